"""The trainer process's progress protocol: one JSON object per line on its stdout, typed on both sides.

``python -m clawdesk.learn.trainer`` (:func:`clawdesk.learn.trainer.main`) prints the messages with
:func:`encode`; the learning loop that started it (:mod:`clawdesk.loop`) reads them with
:func:`decode`. The wire format, line by line:

- first :class:`TrainerStarted` — ``{"phase": "starting", "pausable": <bool>}``: whether the app may
  stop the process while the chat generates (it set its death signal, :mod:`clawdesk.learn.pause`);
- then one :class:`TrainProgress` per report — ``{"phase", "step", "steps", "message", "metrics"}``;
- on a :class:`~clawdesk.errors.ClawDeskError`, last :class:`TrainerFailed` —
  ``{"phase": "error", "error": <message>, "kind": <class name>}`` (and exit code 1).

Kept free of torch and llama.cpp: both processes import it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

STARTING = "starting"
ERROR = "error"


@dataclass(frozen=True)
class TrainerStarted:
    """The process is up; ``pausable``: the app may stop (SIGSTOP) it while the chat generates."""

    pausable: bool


@dataclass(frozen=True)
class TrainProgress:
    """One progress report of a training run (:func:`clawdesk.learn.trainer.train`'s ``on_progress``)."""

    phase: str  # one of clawdesk.learn.trainer.PHASES
    step: int  # 1-based step of this run (0 while loading / when skipped)
    steps: int  # steps this run intends to make
    message: str
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainerFailed:
    """The run ended on an error the user can act on; ``kind`` names its ClawDeskError class."""

    error: str
    kind: str = ""


TrainerMessage = TrainerStarted | TrainProgress | TrainerFailed


def encode(message: TrainerMessage) -> str:
    """One protocol line (with its newline)."""
    if isinstance(message, TrainerStarted):
        obj: dict = {"phase": STARTING, "pausable": message.pausable}
    elif isinstance(message, TrainerFailed):
        obj = {"phase": ERROR, "error": message.error, "kind": message.kind}
    else:
        obj = asdict(message)
    return json.dumps(obj) + "\n"


def decode(line: str) -> TrainerMessage | None:
    """The message on one line, or None for a line that is not one (a stray print from a library).

    Missing fields take their defaults, so a reader never fails on a short line.
    """
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("phase"), str):
        return None
    phase = obj["phase"]
    if phase == STARTING and "pausable" in obj:
        return TrainerStarted(bool(obj["pausable"]))
    if phase == ERROR:
        return TrainerFailed(str(obj.get("error") or ""), str(obj.get("kind") or ""))
    metrics = obj.get("metrics")
    return TrainProgress(
        phase,
        _int(obj.get("step")),
        _int(obj.get("steps")),
        str(obj.get("message") or ""),
        {str(k): v for k, v in metrics.items()} if isinstance(metrics, dict) else {},
    )


def _int(value: object) -> int:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0
