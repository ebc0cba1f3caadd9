"""The memory screen (F7): the notes the agent keeps with `remember`, listed and deletable.

Reads and deletes through :mod:`clawdesk.store.notes` on the main-thread store; nothing here runs a
tool. Deleting a note overwrites its text in the file (``secure_delete``) as ``forget`` does.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Label, Static

from clawdesk.errors import ClawDeskError
from clawdesk.store.notes import count_notes, delete_note, list_notes

SHOWN = 500  # newest notes listed; the count says when there are more


def _snip(text: str, n: int = 80) -> str:
    line = " ".join(text.split())
    return line if len(line) <= n else line[: n - 1] + "…"


class MemoryScreen(Screen[None]):
    """Every note with its date and tags; `d`/`delete` deletes the selected one."""

    BINDINGS = [
        Binding("escape,f7", "close", "Back"),
        Binding("delete,d", "delete", "Delete note"),
    ]

    def __init__(self, store) -> None:
        super().__init__()
        self.store = store
        self._ids: list[int] = []

    def compose(self):
        yield Header()
        yield Label(
            "Memory — notes the assistant saved with `remember` and finds with `recall`, across chats. "
            "Delete what it should not keep.",
            id="memory-intro",
        )
        yield DataTable(id="memory", cursor_type="row", zebra_stripes=True)
        yield Static("", id="memory-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns("#", "saved", "tags", "note")
        self.reload()

    def reload(self) -> None:
        table = self.query_one(DataTable)
        table.clear()
        notes = list_notes(self.store, limit=SHOWN)
        self._ids = [n.id for n in notes]
        for n in notes:
            table.add_row(str(n.id), n.created_at[:16].replace("T", " "), n.tags, _snip(n.content))
        total = count_notes(self.store)
        more = f" (the newest {SHOWN} shown)" if total > SHOWN else ""
        self.query_one("#memory-detail", Static).update(
            f"{total} note(s){more}." if total else "No notes yet: the assistant saves one when you ask it to remember."
        )

    def action_close(self) -> None:
        self.dismiss()

    def action_delete(self) -> None:
        table = self.query_one(DataTable)
        if not self._ids:
            return
        note_id = self._ids[table.cursor_row]
        try:
            note = delete_note(self.store, note_id)
        except ClawDeskError as err:
            self.notify(str(err), severity="error")
            return
        self.reload()
        self.notify(f"Deleted note #{note.id}: “{_snip(note.content, 40)}”.")
