"""The preference memory in the TUI: the "noted" toast with F9 undo, and the F8 screen (edit, pin, remove, delete)."""

from __future__ import annotations

import pytest

from clawdesk.config import JudgeConfig
from clawdesk.engine.gate import ChatGate
from clawdesk.judge.runner import Judge
from clawdesk.loop import LearningLoop, PreferenceNoted
from clawdesk.store.prefs import add_preference, get_preference, list_preferences, pin_preference
from clawdesk.ui.learning import LearningView
from clawdesk.ui.prefs_screen import EditPreferenceScreen, PreferencesScreen
from tests.support.scripted_engine import ScriptedEngine
from tests.support.ui import SIZE, RecordingApp, wait_until

pytestmark = pytest.mark.anyio
SECRET = "walnut-free-7f3a"


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_a_noted_preference_is_told_and_f9_undoes_it_bringing_back_what_it_replaced(config, store, engine):
    old = add_preference(store, "Do not use any list, bullet points or numbering.").item
    added = add_preference(store, "Use bullet lists, please.")
    assert [p.id for p in added.replaced] == [old.id]
    app = RecordingApp(config, ScriptedEngine(["Sure."]), store)
    async with app.run_test(size=SIZE) as pilot:
        # The loop's event, rendered by the app's real LearningView (the loop, on the demo engine, is not started).
        loop = LearningLoop(config, config.db_path, engine, Judge(engine, JudgeConfig()), gate=ChatGate())
        view = LearningView(app, loop)
        try:
            view.render(PreferenceNoted(added.item.id, added.item.text, None, "unsure", (old.id,)))
            await pilot.pause()
            (toast,) = [m for m, _ in app.notes if "Noted" in m]
            assert "Use bullet lists, please." in toast and "F9 undoes it" in toast and f"#{old.id}" in toast
            assert "only for that reply" in toast  # "unsure": the person decides
            await pilot.press("f9")
            await wait_until(pilot, lambda: any("Undone" in m for m, _ in app.notes), "the undo")
            assert [p.id for p in list_preferences(store)] == [old.id]
            assert (
                get_preference(store, old.id).status == "active" and get_preference(store, old.id).replaced_by is None
            )
            await pilot.press("f9")  # nothing left to undo: said so, nothing changes
            await wait_until(pilot, lambda: any("No preference was just noted" in m for m, _ in app.notes), "the hint")
            assert len(list_preferences(store)) == 1
        finally:
            view.close()


async def test_f8_lists_items_and_edits_pins_removes_and_deletes_them(config, store):
    first = add_preference(store, "Answer in French.").item
    secret = add_preference(store, f"Never mention {SECRET}.").item
    app = RecordingApp(config, ScriptedEngine(["Sure."]), store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f8")
        await wait_until(pilot, lambda: isinstance(app.screen, PreferencesScreen), "the preferences screen")
        table = app.screen.query_one("DataTable")
        assert table.row_count == 2
        row = [str(c) for c in table.get_row_at(0)]
        assert row[0] == str(secret.id) and row[1] == "active" and row[3] == "by hand" and SECRET in row[5]
        await pilot.press("down", "p")  # pin the older one: it moves to the top
        await wait_until(pilot, lambda: get_preference(store, first.id).pinned, "the pin")
        assert str(table.get_row_at(0)[0]) == str(first.id)
        await pilot.press("r")  # the cursor stays on row 1 (the secret now): take it out of the prompt
        await wait_until(pilot, lambda: get_preference(store, secret.id).status == "removed", "the removal")
        await pilot.press("r")  # and back
        await wait_until(pilot, lambda: get_preference(store, secret.id).status == "active", "the restore")
        await pilot.press("up", "e")
        await wait_until(pilot, lambda: isinstance(app.screen, EditPreferenceScreen), "the edit dialog")
        app.screen.query_one("Input").value = "Answer in German."
        await pilot.press("enter")
        await wait_until(pilot, lambda: get_preference(store, first.id).text == "Answer in German.", "the edit")
        await pilot.press("down", "d")
        await wait_until(pilot, lambda: len(list_preferences(store)) == 1, "the deletion")
        assert app.errors() == []
        await pilot.press("f8")
        await wait_until(pilot, lambda: not isinstance(app.screen, PreferencesScreen), "the screen to close")
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = b"".join(p.read_bytes() for p in config.home.glob("clawdesk.db*"))
    assert SECRET.encode() not in raw  # deleted with secure_delete: the text is gone from the file


async def test_f8_with_no_items_says_so_and_keys_do_nothing(config, store):
    app = RecordingApp(config, ScriptedEngine(["Sure."]), store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f8")
        await wait_until(pilot, lambda: isinstance(app.screen, PreferencesScreen), "the preferences screen")
        assert "No preferences yet" in str(app.screen.query_one("#prefs-detail").render())
        await pilot.press("d", "p", "r", "e")
        assert isinstance(app.screen, PreferencesScreen) and app.errors() == []


async def test_a_pinned_item_shows_its_pin(config, store):
    item = add_preference(store, "Use metric units.").item
    pin_preference(store, item.id)
    app = RecordingApp(config, ScriptedEngine(["Sure."]), store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f8")
        await wait_until(pilot, lambda: isinstance(app.screen, PreferencesScreen), "the preferences screen")
        assert str(app.screen.query_one("DataTable").get_row_at(0)[2]) == "📌"


async def test_a_learned_item_shows_when_it_was_learned(config, store):
    from clawdesk.store.prefs import mark_learned

    item = mark_learned(store, add_preference(store, "Use metric units.").item.id)
    app = RecordingApp(config, ScriptedEngine(["Sure."]), store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f8")
        await wait_until(pilot, lambda: isinstance(app.screen, PreferencesScreen), "the preferences screen")
        status = str(app.screen.query_one("DataTable").get_row_at(0)[1])
        assert status == f"learned {item.learned_at[:16].replace('T', ' ')}"
        assert "1 learned" in str(app.screen.query_one("#prefs-detail").render())
