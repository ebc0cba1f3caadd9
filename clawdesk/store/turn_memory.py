"""What the preference memory put into each turn's prompt (migration ``m009_turn_memory``).

Consolidation distils the memory into the weights (docs/learning.md, "Memory"): the student learns
from a turn's prompt *without* the preference items, the teacher reads it *with* them. So a turn
served with items records, with the turn:

- ``turn_memory``: the memory block exactly as rendered into its system prompt and the ids of the
  items in it. The judge re-renders the served prompt from it to build the hint teacher
  (:func:`clawdesk.judge.teacher.turn_context`), and the learned check finds an item's turns by it;
- ``steps.student_prompt_ids``: each step's prompt rendered without the block (NULL: the served
  prompt had no item, so it is its own student prompt).

Forgetting a turn deletes its row (:data:`clawdesk.store.forget.TURN_TABLES`); scrubbing a later
turn's prompt ids scrubs its student ids too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from clawdesk.store.log import Store
from clawdesk.store.rules import final_step, learnable_turn
from clawdesk.store.tokens import pack_ids, unpack_ids


@dataclass(frozen=True)
class ItemTurn:
    """A turn whose prompt held an item: its served (with items) and student (without) prompt, its reply."""

    turn_id: int
    served_ids: list[int]
    student_ids: list[int]
    reply_ids: list[int]
    item_ids: tuple[int, ...]  # every item its prompt held


def record_turn_memory(
    store: Store, turn_id: int, block: str, item_ids: Sequence[int], student_prompt_ids: Sequence[Sequence[int] | None]
) -> None:
    """Record that ``turn_id`` was served with ``block`` (items ``item_ids``); step k's prompt without it."""
    if not block:
        return
    with store.transaction():
        store.db.execute(
            "INSERT OR REPLACE INTO turn_memory(turn_id, block, item_ids) VALUES (?, ?, ?)",
            [turn_id, block, json.dumps([int(i) for i in item_ids])],
        )
        for idx, ids in enumerate(student_prompt_ids):
            if ids:
                store.db.execute(
                    "UPDATE steps SET student_prompt_ids = ? WHERE turn_id = ? AND idx = ?",
                    [pack_ids(list(ids)), turn_id, idx],
                )


def turn_memory_block(store: Store, turn_id: int) -> str:
    """The memory block rendered into ``turn_id``'s system prompt ("" when none was)."""
    row = store.db.execute("SELECT block FROM turn_memory WHERE turn_id = ?", [turn_id]).fetchone()
    return row[0] if row else ""


def turn_memory_items(store: Store, turn_id: int) -> list[int]:
    """The ids of the items in ``turn_id``'s prompt ([] when none)."""
    row = store.db.execute("SELECT item_ids FROM turn_memory WHERE turn_id = ?", [turn_id]).fetchone()
    return [int(i) for i in json.loads(row[0])] if row else []


_ITEM_TURNS = f"""
    FROM turn_memory m
    JOIN turns t ON t.id = m.turn_id
    JOIN sessions s ON s.id = t.session_id
    LEFT JOIN feedback f ON f.turn_id = t.id
    JOIN steps st ON st.turn_id = t.id AND {final_step("st")}
    WHERE EXISTS (SELECT 1 FROM json_each(m.item_ids) e WHERE e.value = :item)
      AND t.model_sha256 = :sha AND {learnable_turn("t", "s", "f")}
      AND st.status IN ('finished', 'length') AND length(st.prompt_ids) > 0 AND length(st.reply_ids) > 0
      AND length(st.student_prompt_ids) > 0
"""


def item_turns(
    store: Store, pref_id: int, base_sha256: str, *, limit: int = 3, newest_first: bool = False
) -> list[ItemTurn]:
    """Up to ``limit`` recent turns of this base whose prompt held item ``pref_id``, fewest items first.

    Fewest items first: the log-prob check measures what removing the *whole* block costs, so a turn
    whose prompt held this item alone measures this item alone. Then the newest. ``newest_first``: the
    newest alone, whatever else their prompt held (the behaviour test: where the person is now; fewest
    first read only turns from before a second item was noted, stop 49).
    """
    order = "t.id DESC" if newest_first else "json_array_length(m.item_ids), t.id DESC"
    sql = f"""
        SELECT t.id, st.prompt_ids, st.student_prompt_ids, st.reply_ids, m.item_ids {_ITEM_TURNS}
        ORDER BY {order} LIMIT :limit
    """
    rows = store.db.execute(sql, {"item": pref_id, "sha": base_sha256, "limit": int(limit)}).fetchall()
    return [
        ItemTurn(tid, unpack_ids(p), unpack_ids(s), unpack_ids(r), tuple(json.loads(items)))
        for tid, p, s, r, items in rows
    ]


def item_trained_turns(store: Store, pref_id: int, base_sha256: str) -> int:
    """How many turns whose prompt held item ``pref_id`` a ready adapter version has trained on."""
    sql = f"""
        SELECT count(DISTINCT t.id) {_ITEM_TURNS}
          AND EXISTS (SELECT 1 FROM adapter_samples a JOIN adapters v ON v.version = a.version
                      WHERE a.step_id = st.id AND v.status = 'ready')
    """
    return int(store.db.execute(sql, {"item": pref_id, "sha": base_sha256}).fetchone()[0])


def drop_item_blocks(store: Store, item_ids: Sequence[int]) -> int:
    """Delete the memory records of turns whose prompt held any of ``item_ids`` (their text quotes the items).

    Called where items are deleted for good (``prefs rm``/``clear``, ``forget``), so a deleted item's
    words are not left in the file. Those turns' student prompt ids stay (they never held the items);
    a judgment not yet made for them can no longer rebuild the served prompt and gets no hint teacher.
    """
    ids = [int(i) for i in item_ids]
    if not ids:
        return 0
    marks = ",".join("?" * len(ids))
    sql = f"DELETE FROM turn_memory WHERE EXISTS (SELECT 1 FROM json_each(item_ids) e WHERE e.value IN ({marks}))"
    return store.db.execute(sql, ids).rowcount
