"""The chat app's widgets: messages, the input box, the sessions sidebar and the status bar.

Widgets only display; the app (:mod:`clawdesk.ui.app`) owns the store, the engine and the turn
in progress, and widgets ask it for things by posting messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from textual import events
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Collapsible, Label, ListItem, ListView, Markdown, Static, TextArea
from textual.widgets.markdown import MarkdownStream

from clawdesk.store import Session
from clawdesk.ui.stream import hide_tool_calls, split_streaming
from clawdesk.ui.tool_widgets import StepView, ToolTrail

INCOGNITO_ICON = "👻"
EMPTY_CHAT = "Ask me anything — I learn from how you respond"
STATUS_MARKERS = {
    "cancelled": "(stopped)",
    "length": "(cut at length)",
    "repeat": "(cut: it kept repeating itself)",  # a 'length' reply the engine ended in a loop (engine/repeats.py)
}


def status_marker(status: str, content: str) -> str:
    """The visible note under a reply: why it ended early, or that it is empty."""
    if status in STATUS_MARKERS:
        return STATUS_MARKERS[status]
    return "" if content.strip() else "(empty reply)"


# -- messages -----------------------------------------------------------------------------


class UserMessage(Vertical):
    """One message the user sent (shown as typed, no markdown)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self):
        yield Label("You", classes="role")
        yield Static(self.text, markup=False, classes="body")


class AssistantMessage(Vertical):
    """One reply: a collapsed thinking block, the markdown answer, and an end marker.

    Built finished (from the log) or empty and then fed with :meth:`show_progress` while the
    reply streams, and closed with :meth:`finish`.
    """

    def __init__(
        self,
        content: str = "",
        thinking: str = "",
        status: str = "finished",
        *,
        live: bool = False,
        steps: Sequence[StepView] = (),
    ):
        """``steps``: the tool steps before the answer (a reopened turn); a live reply gets them mounted."""
        super().__init__(classes="" if live or status == "finished" else "ended-early")
        self.steps = steps
        self.content = content
        self.thinking = thinking
        self.status = "" if live else status
        self._stream: MarkdownStream | None = None
        self._shown = content  # the answer text the Markdown widget holds

    def compose(self):
        yield Label("ClawDesk", classes="role")
        with Collapsible(title="Thoughts", collapsed=True, classes="thinking") as box:
            box.display = bool(self.thinking)
            yield Static(self.thinking, markup=False, classes="thinking-text")
        if self.steps:
            yield ToolTrail(self.steps)
        yield Markdown(self.content, classes="answer")
        text = "…" if not self.status else status_marker(self.status, self.content)
        marker = Static(text, markup=False, classes="marker")
        marker.display = bool(text)
        yield marker

    @property
    def answer(self) -> Markdown:
        return self.query_one(".answer", Markdown)

    def _set_thinking(self, text: str, *, title: str) -> None:
        box = self.query_one(".thinking", Collapsible)
        box.display = bool(text)
        box.title = title
        self.query_one(".thinking-text", Static).update(text)
        self.thinking = text

    async def _set_answer(self, text: str) -> None:
        if text == self._shown:
            return
        if text.startswith(self._shown):
            if self._stream is None:
                self._stream = Markdown.get_stream(self.answer)
            await self._stream.write(text[len(self._shown) :])
        else:
            # Not an extension of what is shown (e.g. stripped whitespace): re-render in full.
            await self._stop_stream()
            await self.answer.update(text)
        self._shown = text
        self.content = text

    async def _stop_stream(self) -> None:
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None

    async def show_progress(self, raw: str, n_tokens: int) -> None:
        """Show the reply streamed so far (``raw`` is the model's whole output yet)."""
        thinking, answer, still_thinking = split_streaming(raw)
        answer = hide_tool_calls(answer)  # the tool blocks show the calls
        if thinking:
            self._set_thinking(thinking, title=f"Thinking… ({n_tokens} tokens)" if still_thinking else "Thoughts")
        await self._set_answer(answer)

    async def finish(self, content: str, thinking: str, status: str) -> None:
        """Show the final reply as recorded, with its end marker."""
        await self._stop_stream()
        self._set_thinking(thinking, title="Thoughts")
        if self.answer.source != content:
            await self.answer.update(content)
        self._shown = self.content = content
        self.status = status
        marker = status_marker(status, content)
        widget = self.query_one(".marker", Static)
        widget.update(marker)
        widget.display = bool(marker)
        self.set_class(status != "finished", "ended-early")


class EmptyState(Static):
    """What a new chat shows before its first message."""

    def __init__(self, *, incognito: bool = False) -> None:
        lines = [EMPTY_CHAT, ""]
        if incognito:
            lines += [f"{INCOGNITO_ICON} Incognito chat: it is kept out of learning.", ""]
        lines.append("Enter sends · Shift+Enter or Ctrl+J: new line · F1: help")
        super().__init__("\n".join(lines), markup=False)


# -- input --------------------------------------------------------------------------------


