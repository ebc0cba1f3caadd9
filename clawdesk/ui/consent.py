"""The consent dialog, and the bridge that lets the agent's worker thread wait for its answer.

The agent loop runs in a thread worker and asks :class:`~clawdesk.tools.consent.Consent` before a
call whose policy is ``ask``; the chat's ``Consent`` has :func:`asker` as its ``ask`` callback. It
posts a :class:`~clawdesk.ui.messages.ConsentRequested` to the app (never blocking on the UI
thread, which may be shutting down) and waits for the :class:`ConsentScreen`'s answer, or for the
turn to be stopped, which counts as a denial. The dialog shows the exact call, what it can reach
(folders, environment, whether the shell's sandbox is active), and for ``write_file`` /
``edit_file`` a diff against the file as it is now in the workspace; control characters in any of
it are shown escaped, never sent to the terminal.

The dialog cannot be answered by typing that was meant for the message box: it ignores every
key and click until :data:`ARM_S` has passed with no key pressed (a typing burst keeps it
disarmed), focus starts on *No* (Enter denies), and *Yes for this chat* has no letter key
(``ctrl+y``, or its button).
"""

from __future__ import annotations

import difflib
import json
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from textual import events
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from clawdesk.errors import ToolInputError
from clawdesk.tools.consent import ALLOW, ALLOW_CHAT, DENY, Decision, instead
from clawdesk.tools.jail import Workspace
from clawdesk.tools.types import ToolCall, ToolSpec

PREVIEW_MAX_BYTES = 200_000  # a file bigger than this is not diffed (the call is still shown)
STOPPED = Decision("deny", "The user stopped the reply; this call was not run.")
_WAIT_S = 0.05  # how often a waiting worker looks at the turn's cancel event
ARM_S = 0.5  # the dialog answers nothing until this long has passed without a key
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab and line feed


@dataclass
class ConsentRequest:
    """One question from the worker: the call, what the dialog shows, and the answer slot."""

    call: ToolCall
    spec: ToolSpec
    preview: str
    reach: str = ""  # what the call can reach: folders, environment, sandbox
    answered: threading.Event = field(default_factory=threading.Event)
    decision: Decision = DENY

    def answer(self, decision: Decision | None) -> None:
        """Called on the UI thread when the dialog closes (None = closed without an answer: deny)."""
        if not self.answered.is_set():
            self.decision = decision or DENY
            self.answered.set()


def asker(
    post: Callable[[ConsentRequest], None],
    cancel: threading.Event,
    workspace: Workspace | None,
    reach_of: Callable[[ToolSpec], str] | None = None,
) -> Callable[[ToolCall, ToolSpec], Decision]:
    """The ``Consent.ask`` callback of one turn: ``post`` hands a request to the UI, then this waits.

    Runs on the worker thread. Stopping the turn (Esc, quitting) answers "no" at once, so the
    worker never waits on a dialog that nobody will close.
    """

    def ask(call: ToolCall, spec: ToolSpec) -> Decision:
        if cancel.is_set():
            return STOPPED
        reach = visible(reach_of(spec)) if reach_of is not None else ""
        request = ConsentRequest(call, spec, preview_call(call, workspace), reach)
        post(request)
        while not request.answered.wait(_WAIT_S):
            if cancel.is_set():
                return STOPPED
        return request.decision

    return ask


# -- what the dialog shows ---------------------------------------------------------------


def preview_call(call: ToolCall, workspace: Workspace | None) -> str:
    """The exact call, and for a file write or edit the change it would make to the file as it is now."""
    text = visible(f"{call.name}({json.dumps(call.arguments, ensure_ascii=False, indent=2, default=str)})")
    if workspace is None or call.name not in ("write_file", "edit_file"):
        return text
    try:
        diff = _file_diff(call, workspace)
    except ToolInputError as err:
        diff = f"(this call will fail: {err})"
    return f"{text}\n\n{visible(diff)}"


