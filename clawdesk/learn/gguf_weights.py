"""Streaming a GGUF's weights into a transformers model one tensor at a time (the training base).

transformers' own ``from_pretrained(gguf_file=...)`` (5.24, llama/qwen: its legacy GGUF path) memory-
maps the file, dequantizes every tensor into one state dict in the load dtype and only then fills
the model; a 4-bit base could only be quantized after that, from a full-precision model (~8 GB bf16
for a 4B model). Here the model is built from the GGUF's config with empty (meta) weights, then each
tensor is read (explicit reads: no mapped file pages in RSS), dequantized a chunk of rows at a time
straight into the target dtype, processed the way transformers processes it (its name map and
per-architecture processor, e.g. llama's q/k reverse permutation) and assigned. With ``on_layer`` a
decoder layer is handed over as soon as its last weight lands (the caller quantizes it to NF4), so
the peak is the model as kept plus one layer in flight. Measured on a 120M-weight Q8_0 model
(tests/learn/test_gguf_weights.py): fp32 load ~0.8x transformers' peak, NF4 < 0.5x.

Only the llama-family architectures ClawDesk supports (models/README.md) are streamed; for others
:func:`streamable` is False and the caller falls back to transformers' full load.

It stays in the learn stage, not in :mod:`clawdesk.gguf`: the format facts it needs (tensor table,
types, data offsets) come from :mod:`clawdesk.gguf.header`; what is left is building and filling a
torch/transformers model (meta init, transformers' name map and processors, target dtype, NF4
hand-over, the RAM policy below), which only the trainer does.

:func:`choose_dtype` is ``train.base_dtype = "auto"``: fp32 when the fp32 model fits comfortably in
the RAM available now, else bf16.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from math import prod
from pathlib import Path
from typing import Any, NamedTuple

from clawdesk.config import BASE_DTYPES
from clawdesk.errors import TrainError
from clawdesk.gguf.header import GGUFHeader, HeaderError, read_header
from clawdesk.learn.gguf_config import config_of, name_maps_built_once
from clawdesk.learn.offline import import_offline

# Architectures whose transformers tensor processor is per-tensor (no cross-tensor merging), so each
# tensor can be processed, assigned and freed on its own: those listed in models/README.md.
STREAMED_ARCHS = ("llama", "qwen2", "qwen3")

# "auto" keeps fp32 while the fp32 weights take at most this share of the available RAM: the rest
# is for activations, gradients, the logits of a 151k vocabulary and the chat's own llama.cpp copy.
FP32_RAM_SHARE = 0.5

# Weights dequantized per call: gguf.quants makes several float temporaries the size of its input,
# so a whole 151k-row embedding at once would cost GBs on top of the result; 1M weights cost ~20 MB.
_CHUNK_WEIGHTS = 1 << 20

_LAYER = re.compile(r"^(.*?\.layers\.\d+)\.")


class TensorEntry(NamedTuple):
    """One row of a GGUF's tensor table."""

    name: str
    shape: tuple[int, ...]  # torch order (ggml lists the fastest-moving dimension first)
    qtype: int  # ggml type id (gguf.GGMLQuantizationType)
    start: int  # byte offset of the data in the file


def read_tensor_table(path: Path) -> list[TensorEntry]:
    """The tensor table of a GGUF, read straight from the header (no tensor data read)."""
    return [TensorEntry(t.name, t.shape, t.ggml_type, t.start) for t in _header(path).tensors]


def _header(path: Path) -> GGUFHeader:
    try:
        return read_header(path)
    except HeaderError as exc:
        raise TrainError(f"{path} is not a readable GGUF ({exc}); point the trainer at the served model.") from exc


def gguf_param_count(path: Path) -> int:
    """Number of weights in a GGUF (from its tensor table; no tensor data is read)."""
    return sum(prod(entry.shape) for entry in read_tensor_table(path))


def choose_dtype(base_dtype: str, *, n_params: int, available_bytes: int):
    """The torch dtype of the base weights for ``train.base_dtype`` on a CPU with ``available_bytes`` free."""
    import torch

    if base_dtype not in BASE_DTYPES:
        raise TrainError(f"train.base_dtype must be one of {', '.join(BASE_DTYPES)}, got {base_dtype!r}.")
    if base_dtype == "float32":
        return torch.float32
    if base_dtype == "bfloat16":
        return torch.bfloat16
    return torch.float32 if 4 * n_params <= FP32_RAM_SHARE * available_bytes else torch.bfloat16


def streamable(arch: str) -> bool:
    return arch in STREAMED_ARCHS