class ChatInput(TextArea):
    """Multi-line message box: Enter sends; Shift+Enter (or Ctrl+J where the terminal does not
    report Shift+Enter) starts a new line."""

    BINDINGS = [Binding("shift+enter,ctrl+j", "newline", "New line", show=False)]

    class Submitted(Message):
        """The user pressed Enter; ``text`` is the box's whole content."""

        def __init__(self, chat_input: ChatInput, text: str) -> None:
            super().__init__()
            self.chat_input = chat_input
            self.text = text

        @property
        def control(self) -> ChatInput:
            return self.chat_input

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("soft_wrap", True)
        kwargs.setdefault("show_line_numbers", False)
        kwargs.setdefault("tab_behavior", "focus")
        kwargs.setdefault("placeholder", "Message ClawDesk…  (Enter to send)")
        super().__init__(**kwargs)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Ctrl+Y is the app's "copy last reply"; TextArea would take it as redo.
        return False if action == "redo" else super().check_action(action, parameters)

    async def _on_key(self, event: events.Key) -> None:
        # Textual then runs TextArea._on_key too (handlers run down the MRO) unless the
        # default is prevented, which is how Enter is kept from inserting a newline.
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self, self.text))

    def action_newline(self) -> None:
        self.insert("\n")


# -- sessions sidebar ---------------------------------------------------------------------


def session_label(session: Session) -> str:
    return f"{INCOGNITO_ICON} {session.title}" if session.incognito else session.title


class SessionItem(ListItem):
    def __init__(self, session: Session) -> None:
        super().__init__(Label(session_label(session), markup=False))
        self.session = session


class MoreSessions(ListItem):
    """The sidebar's last row when older chats are not listed yet: selecting it lists another page."""

    def __init__(self) -> None:
        super().__init__(Label("… older chats", markup=False))


class SessionList(ListView):
    """Saved chats, newest first, a page at a time. Enter opens one; ``r`` renames, Delete removes."""

    BINDINGS = [
        Binding("r,f2", "rename", "Rename"),
        Binding("delete,d", "delete", "Delete"),
    ]

    class RenameRequested(Message):
        def __init__(self, session_id: int) -> None:
            super().__init__()
            self.session_id = session_id

    class DeleteRequested(Message):
        def __init__(self, session_id: int) -> None:
            super().__init__()
            self.session_id = session_id

    async def show(self, sessions: Iterable[Session], current_id: int | None, *, more: bool = False) -> None:
        """Replace the items, highlighting the open chat; ``more`` ends the list with a :class:`MoreSessions` row."""
        sessions = list(sessions)
        await self.clear()
        await self.extend([*(SessionItem(s) for s in sessions), *([MoreSessions()] if more else [])])
        ids = [s.id for s in sessions]
        self.index = ids.index(current_id) if current_id in ids else None

    def _highlighted_id(self) -> int | None:
        item = self.highlighted_child
        return item.session.id if isinstance(item, SessionItem) else None

    def action_rename(self) -> None:
        if (sid := self._highlighted_id()) is not None:
            self.post_message(self.RenameRequested(sid))

    def action_delete(self) -> None:
        if (sid := self._highlighted_id()) is not None:
            self.post_message(self.DeleteRequested(sid))


# -- status bar ---------------------------------------------------------------------------


class StatusBar(Widget):
    """One line of state: model, adapter, learning, thinking, speed, activity, then extras.

    The built-in fields are reactives (assign to update). Later features add their own fields
    with :meth:`set_field` (e.g. ``set_field("judge", "judge: 3 waiting")``) and drop them with
    :meth:`remove_field`; extras render after the built-ins, in the order first set.
    """

    DEFAULT_CSS = """
    StatusBar { height: 1; width: 1fr; }
    """

    model_name = reactive("")
    adapter = reactive("base")
    learning = reactive(True)
    thinking: reactive[bool | None] = reactive(None)  # None: the model has no thinking mode
    tokens_per_s: reactive[float | None] = reactive(None)
    activity = reactive("")  # e.g. "writing… 12 tokens" while a reply streams

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._extra: dict[str, tuple[str, str]] = {}

    def set_field(self, key: str, text: str, style: str = "") -> None:
        """Add or change an extra field (``style`` is a Textual style, e.g. ``"bold $warning"``)."""
        self._extra[key] = (text, style)
        self.refresh()

    def remove_field(self, key: str) -> None:
        if self._extra.pop(key, None) is not None:
            self.refresh()

    @property
    def extra_fields(self) -> dict[str, str]:
        return {k: text for k, (text, _) in self._extra.items()}

    def _on_off(self, value: bool | None) -> tuple[str, str]:
        if value is None:
            return "n/a", "$text-muted"
        return ("ON", "bold $success") if value else ("OFF", "$text-muted")

    def render(self) -> Content:
        sep = (" │ ", "$text-muted")
        speed = f"{self.tokens_per_s:.1f} tok/s" if self.tokens_per_s is not None else "– tok/s"
        parts: list[str | tuple[str, str]] = [
            (f" {self.model_name}", "bold"),
            sep,
            "adapter ",
            (self.adapter, "bold"),
            sep,
            "learning ",
            self._on_off(self.learning),
            sep,
            "thinking ",
            self._on_off(self.thinking),
            sep,
            speed,
        ]
        for text, style in self._extra.values():
            parts += [sep, (text, style)]
        left = Content.assemble(*parts)
        if not self.activity:
            return left
        # The activity sits at the right end when it fits, else it follows the fields.
        right = Content.assemble((f"● {self.activity} ", "bold $accent"))
        gap = self.size.width - left.cell_length - right.cell_length
        return Content.assemble(left, " " * gap if gap >= 2 else sep, right)

    @property
    def plain(self) -> str:
        """The bar as plain text (for tests and logs)."""
        return self.render().plain
