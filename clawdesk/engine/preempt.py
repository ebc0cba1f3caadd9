"""The chat preempts the judge inside a llama.cpp call: an abort flag on the shared context.

The judge shares the served engine's context and yields between prompt chunks and tokens, but a
chat reply that arrives mid-call used to wait for the judge's current native call: on the 2-core
dev VM one 16-token chunk of the demo model is ~60 ms and a channel vote's continuation decode is
longer, so time to first token while judging was 1.3–1.6× idle (``bench/run.py``,
``ttft_busy_ratio``). llama.cpp polls an abort callback between graph nodes; when it answers true,
``llama_decode`` returns 2 and removes the aborted micro-batch's positions from the KV cache (the
cache stays exact: measured, logits after abort + resume equal a fresh evaluation's). So a chat call
that finds interruptible side work holding the engine raises the flag, the side work's native call
stops within one graph node, the side work reports "stopped" (its callers already handle that: the
judge retries from its cached prefix), and the chat clears the flag once it holds the engine.

The callback is libc's ``strlen`` over a two-byte buffer ``[flag, 0]``: it returns 0 or 1, which a
``bool`` return reads as false/true on every C ABI we ship for. A C function and not a Python
callback, because ggml calls it once per graph node (~1,000 per decode): a Python callback would
need the GIL each time, and the chat's own decodes would pay for it too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import threading
from collections.abc import Iterator

# What llama.cpp logs (at ERROR level) for the aborts this module causes: expected, not errors.
_ABORT_LOG = re.compile(rb"failed to decode, ret = 2|removing memory module entries")
_log_lock = threading.Lock()
_log_installed = False


class Preemption:
    """The abort flag of one llama.cpp context; every method is called by the owning :class:`Engine`."""

    def __init__(self, llm) -> None:
        self._flag = ctypes.create_string_buffer(2)  # [flag, NUL]: strlen() is 0 or 1
        self.side_running = False  # interruptible side work holds the engine now
        self.preemptions = 0  # side calls stopped mid-native-call (for tests and the bench)
        self.available = self._install(llm)

    def _install(self, llm) -> bool:
        import llama_cpp

        ctx = getattr(getattr(llm, "_ctx", None), "ctx", None)
        name = ctypes.util.find_library("c")
        if ctx is None or name is None or not hasattr(llama_cpp, "llama_set_abort_callback"):
            return False  # the chat then waits for the side work's current chunk, as it yields anyway
        libc = ctypes.CDLL(name)
        self._callback = ctypes.cast(libc.strlen, llama_cpp.ggml_abort_callback)  # kept: llama.cpp holds it
        llama_cpp.llama_set_abort_callback(ctx, self._callback, ctypes.cast(self._flag, ctypes.c_void_p))
        _quiet_abort_log()
        return True

    def request(self) -> None:
        """A chat call wants the engine: stop interruptible side work at its next graph node."""
        if self.side_running and self.available:
            self._flag[0] = b"\x01"

    def clear(self) -> None:
        """The chat holds the engine now (side work has let go)."""
        self._flag[0] = b"\x00"

    @property
    def requested(self) -> bool:
        return self._flag[0] != b"\x00"

    def stopped_by_us(self, exc: RuntimeError) -> bool:
        """Whether ``exc`` (llama-cpp-python's error for a nonzero ``llama_decode``) is our abort."""
        if self.requested and "returned 2" in str(exc):
            self.preemptions += 1
            return True
        return False

    def tokens(self, gen: Iterator[int]) -> Iterator[int]:
        """``gen``'s tokens, ending quietly when a chat call aborted its ``llama_decode``."""
        try:
            yield from gen
        except RuntimeError as exc:
            if not self.stopped_by_us(exc):
                raise


def _quiet_abort_log() -> None:
    """Once per process: drop llama.cpp's log lines for our own aborts, pass every other line on."""
    global _log_installed
    with _log_lock:
        if _log_installed:
            return
        import llama_cpp
        from llama_cpp import _logger

        default = _logger.llama_log_callback

        @llama_cpp.llama_log_callback
        def callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            if not _ABORT_LOG.search(text or b""):
                default(level, text, user_data)

        _quiet_abort_log.callback = callback  # kept alive for as long as llama.cpp may call it
        llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
        _log_installed = True
