"""The preference memory in the eval: ``clawdesk eval --memory on|off`` (default: the app's ``[memory] enabled``).

With the memory on, the eval's simulated chats get it exactly as the app's chats do: the same
:class:`~clawdesk.agent.AgentService` renders the active items into every turn's prompt (``memory.placement``),
items come from the judge's accepted hints (the learning loop's judge pass calls
:func:`clawdesk.preferences.note_hint` with the classifier the eval gives it), and the
trainer's learned check (:mod:`clawdesk.learn.consolidate`) retires the items the adapter carries.
Which hints are standing preferences: with ``--judge self`` the app's classifier decides
(:func:`clawdesk.runtime.hint_classifier`); with the oracle every hint is standing by construction
(a persona's hint says how *every* reply should be, never a one-off correction of one answer).

The experiment (:mod:`clawdesk.eval.experiment`) calls this module at a few marked hooks
(``# [memory hook]``): with the memory on, the run has the loop judge right after every
interaction (the app's background judge does: an item acts from the next reply on, not after a
training batch), says when the items in the prompt changed (the held-out set is scored again then),
and adds to ``result.json``: ``memory``, ``memory_items`` (text, created at / learned at: the
interaction after which it was noted or retired), ``score_without_memory`` (the held-out score at
the end with the items removed from the prompt: what the weights learned) and ``sessions_to_effect``
(:func:`sessions_to_effect`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clawdesk.config import MemoryConfig
from clawdesk.eval.topic import OFF_TOPIC_HINT
from clawdesk.preferences import HintClassifier, block_for_turn, effective_placement
from clawdesk.store import Store
from clawdesk.store.prefs import list_preferences

EFFECT_RUN = 3  # consecutive satisfied replies that count as "the effect holds"


def sessions_to_effect(satisfied: Sequence[bool], run: int = EFFECT_RUN) -> int | None:
    """The first interaction after which ``run`` consecutive served replies satisfied the persona.

    ``satisfied[k]`` is whether the reply of interaction k + 1 did; the answer n means replies
    n + 1 .. n + run all did (0: from the start). None when no such run happened.
    """
    streak = 0
    for k, ok in enumerate(satisfied):
        streak = streak + 1 if ok else 0
        if streak == run:
            return k + 1 - run
    return None


def oracle_classifier(hint: str, request: str, next_message: str) -> str:
    """The oracle's hints are standing by construction: a persona's hint is how every reply should be.

    The one exception is the hint after a reply that answered nothing (:data:`~clawdesk.eval.topic.OFF_TOPIC_HINT`):
    it corrects that reply, as "I meant Paris, France" does, so it is a one-off.
    """
    return "one-off" if hint == OFF_TOPIC_HINT else "standing"


@dataclass
class MemoryRun:
    """One eval run's memory: whether it is on, what it noted and retired, and when (in interactions)."""

    config: MemoryConfig
    placement: str  # the config's placement for the run's model ("auto" resolved)
    count_tokens: Callable[[str], int]
    classify: HintClassifier | None
    created: dict[int, int] = field(default_factory=dict)  # item id → interaction after which it was noted
    learned: dict[int, int] = field(default_factory=dict)  # item id → interaction after which it was retired
    _active: frozenset[int] = frozenset()

    @classmethod
    def start(cls, config: MemoryConfig, engine, classify: HintClassifier | None) -> MemoryRun:
        placement = effective_placement(config.placement, engine.identity.is_demo)
        return cls(config, placement, lambda text: len(engine.tokenize(text)), classify)

    @property
    def on(self) -> bool:
        return self.config.enabled and self.classify is not None

    def served_block(self, store: Store) -> Callable[[], str] | None:
        """The held-out scorer's memory block, as a chat would get it now (None: the memory is off)."""
        if not self.on:
            return None
        return lambda: block_for_turn(store, self.count_tokens, self.config.budget_tokens, self.placement)

    def changed(self, store: Store, interaction: int) -> bool:
        """Record new and retired items after ``interaction``; whether the items in the prompt changed."""
        if not self.on:
            return False
        items = list_preferences(store)
        for p in items:
            self.created.setdefault(p.id, interaction)
            if p.status == "learned":
                self.learned.setdefault(p.id, interaction)
            elif p.status == "active":
                self.learned.pop(p.id, None)  # it came back: the behaviour did not hold
        active = frozenset(p.id for p in items if p.status == "active")
        moved, self._active = active != self._active, active
        return moved

    def result(self, store: Store, scorer, satisfied: Sequence[bool], final_score: float) -> dict[str, Any]:
        """The run's memory keys for ``result.json`` (the store and the scorer still open)."""
        out: dict[str, Any] = {"memory": self.on, "sessions_to_effect": sessions_to_effect(satisfied)}
        if not self.on:
            return out | {"memory_items": [], "score_without_memory": final_score}
        out["memory_items"] = [
            {
                "id": p.id, "text": p.text, "status": p.status, "created_at": self.created.get(p.id),
                "learned_at": self.learned.get(p.id) if p.status == "learned" else None,
            }
            for p in sorted(list_preferences(store), key=lambda p: p.id)
        ]  # fmt: skip
        served, scorer.memory = scorer.memory, None
        try:
            out["score_without_memory"] = scorer.score()
        finally:
            scorer.memory = served
        return out
