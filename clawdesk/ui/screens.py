"""Screens pushed over the chat: the key help, renaming a chat, confirming a deletion.

Each is a small :class:`~textual.screen.ModalScreen` that returns its answer through
``dismiss`` so the app decides what to do with it. Later screens (what the model learned, the
learning dashboard) go here or in their own module and are pushed with ``app.push_screen``.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

# The chat app's keys as the help screen lists them (ClawDeskApp.HELP_KEYS; extend there).
HELP_KEYS: list[tuple[str, str]] = [
    ("Enter", "send the message"),
    ("Shift+Enter, Ctrl+J", "new line in the message"),
    ("Esc", "stop the reply (what was written is kept)"),
    ("Ctrl+N", "new chat"),
    ("Ctrl+G", "new incognito chat (kept out of learning)"),
    ("Ctrl+L", "learning on/off"),
    ("Ctrl+T", "thinking on/off for this chat (Qwen3 models)"),
    ("Ctrl+Y", "copy the last reply"),
    ("F2", "rename this chat"),
    ("F3, F4", "thumbs up / down for the last reply"),
    ("F5", "what I learned (veto or delete a turn)"),
    ("F6", "learning dashboard and adapter versions"),
    # One line for both screens: the help dialog is at its height on a 32-row terminal.
    ("F7, F8", "memory notes · preferences; F9 undoes a new one"),
    ("Tab", "move between the chat list and the message box"),
    ("↑ ↓ Enter", "chat list: open a chat"),
    ("r, Delete", "chat list: rename, delete the highlighted chat"),
    ("Ctrl+P", "command palette"),
    ("F1, ?", "this help"),
    ("Ctrl+Q", "quit"),
]


class HelpScreen(ModalScreen[None]):
    """The keys, as a two-column list. Any of Esc, F1, ? or q closes it."""

    BINDINGS = [Binding("escape,f1,question_mark,q", "close", "Close")]

    def __init__(self, keys: Sequence[tuple[str, str]], *, title: str = "ClawDesk keys") -> None:
        super().__init__()
        self.keys = list(keys)
        self.title_text = title

    def compose(self):
        width = max(len(k) for k, _ in self.keys) + 3
        lines = [Content.assemble((key.ljust(width), "bold $accent"), what) for key, what in self.keys]
        with Vertical(id="help-dialog", classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Static(Content("\n").join(lines), id="help-keys")
            yield Label("Esc closes this help", classes="dialog-hint")

    def action_close(self) -> None:
        self.dismiss(None)


class TextPromptScreen(ModalScreen[str | None]):
    """Ask for one line of text; dismisses with it, or None when cancelled. Subclasses name the dialog."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    PROMPT_TITLE = ""
    DIALOG_ID = ""
    INPUT_ID = ""
    SELECT_ON_FOCUS = True  # a title is usually replaced whole; a preference is usually edited

    def __init__(self, text: str) -> None:
        super().__init__()
        self.current = text

    def compose(self):
        with Vertical(id=self.DIALOG_ID, classes="dialog"):
            yield Label(self.PROMPT_TITLE, classes="dialog-title")
            yield Input(self.current, id=self.INPUT_ID, select_on_focus=self.SELECT_ON_FOCUS)
            yield Label("Enter saves · Esc cancels", classes="dialog-hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class RenameScreen(TextPromptScreen):
    """Ask for a new chat title; dismisses with the title, or None when cancelled."""

    PROMPT_TITLE, DIALOG_ID, INPUT_ID = "Rename chat", "rename-dialog", "rename-input"


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; dismisses with True only for the confirm button (or ``y``)."""

    BINDINGS = [Binding("escape,n", "answer(False)", "No"), Binding("y", "answer(True)", "Yes")]

    def __init__(self, question: str, *, confirm: str = "Delete") -> None:
        super().__init__()
        self.question = question
        self.confirm = confirm

    def compose(self):
        with Vertical(id="confirm-dialog", classes="dialog"):
            yield Label(self.question, id="confirm-question", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.confirm, variant="error", id="confirm-yes")
                yield Button("Cancel", id="confirm-no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
