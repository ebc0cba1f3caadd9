"""The preference memory: the ``preferences`` table (migration ``m008_preferences``) and every rule about it.

A preference is how the person wants replies *in general*, in their own words ("no lists, plain
sentences"): made from a hint the judge accepted (:mod:`clawdesk.preferences` decides which hints
are standing preferences) or added by hand (``clawdesk prefs add``). Active items go into the system
prompt of every new turn; *learned* ones left the prompt because the adapter carries them (marked
by the learned check after training, :mod:`clawdesk.learn.consolidate`; back to active when a later
version no longer does, unless a newer related item may have reversed it: :func:`newer_related`);
*removed* ones stay listed but are never rendered.

Rules kept here, once:

- an item is only made from a turn that may be learned from (:func:`clawdesk.store.rules.learnable_turn`:
  learning was ON, the chat is not incognito, the turn is not vetoed); :func:`add_preference`
  returns None otherwise;
- a later item replaces an earlier one on the same topic (:func:`~clawdesk.store.pref_topics.same_topic`: the
  same aspect of a reply, e.g. its length; or the ``replaces``
  check a caller passes): the earlier is marked removed with ``replaced_by`` pointing at the new
  one, and a pin carries over. Two preferences on different topics are both kept;
- deleting overwrites the freed pages (``secure_delete``), as deleting a note does; ``forget``
  deletes the items of forgotten turns (:mod:`clawdesk.store.forget`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clawdesk.errors import InputError, NotFoundError
from clawdesk.store.log import Store, now_iso
from clawdesk.store.pref_topics import related_topic, same_topic
from clawdesk.store.rules import learnable_turn
from clawdesk.store.turn_memory import drop_item_blocks

PREF_MAX_CHARS = 500  # a preference is a sentence or two about style, not a document
STATUSES = ("active", "learned", "removed")

Replaces = Callable[[str, str], bool]
"""``replaces(new_text, old_text)``: whether the new item supersedes the old (same topic)."""

_COLUMNS = "id, text, source_turn_id, judged_turn_id, status, pinned, replaced_by, learned_at, created_at, updated_at"


@dataclass(frozen=True)
class Preference:
    id: int
    text: str
    source_turn_id: int | None  # the user message that stated it (None: added by hand)
    judged_turn_id: int | None  # the reply it corrected
    status: str  # 'active' | 'learned' | 'removed'
    pinned: bool
    replaced_by: int | None
    learned_at: str | None
    created_at: str
    updated_at: str

    @classmethod
    def from_row(cls, row) -> Preference:
        r = list(row)
        r[5] = bool(r[5])
        return cls(*r)


@dataclass(frozen=True)
class Added:
    """What :func:`add_preference` did: the new (or identical existing) item and the items it replaced."""

    item: Preference
    replaced: tuple[Preference, ...] = ()
    new: bool = True  # False: the same text was already kept, nothing was added


def newer_related(store: Store, item: Preference) -> Preference | None:
    """An active or learned item noted after ``item`` was learned, on a related topic; None if none.

    When the weights lose a learned item, the usual reason is that later training moved them; but
    if the person has since stated a related preference, it may have changed what they want (one on
    the same aspect, e.g. "several paragraphs" after "one paragraph", replaced it outright: this is
    for related wishes on other aspects), and putting the old item back would tell the model both. Then the item
    stays learned (out of the prompt): if the person still wants it, they say so again and a new item
    is noted, or they restore it (F8, ``clawdesk prefs``).
    """
    if item.learned_at is None:
        return None
    for other in list_preferences(store, statuses=("active", "learned")):
        if other.id != item.id and other.created_at > item.learned_at and related_topic(other.text, item.text):
            return other
    return None


# -- writing ---------------------------------------------------------------------------------


def check_text(text: str) -> str:
    """The text as stored: one line of printable text, at most :data:`PREF_MAX_CHARS` characters."""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if not line:
        raise InputError('a preference needs some text, e.g. `clawdesk prefs add "no bullet lists"`')
    if len(line) > PREF_MAX_CHARS:
        raise InputError(
            f"a preference is at most {PREF_MAX_CHARS} characters (this one has {len(line)}); say it in a sentence"
        )
    return line


def turn_is_learnable(store: Store, turn_id: int) -> bool:
    """Whether ``turn_id`` exists and may be learned from (learning ON, not incognito, not vetoed)."""
    row = store.db.execute(
        "SELECT 1 FROM turns t JOIN sessions s ON s.id = t.session_id LEFT JOIN feedback f ON f.turn_id = t.id "
        f"WHERE t.id = ? AND {learnable_turn('t', 's', 'f')}",
        [turn_id],
    ).fetchone()
    return row is not None


def add_preference(
    store: Store,
    text: str,
    *,
    source_turn_id: int | None = None,
    judged_turn_id: int | None = None,
    replaces: Replaces = same_topic,
) -> Added | None:
    """Keep ``text`` as an active preference; None when a turn it comes from may not be learned from.

    The same text already kept (active or learned) is not added twice. Every active or learned item
    that ``replaces(text, old)`` marks as on the same topic is removed and points at the new item.
    """
    text = check_text(text)
    for turn_id in (source_turn_id, judged_turn_id):
        if turn_id is not None and not turn_is_learnable(store, turn_id):
            return None  # incognito, learning OFF or vetoed: nothing is remembered from it
    kept = list_preferences(store, statuses=("active", "learned"))
    for old in kept:
        if old.text.casefold() == text.casefold():
            return Added(old, new=False)
    stamp = now_iso()
    replaced = [old for old in kept if replaces(text, old.text)]
    with store.transaction():
        cur = store.db.execute(
            "INSERT INTO preferences(text, source_turn_id, judged_turn_id, pinned, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [text, source_turn_id, judged_turn_id, int(any(o.pinned for o in replaced)), stamp, stamp],
        )
        new_id = cur.lastrowid
        for old in replaced:
            store.db.execute(
                "UPDATE preferences SET status = 'removed', replaced_by = ?, updated_at = ? WHERE id = ?",
                [new_id, stamp, old.id],
            )
    return Added(get_preference(store, new_id), tuple(get_preference(store, o.id) for o in replaced))


def edit_preference(store: Store, pref_id: int, text: str) -> Preference:
    """New words for an item. A learned one goes back into the prompt: the adapter learned the old words."""
    text = check_text(text)
    item = get_preference(store, pref_id)
    if item.text == text:
        return item
    with store.transaction():
        store.db.execute(
            "UPDATE preferences SET text = ?, updated_at = ?, "
            "learned_at = CASE status WHEN 'learned' THEN NULL ELSE learned_at END, "
            "status = CASE status WHEN 'learned' THEN 'active' ELSE status END WHERE id = ?",
            [text, now_iso(), pref_id],
        )
    return get_preference(store, pref_id)


def _set_status(store: Store, pref_id: int, status: str, learned_at: str | None = None) -> Preference:
    get_preference(store, pref_id)
    with store.transaction():
        store.db.execute(
            "UPDATE preferences SET status = ?, learned_at = ?, updated_at = ? WHERE id = ?",
            [status, learned_at, now_iso(), pref_id],
        )
    return get_preference(store, pref_id)


def remove_preference(store: Store, pref_id: int) -> Preference:
    """Take an item out of the prompt; it stays listed as removed (:func:`restore_preference` undoes it)."""
    return _set_status(store, pref_id, "removed")


def restore_preference(store: Store, pref_id: int) -> Preference:
    """A removed (or learned) item is active again: back in the prompt."""
    return _set_status(store, pref_id, "active")


def mark_learned(store: Store, pref_id: int, learned: bool = True) -> Preference:
    """The adapter carries this item (it leaves the prompt); ``learned=False``: the behaviour did not hold."""
    return _set_status(store, pref_id, "learned" if learned else "active", now_iso() if learned else None)


def pin_preference(store: Store, pref_id: int, pinned: bool = True) -> Preference:
    """A pinned item is rendered before the unpinned ones, so the token budget never leaves it out first."""
    get_preference(store, pref_id)
    with store.transaction():
        store.db.execute(
            "UPDATE preferences SET pinned = ?, updated_at = ? WHERE id = ?", [int(pinned), now_iso(), pref_id]
        )
    return get_preference(store, pref_id)


def delete_preference(store: Store, pref_id: int) -> Preference:
    """Delete an item for good; its text is overwritten in the file (``secure_delete``)."""
    item = get_preference(store, pref_id)
    store.db.execute("PRAGMA secure_delete = ON")
    with store.transaction():
        store.db.execute("UPDATE preferences SET replaced_by = NULL WHERE replaced_by = ?", [pref_id])
        store.db.execute("DELETE FROM preferences WHERE id = ?", [pref_id])
        drop_item_blocks(store, [pref_id])  # the memory blocks of turns served with it quote it
    return item


def undo_preference(store: Store, pref_id: int) -> tuple[Preference, list[Preference]]:
    """Take back a noted item: delete it for good and make the items it replaced active again."""
    replaced = [p.id for p in list_preferences(store, statuses=("removed",)) if p.replaced_by == pref_id]
    item = delete_preference(store, pref_id)  # also clears their replaced_by
    return item, [restore_preference(store, i) for i in replaced]


def clear_preferences(store: Store) -> int:
    """Delete every item (active, learned and removed) for good; returns how many."""
    store.db.execute("PRAGMA secure_delete = ON")
    with store.transaction():
        store.db.execute("DELETE FROM turn_memory")  # every block quotes items
        return store.db.execute("DELETE FROM preferences").rowcount


# -- reading ---------------------------------------------------------------------------------


def get_preference(store: Store, pref_id: int) -> Preference:
    row = store.db.execute(f"SELECT {_COLUMNS} FROM preferences WHERE id = ?", [pref_id]).fetchone()
    if row is None:
        raise NotFoundError(f"there is no preference #{pref_id}; `clawdesk prefs list` shows their numbers")
    return Preference.from_row(row)


def list_preferences(store: Store, *, statuses: tuple[str, ...] = STATUSES, limit: int = 500) -> list[Preference]:
    """Items with one of ``statuses``: pinned first, then the newest first (the prompt's order)."""
    unknown = set(statuses) - set(STATUSES)
    if unknown:
        raise ValueError(f"unknown preference status(es): {sorted(unknown)}")
    marks = ",".join("?" * len(statuses))
    rows = store.db.execute(
        f"SELECT {_COLUMNS} FROM preferences WHERE status IN ({marks}) ORDER BY pinned DESC, id DESC LIMIT ?",
        [*statuses, limit],
    ).fetchall()
    return [Preference.from_row(r) for r in rows]


def active_preferences(store: Store) -> list[Preference]:
    """What the prompt renders (pinned first, newest first)."""
    return list_preferences(store, statuses=("active",))


def count_preferences(store: Store) -> dict[str, int]:
    counts = dict.fromkeys(STATUSES, 0)
    counts.update(store.db.execute("SELECT status, count(*) FROM preferences GROUP BY status").fetchall())
    return counts
