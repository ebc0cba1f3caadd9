"""Messages between the chat app's turn worker and its UI thread, and the public turn hook.

The worker posts :class:`ReplyProgress` (and, when the agent uses tools, :class:`AgentUpdate` and
:class:`ConsentRequested`), then :class:`TurnDone` or :class:`TurnFailed`; the app
posts :class:`TurnRecorded` to itself once a turn is in the log and on screen, which is where
later features (the judge, the learning dashboard) hook in with an ``on_turn_recorded`` handler.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from clawdesk.agent import AgentEvent
from clawdesk.chat import TurnResult
from clawdesk.errors import ClawDeskError
from clawdesk.ui.stream import ReplyBuffer
from clawdesk.ui.widgets import AssistantMessage, UserMessage

if TYPE_CHECKING:
    from clawdesk.ui.consent import ConsentRequest
    from clawdesk.ui.tool_widgets import ToolTrail


@dataclass
class PendingTurn:
    """The turn being served: what was sent, where it shows, and how to stop it."""

    session_id: int
    text: str
    cancel: threading.Event
    buffer: ReplyBuffer
    user: UserMessage
    assistant: AssistantMessage
    new_session: bool  # the session was created for this message (removed again if it fails)
    trail: ToolTrail | None = None  # the reply's tool calls, mounted when the first tool step ends


class ReplyProgress(Message):
    """The worker streamed more text into ``turn.buffer`` (at most one is queued per turn)."""

    def __init__(self, turn: PendingTurn) -> None:
        super().__init__()
        self.turn = turn


class AgentUpdate(Message):
    """A step began or a tool call started/ended; ``step_text`` is the step's visible text so far."""

    def __init__(self, turn: PendingTurn, event: AgentEvent, step_text: str = "") -> None:
        super().__init__()
        self.turn = turn
        self.event = event
        self.step_text = step_text


class ConsentRequested(Message):
    """The worker waits for the user's answer about a tool call (``request.answer`` releases it)."""

    def __init__(self, turn: PendingTurn, request: ConsentRequest, step: int, step_text: str) -> None:
        super().__init__()
        self.turn = turn
        self.request = request
        self.step = step
        self.step_text = step_text


class TurnDone(Message):
    """The worker recorded the turn (finished, cancelled or cut at length)."""

    def __init__(self, turn: PendingTurn, result: TurnResult) -> None:
        super().__init__()
        self.turn = turn
        self.result = result


class TurnFailed(Message):
    """The turn was refused or failed before it was recorded; nothing was written."""

    def __init__(self, turn: PendingTurn, error: ClawDeskError) -> None:
        super().__init__()
        self.turn = turn
        self.error = error


class TurnRecorded(Message):
    """Posted to the app after a turn is in the log and on screen: the hook for judge/learning."""

    def __init__(self, session_id: int, turn_id: int, status: str, incognito: bool) -> None:
        super().__init__()
        self.session_id = session_id
        self.turn_id = turn_id
        self.status = status
        self.incognito = incognito
