"""The chat's view of the learning loop: status-bar fields, notifications, the dashboard's updates.

The loop itself (judging, training, hot-swapping) is :class:`clawdesk.loop.LearningLoop`, headless;
:class:`LearningView` only renders its events. They arrive on the loop's threads and cross to the
UI thread with ``app.call_from_thread`` (or are rendered at once when the UI thread caused them, e.g.
"train now").
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from clawdesk.loop import (
    JudgeStopped,
    LearningLoop,
    LoopEvent,
    LoopState,
    PreferenceNoted,
    ServingProblem,
    SwapFailed,
    TrainingFailed,
    TrainingFinished,
    TrainingSkipped,
    VersionRejected,
    VersionServed,
)


class LearningView:
    """Renders one :class:`LearningLoop` in the chat app (``app``: the running ClawDeskApp)."""

    def __init__(self, app: Any, loop: LearningLoop) -> None:
        self.app = app
        self.loop = loop
        self.listeners: list[Callable[[LoopState], None]] = []  # e.g. the learning dashboard, on the UI thread
        self._ui_thread = threading.get_ident()  # built on the UI thread (the app's on_mount)
        self._unsubscribe = loop.subscribe(self._on_event)

    def start(self) -> None:
        self.loop.start()

    def close(self) -> None:
        self._unsubscribe()
        self.loop.close()

    def _on_event(self, event: LoopEvent) -> None:
        if threading.get_ident() == self._ui_thread:
            self.render(event)
            return
        # RuntimeError: the app has already exited, so there is no screen left to update.
        with contextlib.suppress(RuntimeError):
            self.app.call_from_thread(self.render, event)

    def render(self, event: LoopEvent) -> None:
        """On the UI thread: tell the user what needs telling, then show the loop's state."""
        notify = self.app.notify
        if isinstance(event, ServingProblem):
            notify(event.message, severity="warning", timeout=8)
        elif isinstance(event, TrainingSkipped):
            notify(event.reason, timeout=4)
        elif isinstance(event, TrainingFailed):
            notify(f"Training failed: {event.error or 'see logs/trainer.log'}", severity="error")
        elif isinstance(event, TrainingFinished) and not event.versions and event.message:
            notify(event.message, timeout=6)
        elif isinstance(event, VersionRejected):
            notify(
                f"Adapter v{event.version} was rejected: {event.note}. The chat keeps its current adapter.",
                severity="warning",
            )
        elif isinstance(event, VersionServed):
            self.app.refresh_status()
            notify(event.message, timeout=6)
        elif isinstance(event, SwapFailed):
            notify(event.error, severity="error")
        elif isinstance(event, PreferenceNoted):
            self.app.preference_noted(event.item_id, event.text, event.kind, event.replaced)
        elif isinstance(event, JudgeStopped):
            notify(f"Background judging stopped: {event.error}", severity="error")
        self.publish()

    def publish(self) -> None:
        """The status bar's judge and learn fields, and the listeners, from the loop's state."""
        s = self.loop.state
        bar = self.app.status_bar
        if not self.app.store.learning_enabled:
            bar.remove_field("judge")
            bar.remove_field("learn")
        else:
            judge = (s.judging and f"judging {s.judging}") or (
                f"judge {s.judge_ready}" + (f" (+{s.judge_waiting} waiting)" if s.judge_waiting else "")
            )
            bar.set_field("judge", judge)
            if s.running:
                bar.set_field("learn", f"training {s.phase} {s.step}/{s.steps or '?'}", style="bold")
            else:
                bar.set_field("learn", f"batch {min(s.ready_samples, s.batch_size)}/{s.batch_size}")
        for listener in list(self.listeners):
            listener(s)
