"""Loading the base weights the learner trains a LoRA on: the served GGUF, or a configured HF checkpoint.

The adapter must fit the model llama.cpp serves, so the default base is that very GGUF, read by
transformers and dequantized. On CUDA the base is held in 4-bit NF4 (QLoRA) with bf16 compute (fp16
on GPUs without native bf16); ``train.device`` and ``train.load_in_4bit`` override both choices. On
CPU the weights are fp32 while they fit comfortably in the RAM available, else bf16, and NF4 (bitsandbytes'
CPU kernels) when a bf16 step would need more than 8 GB or half the free RAM: that is how a 4B model
trains within 8 GB of RAM.

transformers refuses a ``quantization_config`` together with ``gguf_file`` (GGUF loading is itself a
"quantizer" there), so a GGUF base is streamed tensor by tensor on the CPU (:mod:`gguf_weights`)
and, with 4-bit on, each decoder layer's linears are swapped for NF4 ``bnb.nn.Linear4bit`` modules
as soon as the layer is complete, quantized as they move to the device: neither RAM nor the device
ever holds the full-precision model. A checkpoint dir uses
``BitsAndBytesConfig`` directly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawdesk.errors import TrainError
from clawdesk.learn.offline import import_offline

log = logging.getLogger(__name__)

# Never quantized: the output head (tied to the embedding in small models) must stay exact.
_KEEP_FULL = ("lm_head",)

# Peak RSS of one training step per base weight in bf16 on a CPU, measured on the Qwen3-4B-shaped
# model (docs/benchmarks.md, `python bench/run.py --only model4b`): 10.5-10.6 GB / 4.02 B weights.
# NF4 measured 5.3-5.5 GB (1.3 bytes per weight) at about the same step time, but loads 40-80 s longer.
BF16_STEP_BYTES_PER_WEIGHT = 2.6
# A CPU step stays within this much RAM when NF4 can make it (issue #8: a 4B model within 8 GB,
# beside the served model), even on a machine that has more to spare.
CPU_STEP_RAM_BUDGET = 8 * 2**30


@dataclass(frozen=True)
class BaseInfo:
    """What was loaded, for the trainer, the adapter writer and the metadata of each version."""

    source: str  # the GGUF path, or the HF checkpoint dir
    arch: str  # general.architecture of the served GGUF (the GGUF LoRA must name it)
    model_type: str  # transformers' config.model_type
    device: str
    dtype: str  # compute dtype, e.g. "float32" / "bfloat16"
    quantized: bool  # decoder linears held in 4-bit NF4
    n_head: int
    n_head_kv: int
    vocab_size: int
    n_params: int
    load_seconds: float


def gguf_architecture(gguf_path: Path) -> str:
    """``general.architecture`` of a GGUF file (reads the header only; the tensors stay on disk)."""
    from clawdesk.gguf.header import HeaderError, read_header

    try:
        header = read_header(gguf_path)
    except (OSError, HeaderError) as exc:
        raise TrainError(f"Cannot read the base model {gguf_path} ({exc}); is it a GGUF file?") from exc
    arch = header.fields.get("general.architecture")
    if arch is None:
        raise TrainError(f"{gguf_path} has no general.architecture key; it is not a usable GGUF model.")
    return str(arch)


def resolve_device(device: str | None = "auto") -> str:
    """``train.device`` → a torch device string: "auto" (or None) = "cuda" when torch sees a GPU, else "cpu".

    An explicit CUDA device that torch cannot use is an error, not a silent fall-back to a CPU run
    that would take hours on a real model.
    """
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise TrainError(
                f'train.device = "{device}" but torch {torch.__version__} sees no CUDA GPU (a CPU build, or no '
                'driver). Install the CUDA build of torch, or set train.device = "cpu" (or "auto") in config.toml.'
            )
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise TrainError(
                f'train.device = "{device}" but torch sees {torch.cuda.device_count()} GPU(s), numbered from 0; '
                "fix train.device in config.toml."
            )
    return device


def compute_dtype(device: str):
    """fp32 on the CPU; on CUDA bf16 where the GPU has native bf16 (Ampere and newer), else fp16."""
    import torch

    if not device.startswith("cuda"):
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def load_base(
    gguf_path: Path,
    *,
    hf_checkpoint: str = "",
    device: str | None = "auto",
    load_in_4bit: bool | str | None = "auto",
    base_dtype: str = "auto",
    on_status: Callable[[str], None] | None = None,
) -> tuple[Any, BaseInfo]:
    """Load the frozen base model for LoRA training; returns ``(model, info)``.

    ``gguf_path`` is the served GGUF: its weights are the base unless ``hf_checkpoint`` names an HF
    checkpoint dir to train on instead (its architecture must match the GGUF's). ``device`` and
    ``load_in_4bit`` take ``train.device`` / ``train.load_in_4bit``: "auto" (or None) = CUDA when
    available, else CPU; 4-bit on CUDA, and on a CPU where a bf16 step would exceed
    :data:`CPU_STEP_RAM_BUDGET` or half the free RAM. Compute
    dtype: :func:`compute_dtype`. Status lines
    ("reading ...", "loaded in ...") go to ``on_status`` and the module logger, because loading a
    multi-GB GGUF takes a while. All parameters come back frozen, ``use_cache`` off. ``base_dtype`` is
    ``train.base_dtype``: "float32" / "bfloat16" set the weight dtype; "auto" keeps :func:`compute_dtype`
    on CUDA and, on a CPU, fp32 only while the fp32 weights fit comfortably in the RAM available now.
    """
    import_offline()  # before transformers imports bitsandbytes, which would ask the Hub (learn/offline.py)
    gguf_path = Path(gguf_path)
    device = resolve_device(device)
    auto_4bit = load_in_4bit in (None, "auto")
    if auto_4bit:
        load_in_4bit = device.startswith("cuda")
    dtype = compute_dtype(device)
    if base_dtype != "auto" or not device.startswith("cuda"):
        import torch

        from clawdesk.learn.gguf_weights import choose_dtype, gguf_param_count

        needs_count = (base_dtype == "auto" or auto_4bit) and gguf_path.is_file() and not hf_checkpoint
        n_weights = gguf_param_count(gguf_path) if needs_count else 0
        available = _available_ram()
        dtype = choose_dtype(base_dtype, n_params=n_weights, available_bytes=available)
        # NF4 on a CPU when a bf16 step would not fit in CPU_STEP_RAM_BUDGET or half the free RAM:
        # measured on a 4B model, NF4 halves the step's peak at the same step time (it loads slower).
        if auto_4bit and not device.startswith("cuda") and nf4_on_cpu(n_weights, available):
            load_in_4bit = True
            if base_dtype == "auto":
                dtype = torch.bfloat16  # NF4's compute dtype, as measured (not fp32 on a big-RAM machine)

    def status(msg: str) -> None:
        log.info(msg)
        if on_status is not None:
            on_status(msg)

    if not gguf_path.is_file():
        raise TrainError(f"The base model {gguf_path} does not exist; train needs the GGUF that the chat serves.")
    arch = gguf_architecture(gguf_path)
    started = time.perf_counter()
    if hf_checkpoint:
        model = _load_checkpoint(Path(hf_checkpoint).expanduser(), device, dtype, load_in_4bit, status)
        source = str(hf_checkpoint)
    else:
        model = _load_gguf(gguf_path, device, dtype, load_in_4bit, status, arch=arch)
        source = str(gguf_path)
    if hf_checkpoint and model.config.model_type != arch:
        raise TrainError(
            f"The checkpoint {hf_checkpoint} is a {model.config.model_type!r} model but the served GGUF {gguf_path} "
            f"is {arch!r}; an adapter trained on it would not fit. Point train.hf_checkpoint at the matching model."
        )
    model.config.use_cache = False  # training never decodes; a KV cache only costs memory
    for param in model.parameters():
        param.requires_grad_(False)
    cfg = model.config
    info = BaseInfo(
        source=source,
        arch=arch,
        model_type=cfg.model_type,
        device=device,
        dtype=str(dtype).removeprefix("torch."),
        quantized=bool(load_in_4bit),
        n_head=int(cfg.num_attention_heads),
        n_head_kv=int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads),
        vocab_size=int(cfg.vocab_size),
        n_params=int(model.num_parameters()),  # counts NF4-packed weights at full size
        load_seconds=time.perf_counter() - started,
    )
    status(
        f"base loaded in {info.load_seconds:.1f} s: {info.model_type}, {info.n_params / 1e6:.1f} M params "
        f"on {device} ({'NF4 + ' if info.quantized else ''}{info.dtype})"
    )
    return model, info


def nf4_on_cpu(n_weights: int, available_bytes: int) -> bool:
    """Whether "auto" trains a base of ``n_weights`` in NF4 on a CPU with ``available_bytes`` free."""
    from clawdesk.learn.gguf_weights import FP32_RAM_SHARE

    room = min(CPU_STEP_RAM_BUDGET, FP32_RAM_SHARE * available_bytes)
    return BF16_STEP_BYTES_PER_WEIGHT * n_weights > room


def _available_ram() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def _load_gguf(path: Path, device: str, dtype, load_in_4bit: bool, status: Callable[[str], None], *, arch: str):
    from transformers import AutoModelForCausalLM

    from clawdesk.learn import gguf_weights

    size_gb = path.stat().st_size / 1e9
    if gguf_weights.streamable(arch):
        # Tensor by tensor (no full-precision copy of the file); with 4-bit each decoder layer is
        # quantized as soon as its last weight lands, so the full-precision model never exists.
        status(f"reading {path.name} ({size_gb:.2f} GB) tensor by tensor; this can take minutes")
        on_layer = (lambda layer: _to_nf4(layer, device, dtype)) if load_in_4bit else None
        model = gguf_weights.load_streamed(path, arch, dtype, on_layer=on_layer, status=status)
        if load_in_4bit:
            model.is_loaded_in_4bit = True  # what peft and transformers check for a k-bit base
        model.to(device)
        return model
    status(f"reading {path.name} ({size_gb:.2f} GB) with transformers and dequantizing it; this can take minutes")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise TrainError(
            f"transformers could not load {path} as a training base ({exc}). Its architecture may not be "
            "supported for GGUF loading; set train.hf_checkpoint to an HF checkpoint dir of the same model."
        ) from exc
    if load_in_4bit:
        status(f"quantizing the decoder linears to 4-bit NF4 on {device}")
        _to_nf4(model, device, dtype)
    model.to(device)
    return model


def _load_checkpoint(path: Path, device: str, dtype, load_in_4bit: bool, status: Callable[[str], None]):
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    if not path.is_dir():
        raise TrainError(f"train.hf_checkpoint {path} is not a directory; give the dir holding config.json.")
    status(f"loading the HF checkpoint {path}")
    kwargs: dict[str, Any] = {"dtype": dtype}
    if load_in_4bit:
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype
        )
        kwargs["device_map"] = {"": device}
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise TrainError(f"transformers could not load the checkpoint {path} ({exc}).") from exc
    if not load_in_4bit:
        model.to(device)
    else:
        _keep_trainable_on_cpu(model)
    return model


def _to_nf4(model, device: str, dtype) -> None:
    """Swap every decoder ``nn.Linear`` for an NF4 ``bnb.nn.Linear4bit``, quantized as it lands on ``device``.

    Same settings as ``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
    bnb_4bit_compute_dtype=dtype)`` (no double quantization). peft recognizes these modules and puts
    its QLoRA layers on them.
    """
    import torch

    bnb = _bitsandbytes()
    targets = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) is torch.nn.Linear and name not in _KEEP_FULL
    ]
    if not targets:
        # Training on would silently be full-precision LoRA, with the memory a 4-bit base was chosen to avoid.
        kinds = sorted({type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__}) or ["none"]
        raise TrainError(
            f"4-bit loading found no torch.nn.Linear to quantize in this {type(model).__name__} (linear layers: "
            f"{', '.join(kinds)}). Set train.load_in_4bit = false in config.toml to train it unquantized."
        )
    for parent, name, child in targets:
        q = bnb.nn.Linear4bit(
            child.in_features,
            child.out_features,
            bias=child.bias is not None,
            compute_dtype=dtype,
            compress_statistics=False,
            quant_type="nf4",
            device="meta",  # no throw-away init of a full-size weight
        )
        weight = bnb.nn.Params4bit(
            child.weight.data, requires_grad=False, compress_statistics=False, quant_type="nf4", module=q
        )
        q.weight = weight.to(device)  # Params4bit quantizes on its first move to a device
        if child.bias is not None:
            q.bias = torch.nn.Parameter(child.bias.data.to(device), requires_grad=False)
        setattr(parent, name, q)
    model.is_loaded_in_4bit = True  # what peft and transformers check for a k-bit base
    _keep_trainable_on_cpu(model)


def _bitsandbytes():
    try:
        import bitsandbytes
    except ImportError as exc:  # a dependency, but a hand-made CUDA environment may lack it
        raise TrainError(
            f"4-bit training needs bitsandbytes ({exc}). Install it (pip install 'bitsandbytes>=0.50,<0.51') or "
            "set train.load_in_4bit = false in config.toml."
        ) from exc
    return bitsandbytes


def _keep_trainable_on_cpu(model) -> None:
    """Stop bitsandbytes from repacking NF4 weights for CPU inference.

    On a CPU with AVX512-BF16, the first eval-mode no-grad forward of a ``Linear4bit`` (our scoring
    pass) repacks its weight into a layout whose matmul has no autograd: from then on no gradient
    flows back through the base linears, so every LoRA before the last o_proj/down_proj silently
    stops learning. Measured here with bitsandbytes 0.50.2; harmless on GPUs.
    """
    import bitsandbytes as bnb

    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False
