"""The preferences screen (F8): the preference memory listed, edited, pinned, removed and deleted.

Only renders and calls :mod:`clawdesk.store.prefs` on the main-thread store. Active items are what
every new turn's prompt shows as the user's stated preferences; *learned* ones left the prompt
because the adapter carries them; *removed* ones (taken out, or replaced by a later item on the
same topic) stay listed until deleted. Deleting overwrites the text in the file (``secure_delete``).
Under the table, the highlighted item's standing in the newest learned check that measured it
(:func:`clawdesk.learn.consolidate.standing`, read from the versions' ``validation``): how much of
it the weights carry and what it still needs before it leaves the prompt.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Label, Static

from clawdesk.errors import ClawDeskError
from clawdesk.learn.consolidate import standing
from clawdesk.store.prefs import (
    count_preferences,
    delete_preference,
    edit_preference,
    get_preference,
    list_preferences,
    pin_preference,
    remove_preference,
    restore_preference,
)
from clawdesk.store.versions import last_item_checks
from clawdesk.ui.screens import TextPromptScreen

SHOWN = 500  # items listed (pinned, then newest, first)


def _snip(text: str, n: int = 90) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


class EditPreferenceScreen(TextPromptScreen):
    """Ask for an item's new text; dismisses with it, or None when cancelled."""

    PROMPT_TITLE, DIALOG_ID, INPUT_ID = "Edit preference", "pref-edit-dialog", "pref-edit-input"
    SELECT_ON_FOCUS = False


class PreferencesScreen(Screen[None]):
    """Every item with its status, pin, source turn and date; keys act on the highlighted one."""

    BINDINGS = [
        Binding("escape,f8", "close", "Back"),
        Binding("e", "edit", "Edit"),
        Binding("p", "pin", "Pin/unpin"),
        Binding("r", "remove", "Remove/restore"),
        Binding("delete,d", "delete", "Delete"),
    ]

    def __init__(self, store) -> None:
        super().__init__()
        self.store = store
        self.ids: list[int] = []
        self.checks: dict[int, tuple[int, dict]] = {}

    def compose(self):
        yield Header()
        yield Label(
            "Preferences — how you want replies in general, noted from your corrections (or added with "
            "`clawdesk prefs add`). Active ones are in the prompt of every new turn; learned ones left it "
            "because the model's adapter carries them.",
            id="prefs-intro",
        )
        yield DataTable(id="prefs", cursor_type="row", zebra_stripes=True)
        yield Static("", id="prefs-check")
        yield Static("", id="prefs-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns("#", "status", "pin", "from", "noted", "preference")
        self.reload()

    def reload(self) -> None:
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.clear()
        items = list_preferences(self.store, limit=SHOWN)
        self.ids = [p.id for p in items]
        self.checks = last_item_checks(self.store)
        for p in items:
            source = f"turn {p.source_turn_id}" if p.source_turn_id is not None else "by hand"
            status = p.status if p.replaced_by is None else f"replaced by #{p.replaced_by}"
            if p.status == "learned" and p.learned_at:  # when the adapter took it over (clawdesk.learn.consolidate)
                status = f"learned {p.learned_at[:16].replace('T', ' ')}"
            date = p.created_at[:16].replace("T", " ")
            table.add_row(str(p.id), status, "📌" if p.pinned else "", source, date, _snip(p.text))
        if items:
            table.move_cursor(row=min(row, len(items) - 1))
        counts = count_preferences(self.store)
        detail = (
            f"{counts['active']} active · {counts['learned']} learned · {counts['removed']} removed. "
            "e edit · p pin · r remove/restore · d delete · Esc back"
            if items
            else "No preferences yet: when you tell the assistant how you like replies, it notes it here."
        )
        self.query_one("#prefs-detail", Static).update(detail)
        self._show_check()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_check()

    def _show_check(self) -> None:
        """The highlighted item's standing in the newest learned check that measured it."""
        pref_id = self._selected()
        text = ""
        if pref_id is not None:
            item = get_preference(self.store, pref_id)
            if item.status == "removed":
                text = f"#{item.id} is not in the prompt (removed or replaced); r restores it."
            elif pref_id in self.checks:
                version, record = self.checks[pref_id]
                text = f"#{item.id} {standing(record, version, item)}."
            else:
                text = (
                    f"#{item.id} has not been checked yet: after each version training makes, the learned check "
                    "measures whether the weights carry it, and then it leaves the prompt."
                )
        self.query_one("#prefs-check", Static).update(text)

    def _selected(self) -> int | None:
        if not self.ids:
            return None
        return self.ids[self.query_one(DataTable).cursor_row]

    def _act(self, change, done: str) -> None:
        pref_id = self._selected()
        if pref_id is None:
            return
        try:
            item = change(pref_id)
        except ClawDeskError as err:
            self.notify(str(err), severity="error")
            return
        self.reload()
        self.notify(done.format(id=item.id, text=_snip(item.text, 40)))

    def action_close(self) -> None:
        self.dismiss()

    def action_pin(self) -> None:
        pref_id = self._selected()
        if pref_id is None:
            return
        pinned = get_preference(self.store, pref_id).pinned
        word = (
            "Unpinned #{id}." if pinned else "Pinned #{id}: it is the last to leave the prompt when the budget is full."
        )
        self._act(lambda i: pin_preference(self.store, i, not pinned), word)

    def action_remove(self) -> None:
        pref_id = self._selected()
        if pref_id is None:
            return
        if get_preference(self.store, pref_id).status == "removed":
            self._act(lambda i: restore_preference(self.store, i), "Restored #{id}: it is in the prompt again.")
        else:
            self._act(lambda i: remove_preference(self.store, i), "Removed #{id} from the prompt (still listed).")

    def action_delete(self) -> None:
        self._act(lambda i: delete_preference(self.store, i), "Deleted #{id}: “{text}”.")

    def action_edit(self) -> None:
        pref_id = self._selected()
        if pref_id is None:
            return
        item = get_preference(self.store, pref_id)
        current = item.text
        done = "Saved #{id}: back in the prompt in these words." if item.status == "learned" else "Saved #{id}."

        def save(text: str | None) -> None:
            if text is not None and text != current:
                self._act(lambda i: edit_preference(self.store, i, text), done)

        self.app.push_screen(EditPreferenceScreen(current), save)
