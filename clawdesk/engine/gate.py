"""Chat priority over the shared engine and the machine: background work yields while the chat is busy.

Two spans: *busy* (from "user pressed Enter" to "reply recorded": the judge stops at its next token or
prompt chunk) and *computing* (only while the engine generates for the chat: listeners such as the
trainer pause hold the CPU for the reply; no database write happens inside this span, so a paused
process can never hold a lock the chat waits on).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


class ChatGate:
    """Chat priority. The chat marks itself busy from 'user pressed Enter' to 'reply recorded'."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0
        self._idle = threading.Event()
        self._idle.set()
        self._computing = 0
        self._listeners: list[Callable[[bool], None]] = []

    def __enter__(self) -> ChatGate:
        with self._lock:
            self._busy += 1
            self._idle.clear()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._busy = max(0, self._busy - 1)
            if self._busy == 0:
                self._idle.set()

    @property
    def busy(self) -> bool:
        return not self._idle.is_set()

    def wait_idle(self, stop: threading.Event, poll: float = 0.05) -> None:
        while not self._idle.wait(poll):
            if stop.is_set():
                return

    # -- computing: the engine generates for the chat ------------------------------------------

    def on_computing(self, listener: Callable[[bool], None]) -> Callable[[], None]:
        """Call ``listener(True)`` when the chat starts generating, ``listener(False)`` when no
        generation for the chat is left; returns the function that removes the listener."""
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    @contextlib.contextmanager
    def computing(self) -> Iterator[None]:
        """Wrap one ``Engine.generate`` for the chat. Listeners run in this thread, in order, under
        the gate's lock (so a start and an end can never be seen swapped); they must be quick."""
        self._set_computing(+1)
        try:
            yield
        finally:
            self._set_computing(-1)

    def _set_computing(self, delta: int) -> None:
        with self._lock:
            before = self._computing
            self._computing = max(0, before + delta)
            if (before == 0) != (self._computing == 0):
                for listener in list(self._listeners):
                    listener(self._computing > 0)
