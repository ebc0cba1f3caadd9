"""A tiny, random-weight Qwen3 GGUF that both llama.cpp and transformers load.

It stands in for a real Qwen3 model wherever a test or bench script needs the whole stack (chat
template with ``enable_thinking``, ``<think>`` tokens, LoRA on q/k/v/o/gate/up/down) but not a
sensible answer. Everything is f32 so llama.cpp and transformers can be compared almost exactly.

Two shapes are chosen to match how transformers reads a qwen3 GGUF: its config mapping ignores
``qwen3.attention.key_length``, so ``head_dim`` always falls back to Qwen3Config's 128. We keep
``head_dim = 128`` and let ``n_head * head_dim`` differ from ``hidden`` (Qwen3 allows it; llama.cpp
reads the real value from ``attention.key_length``).

By default it has a tiny byte-level vocabulary and a cut-down template (fast: the trainer tests use
it). With ``vocab=qwen3_vocab(...)`` and ``chat_template=`` it carries Qwen3's real 151,936-token BPE
and template instead (see :mod:`clawdesk.testing.qwen3_assets`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

HEAD_DIM = 128  # what transformers assumes for qwen3 GGUFs, whatever the file says

# In Qwen3 the chat markers are control tokens, while <think>/</think> are added tokens that are not
# "special" (llama.cpp token type USER_DEFINED): both stacks match them whole in any text.
CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
USER_DEFINED_TOKENS = ("<think>", "</think>")

# A handful of byte-level BPE merges so ordinary text exercises the merge path (and the Qwen2
# pre-tokenizer split) instead of falling apart into single bytes. Order is merge priority.
MERGES = (
    ("Ġ", "t"),
    ("h", "e"),
    ("Ġt", "he"),
    ("i", "n"),
    ("e", "r"),
    ("Ġ", "a"),
    ("o", "u"),
    ("u", "s"),
    ("us", "er"),
    ("a", "s"),
    ("as", "s"),
    ("ass", "i"),
    ("assi", "s"),
    ("assis", "t"),
    ("assist", "a"),
    ("assista", "n"),
    ("assistan", "t"),
    ("Ċ", "Ċ"),
    ("i", "s"),
    ("Ġ", "is"),
    ("o", "n"),
    ("Ġ", "s"),
)

# Qwen3's template, cut down to what ClawDesk uses: system/user/assistant turns, earlier assistant
# turns rendered with their answer only (thinking dropped), and a generation prompt that, with
# enable_thinking=false, pre-fills an empty think block as the real template does.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message.role == 'assistant' -%}"
    "{%- set content = message.content -%}"
    "{%- if '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


def byte_alphabet() -> list[str]:
    """GPT-2's byte-to-unicode spelling of the 256 bytes, in GPT-2's token order."""
    order = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    spelling = [*order]  # printable bytes spell as themselves
    unprintable = [byte for byte in range(256) if byte not in order]
    spelling += [256 + n for n in range(len(unprintable))]  # the rest: code points 256.. in byte order
    return [chr(c) for c in spelling]


def tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) of the tiny byte-level BPE vocabulary."""
    tokens = byte_alphabet()
    for left, right in MERGES:
        tokens.append(left + right)
    types = [1] * len(tokens)  # NORMAL
    tokens += [*CONTROL_TOKENS, *USER_DEFINED_TOKENS]
    types += [3] * len(CONTROL_TOKENS) + [4] * len(USER_DEFINED_TOKENS)  # CONTROL, USER_DEFINED
    assert len(set(tokens)) == len(tokens), "duplicate token in the tiny vocabulary"
    return tokens, types, [f"{left} {right}" for left, right in MERGES]


