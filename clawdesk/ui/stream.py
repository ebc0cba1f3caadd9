"""The hand-off of a streamed reply from the generation thread to the UI thread.

The worker thread calls :meth:`ReplyBuffer.push` for every :class:`~clawdesk.engine.Delta`; the
UI drains the buffer with :meth:`ReplyBuffer.take`. ``push`` asks the caller to post a wake-up
message only when none is outstanding, so however fast the model is, at most one message per
reply sits in the app's queue and the UI renders whatever has piled up since it last looked.
Nothing here imports textual.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from clawdesk.engine import Delta
from clawdesk.engine.prompt import THINK_CLOSE, THINK_OPEN, in_thinking, split_thinking
from clawdesk.tools.format import CALL_OPEN


@dataclass(frozen=True)
class ReplySnapshot:
    """Everything streamed so far."""

    raw: str
    n_tokens: int
    thinking: bool  # the model is still inside its <think> block


class ReplyBuffer:
    """Thread-safe accumulator of streamed reply text with one-outstanding-wake-up batching."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._raw: list[str] = []
        self._n_tokens = 0
        self._thinking = False
        self._wake_pending = False

    def push(self, delta: Delta) -> bool:
        """Add a delta. True when the caller should wake the UI (no wake-up is pending yet)."""
        with self._lock:
            self._raw.append(delta.text)
            self._n_tokens = delta.n_tokens
            self._thinking = delta.thinking
            if self._wake_pending:
                return False
            self._wake_pending = True
            return True

    def reset(self) -> None:
        """Start over for the agent's next step (a wake-up already pending stays pending)."""
        with self._lock:
            self._raw = []
            self._n_tokens = 0
            self._thinking = False

    def take(self) -> ReplySnapshot:
        """The reply so far; the next push wakes the UI again."""
        with self._lock:
            self._wake_pending = False
            raw = "".join(self._raw)
            self._raw = [raw]
            return ReplySnapshot(raw=raw, n_tokens=self._n_tokens, thinking=self._thinking)


def split_streaming(raw: str) -> tuple[str, str, bool]:
    """Split partial output into (thinking, answer, still_thinking) for display.

    Unlike :func:`split_thinking` this hides half-streamed tags ("<thi", "</th") so they never
    flash on screen, and treats text that may still become "<think>" as thinking.
    """
    if in_thinking(raw):
        body = raw.lstrip()[len(THINK_OPEN) :] if raw.lstrip().startswith(THINK_OPEN) else ""
        for k in range(len(THINK_CLOSE) - 1, 0, -1):
            if body.endswith(THINK_CLOSE[:k]):
                body = body[:-k]
                break
        return body.strip(), "", True
    thinking, answer = split_thinking(raw)
    return thinking, answer, False


def hide_tool_calls(answer: str) -> str:
    """A streaming answer without its ``<tool_call>`` blocks: everything from the first one on is
    hidden (the tool blocks show the calls), and so is a tag still being written ("<tool_c")."""
    at = answer.find(CALL_OPEN)
    if at >= 0:
        return answer[:at].rstrip()
    for k in range(len(CALL_OPEN) - 1, 0, -1):
        if answer.endswith(CALL_OPEN[:k]):
            return answer[:-k].rstrip()
    return answer
