"""Stop strings for a streamed reply: where it ends, on a token boundary, and what may be shown meanwhile.

A reply that writes a stop string ends before it. The cut is on a token boundary so that the served
token ids (which are recorded and trained on) decode to exactly the text that was shown: a token that
holds the start of the stop string is dropped with it. While the reply streams, a tail that may still
grow into a stop string is held back, so what was shown is always a prefix of the final reply and
nothing has to be taken back. A leading ``<think>`` block is not searched: a thought may quote its
prompt (Qwen3 reasoning about a hint), and the reply is what comes after it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from clawdesk.engine.prompt import THINK_CLOSE, THINK_OPEN, in_thinking


def held_tail(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of one of ``stops``."""
    longest = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:k]):
                longest = k
                break
    return longest


class StopCut:
    """Feeds a reply's token pieces in; says what may be shown and whether a stop string was written.

    ``ends[i]`` is the text length after token ``i``. After :meth:`add` returned ``stopped``,
    :attr:`kept` is the number of tokens before the stop string (its first token included nothing of
    the text before it, or that bit is dropped with it) and :attr:`text` their text.
    """

    def __init__(self, stops: Sequence[str]):
        self.stops = tuple(s for s in stops if s)
        self.text = ""
        self.ends: list[int] = []
        self.shown = 0  # tokens whose text was handed out
        self.kept: int | None = None  # set once a stop string was written

    def add(self, piece: str) -> tuple[str, bool]:
        """Add one token's text; returns (text that may be shown now, whether the reply stops here)."""
        start = len(self.text) - max((len(s) for s in self.stops), default=0)
        self.text += piece
        self.ends.append(len(self.text))
        floor = self._after_thought()
        if floor is None:  # inside the thought: nothing to search, nothing to hold back
            return self._show(len(self.ends)), False
        found = [at for at in (self.text.find(s, max(start, floor)) for s in self.stops) if at >= 0]
        if found:
            cut = min(found)
            self.kept = bisect_right(self.ends, cut)  # ends never decrease: the tokens ending by the cut
            self.text = self.text[: self.ends[self.kept - 1] if self.kept else 0]
            return self._show(self.kept), True
        safe = len(self.text) - held_tail(self.text[floor:], self.stops)
        return self._show(bisect_right(self.ends, safe)), False

    def _after_thought(self) -> int | None:
        """Where stop strings count: 0, or after a leading think block; None while that block is open."""
        if not self.stops:
            return 0
        if in_thinking(self.text):  # also "<thi", which may still open one
            return None
        if not self.text.lstrip().startswith(THINK_OPEN):
            return 0
        return self.text.find(THINK_CLOSE) + len(THINK_CLOSE)

    def flush(self) -> str:
        """The text still held back once the reply has ended without a stop string ("" after one)."""
        return "" if self.kept is not None else self._show(len(self.ends))

    def _show(self, upto: int) -> str:
        if upto <= self.shown:
            return ""
        begin = self.ends[self.shown - 1] if self.shown else 0
        self.shown = upto
        return self.text[begin : self.ends[upto - 1]]