def visible(text: str) -> str:
    """``text`` with every control character but tab and line feed written as an escape (``\\x1b``)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _file_diff(call: ToolCall, workspace: Workspace) -> str:
    args = call.arguments
    path = args.get("path")
    real = workspace.resolve(path)  # the jail's refusal is shown, never a file outside it
    shown = workspace.relative(real)
    st = workspace.lstat(path)
    if st is None:
        before = None
    elif not stat.S_ISREG(st.st_mode):
        return f"({shown} is not a regular file)"
    elif st.st_size > PREVIEW_MAX_BYTES:
        return f"({shown} is larger than {PREVIEW_MAX_BYTES:,} bytes; no diff shown)"
    else:
        try:
            _, fd = workspace.open_read(path)  # beneath the workspace, no link followed, never blocking
        except ToolInputError as err:
            if call.name == "edit_file":
                raise
            return f"({err}; the write will replace it)"
        with open(fd, "rb") as f:
            data = f.read(PREVIEW_MAX_BYTES + 1)
        try:
            before = data.decode("utf-8")
        except UnicodeDecodeError:
            return f"({shown} is not UTF-8 text; no diff shown)"
    if call.name == "write_file":
        after = args.get("content")
        if not isinstance(after, str):
            return "(no content given)"
    else:
        old, new = args.get("old_text"), args.get("new_text")
        if before is None:
            return f"(this call will fail: {shown} does not exist)"
        if not isinstance(old, str) or not isinstance(new, str) or not old:
            return "(old_text / new_text missing)"
        count = before.count(old)
        if count != 1:
            return f"(this call will fail: old_text occurs {count} times in {shown}, it must occur once)"
        after = before.replace(old, new, 1)
    if before is None:
        header = f"new file {shown}, {len(after):,} characters:"
        return header + "\n" + "\n".join("+" + line for line in after.splitlines())
    if before == after:
        return f"(no change to {shown})"
    lines = difflib.unified_diff(
        before.splitlines(), after.splitlines(), fromfile=f"{shown} (now)", tofile=f"{shown} (after)", lineterm=""
    )
    return "\n".join(lines)


class ConsentScreen(ModalScreen[Decision]):
    """Asks whether a tool call may run; dismisses with a :class:`Decision`.

    *Yes* (``y``), *Yes for this chat* (``ctrl+y``), *No* (``n``, and Enter at first), or *No,
    do this instead…* (``i``), which opens a text box whose text the model reads as the call's
    result. Esc denies and stops the reply, at any time. Nothing else answers before :attr:`armed`.
    """

    BINDINGS = [
        Binding("escape", "stop", "Deny and stop"),
        Binding("y", "answer('allow')", "Yes", show=False),
        Binding("ctrl+y", "answer('allow_chat')", "Yes for this chat", show=False),
        Binding("n", "answer('deny')", "No", show=False),
        Binding("i", "instead", "Instead…", show=False),
    ]

    def __init__(self, request: ConsentRequest) -> None:
        super().__init__()
        self.request = request
        self._arms_at = time.monotonic() + ARM_S

    @property
    def armed(self) -> bool:
        """Whether an answer counts: :data:`ARM_S` has passed since it opened and since the last key."""
        return time.monotonic() >= self._arms_at

    def on_key(self, event: events.Key) -> None:
        if not self.armed and event.key != "escape":
            self._arms_at = time.monotonic() + ARM_S  # still typing: wait for a pause
            event.prevent_default()
            event.stop()

    def on_mouse_down(self, event: events.MouseDown) -> None:
        if not self.armed:
            event.prevent_default()
            event.stop()

    def compose(self):
        spec = self.request.spec
        with Vertical(id="consent-dialog", classes="dialog"):
            yield Label(f"Run {spec.name}?", classes="dialog-title", markup=False)
            if spec.description:
                yield Static(spec.description, id="consent-about", markup=False)
            if self.request.reach:
                yield Static(self.request.reach, id="consent-reach", markup=False)
            with VerticalScroll(id="consent-preview-box"):
                yield Static(self.request.preview, id="consent-preview", markup=False)
            instead_box = Input(placeholder="What should it do instead? (Enter sends)", id="consent-instead")
            instead_box.display = False
            yield instead_box
            with Horizontal(classes="dialog-buttons"):
                yield Button("Yes", variant="success", id="consent-allow")
                yield Button("Yes for this chat", id="consent-allow_chat")
                yield Button("No", variant="error", id="consent-deny")
                yield Button("No, do this instead…", id="consent-instead-button")
            yield Label(
                "y yes · ctrl+y yes for this chat · n no · i instead · Esc: no, and stop", classes="dialog-hint"
            )

    def on_mount(self) -> None:
        self._arms_at = time.monotonic() + ARM_S
        self.query_one("#consent-deny", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if not self.armed:
            return
        if event.button.id == "consent-instead-button":
            self.action_instead()
        elif event.button.id and event.button.id.startswith("consent-"):
            self.action_answer(event.button.id.removeprefix("consent-"))

    def action_answer(self, verdict: str) -> None:
        if not self.armed or self.query_one("#consent-instead", Input).has_focus:
            return  # y/a/n typed into the text box are letters, not answers
        self.dismiss({"allow": ALLOW, "allow_chat": ALLOW_CHAT}.get(verdict, DENY))

    def action_instead(self) -> None:
        box = self.query_one("#consent-instead", Input)
        if not self.armed or box.has_focus:
            return
        box.display = True
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if text:
            self.dismiss(instead(text))

    def action_stop(self) -> None:
        self.dismiss(STOPPED)
