"""A parent adapter version's PEFT weights, checked and put into the learner's model (training continues from them).

The files are checked first by :func:`clawdesk.gguf.adapters.check_peft_dir` (safetensors only, never a
pickle; one rank; complete A/B pairs). Loading them into torch/peft is the learner's business, so it
lives here rather than in the format layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clawdesk.gguf.adapters import PEFT_WEIGHTS, check_peft_dir, refuse
from clawdesk.learn.offline import import_offline


def load_peft_adapter(peft_dir: Path, *, fix: str) -> tuple[Any, dict[str, Any]]:
    """A checked parent adapter for training: ``(LoraConfig, {key: torch tensor})`` from safetensors only.

    Never calls ``PeftModel.from_pretrained``, which falls back to a pickle ``adapter_model.bin``
    (and to the Hub) when the safetensors file is missing.
    """
    import_offline()  # learn/offline.py: bitsandbytes is imported with the Hub offline
    from peft import LoraConfig
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    check_peft_dir(peft_dir, fix=fix)
    # The config file exists (checked), so this reads it locally and never asks the Hub.
    config = LoraConfig.from_pretrained(str(peft_dir))
    config.inference_mode = False  # saved for inference; the learner trains it further
    weights = Path(peft_dir) / PEFT_WEIGHTS
    try:
        return config, load_file(str(weights))
    except (SafetensorError, OSError) as exc:
        raise refuse(weights, f"could not be read ({exc})", fix) from exc


def load_state_into(model, state: Mapping[str, Any], source: Path, *, fix: str) -> None:
    """Put ``state`` (a saved PEFT state dict) into ``model`` (a fresh PeftModel of the same config), exactly.

    Every key and shape must match what the model expects (the base's dims): a foreign adapter is
    refused instead of being partly loaded.
    """
    import_offline()  # learn/offline.py: bitsandbytes is imported with the Hub offline
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    expected = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(model).items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    if expected.keys() != got.keys():
        missing, extra = sorted(expected.keys() - got.keys()), sorted(got.keys() - expected.keys())
        raise refuse(source, f"does not fit this base (missing {missing[:2]}, unexpected {extra[:2]})", fix)
    for key, shape in expected.items():
        if got[key] != shape:
            raise refuse(source, f"has {key} of shape {list(got[key])}, the base needs {list(shape)}", fix)
    set_peft_model_state_dict(model, dict(state))
