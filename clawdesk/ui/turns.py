"""The chat app's turn flow: a message sent, its reply streamed from a thread worker, recorded or failed.

:class:`TurnFlow` is a mixin of :class:`~clawdesk.ui.app.ClawDeskApp` (kept apart so the app module
stays about layout and sessions). A turn runs :meth:`AgentService.run_turn` in a thread worker with
its own Store; streamed text crosses threads only through the turn's
:class:`~clawdesk.ui.stream.ReplyBuffer` and posted messages, so the UI keeps handling keys while the
model works. After a turn is on screen the app posts :class:`~clawdesk.ui.messages.TurnRecorded`.
"""

from __future__ import annotations

import threading
import time
from functools import partial

from textual import work

from clawdesk.chat import clean_message
from clawdesk.errors import ClawDeskError
from clawdesk.store import Store
from clawdesk.tools.consent import Consent
from clawdesk.ui.messages import PendingTurn, ReplyProgress, TurnDone, TurnFailed, TurnRecorded
from clawdesk.ui.stream import ReplyBuffer
from clawdesk.ui.widgets import AssistantMessage, EmptyState, UserMessage

RENDER_HZ = 10  # most streamed renders per second
# Most of one core the UI thread may use while a reply streams: every render takes CPU from
# llama.cpp's threads, so a costly screen (slow machine, long chat) renders less often. On the 2-core
# dev VM a render costs ~20 ms: 0.1 gives ~5 renders/s and tui_decode_ratio 0.94-0.99 (RENDER_HZ alone
# at 10/s: 0.80-0.85; 0.15: 8/s, 0.92); see docs/benchmarks.md.
RENDER_SHARE = 0.1


def _exchanges(n: int) -> str:
    return "1 earlier exchange was" if n == 1 else f"{n} earlier exchanges were"


class TurnFlow:
    """Mixin for :class:`ClawDeskApp`: expects ``store``, ``service``, ``session``, ``_turn``, the chat widgets."""

    _turn: PendingTurn | None
    _last_render: float  # time.monotonic() of the last streamed render
    _render_cpu: float  # the UI thread's CPU time (time.thread_time()) then

    def action_stop(self) -> None:
        if self._turn is not None and not self._turn.cancel.is_set():
            self._turn.cancel.set()
            self.status_bar.activity = "stopping…"

    async def send(self, text: str) -> bool:
        """Send a message from the box: validate it, show it, start the reply. False if refused.

        A refused message stays in the box and an error notification says why.
        """
        if self._refuse_while_busy():
            return False
        created = False
        try:
            text = clean_message(text, self.config.chat.max_message_chars)
            if self.session is None:
                self.session = self.service.new_session(
                    self.store, incognito=self._draft_incognito, thinking=self._draft_thinking
                )
                created = True
        except ClawDeskError as err:
            self.notify(str(err), severity="error", title="Not sent")
            return False
        self.chat_input.clear()
        log = self.chat_log
        await log.query(EmptyState).remove()
        user, assistant = UserMessage(text), AssistantMessage(live=True)
        await log.mount_all([user, assistant])
        self._follow_end()
        self._turn = PendingTurn(self.session.id, text, threading.Event(), ReplyBuffer(), user, assistant, created)
        self.status_bar.activity = "waiting for the model…"
        self.refresh_bindings()
        if created:
            await self.refresh_sessions()
        self._serve(self._turn, *self.agent_callbacks(self._turn))
        return True

    @work(thread=True, exclusive=True, group="turn", name="chat turn", exit_on_error=False)
    def _serve(self, turn: PendingTurn, on_event, consent: Consent | None) -> None:
        """Worker thread: run the turn on a store of this thread's own (text and tool calls come as events)."""
        try:
            store = Store.open(self.store.path)
            try:
                result = self.service.run_turn(
                    store, turn.session_id, turn.text, cancel=turn.cancel, on_event=on_event, consent=consent
                )
            finally:
                store.close()
        except ClawDeskError as err:
            self.post_message(TurnFailed(turn, err))
            return
        self.post_message(TurnDone(turn, result))

    async def on_reply_progress(self, message: ReplyProgress) -> None:
        # Render at most RENDER_HZ times a second, and only as often as keeps this thread's CPU
        # under RENDER_SHARE: the UI thread shares the CPU (and the GIL) with generation, and
        # re-rendering per token roughly halved SmolLM2's speed on 2 cores. Until the buffer is
        # taken, the worker posts nothing more, so deltas pile up meanwhile.
        used = time.thread_time() - self._render_cpu  # this thread's CPU since that render began
        wait = self._last_render + max(1 / RENDER_HZ, used / RENDER_SHARE) - time.monotonic()
        if wait > 0:
            self.set_timer(wait, partial(self._render_progress, message.turn))
        else:
            await self._render_progress(message.turn)

    async def _render_progress(self, turn: PendingTurn) -> None:
        if turn is not self._turn:
            return  # the turn ended meanwhile; finish() showed the final text
        self._last_render, self._render_cpu = time.monotonic(), time.thread_time()
        snap = turn.buffer.take()
        await turn.assistant.show_progress(snap.raw, snap.n_tokens)
        if not turn.cancel.is_set():
            doing = "thinking" if snap.thinking else "writing"
            self.status_bar.activity = f"{doing}… {snap.n_tokens} tokens"

    async def on_turn_done(self, message: TurnDone) -> None:
        turn, result = message.turn, message.result
        reply = result.reply
        self._turn = None
        await turn.assistant.finish(reply.content, reply.thinking, reply.cut or reply.status)
        self.status_bar.tokens_per_s = reply.tokens_per_s
        self.status_bar.activity = ""
        self._last_reply = reply.content
        if result.dropped_turns:
            self.notify(f"{_exchanges(result.dropped_turns)} left out to fit the context window.", severity="warning")
        try:
            self.session = self.store.get_session(turn.session_id)
        except ClawDeskError as err:
            self.notify(str(err), severity="error")
        await self.refresh_sessions()
        self.refresh_status()
        self.refresh_bindings()
        self.post_message(TurnRecorded(turn.session_id, result.turn_id, reply.status, self.incognito))

    def on_turn_recorded(self, message: TurnRecorded) -> None:
        if self.learning is not None:
            self.learning.loop.turn_recorded()

    async def on_turn_failed(self, message: TurnFailed) -> None:
        turn = message.turn
        self._turn = None
        self.status_bar.activity = ""
        await turn.user.remove()
        await turn.assistant.remove()
        if turn.new_session:
            # The chat was created for this message alone; leave no empty chat behind.
            try:
                self.store.delete_session(turn.session_id)
            except ClawDeskError as err:
                self.notify(str(err), severity="error")
            self.session = None
            await self.refresh_sessions()
            self.refresh_status()
        if not self.chat_log.query("UserMessage, EmptyState"):
            await self.chat_log.mount(EmptyState(incognito=self.incognito))
        if not self.chat_input.text.strip():
            self.chat_input.text = turn.text  # keep what the user wrote
        self.refresh_bindings()
        self.notify(str(message.error), severity="error", title="Not sent")
