"""The ClawDesk chat app (Textual): layout, sessions and the sidebar; the rest in mixins.

The app owns the chat state on the UI thread: the open session (or a *draft* new chat that is
saved on its first message), the main-thread :class:`~clawdesk.store.Store`, and at most one turn
in progress. Its behaviour is split by responsibility:

- :class:`~clawdesk.ui.turns.TurnFlow`: sending a message, streaming the reply from a thread worker
  (through :class:`~clawdesk.agent.AgentService`), recording or failing the turn;
- :class:`~clawdesk.ui.agent_view.AgentView`: tool blocks, the consent dialog, the tools status;
- :class:`~clawdesk.ui.chat_actions.ChatActions`: switches, copy, memory/help, rename/delete, the palette;
- :class:`~clawdesk.ui.learning_actions.LearningActions`: thumbs, the learning screens, train now,
  roll back; with ``learning=True`` the app runs a :class:`~clawdesk.loop.LearningLoop` (built by
  :func:`clawdesk.runtime.build_learning_loop`) and :class:`~clawdesk.ui.learning.LearningView`
  renders its events.

Extension points for later features: :class:`TurnRecorded` (posted after every recorded turn),
:meth:`ClawDeskApp.refresh_status` and ``app.status_bar.set_field`` for extra status fields,
:attr:`ClawDeskApp.HELP_KEYS` and :meth:`ClawDeskApp.get_system_commands` for keys and commands,
``app.push_screen`` for new screens.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Footer, Header, Label, Static

from clawdesk.agent import AgentService
from clawdesk.config import Config
from clawdesk.engine import Engine
from clawdesk.errors import ClawDeskError
from clawdesk.store import Session, Store
from clawdesk.tools.consent import Consent
from clawdesk.tools.registry import Registry
from clawdesk.ui.agent_view import AgentView
from clawdesk.ui.chat_actions import ChatActions
from clawdesk.ui.learning import LearningView
from clawdesk.ui.learning_actions import LearningActions
from clawdesk.ui.messages import PendingTurn
from clawdesk.ui.screens import HELP_KEYS
from clawdesk.ui.tool_widgets import load_trails
from clawdesk.ui.turns import TurnFlow
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

SIDEBAR_PAGE = 50  # chats the sidebar lists at first and per "… older chats"


# -- the app ------------------------------------------------------------------------------


class ClawDeskApp(TurnFlow, AgentView, ChatActions, LearningActions, App[None]):
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
        Binding("f8", "preferences", "Preferences", show=False, priority=True),
        Binding("f9", "undo_preference", "Undo preference", show=False, priority=True),
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
        self.learning: LearningView | None = None
        self.config = config
        self.engine = engine
        self.store = store
        self.registry = registry
        self._consents: dict[int, Consent] = {}  # per chat: "yes for this chat" answers
        self.service = AgentService(engine, config.chat, config.tools, registry, memory=config.memory)
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
            from clawdesk.runtime import build_learning_loop

            try:  # judge.model may name a missing or broken GGUF: the chat still works without learning
                loop = build_learning_loop(self.config, self.store, self.engine, gate=self.service.gate)
            except ClawDeskError as err:
                self.notify(f"Background learning is not running: {err}", severity="error", timeout=12)
                return
            self.learning = LearningView(self, loop)
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

    def exit(self, result=None, return_code: int = 0, message=None) -> None:
        # Stop a running reply so the worker thread ends now (and records it as stopped).
        if self._turn is not None:
            self._turn.cancel.set()
        if self.learning is not None:
            self.learning.close()
        super().exit(result, return_code, message)

    def on_unmount(self) -> None:
        # However the app ends (exit, or a test's run_test): no judging and no events left behind.
        if self.learning is not None:
            self.learning.close()

    # -- actions --------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return self._turn is not None  # hidden from the footer when nothing runs
        return True

    async def action_new_chat(self, incognito: bool = False) -> None:
        if await self.start_new_chat(incognito=incognito):
            self.chat_input.focus()
