"""Judging the backlog: once (``clawdesk judge``) or continuously in the background (the TUI).

The backlog is turns (judged from the user's next message, :meth:`Judge.judge`) and then tool steps
(judged from their tool results, :meth:`Judge.judge_step`), which are ready as soon as they are
recorded. Both go through the one vote method, :meth:`Judge.vote`.

Both paths respect the learning switch: judging only runs while learning is ON, and turning it
OFF interrupts the turn being judged (nothing half-judged is saved).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from clawdesk.engine import Engine
from clawdesk.judge.parse import majority
from clawdesk.judge.runner import JudgeInterrupted
from clawdesk.judge.vote import VoteProgress
from clawdesk.preferences import HintClassifier, Noted, note_hint
from clawdesk.store import Store
from clawdesk.store.judgments import Judgment, PendingTurn, backlog, drop_stale, pending_turns, save_judgment
from clawdesk.store.step_judgments import (
    PendingStep,
    StepJudgment,
    pending_steps,
    save_step_judgment,
    step_backlog,
)


class BacklogJudge(Protocol):
    """What judging the backlog needs of a judge. :class:`Judge` is the app's; the eval's oracle and its
    controls (:mod:`clawdesk.eval.judges`) are others, so the learning loop runs them all alike."""

    engine: Engine  # the engine it votes with (closed by the learning loop when it is not the served one)
    stop: threading.Event  # set: interrupt at the next token (learning OFF, closing)

    def judge(
        self, store: Store, pending: PendingTurn, *, on_progress: Callable[[VoteProgress], None] | None = None
    ) -> Judgment: ...

    def judge_step(
        self, store: Store, pending: PendingStep, *, on_progress: Callable[[VoteProgress], None] | None = None
    ) -> StepJudgment: ...


@dataclass(frozen=True)
class JudgeEvent:
    """Progress for a UI: a vote finished, a turn was judged, or the backlog changed."""

    kind: str  # 'vote' | 'judged' | 'backlog'
    ready: int = 0  # turns ready to judge
    waiting: int = 0  # turns waiting for the user's next message
    vote: VoteProgress | None = None
    judgment: Judgment | None = None
    steps_ready: int = 0  # tool steps ready to judge
    step_judgment: StepJudgment | None = None  # set instead of ``judgment`` when a tool step was judged
    preference: Noted | None = None  # the judged turn's hint was kept as a preference item


@dataclass
class JudgeSummary:
    judged: int = 0
    dropped: int = 0
    rewards: dict[int, int] = field(default_factory=lambda: {1: 0, -1: 0, 0: 0})
    hints: int = 0
    stopped: bool = False  # learning was turned off / interrupted before the backlog was done
    steps_judged: int = 0  # tool steps
    step_rewards: dict[int, int] = field(default_factory=lambda: {1: 0, -1: 0, 0: 0})  # majority of their votes
    step_hints: int = 0
    preferences: int = 0  # hints kept as preference items


def judge_pending(
    store: Store,
    judge: BacklogJudge,
    *,
    max_age_hours: float,
    limit: int | None = None,
    on_event: Callable[[JudgeEvent], None] | None = None,
    classify: HintClassifier | None = None,
) -> JudgeSummary:
    """Judge up to ``limit`` ready turns, then tool steps, now (oldest first; ``limit`` counts both).

    ``classify``: with it, a turn's accepted hint that states a standing preference becomes a
    preference item (:func:`clawdesk.preferences.note_hint`); None (the memory off): never.
    """
    summary = JudgeSummary(dropped=drop_stale(store, max_age_hours))
    for pending in pending_turns(store, limit=limit):
        if not store.learning_enabled or judge.stop.is_set():
            summary.stopped = True
            break

        def progress(v: VoteProgress) -> None:
            if on_event is not None:
                on_event(JudgeEvent("vote", vote=v))

        try:
            judgment = judge.judge(store, pending, on_progress=progress)
        except JudgeInterrupted:
            summary.stopped = True
            break
        save_judgment(store, judgment)
        try:
            noted = _note_preference(store, classify, judgment, pending)
        except JudgeInterrupted:  # learning turned OFF while classifying: the judgment is kept, no item
            noted = None
            summary.stopped = True
        summary.preferences += noted is not None
        summary.judged += 1
        summary.rewards[judgment.reward] += 1
        summary.hints += judgment.hint is not None
        if on_event is not None:
            ready, waiting = backlog(store)
            on_event(JudgeEvent("judged", ready=ready, waiting=waiting, judgment=judgment, preference=noted))
        if summary.stopped:
            break
    if not summary.stopped:
        _judge_steps(store, judge, summary, None if limit is None else limit - summary.judged, on_event)
    return summary


def _note_preference(
    store: Store, classify: HintClassifier | None, judgment: Judgment, pending: PendingTurn
) -> Noted | None:
    """The judgment's accepted hint as a preference item, when ``classify`` calls it a standing one."""
    if classify is None or judgment.hint is None:
        return None
    return note_hint(
        store,
        classify,
        hint=judgment.hint,
        judged_turn_id=judgment.turn_id,
        source_turn_id=judgment.next_turn_id,
        request=pending.turn.user_content,
        next_message=pending.next_state,
    )