# Qwen3's added tokens where the Qwen2 vocab GGUF (llama.cpp's models/ggml-vocab-qwen2.gguf) has
# "[PAD<id>]" placeholders. From Qwen3's tokenizer_config.json ``added_tokens_decoder`` (a copy of
# Qwen3-4B's: github.com/akougkas/warpio-cli, warpio-docs/ai-docs/model_cards/qwen3:4b.md):
# 151646-151656 are "special" (control tokens), 151657-151668 are not (USER_DEFINED, matched whole).
QWEN3_ADDED_TOKENS = {
    151646: "<|object_ref_start|>",
    151647: "<|object_ref_end|>",
    151648: "<|box_start|>",
    151649: "<|box_end|>",
    151650: "<|quad_start|>",
    151651: "<|quad_end|>",
    151652: "<|vision_start|>",
    151653: "<|vision_end|>",
    151654: "<|vision_pad|>",
    151655: "<|image_pad|>",
    151656: "<|video_pad|>",
    151657: "<tool_call>",
    151658: "</tool_call>",
    151659: "<|fim_prefix|>",
    151660: "<|fim_middle|>",
    151661: "<|fim_suffix|>",
    151662: "<|fim_pad|>",
    151663: "<|repo_name|>",
    151664: "<|file_sep|>",
    151665: "<tool_response>",
    151666: "</tool_response>",
    151667: "<think>",
    151668: "</think>",
}
QWEN3_CONTROL_IDS = range(151646, 151657)


def qwen3_vocab(vocab_gguf: Path) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) of the real Qwen2/3 BPE from a vocab-only GGUF, with the
    ``[PAD…]`` placeholders at 151646-151668 renamed to Qwen3's added tokens (151,936 tokens)."""
    keys = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")
    arrays = _gguf_arrays(Path(vocab_gguf), set(keys))
    tokens, types, merges = (arrays[key] for key in keys)
    for token_id, text in QWEN3_ADDED_TOKENS.items():
        if tokens[token_id] != f"[PAD{token_id}]":
            raise ValueError(f"{vocab_gguf}: token {token_id} is {tokens[token_id]!r}, not a [PAD] placeholder")
        tokens[token_id] = text
        types[token_id] = 3 if token_id in QWEN3_CONTROL_IDS else 4  # CONTROL, USER_DEFINED
    return tokens, types, merges


def _gguf_arrays(path: Path, keys: set[str]) -> dict[str, list]:
    """The string or integer array values of ``keys`` in a GGUF's header (ValueError if missing)."""
    from clawdesk.gguf.header import read_header

    fields = read_header(path, arrays=True).fields
    missing = {key for key in keys if not isinstance(fields.get(key), list)}
    if missing:
        raise ValueError(f"{path} has no {', '.join(sorted(missing))}")
    return {key: fields[key] for key in keys}