def load_streamed(
    path: Path,
    arch: str,
    dtype,
    *,
    on_layer: Callable[[Any], None] | None = None,
    status: Callable[[str], None] = lambda _msg: None,
):
    """The GGUF at ``path`` (``general.architecture`` = ``arch``) as a transformers causal LM on the CPU
    in ``dtype``, read tensor by tensor.

    ``on_layer(module)`` is called with each decoder layer once all its weights are in place (e.g. to
    quantize its linears); it must keep the module's tensors off the meta device. The returned model
    has its weights tied as the config says and no meta tensor left.
    """
    import_offline()  # learn/offline.py: bitsandbytes is imported with the Hub offline
    import numpy as np
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    path = Path(path)
    if not streamable(arch):
        raise TrainError(f"{path} is a {arch!r} model; streamed loading supports {', '.join(STREAMED_ARCHS)} only.")
    header = _header(path)
    table = [TensorEntry(t.name, t.shape, t.ggml_type, t.start) for t in header.tensors]
    # From the header in milliseconds where that is exactly transformers' config (learn/gguf_config.py),
    # else transformers' own reader (seconds: it parses the whole vocabulary).
    config = config_of(path, header)
    if config is None:
        try:
            config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
        except (OSError, ValueError, KeyError) as exc:
            raise TrainError(
                f"transformers could not read the config of {path} ({exc}); is it a complete GGUF?"
            ) from exc

    # Buffers (rotary inv_freq) are computed in __init__ and must stay real: init_empty_weights only
    # puts the parameters on the meta device.
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=config.to_dict())
    identity = type(processor).process is TensorProcessor.process  # qwen2/qwen3: names only, values as stored
    with name_maps_built_once():
        names = get_gguf_hf_weights_map(model, processor)
    params = dict(model.named_parameters())  # tied weights appear once, under their first name
    pending = Counter(_layer_of(name) for name in params)
    parsed: dict[str, Any] = {"config": config.to_dict(), "tensors": {}}

    trim = _malloc_trim()
    status(f"streaming {len(table)} tensors of {path.name} into {str(dtype).removeprefix('torch.')}")
    with open(path, "rb") as fh:
        for entry in table:
            hf_name = names.get(entry.name)
            if hf_name is None or hf_name not in params:
                continue  # a tensor transformers does not load either (e.g. rope_freqs), or a tied duplicate
            if identity:  # straight into the target dtype: no float32 copy of a 151k-row embedding
                value = _dequantize(fh.fileno(), entry, path, torch.empty(entry.shape, dtype=dtype))
            else:
                weights = _dequantize(fh.fileno(), entry, path, torch.empty(entry.shape, dtype=torch.float32))
                result = processor.process(
                    weights=weights.numpy(), name=entry.name, tensor_key_mapping=names, parsed_parameters=parsed
                )
                del weights  # the processed copy (llama's permuted q/k) replaces it
                value = torch.from_numpy(np.ascontiguousarray(result.weights)).to(dtype)
                del result
            if tuple(value.shape) != tuple(params[hf_name].shape):
                raise TrainError(
                    f"{path}: tensor {entry.name} has shape {tuple(value.shape)} but the model built from the "
                    f"file's own config expects {tuple(params[hf_name].shape)} for {hf_name}; the GGUF is "
                    "inconsistent."
                )
            module_name, _, leaf = hf_name.rpartition(".")
            # get_submodule, not a dict made up front: that would keep the Linears on_layer replaced
            # (and their full-precision weights) alive until the end of the load.
            model.get_submodule(module_name)._parameters[leaf] = torch.nn.Parameter(value, requires_grad=False)
            del value
            layer = _layer_of(hf_name)
            pending[layer] -= 1
            if layer and pending[layer] == 0 and on_layer is not None:
                on_layer(model.get_submodule(layer))
            trim()

    model.tie_weights()
    missing = [name for name, p in model.named_parameters() if p.device.type == "meta"]
    if missing:
        raise TrainError(
            f"{path} lacks {len(missing)} weight(s) the model needs (e.g. {missing[0]}); the file is "
            "incomplete or not what its architecture key says."
        )
    return model


def _malloc_trim() -> Callable[[], None]:
    """A call that hands freed heap memory back to the OS (glibc's ``malloc_trim``), or a no-op.

    Measured on a medium model: without it glibc keeps each freed float copy (its dynamic mmap
    threshold moves the next ones onto the heap), and the RSS of an NF4 load grew by a full-precision
    layer per layer, as if nothing had been quantized; with it, by the NF4 layer only.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (macOS, musl): their allocators return memory themselves
        trim = None
    if trim is None:
        return lambda: None
    return lambda: trim(0) and None


def _layer_of(param_name: str) -> str:
    match = _LAYER.match(param_name)
    return match.group(1) if match else ""


def _read(fd: int, start: int, nbytes: int):
    """``nbytes`` of the file from ``start`` into a fresh buffer.

    Explicit reads rather than a memory map: mapped file pages count in the process's RSS (the
    whole file, by the end of the load), while read pages stay in the kernel's evictable cache.
    """
    import os

    import numpy as np

    buf = np.empty(nbytes, dtype=np.uint8)
    view, done = memoryview(buf), 0
    while done < nbytes:  # one read returns at most ~2 GB on Linux
        got = os.preadv(fd, [view[done:]], start + done)
        if got <= 0:
            raise OSError(f"unexpected end of file at byte {start + done}")
        done += got
    return buf


def _dequantize(fd: int, entry: TensorEntry, path: Path, out):
    """Read one GGUF tensor into the torch tensor ``out`` (its shape, any float dtype) a chunk of rows at
    a time, dequantizing and casting each chunk; returns ``out``."""
    import torch
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

    try:
        qtype = GGMLQuantizationType(entry.qtype)
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        cols = entry.shape[-1]
        rows = prod(entry.shape) // cols
        row_bytes = cols // block * block_bytes
        flat = out.view(rows, cols)
        chunk = max(1, _CHUNK_WEIGHTS // cols)
        for first in range(0, rows, chunk):
            n = min(chunk, rows - first)
            raw = _read(fd, entry.start + first * row_bytes, n * row_bytes).reshape(n, row_bytes)
            flat[first : first + n] = torch.from_numpy(quants.dequantize(raw, qtype).reshape(n, cols))
    except (ValueError, KeyError, NotImplementedError, OSError) as exc:
        raise TrainError(
            f"{path}: cannot read tensor {entry.name} (ggml type {entry.qtype}: {exc}); the file may be "
            "truncated, or use a quantization this reader lacks: use a Q8_0/Q4_K_M file or set train.hf_checkpoint."
        ) from exc
    return out
