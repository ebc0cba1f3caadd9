"""AdamW's moments kept with an adapter version, so training continues where the last run left them.

Owns ``optimizer.safetensors`` (beside a version's PEFT files; :mod:`clawdesk.export` copies only
the PEFT and GGUF files, so it never leaves the machine): for every trainable LoRA parameter
``NAME``, the tensors ``NAME::exp_avg``, ``NAME::exp_avg_sq`` and ``NAME::step``. Keyed by
parameter name, not by position, so a file that does not fit the model is refused instead of
being loaded into the wrong tensors. safetensors, never a pickle (``torch.save`` of a state dict
would be one): a damaged or foreign file can only fail to load.

Why: a fresh AdamW's first update moves every weight by about the learning rate whatever the
gradient's size (its second moment starts from this one gradient), so every trainer run (the app
starts one per step) and every guard retry started with the largest possible move.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clawdesk.errors import TrainError

OPTIMIZER_FILE = "optimizer.safetensors"
_KEYS = ("exp_avg", "exp_avg_sq", "step")


def state_tensors(optimizer, names: Sequence[str]) -> dict[str, Any]:
    """``{NAME::key: tensor}`` of ``optimizer``'s per-parameter state; ``names`` follow its parameter order."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if len(params) != len(names):
        raise TrainError(f"optimizer has {len(params)} parameters but {len(names)} names were given.")
    out: dict[str, Any] = {}
    for name, p in zip(names, params, strict=True):
        state = optimizer.state.get(p)
        if not state:
            continue  # never stepped: nothing to keep
        for key in _KEYS:
            value = state[key]
            out[f"{name}::{key}"] = (value if hasattr(value, "shape") else _scalar(value)).detach().cpu().contiguous()
    return out


def load_tensors(optimizer, names: Sequence[str], tensors: dict[str, Any]) -> None:
    """Put ``tensors`` (from :func:`state_tensors`) into ``optimizer`` exactly, or raise without changing it."""
    import torch

    params = [p for group in optimizer.param_groups for p in group["params"]]
    if len(params) != len(names):
        raise TrainError(f"optimizer has {len(params)} parameters but {len(names)} names were given.")
    expected = {f"{n}::{k}" for n in names for k in _KEYS}
    if set(tensors) - expected:
        extra = sorted(set(tensors) - expected)[:2]
        raise TrainError(f"the saved optimizer state names parameters this adapter does not have ({extra}).")
    staged: dict[Any, dict[str, Any]] = {}
    for name, p in zip(names, params, strict=True):
        have = [k for k in _KEYS if f"{name}::{k}" in tensors]
        if not have:
            continue
        if len(have) != len(_KEYS):
            raise TrainError(f"the saved optimizer state of {name} is incomplete (has {have}).")
        state = {k: tensors[f"{name}::{k}"] for k in _KEYS}
        for k in ("exp_avg", "exp_avg_sq"):
            if tuple(state[k].shape) != tuple(p.shape):
                raise TrainError(
                    f"the saved optimizer state of {name} has shape {list(state[k].shape)}, "
                    f"the adapter {list(p.shape)}."
                )
        staged[p] = {
            "step": state["step"].to(torch.float32).clone(),  # AdamW keeps its step count as a CPU float tensor
            "exp_avg": state["exp_avg"].to(p.device, p.dtype).clone(),
            "exp_avg_sq": state["exp_avg_sq"].to(p.device, p.dtype).clone(),
        }
    optimizer.state.clear()
    for p, state in staged.items():
        optimizer.state[p] = state


def save(path: Path, tensors: dict[str, Any]) -> None:
    """Write ``tensors`` as safetensors at ``path`` (nothing written when there is no state yet)."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    if not tensors:
        return
    try:
        save_file(tensors, str(path))
    except (OSError, SafetensorError) as exc:
        raise TrainError(f"Cannot write the optimizer state to {path} ({exc}); check free disk space.") from exc


def load(path: Path) -> dict[str, Any] | None:
    """The tensors of ``path``, or None when the file does not exist (a version trained without it)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        return None
    try:
        return load_file(str(path))
    except (OSError, SafetensorError) as exc:
        raise TrainError(
            f"Cannot read the optimizer state {path} ({exc}); delete the file to continue with fresh moments."
        ) from exc


def _scalar(value: float):
    import torch

    return torch.tensor(float(value), dtype=torch.float32)
