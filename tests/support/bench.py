"""Loading a script of ``bench/`` as a module, so tests can call its functions (bench/ is not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` freshly executed as module ``bench_<name>_under_test``."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}_under_test", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
