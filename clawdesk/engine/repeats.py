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
    """The smallest period ``p`` with which the tail of ``ids`` repeats, or 0 if it does not (or ``window`` is 0: off).

    The tail is the last ``max(window, 2 * p)`` ids; it repeats when each of them after its first
    ``p`` equals the id ``p`` before it. Called on a reply's ids after each token, it ends the reply
    at the first token that makes it loop.
    """
    if window <= 0:
        return 0
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