def write_tiny_qwen3_gguf(
    path: Path,
    *,
    seed: int = 0,
    n_layers: int = 2,
    hidden: int = 64,
    n_head: int = 2,
    n_head_kv: int = 1,
    ffn: int = 128,
    context_length: int = 512,
    std: float = 0.02,
    embed_std: float = 0.125,
    rope_base: float = 1_000_000.0,
    rms_eps: float = 1e-6,
    vocab: tuple[list[str], list[int], list[str]] | None = None,
    chat_template: str = CHAT_TEMPLATE,
    qtype: str = "F32",
    fast_draws: bool = False,
) -> Path:
    """Write a random Qwen3 GGUF (tied embeddings, head_dim 128) to ``path`` and return it.

    Linear weights are N(0, ``std``); the tied embedding uses ``embed_std`` (≈ 1/sqrt(hidden), so
    logits are O(1) rather than O(0.1)); RMSNorm weights are 1 + N(0, 0.1) so a mixed-up norm shows.
    Same arguments, same bytes. ``vocab`` (tokens, types, merges) replaces the tiny byte-level
    vocabulary, e.g. :func:`qwen3_vocab`; ``chat_template`` replaces the cut-down template.
    ``qtype`` "Q8_0" or "Q4_0" stores the 2-D weights quantized (``gguf.quants``; norms stay f32), as
    served files do. Tensors are generated, quantized and written one at a time (the embedding in row
    chunks), so a full-size model (e.g. Qwen3-4B's dims: the 4B bench) needs about one tensor of RAM.
    ``fast_draws`` draws float32 normals from numpy's default generator (~3x faster, other bytes).
    """
    import gguf
    from gguf import quants

    path = Path(path)
    rng = np.random.RandomState(seed)
    fast = np.random.default_rng(seed) if fast_draws else None
    tokens, types, merges = vocab if vocab is not None else tiny_vocab()
    n_vocab = len(tokens)
    q_dim, kv_dim = n_head * HEAD_DIM, n_head_kv * HEAD_DIM
    quant = None if qtype == "F32" else gguf.GGMLQuantizationType[qtype]
    file_types = {"F32": "ALL_F32", "Q8_0": "MOSTLY_Q8_0", "Q4_0": "MOSTLY_Q4_0"}
    if qtype not in file_types:
        raise ValueError(f"qtype must be one of {', '.join(file_types)}, got {qtype!r}")

    def normal(shape: tuple[int, ...], scale: float) -> np.ndarray:
        # Row chunks of float64 draws: the same stream as one call (RandomState keeps its spare
        # Gaussian between calls), without a float64 copy of a 151k-row embedding.
        out = np.empty(shape, dtype=np.float32)
        rows = max(1, (1 << 22) // max(1, int(np.prod(shape[1:]))))
        for start in range(0, shape[0], rows):
            n = min(rows, shape[0] - start)
            if fast is not None:
                out[start : start + n] = fast.standard_normal((n, *shape[1:]), dtype=np.float32) * scale
            else:
                out[start : start + n] = rng.standard_normal((n, *shape[1:])) * scale
        return out

    def linear(n_out: int, n_in: int) -> Callable[[], np.ndarray]:
        return lambda: normal((n_out, n_in), std)  # (out, in), as torch stores it

    def norm(n: int) -> Callable[[], np.ndarray]:
        return lambda: (1.0 + rng.standard_normal(n) * 0.1).astype(np.float32)

    arch = gguf.MODEL_ARCH.QWEN3
    names = gguf.get_tensor_name_map(arch, n_layers)
    # (name, shape, how to draw it), in the order the random stream is consumed and the file is written.
    weights: list[tuple[str, tuple[int, ...], Callable[[], np.ndarray]]] = [
        ("model.embed_tokens", (n_vocab, hidden), lambda: normal((n_vocab, hidden), embed_std)),
    ]
    for i in range(n_layers):
        p = f"model.layers.{i}"
        weights += [
            (f"{p}.input_layernorm", (hidden,), norm(hidden)),
            (f"{p}.self_attn.q_proj", (q_dim, hidden), linear(q_dim, hidden)),
            (f"{p}.self_attn.k_proj", (kv_dim, hidden), linear(kv_dim, hidden)),
            (f"{p}.self_attn.v_proj", (kv_dim, hidden), linear(kv_dim, hidden)),
            (f"{p}.self_attn.o_proj", (hidden, q_dim), linear(hidden, q_dim)),
            (f"{p}.self_attn.q_norm", (HEAD_DIM,), norm(HEAD_DIM)),
            (f"{p}.self_attn.k_norm", (HEAD_DIM,), norm(HEAD_DIM)),
            (f"{p}.post_attention_layernorm", (hidden,), norm(hidden)),
            (f"{p}.mlp.gate_proj", (ffn, hidden), linear(ffn, hidden)),
            (f"{p}.mlp.up_proj", (ffn, hidden), linear(ffn, hidden)),
            (f"{p}.mlp.down_proj", (hidden, ffn), linear(hidden, ffn)),
        ]
    weights.append(("model.norm", (hidden,), norm(hidden)))

    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[arch])
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(f"tiny-qwen3-seed{seed}")
    writer.add_file_type(getattr(gguf.LlamaFileType, file_types[qtype]))
    writer.add_context_length(context_length)
    writer.add_embedding_length(hidden)
    writer.add_block_count(n_layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(rope_base)
    writer.add_layer_norm_rms_eps(rms_eps)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    # As in real Qwen3 GGUFs: BOS and PAD are <|endoftext|> but never added; EOS ends a turn.
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(chat_template)
    for hf_name, shape, _ in weights:
        gguf_name = names.get_name(hf_name)
        assert gguf_name is not None, hf_name
        if quant is not None and len(shape) == 2:
            block, block_bytes = gguf.GGML_QUANT_SIZES[quant]
            nbytes = shape[0] * shape[1] // block * block_bytes
            writer.add_tensor_info(f"{gguf_name}.weight", shape, np.dtype(np.float32), nbytes, raw_dtype=quant)
        else:
            writer.add_tensor_info(f"{gguf_name}.weight", shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, shape, draw in weights:
        array = draw()
        if quant is not None and len(shape) == 2:
            array = quants.quantize(array, quant)
        writer.write_tensor_data(array)
        del array
    writer.close()
    return path
