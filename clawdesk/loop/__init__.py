"""The headless learning loop: background judging, training and hot-swapping, below every front end.

Build one with :func:`clawdesk.runtime.build_learning_loop`; subscribe to its events
(:mod:`clawdesk.loop.events`) and read :attr:`LearningLoop.state`. The TUI
(:mod:`clawdesk.ui.learning`) only renders them; ``clawdesk eval`` drives a synchronous loop with
its own judge and trainer (:mod:`clawdesk.loop.trainers`). Nothing here imports textual or the eval.
"""

from clawdesk.loop.events import (
    JudgeProgress,
    JudgeStopped,
    LearningToggled,
    LoopEvent,
    LoopState,
    PreferenceNoted,
    SamplesReady,
    ServingProblem,
    SwapFailed,
    TrainingFailed,
    TrainingFinished,
    TrainingProgress,
    TrainingSkipped,
    TrainingStarted,
    VersionRejected,
    VersionServed,
)
from clawdesk.loop.learning_loop import LearningLoop

__all__ = [
    "JudgeProgress",
    "JudgeStopped",
    "LearningLoop",
    "LearningToggled",
    "LoopEvent",
    "LoopState",
    "PreferenceNoted",
    "SamplesReady",
    "ServingProblem",
    "SwapFailed",
    "TrainingFailed",
    "TrainingFinished",
    "TrainingProgress",
    "TrainingSkipped",
    "TrainingStarted",
    "VersionRejected",
    "VersionServed",
]
