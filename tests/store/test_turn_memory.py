"""The memory record of turns (m009) on a real SQLite log: forgetting and deleting leave no item text behind."""

from __future__ import annotations

import pytest

from clawdesk.errors import NotFoundError
from clawdesk.store.forget import forget_turn
from clawdesk.store.prefs import add_preference, clear_preferences, get_preference
from clawdesk.store.steps import list_steps
from clawdesk.store.turn_memory import item_turns, record_turn_memory, turn_memory_block

from .test_forget import _turn

SECRET = "ZQXJ-MEMORY-ITEM-0042"


def _file_bytes(store) -> bytes:
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return b"".join(p.read_bytes() for p in store.path.parent.glob(store.path.name + "*"))


def test_forgetting_the_turn_an_item_came_from_drops_the_blocks_that_quote_it(store):
    first = store.create_session(system_prompt="You are ClawDesk.")
    source = store.add_turn(first.id, _turn("Never say the secret."))
    item = add_preference(store, f"Never mention {SECRET}.", source_turn_id=source).item
    other = store.create_session(system_prompt="You are ClawDesk.")
    served = store.add_turn(other.id, _turn("Hello"))
    record_turn_memory(store, served, f'Preferences:\n- "Never mention {SECRET}."', [item.id], [[1, 2]])
    assert [t.turn_id for t in item_turns(store, item.id, "test-sha")] == [served]
    forget_turn(store, source)
    assert turn_memory_block(store, served) == ""
    (step,) = list_steps(store, served)
    assert step.prompt_ids == [1, 2, 3]  # the other chat's turn stays, only the block quoting the item went
    assert SECRET.encode() not in _file_bytes(store)
    with pytest.raises(NotFoundError):
        get_preference(store, item.id)


def test_scrubbing_a_later_turn_scrubs_its_student_prompt_and_clearing_drops_every_block(store):
    session = store.create_session(system_prompt="You are ClawDesk.")
    first = store.add_turn(session.id, _turn("My secret is 42."))
    later = store.add_turn(session.id, _turn("And then?"))
    item = add_preference(store, "No lists.").item
    record_turn_memory(store, later, 'Preferences:\n- "No lists."', [item.id], [[7, 8, 9]])
    forget_turn(store, first)  # the later turn's prompt held the forgotten one: its ids go, student ids too
    row = store.db.execute("SELECT student_prompt_ids FROM steps WHERE turn_id = ?", [later]).fetchone()
    assert row[0] is None
    assert item_turns(store, item.id, "test-sha") == []
    assert clear_preferences(store) == 1 and turn_memory_block(store, later) == ""


def test_an_items_turns_fewest_items_first_or_newest_first(store):
    """The log-prob check reads the turns that held the item alone first; the behaviour test the newest, so
    a stacked phase's first item is compared where the person is now (stop 49: fewest-first read only the
    turns from before the second item was noted)."""
    session = store.create_session(system_prompt="You are ClawDesk.")
    brief = add_preference(store, "Answer in at most 40 words.").item
    lists = add_preference(store, "No lists.").item
    alone = [store.add_turn(session.id, _turn(f"Question {i}?")) for i in range(2)]
    for turn_id in alone:
        record_turn_memory(store, turn_id, 'Preferences:\n- "Answer in at most 40 words."', [brief.id], [[1]])
    both = [store.add_turn(session.id, _turn(f"Later question {i}?")) for i in range(2)]
    for turn_id in both:
        record_turn_memory(store, turn_id, "Preferences: both", [brief.id, lists.id], [[2]])
    fewest = [t.turn_id for t in item_turns(store, brief.id, "test-sha", limit=3)]
    assert fewest == [alone[1], alone[0], both[1]]
    newest = [t.turn_id for t in item_turns(store, brief.id, "test-sha", limit=3, newest_first=True)]
    assert newest == [both[1], both[0], alone[1]]
