"""Forgetting recorded conversations: deleting turns for good, so their text is left nowhere in the data dir.

Owns ``clawdesk forget`` and the chat's "Delete chat": the turns go with every row that carries
their words or what was learned from them (:data:`TURN_TABLES`), then the file is rebuilt with
``VACUUM`` and the write-ahead log is checkpointed and truncated, so the text is in neither
``clawdesk.db`` nor ``clawdesk.db-wal``. Adapter versions already trained on the turns cannot be
un-trained; they are reported (:attr:`ForgetResult.versions`) with what to serve instead.

This is different from :func:`clawdesk.store.judgments.forget`, which keeps the message and only
drops what the judge made of it (and vetoes the turn).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from clawdesk.errors import NotFoundError, StoreError
from clawdesk.store.log import Store, now_iso, title_from
from clawdesk.store.turn_memory import drop_item_blocks
from clawdesk.store.versions import active_adapter

# Tables keyed by a step (clawdesk.store.steps; every turn has at least one), whose steps belong to a
# turn: tool calls (arguments and results: file contents, shell output), judgments and samples (m007).
STEP_TABLES: tuple[str, ...] = ("tool_calls", "judgments", "adapter_samples")

# Every (table, column) whose rows belong to a turn id and carry its words or what was learned
# from it. The foreign keys cascade most of these, but deleting them by name does not depend on
# `PRAGMA foreign_keys`, and a future table (tool calls, an FTS index) is one more line here.
TURN_TABLES: tuple[tuple[str, str], ...] = (
    ("turn_tokens", "turn_id"),
    # A judgment's hint and teacher prompt are made of its *next* message: forgetting that
    # message must take the judgment of the turn before it too.
    ("judgments", "next_turn_id"),
    ("feedback", "turn_id"),
    # The steps (exact prompts and replies); their STEP_TABLES rows are deleted first.
    ("steps", "turn_id"),
    # Preference items stated in a forgotten message, or made from the judgment of a forgotten reply.
    ("preferences", "source_turn_id"),
    ("preferences", "judged_turn_id"),
    # The memory block its prompt was served with (m009): it quotes the items.
    ("turn_memory", "turn_id"),
)

_STEPS_OF = "SELECT id FROM steps WHERE turn_id IN ({})"  # the steps of the turns given as ids

BUSY_HINT = (
    "another ClawDesk process (the chat, `clawdesk judge` or a training run) kept it locked for more than the "
    "busy timeout; wait for it to finish or close it, then run the command again"
)


@dataclass(frozen=True)
class ForgetResult:
    """What a forget deleted, and what it could not take back."""

    sessions: int  # sessions deleted
    turns: int  # turns deleted
    scrubbed: int  # later turns whose served prompt held a forgotten turn: tokens and judgment deleted, vetoed
    versions: tuple[int, ...]  # adapter versions trained on any of them (or continued from one that was)
    active: int | None  # the version the chat serves
    safe_version: int | None  # the newest ready version trained on none of them
    compacted: bool  # VACUUM ran and the WAL was truncated: the text is gone from the files
    notes: int = 0  # memory notes deleted (only `forget --all`: notes belong to no turn)

    def advice(self) -> str:
        """The follow-up a person needs: which adapters still carry the forgotten turns, and what to do."""
        lines = []
        if self.versions:
            names = ", ".join(f"v{v}" for v in self.versions)
            serving = f" (the chat serves v{self.active})" if self.active in self.versions else ""
            lines.append(
                f"Adapter version(s) {names} were trained on what you deleted{serving} and still carry what they "
                "learned from it."
            )
            if self.safe_version is not None:
                lines.append(
                    f"Serve v{self.safe_version}, trained before it, with `clawdesk adapters use {self.safe_version}` "
                    "(`clawdesk adapters rollback` steps back one version), or the base model with "
                    "`clawdesk adapters off`."
                )
            else:
                lines.append("Serve the base model with `clawdesk adapters off` (`clawdesk adapters rollback` too).")
        if not self.compacted:
            lines.append(compaction_pending_message())
        return "\n".join(lines)


def compaction_pending_message() -> str:
    return (
        "The rows are deleted, but another ClawDesk process still reads the database, so the old text stays in the "
        "file until it is compacted: close the chat and training, then run `clawdesk forget --compact`."
    )


def trained_on(store: Store, turn_ids: Iterable[int]) -> list[int]:
    """Adapter versions trained on any of ``turn_ids``, plus every version continued from one of those."""
    turn_ids = list(turn_ids)
    direct = _ids_query(store, f"SELECT DISTINCT version FROM adapter_samples WHERE step_id IN ({_STEPS_OF})", turn_ids)
    tainted = set(direct)
    # A version continues training from its parent's weights, so what the parent learned lives on in it.
    for version, parent in store.db.execute("SELECT version, parent_version FROM adapters ORDER BY version"):
        if parent in tainted:
            tainted.add(version)
    return sorted(tainted)


def forget_session(store: Store, session_id: int) -> ForgetResult:
    """Delete one chat session with all its turns, then compact the file."""
    store.get_session(session_id)  # NotFoundError names `clawdesk sessions`
    turn_ids = _ids_query(store, "SELECT id FROM turns WHERE session_id IN ({})", [session_id])
    return _forget(store, turn_ids, [], session_ids=[session_id])


def forget_all(store: Store) -> ForgetResult:
    """Delete every session, turn, memory note and preference (adapter versions and settings stay), then compact."""
    session_ids = [r[0] for r in store.db.execute("SELECT id FROM sessions")]
    turn_ids = [r[0] for r in store.db.execute("SELECT id FROM turns")]
    return _forget(store, turn_ids, [], session_ids=session_ids, notes=True)


def forget_turn(store: Store, turn_id: int) -> ForgetResult:
    """Delete one turn (the user's message and the reply), then compact the file.

    The turns after it in the same chat were served with it in their prompt, so their stored
    prompt token ids and their judgments (whose teacher prompt holds the same history) are deleted
    as well and they are vetoed: they stay readable in the chat but are never judged or trained on.
    """
    rows = store.db.execute("SELECT session_id, seq, user_content FROM turns WHERE id = ?", [turn_id]).fetchall()
    if not rows:
        raise NotFoundError(
            f"no turn with id {turn_id}; `clawdesk ask` prints the ids of the turns it records "
            "(`clawdesk forget --session ID` deletes a whole chat)"
        )
    session_id, seq, user_content = rows[0]
    later = [r[0] for r in store.db.execute("SELECT id FROM turns WHERE session_id = ? AND seq > ?", [session_id, seq])]
    return _forget(store, [turn_id], later, retitle=(session_id, user_content))


def compact(store: Store) -> bool:
    """``VACUUM`` then ``wal_checkpoint(TRUNCATE)``; False when a reader kept the checkpoint from finishing.

    VACUUM rebuilds the file without the free pages that still hold deleted text; in WAL mode the
    rebuilt pages land in ``-wal`` first, and only a complete checkpoint overwrites the main file
    and truncates the log.
    """
    conn = store.db.conn
    if conn.in_transaction:
        raise StoreError(f"cannot compact {store.path} inside a transaction (a ClawDesk bug; nothing was changed)")
    try:
        conn.execute("VACUUM")
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except sqlite3.OperationalError as exc:
        if _is_busy(exc):
            raise StoreError(
                f"the turns were deleted, but {store.path} could not be compacted ({exc}): {BUSY_HINT} "
                "with `clawdesk forget --compact`, so the deleted text is also removed from the file."
            ) from exc
        raise StoreError(f"could not compact {store.path} ({exc}); check free disk space, then retry") from exc
    return busy == 0


# -- internals ------------------------------------------------------------------------------


def _forget(
    store: Store,
    turn_ids: list[int],
    scrub_ids: list[int],
    *,
    session_ids: list[int] | None = None,
    retitle: tuple[int, str] | None = None,
    notes: bool = False,
) -> ForgetResult:
    # Asked before deleting: adapter_samples rows cascade away with their turns.
    versions = tuple(trained_on(store, turn_ids + scrub_ids))
    active = active_adapter(store)
    session_ids = session_ids or []
    conn = store.db.conn
    (secure,) = conn.execute("PRAGMA secure_delete").fetchone()
    conn.execute("PRAGMA secure_delete=ON")  # freed pages are zeroed even before VACUUM rebuilds the file
    try:
        with store.transaction():
            _delete(store, turn_ids, scrub_ids, session_ids, retitle)
            # The notes' FTS index follows by trigger; VACUUM below takes both out of the file.
            n_notes = store.db.execute("DELETE FROM notes").rowcount if notes else 0
            if notes:  # the preference memory belongs to the person, like the notes: --all takes it too
                store.db.execute("DELETE FROM turn_memory")
                store.db.execute("DELETE FROM preferences")
    except StoreError as err:
        if _is_busy(err.__cause__):
            raise StoreError(f"nothing was deleted: {store.path} is busy; {BUSY_HINT}.") from err
        raise
    finally:
        conn.execute(f"PRAGMA secure_delete={int(secure)}")
    compacted = compact(store)
    ready = [v for (v,) in store.db.execute("SELECT version FROM adapters WHERE status = 'ready' ORDER BY version")]
    safe = [v for v in ready if v not in versions and (not versions or v < min(versions))]
    return ForgetResult(
        sessions=len(session_ids),
        turns=len(turn_ids),
        scrubbed=len(scrub_ids),
        versions=versions,
        active=active,
        safe_version=safe[-1] if safe and versions else None,
        compacted=compacted,
        notes=n_notes,
    )


def _delete(
    store: Store,
    turn_ids: list[int],
    scrub_ids: list[int],
    session_ids: list[int],
    retitle: tuple[int, str] | None,
) -> None:
    db = store.db
    # Items about to go (stated in, or made from the judgment of, a forgotten turn): the memory blocks
    # of other turns quote them, so those go too (clawdesk.store.turn_memory).
    gone = [
        *_ids_query(store, "SELECT id FROM preferences WHERE source_turn_id IN ({})", turn_ids),
        *_ids_query(store, "SELECT id FROM preferences WHERE judged_turn_id IN ({})", turn_ids + scrub_ids),
    ]
    drop_item_blocks(store, gone)
    for table in STEP_TABLES:
        _ids_exec(store, f"DELETE FROM {table} WHERE step_id IN ({_STEPS_OF})", turn_ids)
    for table, column in TURN_TABLES:
        _ids_exec(store, f"DELETE FROM {table} WHERE {column} IN ({{}})", turn_ids)
    _ids_exec(store, "DELETE FROM turns WHERE id IN ({})", turn_ids)
    # Later turns of the chat keep their text but lose the token ids and judgments that held the forgotten turn.
    _ids_exec(store, "DELETE FROM turn_tokens WHERE turn_id IN ({})", scrub_ids)
    # Their steps' prompts held it as well: the ids go (the steps and tool calls stay readable), and so do
    # their judgments, the turn's own and its tool steps', whose teacher prompts are those prompts plus a hint.
    _ids_exec(store, f"DELETE FROM judgments WHERE step_id IN ({_STEPS_OF})", scrub_ids)
    # So do preference items made from those judgments (the judge read the forgotten turn to make them).
    _ids_exec(store, "DELETE FROM preferences WHERE judged_turn_id IN ({})", scrub_ids)
    _ids_exec(store, "UPDATE steps SET prompt_ids = X'', student_prompt_ids = NULL WHERE turn_id IN ({})", scrub_ids)
    for turn_id in scrub_ids:
        db.execute(
            "INSERT INTO feedback(turn_id, vetoed, updated_at) VALUES (?, 1, ?) "
            "ON CONFLICT(turn_id) DO UPDATE SET vetoed = 1, updated_at = excluded.updated_at",
            [turn_id, now_iso()],
        )
    _ids_exec(store, "DELETE FROM sessions WHERE id IN ({})", session_ids)
    if retitle is not None:
        session_id, user_content = retitle
        # A chat is titled after its first message: a title made from the forgotten one must go too.
        row = db.execute("SELECT title FROM sessions WHERE id = ?", [session_id]).fetchone()
        if row is not None and row[0] == title_from(user_content):
            first = db.execute(
                "SELECT user_content FROM turns WHERE session_id = ? ORDER BY seq LIMIT 1", [session_id]
            ).fetchone()
            title = title_from(first[0]) if first else "New chat"
            db.execute("UPDATE sessions SET title = ? WHERE id = ?", [title, session_id])


_CHUNK = 500  # below SQLite's limit on bound parameters


def _ids_query(store: Store, sql: str, ids: list[int]) -> list[int]:
    """The first column of ``sql`` run over ``ids`` in chunks (``{}`` = the id placeholders)."""
    out: list[int] = []
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i : i + _CHUNK]
        out += [r[0] for r in store.db.execute(sql.format(",".join("?" * len(chunk))), chunk)]
    return out


def _ids_exec(store: Store, sql: str, ids: list[int]) -> None:
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i : i + _CHUNK]
        store.db.execute(sql.format(",".join("?" * len(chunk))), chunk)


def _is_busy(exc: BaseException | None) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and any(w in str(exc) for w in ("locked", "busy"))
