"""Which reply tokens copy the hint: where the OPD teacher's advantage is in-context copying, not the wish.

On-policy distillation rewards each reply token by log π_teacher(a | s + hint) − log π_old(a | s).
A reply that writes the hint's own words back has every one of them in the teacher's context, and a
small model puts high probability on copying what it has just read: on the demo model the advantage
of a reply that *is* the user's complaint averaged +3.6 nats a token, against −0.15 for a real
short answer (``python bench/hint_copy.py``, docs/learning.md, stop 37). So the OPD term pulls
toward echoing the user's feedback (with the self judge the hint is the user's message), which
stop 36 saw as replies that answer nothing. ``train.opd_copy_ngram = n`` (0: off) gives no OPD
advantage to reply tokens inside an n-token run that occurs in the teacher's prompt but nowhere in
the student's, i.e. words that only the hint (and the preference items the teacher adds) brought.
Measured on ``brief`` with the self judge, 3 seeds: the weights carried much less (0.48 mean
without the memory, against 0.79), so it stays off.
"""

from __future__ import annotations

from collections.abc import Sequence


def _ngrams(ids: Sequence[int], n: int) -> set[tuple[int, ...]]:
    return {tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)}


def copied_positions(
    reply_ids: Sequence[int], teacher_prompt_ids: Sequence[int], prompt_ids: Sequence[int], n: int
) -> list[bool]:
    """Per reply token: whether it lies in an ``n``-token run found in the teacher's prompt and not in the student's."""
    if n < 1:
        raise ValueError(f"an n-gram needs n >= 1, got {n}")
    added = _ngrams(teacher_prompt_ids, n) - _ngrams(prompt_ids, n)
    out = [False] * len(reply_ids)
    for i in range(len(reply_ids) - n + 1):
        if tuple(reply_ids[i : i + n]) in added:
            out[i : i + n] = [True] * n
    return out
