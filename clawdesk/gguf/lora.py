"""Writing a PEFT LoRA adapter as a GGUF LoRA file that llama.cpp loads, and reading its facts back.

The trainer keeps its adapter in transformers/PEFT layout; llama.cpp wants a GGUF with
``general.type = "adapter"``, ``adapter.type = "lora"``, ``adapter.lora.alpha`` and, per adapted
matrix, ``<gguf tensor name>.weight.lora_a`` / ``.lora_b``. PEFT's ``lora_A`` (r, in) and ``lora_B``
(out, r) are written as they are: ggml then sees ne = [in, r] and [r, out], the shapes llama.cpp
checks. llama.cpp scales the product by alpha / r (times the adapter scale), as PEFT does without
rsLoRA, so ``alpha`` is PEFT's ``lora_alpha``.

One layout trap: llama.cpp's converter permutes the rows of q_proj/k_proj for the ``llama`` arch (its
rotary embedding pairs dimensions differently from transformers'), so lora_B of q/k must be permuted
the same way there. qwen2/qwen3 are stored unpermuted. Only the arches whose layout is known here
are accepted, since a wrong layout loads without error and silently damages the model.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from clawdesk.errors import AdapterError
from clawdesk.gguf.header import HeaderError, read_header

# Arches whose HF -> GGUF layout of the seven adapted matrices this module knows, and whether the
# converter permuted q/k rows for llama.cpp's rotary embedding.
SUPPORTED_ARCHES = {"llama": True, "qwen2": False, "qwen3": False}

# HF module names PEFT adapts and the GGUF tensor kinds they become (names come from gguf's map).
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_DTYPES = {"f32": np.float32, "f16": np.float16}

# get_peft_model_state_dict keys: base_model.model.<hf module path>.lora_A.weight
_PEFT_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])\.weight$")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _model_arch(arch: str):
    import gguf

    for model_arch, name in gguf.MODEL_ARCH_NAMES.items():
        if name == arch:
            return model_arch
    raise AdapterError(
        f"The gguf library does not know the model architecture {arch!r}, so no GGUF LoRA can be written "
        "for it. Use the base model's `general.architecture` value (e.g. 'qwen3' or 'llama')."
    )


def _to_numpy(tensor: Any) -> np.ndarray:
    if hasattr(tensor, "detach"):  # a torch tensor, maybe bf16, on GPU or requiring grad
        tensor = tensor.detach().float().cpu().numpy()
    return np.asarray(tensor, dtype=np.float32)


def _permute_rows(b: np.ndarray, n_head: int) -> np.ndarray:
    """Reorder output rows the way llama.cpp's converter does for llama q/k: per head, (2, d/2) -> (d/2, 2)."""
    out, r = b.shape  # (out, r)
    if out % (2 * n_head):
        raise AdapterError(f"lora_B has {out} rows, not a multiple of 2 x {n_head} heads; n_head/n_head_kv are wrong.")
    return b.reshape(n_head, 2, out // n_head // 2, r).swapaxes(1, 2).reshape(out, r)


def _pair_up(state_dict: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{hf module path: {"A": tensor, "B": tensor}}, rejecting anything that is not a LoRA A/B weight."""
    pairs: dict[str, dict[str, Any]] = {}
    for key, tensor in state_dict.items():
        match = _PEFT_KEY.match(key)
        if not match or match["module"].rsplit(".", 1)[-1] not in TARGET_MODULES:
            raise AdapterError(
                f"Cannot write adapter weight {key!r} to GGUF: only lora_A/lora_B weights of "
                f"{', '.join(TARGET_MODULES)} are supported (no DoRA, biases, embeddings or modules_to_save). "
                "Pass peft.get_peft_model_state_dict(model) of a LoRA with those target_modules."
            )
        pairs.setdefault(match["module"], {})[match["ab"]] = tensor
    for module, pair in pairs.items():
        if set(pair) != {"A", "B"}:
            missing = "lora_B" if "A" in pair else "lora_A"
            raise AdapterError(f"Adapter state dict has no {missing} weight for {module}; it is incomplete.")
    if not pairs:
        raise AdapterError("Adapter state dict is empty; there is no LoRA weight to write.")
    return pairs


def write_gguf_lora(
    state_dict: Mapping[str, Any],
    out_path: Path,
    *,
    arch: str,
    alpha: float,
    rank: int,
    dtype: str = "f32",
    n_head: int | None = None,
    n_head_kv: int | None = None,
) -> Path:
    """Write a PEFT LoRA state dict as a GGUF LoRA for a base of ``arch``; return ``out_path``.

    ``state_dict`` is ``peft.get_peft_model_state_dict(model)`` (keys
    ``base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight`` etc.). The served update is
    W + (alpha / rank) · B · A, as in PEFT without rsLoRA. ``n_head``/``n_head_kv`` (the base's
    attention head counts) are needed for ``llama`` bases, whose q/k rows llama.cpp keeps permuted.
    ``dtype`` is ``"f32"`` or ``"f16"``. The file appears atomically (temp file + rename).
    """
    import gguf

    if arch not in SUPPORTED_ARCHES:
        _model_arch(arch)  # unknown to gguf: that error is the clearer one
        raise AdapterError(
            f"Writing GGUF LoRA adapters for {arch!r} bases is not supported; supported: "
            f"{', '.join(sorted(SUPPORTED_ARCHES))}. Use a base model of one of those architectures."
        )
    if dtype not in _DTYPES:
        raise AdapterError(f"Unsupported adapter dtype {dtype!r}; use one of {', '.join(_DTYPES)}.")
    permute_qk = SUPPORTED_ARCHES[arch]
    if permute_qk and not (n_head and n_head_kv):
        raise AdapterError(
            f"A LoRA for a {arch!r} base needs n_head and n_head_kv (its q/k rows are permuted in GGUF); "
            "pass the base config's num_attention_heads and num_key_value_heads."
        )

    pairs = _pair_up(state_dict)
    n_layers = 1 + max((int(m[1]) for m in map(_LAYER.search, pairs) if m), default=0)
    names = gguf.get_tensor_name_map(_model_arch(arch), n_layers)
    np_dtype = _DTYPES[dtype]

    tensors: list[tuple[str, np.ndarray]] = []
    for module, pair in pairs.items():
        gguf_name = names.get_name(module)
        if gguf_name is None:
            raise AdapterError(
                f"Adapter module {module!r} has no llama.cpp tensor in a {arch!r} model; "
                "the adapter does not belong to this base architecture."
            )
        a = _to_numpy(pair["A"])  # (r, in)
        b = _to_numpy(pair["B"])  # (out, r)
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != rank or b.shape[1] != rank:
            raise AdapterError(
                f"Adapter weights of {module} have shapes A{tuple(a.shape)} / B{tuple(b.shape)}; expected "
                f"A (rank={rank}, in) and B (out, rank={rank}). Check the rank passed to write_gguf_lora."
            )
        if permute_qk and module.endswith("q_proj"):
            b = _permute_rows(b, n_head)
        elif permute_qk and module.endswith("k_proj"):
            b = _permute_rows(b, n_head_kv)
        tensors.append((f"{gguf_name}.weight.lora_a", np.ascontiguousarray(a, dtype=np_dtype)))
        tensors.append((f"{gguf_name}.weight.lora_b", np.ascontiguousarray(b, dtype=np_dtype)))

    out_path = Path(out_path)
    tmp = out_path.with_name(f".{out_path.name}.tmp")
    try:
        writer = gguf.GGUFWriter(tmp, arch)
        try:
            writer.add_type(gguf.GGUFType.ADAPTER)
            writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
            writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(alpha))
            for name, array in tensors:
                writer.add_tensor(name, array)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()
        os.replace(tmp, out_path)
    except OSError as exc:
        raise AdapterError(
            f"Could not write adapter {out_path} ({exc}); check free disk space and permissions."
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)  # only left over when something failed
    return out_path


def read_gguf_lora_info(path: Path) -> dict[str, Any]:
    """{"arch", "alpha", "rank", "n_tensors"} of a GGUF LoRA file, for validating and listing adapters.

    ``rank`` is the largest lora_a rank (all are equal in adapters written by :func:`write_gguf_lora`).
    Raises :class:`AdapterError` if the file is missing, not a (complete) GGUF, or not a LoRA adapter.
    """
    path = Path(path)
    try:
        header = read_header(path)
        cut = next((t for t in header.tensors if t.n_present != t.n_bytes), None)
        if cut is not None:
            raise HeaderError(f"tensor {cut.name} has {cut.n_present} of its {cut.n_bytes} bytes")
    except (OSError, HeaderError) as exc:
        raise AdapterError(f"Cannot read adapter {path} ({exc}); it is missing or not a GGUF file.") from exc
    fields = header.fields
    if fields.get("general.type") != "adapter" or fields.get("adapter.type") != "lora":
        raise AdapterError(
            f"{path} is a GGUF but not a LoRA adapter (general.type / adapter.type); delete or replace it."
        )
    ranks = [int(t.dims[1]) for t in header.tensors if t.name.endswith(".lora_a")]  # ne = [in, r]
    alpha = fields.get("adapter.lora.alpha")
    return {
        "arch": fields.get("general.architecture"),
        "alpha": None if alpha is None else float(alpha),
        "rank": max(ranks, default=0),
        "n_tensors": len(header.tensors),
    }
