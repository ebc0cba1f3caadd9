"""What the learning loop tells its front ends: a state snapshot and typed, frozen events.

:class:`LoopState` is what a learning dashboard shows at one moment (:attr:`LearningLoop.state`);
the events say what just happened. A subscriber gets every event on the loop's thread that caused it
(the judge thread, the trainer watcher, the swap thread, or the caller's own thread for a call such
as :meth:`LearningLoop.train_now`, and for every call of a synchronous loop) and reads
:attr:`LearningLoop.state` for the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LoopState:
    """One snapshot of the loop: the judge's backlog, the samples ready, the training step, the adapter served."""

    learning: bool = True  # the learning switch as the loop last saw it
    judge_ready: int = 0  # turns ready to judge
    judge_waiting: int = 0  # turns waiting for the user's next message
    judging: str = ""  # the vote in progress, e.g. "turn 12: vote 3/6"
    ready_samples: int = 0  # judged samples the next training step can use
    batch_size: int = 16  # samples per training step (train.batch_size)
    running: bool = False  # a training run is in progress
    phase: str = ""  # its last phase (clawdesk.learn.trainer.PHASES, "starting" or "error")
    step: int = 0
    steps: int = 0
    message: str = ""  # its last message (the error when it failed)
    metrics: Mapping[str, float] = field(default_factory=dict)  # its last non-empty metrics
    serving: int | None = None  # the adapter version served (None: the base model)


@dataclass(frozen=True)
class JudgeProgress:
    """A judge vote finished or the backlog changed (``judging`` is empty between turns)."""

    judging: str
    ready: int
    waiting: int


@dataclass(frozen=True)
class SamplesReady:
    """The counts were read again: ``ready`` samples of the ``batch_size`` a training step takes."""

    ready: int
    batch_size: int


@dataclass(frozen=True)
class LearningToggled:
    """The learning switch changed: OFF interrupts judging and starts no new training step."""

    on: bool


@dataclass(frozen=True)
class TrainingStarted:
    """A training run was started on ``batch`` samples (a trainer process, or in this process)."""

    batch: int


@dataclass(frozen=True)
class TrainingSkipped:
    """Training was asked for but cannot start; ``reason`` says why, for the user."""

    reason: str


@dataclass(frozen=True)
class TrainingProgress:
    """One progress message of the training run (see :mod:`clawdesk.learn.protocol`)."""

    phase: str
    step: int
    steps: int
    message: str
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainingFinished:
    """The training run ended cleanly; ``versions``: those it made (rejected ones included)."""

    versions: tuple[int, ...]
    message: str  # its last progress message (why nothing was made, when nothing was)


@dataclass(frozen=True)
class TrainingFailed:
    """The training run failed; ``error`` is its message ('' when a process died without one: see its log)."""

    error: str


@dataclass(frozen=True)
class VersionRejected:
    """A version the trainer made failed validation: it is kept on disk and never served."""

    version: int
    note: str


@dataclass(frozen=True)
class VersionServed:
    """The engine now serves ``version`` (None: the base model); ``message`` says so for the user."""

    version: int | None
    message: str


@dataclass(frozen=True)
class SwapFailed:
    """An activate / rollback was refused; the engine keeps what it served."""

    error: str


@dataclass(frozen=True)
class ServingProblem:
    """At start the chosen adapter could not be served; ``message`` says what is served instead."""

    message: str


@dataclass(frozen=True)
class JudgeStopped:
    """The background judge ended on an error (the database could not be opened); judging stops."""

    error: str


@dataclass(frozen=True)
class PreferenceNoted:
    """The judge kept a hint as a preference item (``item_id``), now in every new turn's prompt.

    ``kind`` is the classifier's answer ("standing", or "unsure": tell the person, who may undo it);
    ``replaced`` are the ids of earlier items on the same topic that this one replaced.
    """

    item_id: int
    text: str
    source_turn_id: int | None
    kind: str
    replaced: tuple[int, ...] = ()


LoopEvent = (
    JudgeProgress
    | SamplesReady
    | LearningToggled
    | TrainingStarted
    | TrainingSkipped
    | TrainingProgress
    | TrainingFinished
    | TrainingFailed
    | VersionRejected
    | VersionServed
    | SwapFailed
    | ServingProblem
    | JudgeStopped
    | PreferenceNoted
)
