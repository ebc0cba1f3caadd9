"""The ClawDesk chat app (Textual): sessions, streaming replies, settings toggles.

The app owns the chat state on the UI thread: the open session (or a *draft* new chat that is
saved on its first message), the main-thread :class:`~clawdesk.store.Store`, and at most one turn
in progress. A turn runs :meth:`AgentService.run_turn` in a thread worker with its own Store;
streamed text crosses threads only through a :class:`~clawdesk.ui.stream.ReplyBuffer` and
posted messages, so the UI keeps handling keys while the model works. The turn runs through
:class:`~clawdesk.agent.AgentService`: with a tools registry and a model that can call tools, its
tool blocks and consent dialog are :class:`~clawdesk.ui.agent_view.AgentView`'s.

Extension points for later features: :class:`TurnRecorded` (posted after every recorded turn),
:meth:`ClawDeskApp.refresh_status` and ``app.status_bar.set_field`` for extra status fields,
:attr:`ClawDeskApp.HELP_KEYS` and :meth:`ClawDeskApp.get_system_commands` for keys and commands,
``app.push_screen`` for new screens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, Label, Static

from clawdesk.agent import AgentService
from clawdesk.chat import clean_message
from clawdesk.config import Config
from clawdesk.engine import Engine
from clawdesk.errors import ClawDeskError
from clawdesk.store import Session, Store
from clawdesk.tools.consent import Consent
from clawdesk.tools.registry import Registry
from clawdesk.ui.agent_view import AgentView
from clawdesk.ui.learning import LearningActions, LearningController
from clawdesk.ui.messages import PendingTurn, ReplyProgress, TurnDone, TurnFailed, TurnRecorded
from clawdesk.ui.screens import HELP_KEYS, ConfirmScreen, HelpScreen, RenameScreen
from clawdesk.ui.stream import ReplyBuffer
from clawdesk.ui.tool_widgets import load_trails
from clawdesk.ui.widgets import (
    INCOGNITO_ICON,
    AssistantMessage,
    ChatInput,
    EmptyState,
    MoreSessions,
    SessionItem,
    SessionList,
    StatusBar,
    UserMessage,
)

RENDER_HZ = 10  # most streamed renders per second
# Most of one core the UI thread may use while a reply streams: every render takes CPU from
# llama.cpp's threads, so a costly screen (slow machine, long chat) renders less often. On the 2-core
# dev VM a render costs ~20 ms: 0.1 gives ~5 renders/s and tui_decode_ratio 0.94-0.99 (RENDER_HZ alone
# at 10/s: 0.80-0.85; 0.15: 8/s, 0.92); see docs/benchmarks.md.
RENDER_SHARE = 0.1
SIDEBAR_PAGE = 50  # chats the sidebar lists at first and per "… older chats"


def _exchanges(n: int) -> str:
    return "1 earlier exchange was" if n == 1 else f"{n} earlier exchanges were"


# -- the app ------------------------------------------------------------------------------


class ClawDeskApp(AgentView, LearningActions, App[None]):
    """The chat TUI. ``store`` is used on this (the UI) thread only."""

    TITLE = "ClawDesk"
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    HELP_KEYS = HELP_KEYS
    BINDINGS = [
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+g", "new_chat(True)", "Incognito", show=False),
        Binding("ctrl+l", "toggle_learning", "Learning"),
        Binding("ctrl+t", "toggle_thinking", "Thinking"),
        Binding("ctrl+y", "copy_reply", "Copy reply"),  # ChatInput gives up its Ctrl+Y (redo) for this
        Binding("f2", "rename_chat", "Rename", show=False),
        Binding("f3", "rate(1)", "👍", show=False, priority=True),
        Binding("f4", "rate(-1)", "👎", show=False, priority=True),
        Binding("f5", "learned", "Learned", priority=True),
        # priority: the message box (a TextArea) binds F6 to "select line"
        Binding("f6", "learning_screen", "Dashboard", priority=True),
        Binding("f7", "memory", "Memory", show=False, priority=True),
        Binding("escape", "stop", "Stop"),
        Binding("f1", "help", "Help"),
        Binding("question_mark", "help", "Help", show=False),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(
        self,
        config: Config,
        engine: Engine,
        store: Store,
        *,
        session_id: int | None = None,
        learning: bool = False,
        registry: Registry | None = None,
    ):
        """``learning=True`` runs the background judge and trainer (the CLI does; most tests don't).
        ``registry``: the tools the model may call (the caller owns it and closes it); None: no tools."""
        super().__init__()
        self._background_learning = learning
        self.learning: LearningController | None = None
        self.config = config
        self.engine = engine
        self.store = store
        self.registry = registry
        self._consents: dict[int, Consent] = {}  # per chat: "yes for this chat" answers
        self.service = AgentService(engine, config.chat, config.tools, registry)
        # Checked now so a bad --session is reported before the screen takes over the terminal.
        self.session: Session | None = store.get_session(session_id) if session_id is not None else None
        self._draft_incognito = False
        self._draft_thinking = config.chat.thinking
        self._turn: PendingTurn | None = None
        self._last_reply = ""
        self._last_render = 0.0  # time.monotonic() of the last streamed render
        self._render_cpu = 0.0  # the UI thread's CPU time (time.thread_time()) then
        self._sidebar_rows = SIDEBAR_PAGE  # chats listed in the sidebar; "… older chats" lists another page

    # -- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="sidebar"):
                yield Label("Chats", id="sidebar-title")
                with Vertical(id="sidebar-buttons"):
                    yield Button("+ New chat", id="new-chat", compact=True)
                    yield Button(f"{INCOGNITO_ICON} Incognito chat", id="new-incognito", compact=True)
                yield SessionList(id="sessions")
            with Vertical(id="chat"):
                if self.engine.identity.note:
                    yield Static(f"⚠  {self.engine.identity.note}", id="demo-note", markup=False)
                with VerticalScroll(id="log"):
                    # At least as tall as the log, so an anchored (follow-the-end) log still starts at the top.
                    yield Vertical(id="messages")
                yield ChatInput(id="input")
        yield StatusBar(id="status")
        yield Footer()

    async def on_mount(self) -> None:
        if self.session is not None:
            await self.open_session(self.session.id)
        else:
            await self.start_new_chat()
        self.chat_input.focus()
        if self._background_learning:
            self.learning = LearningController(self)
            self.learning.start()

    @property
    def chat_log(self) -> Vertical:
        """The container of the conversation's message widgets."""
        return self.query_one("#messages", Vertical)

    def _follow_end(self) -> None:
        """Keep the conversation scrolled to its end as it grows (until the user scrolls up)."""
        scroller = self.query_one("#log", VerticalScroll)
        scroller.scroll_end(animate=False)
        scroller.anchor()

    @property
    def chat_input(self) -> ChatInput:
        return self.query_one("#input", ChatInput)

    @property
    def status_bar(self) -> StatusBar:
        return self.query_one("#status", StatusBar)

    @property
    def session_list(self) -> SessionList:
        return self.query_one("#sessions", SessionList)

    @property
    def busy(self) -> bool:
        """True while a reply is being served."""
        return self._turn is not None

    @property
    def incognito(self) -> bool:
        return self.session.incognito if self.session is not None else self._draft_incognito

    @property
    def thinking_enabled(self) -> bool:
        return self.session.thinking if self.session is not None else self._draft_thinking

    @property
    def last_reply(self) -> str:
        """The answer text of the last reply in the open chat ('' if none)."""
        return self._last_reply

    def refresh_status(self) -> None:
        """Re-read engine and store state into the status bar and title (call after an adapter swap)."""
        ident = self.engine.identity
        bar = self.status_bar
        bar.model_name = f"{ident.name} (demo)" if ident.is_demo else ident.name
        version = self.engine.adapter_version
        bar.adapter = "base" if version is None else f"v{version}"
        bar.learning = self.store.learning_enabled
        bar.thinking = self.thinking_enabled if self.engine.supports_thinking else None
        self.refresh_tools_status()
        title = self.session.title if self.session is not None else "New chat"
        self.sub_title = f"{INCOGNITO_ICON} {title} (incognito)" if self.incognito else title

    async def refresh_sessions(self) -> None:
        """Re-list the sidebar from the store: the newest ``_sidebar_rows`` chats. A widget per chat costs
        milliseconds to mount and lay out: listing all 1,000 chats of a 10,000-turn log took the app tens of
        seconds to start (bench/sec_scale.py), and the sidebar is re-listed after every reply."""
        current = self.session.id if self.session is not None else None
        sessions = self.store.recent_sessions(self._sidebar_rows + 1)  # one more: are there older ones?
        more = len(sessions) > self._sidebar_rows
        await self.session_list.show(sessions[: self._sidebar_rows], current, more=more)

    # -- sessions -------------------------------------------------------------------------

    def _refuse_while_busy(self) -> bool:
        if self._turn is None:
            return False
        self.notify("A reply is being written. Wait for it, or press Esc to stop it.", severity="warning")
        return True

    async def _show_turns(self, turns: Iterable, *, incognito: bool) -> None:
        log = self.chat_log
        await log.remove_children()
        turns = list(turns)
        trails = load_trails(self.store, [t.id for t in turns])
        widgets = []
        for t in turns:
            reply = AssistantMessage(t.reply_content, t.reply_thinking, t.status, steps=trails.get(t.id, ()))
            widgets += [UserMessage(t.user_content), reply]
        await log.mount_all(widgets or [EmptyState(incognito=incognito)])
        self._follow_end()

    async def open_session(self, session_id: int) -> bool:
        """Show a saved chat with its earlier turns. False if refused (a reply is running)."""
        if self._refuse_while_busy():
            return False
        try:
            session = self.store.get_session(session_id)
            turns = self.store.list_turns(session_id)
        except ClawDeskError as err:
            self.notify(str(err), severity="error")
            return False
        self.session = session
        self._last_reply = turns[-1].reply_content if turns else ""
        self.status_bar.tokens_per_s = turns[-1].tokens_per_s if turns else None
        await self._show_turns(turns, incognito=session.incognito)
        await self.refresh_sessions()
        self.refresh_status()
        return True

    async def start_new_chat(self, *, incognito: bool = False) -> bool:
        """Show an empty draft chat; it is saved as a session when its first message is sent."""
        if self._refuse_while_busy():
            return False
        self.session = None
        self._draft_incognito = incognito
        self._draft_thinking = self.config.chat.thinking
        self._last_reply = ""
        await self._show_turns([], incognito=incognito)
        await self.refresh_sessions()
        self.refresh_status()
        return True

    @on(SessionList.Selected)
    async def _session_selected(self, event: SessionList.Selected) -> None:
        item = event.item
        if isinstance(item, MoreSessions):
            index = self._sidebar_rows
            self._sidebar_rows += SIDEBAR_PAGE
            await self.refresh_sessions()
            self.session_list.index = index  # the first of the chats just listed
            return
        if not isinstance(item, SessionItem) or (self.session is not None and item.session.id == self.session.id):
            return
        if await self.open_session(item.session.id):
            self.chat_input.focus()

    @on(SessionList.RenameRequested)
    def _rename_requested(self, event: SessionList.RenameRequested) -> None:
        self.action_rename_chat(event.session_id)

    @on(SessionList.DeleteRequested)
    def _delete_requested(self, event: SessionList.DeleteRequested) -> None:
        self.action_delete_chat(event.session_id)

    @on(Button.Pressed, "#new-chat")
    async def _new_pressed(self) -> None:
        await self.action_new_chat()

    @on(Button.Pressed, "#new-incognito")
    async def _incognito_pressed(self) -> None:
        await self.action_new_chat(True)

    # -- turns ----------------------------------------------------------------------------

    @on(ChatInput.Submitted)
    async def _submitted(self, event: ChatInput.Submitted) -> None:
        await self.send(event.text)

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
        await turn.assistant.finish(reply.content, reply.thinking, reply.status)
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
            self.learning.turn_recorded()

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

    def exit(self, result=None, return_code: int = 0, message=None) -> None:
        # Stop a running reply so the worker thread ends now (and records it as stopped).
        if self._turn is not None:
            self._turn.cancel.set()
        if self.learning is not None:
            self.learning.close()
        super().exit(result, return_code, message)

    # -- actions --------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return self._turn is not None  # hidden from the footer when nothing runs
        return True

    def action_stop(self) -> None:
        if self._turn is not None and not self._turn.cancel.is_set():
            self._turn.cancel.set()
            self.status_bar.activity = "stopping…"

    async def action_new_chat(self, incognito: bool = False) -> None:
        if await self.start_new_chat(incognito=incognito):
            self.chat_input.focus()

    def action_toggle_learning(self) -> None:
        try:
            self.store.set_learning(not self.store.learning_enabled)
            enabled = self.store.learning_enabled
        except ClawDeskError as err:
            self.notify(str(err), severity="error")
            return
        self.status_bar.learning = enabled
        if self.learning is not None:
            self.learning.set_learning(enabled)
        if enabled:
            self.notify("Learning ON: ClawDesk learns from how you respond.")
        else:
            self.notify("Learning OFF: chats are still saved, but nothing new is learned.")

    def action_toggle_thinking(self) -> None:
        if not self.engine.supports_thinking:
            self.notify(f"{self.engine.identity.name} has no thinking mode; Qwen3 models have one.", severity="warning")
            return
        enabled = not self.thinking_enabled
        if self.session is not None:
            try:
                self.store.set_session_flags(self.session.id, thinking=enabled)
                self.session = self.store.get_session(self.session.id)
            except ClawDeskError as err:
                self.notify(str(err), severity="error")
                return
        else:
            self._draft_thinking = enabled
        self.refresh_status()
        self.notify(f"Thinking {'ON' if enabled else 'OFF'} for this chat.")

    def action_copy_reply(self) -> None:
        if not self._last_reply:
            self.notify("There is no reply to copy yet.", severity="warning")
            return
        self.copy_to_clipboard(self._last_reply)
        self.notify("Copied the last reply to the clipboard.")

    def action_memory(self) -> None:
        from clawdesk.ui.memory_screen import MemoryScreen

        if isinstance(self.screen, MemoryScreen):  # F7 again closes it
            self.screen.dismiss()
        else:
            self.push_screen(MemoryScreen(self.store))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.HELP_KEYS))

    def _saved_session(self, session_id: int | None, unsaved: str) -> Session | None:
        """The session to act on (default: the open one), or None after telling the user why not."""
        sid = session_id if session_id is not None else (self.session.id if self.session is not None else None)
        if sid is None:
            self.notify(unsaved, severity="warning")
            return None
        try:
            return self.store.get_session(sid)
        except ClawDeskError as err:
            self.notify(str(err), severity="error")
            return None

    def action_rename_chat(self, session_id: int | None = None) -> None:
        session = self._saved_session(session_id, "This chat is not saved yet: send a message first, then rename it.")
        if session is None:
            return
        sid = session.id

        async def rename(title: str | None) -> None:
            if title is None:
                return
            try:
                self.store.rename_session(sid, title)
            except ClawDeskError as err:
                self.notify(str(err), severity="error")
                return
            if self.session is not None and self.session.id == sid:
                self.session = self.store.get_session(sid)
            await self.refresh_sessions()
            self.refresh_status()

        self.push_screen(RenameScreen(session.title), rename)

    def action_delete_chat(self, session_id: int | None = None) -> None:
        session = self._saved_session(session_id, "This chat is not saved yet, so there is nothing to delete.")
        if session is None:
            return
        sid = session.id
        if self._turn is not None and self._turn.session_id == sid:
            self._refuse_while_busy()
            return

        async def delete(yes: bool | None) -> None:
            if yes:
                self._forget_chat(sid, session.title)

        question = f"Delete “{session.title}” and its {session.n_turns} exchange(s)? This cannot be undone."
        self.push_screen(ConfirmScreen(question), delete)

    @work(thread=True, group="forget", name="delete chat", exit_on_error=False)
    def _forget_chat(self, sid: int, title: str) -> None:
        """Delete a chat for good in a thread: the VACUUM rewrites the whole file, which takes a while on a big log."""
        from clawdesk.store import Store
        from clawdesk.store.forget import forget_session

        try:
            store = Store.open(self.store.path)  # one connection per thread
            try:
                # Deletes the turns with their judgments and samples, then VACUUMs: no text left in the file.
                result = forget_session(store, sid)
            finally:
                store.close()
        except ClawDeskError as err:
            self.call_from_thread(self.notify, str(err), severity="error")
            return
        self.call_from_thread(self._chat_forgotten, sid, title, result.advice())

    async def _chat_forgotten(self, sid: int, title: str, advice: str) -> None:
        if self.session is not None and self.session.id == sid:
            await self.start_new_chat()
        else:
            await self.refresh_sessions()
        self.notify(f"Deleted “{title}”." + (f"\n{advice}" if advice else ""))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield SystemCommand("New chat", "Start a new chat (Ctrl+N)", self.action_new_chat)
        yield SystemCommand(
            "New incognito chat", "A chat kept out of learning (Ctrl+G)", partial(self.action_new_chat, True)
        )
        yield SystemCommand("Rename chat", "Rename the open chat (F2)", self.action_rename_chat)
        yield SystemCommand("Delete chat", "Delete the open chat and its messages", self.action_delete_chat)
        yield SystemCommand(
            "Toggle learning", "Learn from how you respond, or not (Ctrl+L)", self.action_toggle_learning
        )
        yield SystemCommand(
            "Toggle thinking", "Let the model think before answering (Ctrl+T)", self.action_toggle_thinking
        )
        yield SystemCommand("Copy last reply", "Copy the last answer to the clipboard (Ctrl+Y)", self.action_copy_reply)
        if self._turn is not None:
            yield SystemCommand("Stop reply", "Stop the reply being written (Esc)", self.action_stop)
        yield SystemCommand("Thumbs up", "Mark the last reply as good (F3)", partial(self.action_rate, 1))
        yield SystemCommand("Thumbs down", "Mark the last reply as bad (F4)", partial(self.action_rate, -1))
        yield SystemCommand("What I learned", "Judged turns, rewards and hints; veto (F5)", self.action_learned)
        yield SystemCommand(
            "Learning dashboard", "Training progress and adapter versions (F6)", self.action_learning_screen
        )
        yield SystemCommand("Train now", "Run a training step on the judged turns ready now", self.action_train_now)
        yield SystemCommand("Roll back adapter", "Serve the previous adapter version", self.action_rollback)
        yield SystemCommand("Memory", "Notes the assistant keeps across chats; delete them (F7)", self.action_memory)
        yield SystemCommand("Help", "List the keys (F1)", self.action_help)
        yield from super().get_system_commands(screen)
