"""Whether a reply addresses its request at all: the simulated user's first test, before any persona's checks.

A persona's checks look at a reply's form (its length, a list, an opening phrase). On their own
they are satisfied by a reply that answers nothing: "You can use a few sentences here." is short,
so a ``brief`` user thanked it, the judge scored it +1, and training made more of it (stop 36 found
8, 11 and 7 of the last 24 replies of three self-judged ``brief`` runs so; docs/learning.md,
"Replies that answer nothing"). A person would not thank such a reply, so the simulated one does not
either: a reply must share a content word with the request before any check counts, and when it does
not, or when it only repeats the request's own words, the user says so (:data:`OFF_TOPIC_MESSAGES`)
and the oracle's hint asks for an answer (:data:`OFF_TOPIC_HINT`).

The test is lexical and crude on purpose: it needs no model, so it cannot share the served model's
blind spots, and it is the same for every judge and method. Its miss rate on the demo model's
on-topic replies is measured in docs/learning.md (``python bench/topic_check.py``).
"""

from __future__ import annotations

import re

_STOP = (
    "the and for are but not you your yours what which with that this these those about from have has "
    "does did should would could when where there their they them then were been will make like just only "
    "also very much many most other know explain describe write tell give some more than into can how why "
    "who its it's any all one get use"
)
STOP_WORDS = frozenset(_STOP.split())  # words a question and any answer share

# What the simulated user says after a reply that answers nothing (cycled like a persona's pools), and
# the oracle's hint then. The oracle's memory classifier treats this hint as a one-off correction:
# it is about that reply, not a standing wish (clawdesk.eval.memory.oracle_classifier).
OFF_TOPIC_MESSAGES = (
    "That doesn't answer my question.",
    "You didn't answer what I asked.",
    "That's not what I asked about. Please answer the question.",
)
OFF_TOPIC_HINT = "Answer the question that was asked."


def content_words(text: str) -> set[str]:
    """Lower-cased words of 3+ letters outside ``STOP_WORDS``, cut to their first 5 letters (a crude stem),
    and numbers ("What is 15% of 80?" is answered by "0.15 * 80 = 12", which shares no word).

    Not :func:`clawdesk.store.pref_topics.topic_words`, which compares two preferences: a question and its
    answer differ in inflection ("computing" / "computer") and in question words ("why", "explain").
    """
    words = {w[:5] for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 3 and w not in STOP_WORDS}
    return words | set(re.findall(r"\d+", text))


def addresses(request: str, reply: str) -> bool:
    """Whether ``reply`` shares a content word with ``request`` and says something it did not.

    A request with no content word passes any reply. A reply whose content words all come from the
    request only restates it: "How can I learn to cook better?" back to that very question ends with
    the question mark a ``follow-up`` user wants, and training on the ``follow-up`` persona made 13 of
    48 replies such echoes before this rule (stop 46, docs/learning.md).
    """
    asked, said = content_words(request), content_words(reply)
    return not asked or (bool(asked & said) and not said <= asked)


def off_topic_message(i: int) -> str:
    """The simulated user's message after a reply that answers nothing, at interaction ``i``."""
    return OFF_TOPIC_MESSAGES[i % len(OFF_TOPIC_MESSAGES)]
