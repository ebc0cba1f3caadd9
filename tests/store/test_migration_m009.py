"""Migration m009 (what the memory put into each turn's prompt) on a database written before it.

The committed m007-era fixture (``tests/fixtures/old_main_60390de.db``, written by the old code) is
migrated through m007, m008 and m009: no turn had a memory, so every sample is learned in its served
prompt with exactly the teacher it had, and a new turn served with items records them.
"""

from __future__ import annotations

import json
import sqlite3

from clawdesk.store import Store
from clawdesk.store.integrity import pending_migrations
from clawdesk.store.prefs import add_preference, delete_preference
from clawdesk.store.samples import ready_samples
from clawdesk.store.steps import list_steps
from clawdesk.store.turn_memory import item_turns, record_turn_memory, turn_memory_block, turn_memory_items

from .test_migration_m007 import OLD_DB, _copy, _new_turn


def test_an_old_database_gains_the_memory_record_and_trains_as_before(tmp_path):
    old = json.loads(OLD_DB.with_suffix(".json").read_text())
    db = _copy(OLD_DB, tmp_path)
    with Store.open(db) as st:
        assert pending_migrations(st) == []
        names = [r[0] for r in st.db.execute("SELECT name FROM _sqlite_migrations ORDER BY rowid")]
        assert names[-2:] == ["m008_preferences", "m009_turn_memory"]
        assert st.db.execute("SELECT count(*) FROM turn_memory").fetchone()[0] == 0
        assert st.db.execute("SELECT count(*) FROM steps WHERE student_prompt_ids IS NOT NULL").fetchone()[0] == 0
        sha = old["base_sha256"]
        batch = ready_samples(st, sha)
        expected = old["ready_samples"]["stepwise"]
        assert [(s.turn_id, s.step_id) for s in batch] == [(s["turn_id"], s["step_id"]) for s in expected]
        for s, e in zip(batch, expected, strict=True):  # the served prompt and the hint teacher, as before
            assert (s.prompt_ids, s.teacher_prompt_ids, s.memory) == (e["prompt_ids"], e["teacher_prompt_ids"], False)

        # A new turn served with an item: its row, its student ids, its teacher; deleting the item drops the block.
        session_id = old["sessions"][0]["id"]
        turn_id = st.add_turn(session_id, _new_turn(sha))
        item = add_preference(st, "No lists.").item
        record_turn_memory(st, turn_id, 'MEMORY\n- "No lists."', [item.id], [[1]])
        assert turn_memory_block(st, turn_id).startswith("MEMORY") and turn_memory_items(st, turn_id) == [item.id]
        (step,) = list_steps(st, turn_id)
        (it,) = item_turns(st, item.id, sha)
        assert (it.turn_id, it.served_ids, it.student_ids, it.reply_ids) == (turn_id, step.prompt_ids, [1], [3])
        delete_preference(st, item.id)
        assert turn_memory_block(st, turn_id) == ""
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()
