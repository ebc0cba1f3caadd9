"""What a reply *does*, by the aspect of a reply a preference item is about: the learned check's behaviour test.

Owns the surface features of a reply's text that the aspects of :mod:`clawdesk.store.pref_topics` name
(``length``: words; ``lists``: whether it has list lines; ``paragraphs``: how many, up to 3;
``opening`` / ``closing``: its first / last :data:`EDGE_WORDS` words) and the rule for when two
replies to the same prompt agree on one (:func:`agrees`; on ``length`` in the direction the item points, where
it says one).

Why: the learned check's log-prob criterion scores the *served* replies, and per-token log-probs do
not see where a reply ends or what shape it has. On ``brief`` the item left the prompt while the
adapter without it still wrote long replies, and the held-out score dipped from 0.98 to 0.69
(docs/learning.md, "Memory"). The check therefore also compares what the adapter writes without the
item with what it writes with it, on the item's aspect. ``language`` and ``tone`` have no surface
feature here; for them (and for items with no aspect) the log-prob criterion decides alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

FORM_ASPECTS: tuple[str, ...] = ("opening", "closing", "lists", "paragraphs", "length")
LENGTH_RATIO = 1.3  # word counts agree within this factor (a 40-word wish: 31 and 40 words agree, 31 and 41 do not)
LENGTH_SLACK = 5  # ... or within this many words (very short replies: 3 and 7 words agree)
EDGE_WORDS = 2  # "Hi there!", "Great question!", "Short answer:", "this helps!": two words name them
MAX_PARAGRAPHS = 3  # three or more paragraphs all count as "several"

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")  # letters and digits, an inner apostrophe kept ("don't")
_LIST_LINE = re.compile(r"(?m)^\s*(?:[-*•]|\d+[.)])\s")  # the no-lists persona's own pattern
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def words(text: str) -> list[str]:
    """The reply's words, lowercased, punctuation dropped."""
    return [w.lower() for w in _WORD.findall(text)]


def mean_words(replies: Sequence[str]) -> float:
    """The replies' mean number of :func:`words` (0 for none)."""
    return sum(len(words(r)) for r in replies) / len(replies) if replies else 0.0


def has_list(text: str) -> bool:
    """Whether any line starts with a bullet or a number."""
    return _LIST_LINE.search(text) is not None


def paragraphs(text: str) -> int:
    """Blocks of text separated by blank lines, counted up to :data:`MAX_PARAGRAPHS`."""
    return min(sum(1 for block in _BLANK_LINE.split(text) if block.strip()), MAX_PARAGRAPHS)


def agrees(aspect: str, served: str, own: str, direction: str | None = None, bound: int | None = None) -> bool:
    """Whether ``own`` (the adapter's reply without the items) does what ``served`` (with them) does on ``aspect``.

    ``aspect`` is one of :data:`FORM_ASPECTS`. On ``length`` the word counts must be close (within
    :data:`LENGTH_RATIO` or :data:`LENGTH_SLACK` words) unless ``direction`` says which way the item
    points (:func:`clawdesk.store.pref_topics.length_direction`): for ``"shorter"`` a reply without the
    item that is shorter agrees too, for ``"longer"`` one that is longer. Without a direction the rule is
    symmetric. ``bound`` is the word count the item names as its limit in that direction
    (:func:`clawdesk.store.pref_topics.length_bound`, with ``train.item_word_limit``); with it the limit
    replaces the closeness rule: a reply within it agrees (it does what the item asks), one past it only
    if the reply with the item went as far.
    """
    if direction not in (None, "shorter", "longer"):
        raise ValueError(f"a length direction is 'shorter', 'longer' or None, not {direction!r}")
    if aspect == "length":
        n, m = len(words(served)), len(words(own))
        if (direction == "shorter" and m <= n) or (direction == "longer" and m >= n):
            return True
        if bound is not None and direction in ("shorter", "longer"):
            # The item's own limit decides, not closeness: 45 words beside 38 break "at most 40 words".
            return m <= bound if direction == "shorter" else m >= bound
        lo, hi = sorted((n, m))
        return hi <= LENGTH_RATIO * lo or hi - lo <= LENGTH_SLACK
    if aspect == "lists":
        return has_list(served) == has_list(own)
    if aspect == "paragraphs":
        return paragraphs(served) == paragraphs(own)
    if aspect == "opening":
        return words(served)[:EDGE_WORDS] == words(own)[:EDGE_WORDS]
    if aspect == "closing":
        return words(served)[-EDGE_WORDS:] == words(own)[-EDGE_WORDS:]
    raise ValueError(f"no surface feature for the aspect {aspect!r}; one of {', '.join(FORM_ASPECTS)}")


def agreement(
    aspect: str | None,
    served: Sequence[str],
    own: Sequence[str],
    direction: str | None = None,
    bound: int | None = None,
) -> int | None:
    """How many prompts' pairs (``served[i]``, ``own[i]``) agree on ``aspect``; None if it has no surface feature."""
    if aspect not in FORM_ASPECTS:
        return None
    return sum(agrees(aspect, a, b, direction, bound) for a, b in zip(served, own, strict=True))
