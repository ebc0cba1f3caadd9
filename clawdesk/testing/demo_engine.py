"""The bundled demo model as bench scripts load it: no config, no data dir, a fixed context."""

from __future__ import annotations

from pathlib import Path

from clawdesk.engine import Engine


def demo_engine(n_threads: int = 0, n_ctx: int = 2048) -> Engine:
    """The bundled SmolLM2 GGUF in llama.cpp (``n_threads`` 0 = every core); the caller closes it."""
    from clawdesk.models import DEMO_NAME, resolve_model

    path = resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True)  # the bundled file, never a data dir
    return Engine.load(path, sha256="bench", n_ctx=n_ctx, n_threads=n_threads)
