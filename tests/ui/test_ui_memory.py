"""The memory screen (F7): notes saved by `remember` are listed and can be deleted from the TUI."""

from __future__ import annotations

import pytest

from clawdesk.store.notes import add_note, count_notes, list_notes
from clawdesk.ui.app import ClawDeskApp
from clawdesk.ui.memory_screen import MemoryScreen
from tests.support.scripted_engine import ScriptedEngine
from tests.support.ui import SIZE, wait_until

pytestmark = pytest.mark.anyio
SECRET = "allergic-to-walnuts-7f3a"


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_f7_lists_notes_and_deletes_the_selected_one(config, store):
    add_note(store, "Prefers short answers.", tags="style")
    add_note(store, f"Is {SECRET}.", tags="health")
    app = ClawDeskApp(config, ScriptedEngine(["Sure."]), store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f7")
        await wait_until(pilot, lambda: isinstance(app.screen, MemoryScreen), "the memory screen")
        table = app.screen.query_one("DataTable")
        assert table.row_count == 2
        assert SECRET in str(table.get_row_at(0)[3])  # newest first
        await pilot.press("d")
        await wait_until(pilot, lambda: count_notes(store) == 1, "the note to be deleted")
        assert table.row_count == 1
        assert [n.content for n in list_notes(store)] == ["Prefers short answers."]
        await pilot.press("f7")
        await wait_until(pilot, lambda: not isinstance(app.screen, MemoryScreen), "the screen to close")
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = b"".join(p.read_bytes() for p in config.home.glob("clawdesk.db*"))
    assert SECRET.encode() not in raw  # secure_delete: the note's text is gone from the file


async def test_f7_with_no_notes_says_so(config, store):
    app = ClawDeskApp(config, ScriptedEngine(["Sure."]), store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f7")
        await wait_until(pilot, lambda: isinstance(app.screen, MemoryScreen), "the memory screen")
        assert "No notes yet" in str(app.screen.query_one("#memory-detail").render())
        await pilot.press("d")  # nothing selected: nothing happens, no error
        assert isinstance(app.screen, MemoryScreen)
