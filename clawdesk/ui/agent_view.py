"""The chat app's side of the agent loop: tool blocks as a reply runs, the consent dialog, the tools status.

:class:`AgentView` is a mixin of :class:`~clawdesk.ui.app.ClawDeskApp` (kept apart so the app
module stays about sessions and turns). The turn worker gets its callbacks from
:meth:`AgentView.agent_callbacks`: the loop's events cross to the UI thread as
:class:`~clawdesk.ui.messages.AgentUpdate` messages (streamed text through the turn's
:class:`~clawdesk.ui.stream.ReplyBuffer`, as for a plain reply), and its consent questions as
:class:`~clawdesk.ui.messages.ConsentRequested`, answered by :class:`~clawdesk.ui.consent.ConsentScreen`.
Each chat has one :class:`~clawdesk.tools.consent.Consent`, so "Yes for this chat" lasts as long as
the app shows that chat.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual import work
from textual.message import Message
from textual.worker import Worker, WorkerState

from clawdesk.agent import AgentEvent, StepStarted, StepText, ToolFinished, ToolStarted
from clawdesk.errors import ClawDeskError
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.consent import Consent, Decision, reach
from clawdesk.tools.format import parse_tool_calls
from clawdesk.tools.types import ToolSpec
from clawdesk.ui.consent import STOPPED, ConsentRequest, ConsentScreen, asker
from clawdesk.ui.messages import AgentUpdate, ConsentRequested, PendingTurn, ReplyProgress, TurnFailed
from clawdesk.ui.tool_widgets import CallView, ToolTrail

if TYPE_CHECKING:
    from clawdesk.tools.registry import Registry

NEEDS_TOOL_MODEL = "tools need Qwen3-4B"
log = logging.getLogger(__name__)


class AgentView:
    """Mixin for :class:`ClawDeskApp`: expects ``registry``, ``_consents``, ``_turn``, ``status_bar``."""

    registry: Registry | None
    _consents: dict[int, Consent]

    # -- worker side (runs on the turn's thread) -------------------------------------------

    def agent_callbacks(self, turn: PendingTurn) -> tuple[Callable[[AgentEvent], None], Consent | None]:
        """``(on_event, consent)`` for one turn's ``run_turn``; called on the UI thread, used on the worker's."""
        step = {"idx": 0, "raw": ""}  # the step being served and its raw text so far (worker thread only)

        def step_text() -> str:
            return parse_tool_calls(step["raw"]).content

        def on_event(event: AgentEvent) -> None:
            if isinstance(event, StepText):
                step["raw"] += event.delta.text
                if turn.buffer.push(event.delta):
                    self.post_message(ReplyProgress(turn))
                return
            if isinstance(event, StepStarted):
                step["idx"], step["raw"] = event.idx, ""
                if event.idx:
                    turn.buffer.reset()  # the answer area shows the new step's text
            self.post_message(AgentUpdate(turn, event, step_text()))

        if self.registry is None:
            return on_event, None
        consent = self._consents.setdefault(turn.session_id, Consent())

        def post(request: ConsentRequest) -> None:
            self.post_message(ConsentRequested(turn, request, step["idx"], step_text()))

        builtins = self._builtins()
        workspace = builtins.workspace if builtins is not None else None

        def reach_of(spec: ToolSpec) -> str:
            root = str(workspace.root) if workspace is not None else None
            return reach(spec, root, builtins.shell_env if builtins is not None else ())

        consent.ask = asker(post, turn.cancel, workspace, reach_of)
        return on_event, consent

    def _builtins(self) -> BuiltinTools | None:
        providers = self.registry.providers if self.registry is not None else []
        return next((p for p in providers if isinstance(p, BuiltinTools)), None)

    # -- a worker that fails -----------------------------------------------------------------

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A worker that raised anything (not only a ClawDeskError) fails its task, never the app.

        The app's workers run with ``exit_on_error=False``; this is where their errors land. A
        turn that failed this way ends like a refused one: its text goes back into the box.
        """
        worker = event.worker
        if event.state != WorkerState.ERROR:
            return
        error = worker.error
        log.error("worker %r failed", worker.name, exc_info=error)
        text = f"{type(error).__name__}: {error}" if error is not None else "unknown error"
        if worker.group == "turn" and self._turn is not None:
            err = (
                error if isinstance(error, ClawDeskError) else ClawDeskError(f"The reply failed unexpectedly ({text}).")
            )
            self.post_message(TurnFailed(self._turn, err))
        else:
            self.notify(f"{worker.name} failed unexpectedly ({text}).", severity="error")

    # -- UI side ---------------------------------------------------------------------------

    async def _trail(self, turn: PendingTurn) -> ToolTrail:
        """The reply's tool trail, mounted above its answer on first use."""
        if turn.trail is None:
            turn.trail = ToolTrail()
            await turn.assistant.mount(turn.trail, before=turn.assistant.answer)
        return turn.trail

    async def on_agent_update(self, message: AgentUpdate) -> None:
        turn, event = message.turn, message.event
        if turn is not self._turn:
            return  # a late message of a turn that already ended
        if isinstance(event, StepStarted):
            if event.idx:
                await turn.assistant.show_progress("", 0)
                if not turn.cancel.is_set():
                    self.status_bar.activity = f"step {event.idx + 1}: waiting for the model…"
            return
        if not isinstance(event, ToolStarted | ToolFinished):
            return
        trail = await self._trail(turn)
        await trail.settle_step(event.idx, message.step_text)
        if isinstance(event, ToolStarted):
            call = CallView(event.call.name, event.call.arguments, "running")
            await trail.start_call(event.idx, event.call_idx, call)
            if not turn.cancel.is_set():
                self.status_bar.activity = f"running {event.call.name}…"
        else:
            call = CallView(event.call.name, event.call.arguments, event.result.status, event.result.content)
            await trail.finish_call(event.idx, event.call_idx, call)
        self._follow_end()

    async def on_consent_requested(self, message: ConsentRequested) -> None:
        turn, request = message.turn, message.request
        if turn is not self._turn or turn.cancel.is_set():
            request.answer(STOPPED)
            return
        trail = await self._trail(turn)
        await trail.settle_step(message.step, message.step_text)
        self._follow_end()
        self.status_bar.activity = f"{request.spec.name}: waiting for your answer…"

        def answered(decision: Decision | None) -> None:
            if decision is STOPPED:  # Esc in the dialog: no, and stop the reply
                self.action_stop()
            elif not turn.cancel.is_set():
                self.status_bar.activity = "working…"
            request.answer(decision)

        self.push_screen(ConsentScreen(request), answered)

    # -- status ----------------------------------------------------------------------------

    def refresh_tools_status(self) -> None:
        """The status bar's tools field: the tool count (and failed MCP servers), or why there are none."""
        if self.registry is None or not self.config.tools.enabled:
            self.status_bar.remove_field("tools")
        elif not self.engine.supports_tools:
            self.status_bar.set_field("tools", NEEDS_TOOL_MODEL, "$text-warning")
        else:
            self._probe_tools(self.registry)

    @work(thread=True, exclusive=True, group="tools-status", name="tools status", exit_on_error=False)
    def _probe_tools(self, registry: Registry) -> None:
        """Count the tools off the UI thread: the first look starts the MCP servers (seconds)."""
        n = len(registry.specs())
        failed = [s.name for s in registry.states() if s.state == "failed"]
        text = f"{n} tool{'s' if n != 1 else ''}"
        if failed:
            text += f" · MCP {', '.join(failed)} failed"
        # A message, not call_from_thread: that would block for ever if the app quit meanwhile.
        self.post_message(ToolsProbed(text, "$text-warning" if failed else ""))

    def on_tools_probed(self, message: ToolsProbed) -> None:
        self.status_bar.set_field("tools", message.text, message.style)


class ToolsProbed(Message):
    """The tools status worker's answer: the status bar's tools field."""

    def __init__(self, text: str, style: str) -> None:
        super().__init__()
        self.text = text
        self.style = style
