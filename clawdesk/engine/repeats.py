"""When a reply has started to repeat itself: the end condition for a model caught in a loop.

Small and quantized models sometimes fall into a loop ("-Monte-Cher-Thee-Monte-Cher-Thee-…", the
same sentence again and again) and would write it until ``max_tokens``: on a CPU that is minutes
of a reply nobody reads. A reply is looping once its last ``max(window, 2·p)`` token ids repeat
with a period ``p`` (1 ≤ p ≤ ``MAX_PERIOD``): a short unit over and over for ``window`` tokens, or
a passage of more than ``window / 2`` tokens written twice in a row. Exact repetition of that length
is what loops write and what replies written for a person do not (measured over the eval runs'
served replies: docs/learning.md "Replies that repeat themselves").
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_PERIOD = 256  # the longest repeated passage looked for, in tokens


def repeat_period(ids: Sequence[int], window: int, max_period: int = MAX_PERIOD) -> int:
    """The smallest period ``p`` with which the tail of ``ids`` repeats, or 0 if it does not.

    The tail is the last ``max(window, 2 * p)`` ids; it repeats when each of them after its first
    ``p`` equals the id ``p`` before it.
    """
    n = len(ids)
    for p in range(1, max_period + 1):
        span = max(window, 2 * p)
        if span > n:  # spans only grow with p
            break
        if ids[-1] != ids[-1 - p]:  # the usual case: one comparison per period
            continue
        if all(ids[i] == ids[i - p] for i in range(n - span + p, n - 1)):
            return p
    return 0


class RepeatWatch:
    """Fed a reply's token ids one by one; says when the reply has started to loop.

    ``window = 0`` never fires (the check is off).
    """

    def __init__(self, window: int, ids: Sequence[int] = (), max_period: int = MAX_PERIOD):
        self.window, self.max_period = window, max_period
        self.ids = list(ids)  # a resumed reply's tokens so far
        self.period = 0  # the loop's period once :meth:`add` returned True

    def add(self, token: int) -> bool:
        self.ids.append(token)
        if self.window <= 0 or len(self.ids) < self.window:
            return False
        self.period = repeat_period(self.ids, self.window, self.max_period)
        return self.period > 0
