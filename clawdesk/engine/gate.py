"""Chat priority over the shared engine: background work (the judge) yields while the chat is busy."""

from __future__ import annotations

import threading


class ChatGate:
    """Chat priority. The chat marks itself busy from 'user pressed Enter' to 'reply recorded'."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0
        self._idle = threading.Event()
        self._idle.set()

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
