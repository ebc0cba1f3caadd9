"""The personal memory: notes in the ``notes`` table with an FTS5 index (migration ``m004_memory``).

Notes are what the ``remember`` tool keeps and ``recall`` finds again, across chats and restarts;
they belong to no turn, so forgetting a chat leaves them and ``clawdesk forget --all`` deletes them
(:mod:`clawdesk.store.forget`). Functions take a :class:`~clawdesk.store.log.Store` so they run on
that store's connection and thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clawdesk.errors import NotFoundError
from clawdesk.store.log import Store, now_iso

NOTE_MAX_CHARS = 4000  # a note is a fact or a preference, not a document: the workspace holds files


@dataclass(frozen=True)
class Note:
    id: int
    content: str
    tags: str
    created_at: str


def add_note(store: Store, content: str, tags: str = "") -> Note:
    with store.transaction():
        cur = store.db.execute(
            "INSERT INTO notes(content, tags, created_at) VALUES (?, ?, ?)", [content, tags, now_iso()]
        )
    return get_note(store, cur.lastrowid)


def get_note(store: Store, note_id: int) -> Note:
    row = store.db.execute("SELECT id, content, tags, created_at FROM notes WHERE id = ?", [note_id]).fetchone()
    if row is None:
        raise NotFoundError(f"there is no note #{note_id}")
    return Note(*row)


def list_notes(store: Store, limit: int = 50) -> list[Note]:
    """The newest notes first."""
    rows = store.db.execute(
        "SELECT id, content, tags, created_at FROM notes ORDER BY id DESC LIMIT ?", [limit]
    ).fetchall()
    return [Note(*r) for r in rows]


def search_notes(store: Store, query: str, limit: int = 10) -> list[Note]:
    """Notes matching any word of ``query`` (stemmed, prefix), best match first; newest notes for an empty query.

    The query is reduced to its words and each is quoted, so FTS5 syntax in it (quotes, ``-``,
    ``AND``, ``*``, parentheses) is searched for as text instead of failing as a malformed query.
    """
    words = re.findall(r"\w+", query)
    if not words:
        return list_notes(store, limit)
    match = " OR ".join(f'"{w}"*' for w in words)
    rows = store.db.execute(
        "SELECT n.id, n.content, n.tags, n.created_at FROM notes_fts f JOIN notes n ON n.id = f.rowid "
        "WHERE notes_fts MATCH ? ORDER BY bm25(notes_fts), n.id DESC LIMIT ?",
        [match, limit],
    ).fetchall()
    return [Note(*r) for r in rows]


def delete_note(store: Store, note_id: int) -> Note:
    note = get_note(store, note_id)
    # Overwrite the freed pages: a deleted note (a fact about the person) must not linger in the file.
    store.db.execute("PRAGMA secure_delete = ON")
    with store.transaction():
        store.db.execute("DELETE FROM notes WHERE id = ?", [note_id])
    return note


def count_notes(store: Store) -> int:
    return store.db.execute("SELECT count(*) FROM notes").fetchone()[0]