def _judge_steps(
    store: Store,
    judge: BacklogJudge,
    summary: JudgeSummary,
    limit: int | None,
    on_event: Callable[[JudgeEvent], None] | None,
) -> None:
    if limit is not None and limit <= 0:
        return
    for pending in pending_steps(store, limit=limit):
        if not store.learning_enabled or judge.stop.is_set():
            summary.stopped = True
            break
        try:
            sj = judge.judge_step(
                store, pending, on_progress=lambda v: on_event and on_event(JudgeEvent("vote", vote=v))
            )
        except JudgeInterrupted:
            summary.stopped = True
            break
        save_step_judgment(store, sj)
        summary.steps_judged += 1
        summary.step_rewards[majority(sj.votes)] += 1
        summary.step_hints += sj.hint is not None
        if on_event is not None:
            ready, waiting = backlog(store)
            on_event(
                JudgeEvent("judged", ready=ready, waiting=waiting, steps_ready=step_backlog(store), step_judgment=sj)
            )


class JudgeLoop:
    """The background judge: call :meth:`run` in a worker thread; it opens its own DB connection."""

    def __init__(
        self,
        judge: BacklogJudge,
        db_path: Path,
        *,
        max_age_hours: float,
        on_event: Callable[[JudgeEvent], None] | None = None,
        idle_poll: float = 2.0,
        classify: HintClassifier | None = None,
    ) -> None:
        """``classify``: notes standing hints as preference items (see :func:`judge_pending`)."""
        self.judge = judge
        self.classify = classify
        self.db_path = db_path
        self.max_age_hours = max_age_hours
        self.on_event = on_event
        self.idle_poll = idle_poll
        self._closing = threading.Event()
        self._wake = threading.Event()

    def wake(self) -> None:
        """A turn was recorded or a setting changed: look at the backlog now."""
        self._wake.set()

    def set_learning(self, on: bool) -> None:
        """OFF interrupts the vote in progress at the next token; ON resumes."""
        if on:
            self.judge.stop.clear()
        else:
            self.judge.stop.set()
        self._wake.set()

    def close(self) -> None:
        self._closing.set()
        self.judge.stop.set()
        self._wake.set()

    def run(self) -> None:
        """Judge whatever becomes ready until :meth:`close`: a :meth:`drain` per wake-up (or ``idle_poll``)."""
        store = Store.open(self.db_path)
        try:
            while not self._closing.is_set():
                self._wake.clear()
                self.drain(store)
                self._wake.wait(self.idle_poll)
        finally:
            store.close()

    def drain(self, store: Store) -> int:
        """Judge on the calling thread, one turn or tool step at a time, until nothing judgeable is left
        (or learning is OFF, or :meth:`close`); then report the backlog. Returns how many were judged.

        :meth:`run`'s pass; a caller that needs judging at fixed points (the eval) calls it directly."""
        judged = 0
        while not self._closing.is_set() and store.learning_enabled and not self.judge.stop.is_set():
            summary = judge_pending(
                store,
                self.judge,
                max_age_hours=self.max_age_hours,
                limit=1,
                on_event=self.on_event,
                classify=self.classify,
            )
            if not (summary.judged or summary.steps_judged):
                break
            judged += summary.judged + summary.steps_judged  # more may be ready; re-check at once
        if self.on_event is not None:
            ready, waiting = backlog(store)
            self.on_event(JudgeEvent("backlog", ready=ready, waiting=waiting, steps_ready=step_backlog(store)))
        return judged
