"""The memory tools: ``remember``, ``recall`` and ``forget_note`` over the notes in the turn log's database.

Each call opens its own connection (:meth:`Store.open`) and closes it: tools run on the agent's
worker thread, and a :class:`~clawdesk.store.Store` must stay on the thread that opened it. The
SQL lives in :mod:`clawdesk.store.notes`. ``remember`` and ``forget_note`` are ``ask`` by default:
the model reads files and web text it does not control, and a note planted or deleted there would
shape every later chat that recalls it.
"""

from __future__ import annotations

from pathlib import Path

from clawdesk.errors import NotFoundError, ToolInputError
from clawdesk.store import Store
from clawdesk.store.notes import NOTE_MAX_CHARS, Note, add_note, delete_note, search_notes
from clawdesk.tools.types import ToolSpec, object_schema

RECALL_MAX = 20

SPECS = (
    ToolSpec(
        "remember",
        "Save a short note to your long-term memory (kept across chats): a fact about the user, a preference, "
        "a decision.",
        object_schema(
            {
                "text": {"type": "string", "description": "the note, one self-contained sentence or two"},
                "tags": {"type": "string", "description": "optional words to find it by"},
            },
            ["text"],
        ),
        default_policy="ask",
    ),
    ToolSpec(
        "recall",
        "Search your long-term memory; returns the best-matching notes with their ids (an empty query lists the "
        "newest).",
        object_schema(
            {
                "query": {"type": "string", "description": "words to look for"},
                "limit": {"type": "integer", "description": f"at most this many notes (default 5, max {RECALL_MAX})"},
            },
            ["query"],
        ),
        default_policy="auto",
    ),
    ToolSpec(
        "forget_note",
        "Delete one note from your long-term memory by its id (recall shows the ids).",
        object_schema({"id": {"type": "integer", "description": "the note's id"}}, ["id"]),
        default_policy="ask",
    ),
)


def remember(db_path: Path, text: str, tags: str = "") -> str:
    text = text.strip()
    if not text:
        raise ToolInputError("text is empty; give the note to remember")
    if len(text) > NOTE_MAX_CHARS:
        raise ToolInputError(
            f"the note is {len(text)} characters; keep it under {NOTE_MAX_CHARS} (use write_file for documents)"
        )
    store = Store.open(db_path)
    try:
        note = add_note(store, text, " ".join(tags.split()))
    finally:
        store.close()
    return f"remembered as note #{note.id}"


def recall(db_path: Path, query: str, limit: int = 5) -> str:
    if not 1 <= limit <= RECALL_MAX:
        raise ToolInputError(f"limit must be from 1 to {RECALL_MAX}, got {limit}")
    store = Store.open(db_path)
    try:
        notes = search_notes(store, query, limit)
    finally:
        store.close()
    if not notes:
        return f"no notes match {query!r}" if query.strip() else "there are no notes yet"
    return "\n".join(_line(n) for n in notes)


def forget_note(db_path: Path, id: int) -> str:  # `id`: the parameter's name in the spec
    if not 1 <= id < 2**63:  # SQLite's integers; a bigger one could not even be looked up
        raise ToolInputError(f"there is no note #{id}; recall shows the notes and their ids")
    store = Store.open(db_path)
    try:
        note = delete_note(store, id)
    except NotFoundError:
        raise ToolInputError(f"there is no note #{id}; recall shows the notes and their ids") from None
    finally:
        store.close()
    return f"deleted note #{note.id}: {note.content[:80]}"


def _line(note: Note) -> str:
    tags = f" [{note.tags}]" if note.tags else ""
    return f"#{note.id} ({note.created_at[:10]}){tags}: {note.content}"
