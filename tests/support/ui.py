"""Driving the Textual app in tests: a recording app, waits, typing and sending, what is on screen.

Shared by the UI tests in tests/ui/ (Textual's pilot against a real Store and turn runner).
"""

from __future__ import annotations

import time

import pytest

from clawdesk.ui.app import ClawDeskApp
from clawdesk.ui.messages import TurnRecorded
from clawdesk.ui.widgets import AssistantMessage, UserMessage

SIZE = (100, 32)


class RecordingApp(ClawDeskApp):
    """The real app, remembering its notifications and recorded turns so tests can read them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.notes: list[tuple[str, str]] = []
        self.recorded: list[TurnRecorded] = []

    def on_turn_recorded(self, message: TurnRecorded) -> None:
        self.recorded.append(message)

    def notify(self, message, *, title="", severity="information", **kwargs):
        self.notes.append((str(message), severity))
        super().notify(message, title=title, severity=severity, **kwargs)

    def errors(self) -> list[str]:
        return [m for m, sev in self.notes if sev == "error"]


async def wait_until(pilot, predicate, what: str, timeout: float = 30.0) -> None:
    """Let the app run until ``predicate()`` holds (the timeout only guards against a hang)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await pilot.pause(0.01)


async def type_and_send(pilot, text: str) -> None:
    pilot.app.chat_input.text = text
    pilot.app.chat_input.focus()
    await pilot.press("enter")


async def send_and_wait(pilot, text: str) -> None:
    app = pilot.app
    before = len(app.recorded)
    await type_and_send(pilot, text)
    await wait_until(pilot, lambda: len(app.recorded) > before, "the turn to be recorded")
    await pilot.pause()


def shown(app: ClawDeskApp) -> list[tuple[str, str]]:
    """The conversation on screen as (role, text) pairs."""
    out = []
    for w in app.chat_log.children:
        if isinstance(w, UserMessage):
            out.append(("user", w.text))
        elif isinstance(w, AssistantMessage):
            out.append(("assistant", w.answer.source))
    return out
