"""The turn log: sessions, turns (with the exact served token ids) and persisted settings.

A :class:`Store` wraps one SQLite connection and must stay on the thread that opened it; other
threads open their own with :meth:`Store.open` (``with Store.open(path) as store:`` closes it when
done). A turn is written in one transaction (turn row, token blobs, session timestamp/title) when
its reply finishes or is cancelled, so a crash can never leave half a turn behind. Every turn has
steps (a plain turn one, written here; an agent turn's steps and tool calls are
:mod:`clawdesk.store.steps`'); the shared data rules are :mod:`clawdesk.store.rules`'.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from clawdesk.errors import InputError, NotFoundError, StoreError
from clawdesk.store.db import open_database
from clawdesk.store.tokens import pack_ids, unpack_ids

LEARNING_KEY = "learning_enabled"
TITLE_CHARS = 48


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def title_from(text: str) -> str:
    """A session title made of a chat's first message: one line, cut to ``TITLE_CHARS``."""
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


@dataclass(frozen=True)
class Session:
    id: int
    title: str
    created_at: str
    updated_at: str
    incognito: bool
    thinking: bool
    system_prompt: str
    n_turns: int = 0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Session:
        return cls(
            id=row["id"],
            title=row["title"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            incognito=bool(row["incognito"]),
            thinking=bool(row["thinking"]),
            system_prompt=row["system_prompt"],
            n_turns=row.get("n_turns") or 0,
        )


@dataclass(frozen=True)
class NewTurn:
    """What the chat hands the log once a reply has ended (finished, cancelled or cut at length)."""

    user_content: str
    reply_content: str
    reply_thinking: str
    status: str  # 'finished' | 'cancelled' | 'length'
    thinking: bool
    model_name: str
    model_path: str
    model_sha256: str
    prompt_ids: list[int]
    reply_ids: list[int]
    started_at: str
    finished_at: str
    adapter_version: int | None = None
    dropped_turns: int = 0
    latency_ms: float | None = None
    tokens_per_s: float | None = None
    # False: never learn from this turn, whatever the switch says (the API's side turns: heartbeats,
    # memory calls). True: learn when learning is ON.
    learning: bool = True


@dataclass(frozen=True)
class Turn:
    id: int
    session_id: int
    seq: int
    user_content: str
    reply_content: str
    reply_thinking: str
    status: str
    thinking: bool
    model_name: str
    model_sha256: str
    adapter_version: int | None
    n_prompt_tokens: int
    n_reply_tokens: int
    dropped_turns: int
    latency_ms: float | None
    tokens_per_s: float | None
    started_at: str
    finished_at: str
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Turn:
        names = cls.__dataclass_fields__.keys() - {"extra", "thinking"}
        kwargs = {k: row[k] for k in names}
        return cls(thinking=bool(row["thinking"]), **kwargs)


class Store:
    """The turn log of one data directory, on one connection."""

    def __init__(self, db: sqlite_utils.Database, path: Path):
        self.db = db
        self.path = path

    @classmethod
    def open(cls, path: Path) -> Store:
        return cls(open_database(path), path)

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def transaction(self):
        """A transaction context; converts SQLite failures into :class:`StoreError`."""
        return _Tx(self)

    # -- settings -------------------------------------------------------------------------

    def get_setting(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM settings WHERE key = ?", [key]).fetchone()
        return default if row is None else json.loads(row[0])

    def setting_updated_at(self, key: str) -> str | None:
        """When ``key`` was last set (ISO time), None when it never was."""
        row = self.db.execute("SELECT updated_at FROM settings WHERE key = ?", [key]).fetchone()
        return row[0] if row else None

    def set_setting(self, key: str, value: Any) -> None:
        with self.transaction():
            self.db.execute(
                "INSERT INTO settings(key, value, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                [key, json.dumps(value), now_iso()],
            )

    @property
    def learning_enabled(self) -> bool:
        return bool(self.get_setting(LEARNING_KEY, True))

    def set_learning(self, enabled: bool) -> None:
        self.set_setting(LEARNING_KEY, bool(enabled))

    # -- sessions -------------------------------------------------------------------------

    def create_session(
        self, *, system_prompt: str, title: str = "New chat", incognito: bool = False, thinking: bool = True
    ) -> Session:
        at = now_iso()
        with self.transaction():
            cur = self.db.execute(
                "INSERT INTO sessions(title, created_at, updated_at, incognito, thinking, system_prompt) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [title, at, at, int(incognito), int(thinking), system_prompt],
            )
        return self.get_session(cur.lastrowid)

    _SESSION_SELECT = "SELECT s.*, (SELECT count(*) FROM turns t WHERE t.session_id = s.id) AS n_turns FROM sessions s"

    def get_session(self, session_id: int) -> Session:
        rows = self._rows(self._SESSION_SELECT + " WHERE s.id = ?", [session_id])
        if not rows:
            raise NotFoundError(f"no session with id {session_id}; `clawdesk sessions` lists them")
        return Session.from_row(rows[0])

    def list_sessions(self) -> list[Session]:
        rows = self._rows(self._SESSION_SELECT + " ORDER BY s.updated_at DESC, s.id DESC")
        return [Session.from_row(r) for r in rows]

    def recent_sessions(self, limit: int, offset: int = 0) -> list[Session]:
        """The ``limit`` most recently used sessions after the first ``offset``, newest first (the sidebar's page).

        Reads ``limit`` rows of the ``sessions_recent`` index (m006), however many chats the log holds.
        """
        sql = self._SESSION_SELECT + " ORDER BY s.updated_at DESC, s.id DESC LIMIT ? OFFSET ?"
        return [Session.from_row(r) for r in self._rows(sql, [int(limit), int(offset)])]

    def latest_session(self) -> Session | None:
        sessions = self.recent_sessions(1)
        return sessions[0] if sessions else None

    def rename_session(self, session_id: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            raise StoreError("a session title cannot be empty")
        self._update_session(session_id, title=title)

    def set_session_flags(
        self, session_id: int, *, thinking: bool | None = None, incognito: bool | None = None
    ) -> None:
        changes: dict[str, Any] = {}
        if thinking is not None:
            changes["thinking"] = int(thinking)
        if incognito is not None:
            changes["incognito"] = int(incognito)
        if changes:
            self._update_session(session_id, **changes)

    def _update_session(self, session_id: int, **changes: Any) -> None:
        self.get_session(session_id)
        sets = ", ".join(f"{k} = ?" for k in changes)
        with self.transaction():
            self.db.execute(f"UPDATE sessions SET {sets} WHERE id = ?", [*changes.values(), session_id])

    def delete_session(self, session_id: int) -> None:
        """Drop a session row; for a chat with recorded turns use ``clawdesk.store.forget`` (VACUUMs the text)."""
        self.get_session(session_id)
        with self.transaction():
            self.db.execute("DELETE FROM sessions WHERE id = ?", [session_id])

    # -- turns ----------------------------------------------------------------------------

    def add_turn(self, session_id: int, turn: NewTurn, *, one_step: bool = True) -> int:
        """Commit one finished/cancelled turn atomically; returns its id.

        A plain turn is a one-step agent turn: its answer is also written as its step 0 (``steps``),
        the row its judgment and training sample are keyed by. ``one_step=False`` is for
        :func:`clawdesk.store.steps.add_agent_turn`, which writes the steps itself.
        """
        if turn.status not in ("finished", "cancelled", "length"):
            raise ValueError(f"bad turn status {turn.status!r}")
        session = self.get_session(session_id)
        with self.transaction():
            seq_row = self.db.execute(
                "SELECT coalesce(max(seq), 0) + 1 FROM turns WHERE session_id = ?", [session_id]
            ).fetchone()
            row = {
                "session_id": session_id,
                "seq": seq_row[0],
                "user_content": turn.user_content,
                "reply_content": turn.reply_content,
                "reply_thinking": turn.reply_thinking,
                "status": turn.status,
                "thinking": int(turn.thinking),
                "model_name": turn.model_name,
                "model_path": turn.model_path,
                "model_sha256": turn.model_sha256,
                "adapter_version": turn.adapter_version,
                "n_prompt_tokens": len(turn.prompt_ids),
                "n_reply_tokens": len(turn.reply_ids),
                "dropped_turns": turn.dropped_turns,
                "latency_ms": turn.latency_ms,
                "tokens_per_s": turn.tokens_per_s,
                "started_at": turn.started_at,
                "finished_at": turn.finished_at,
                "learning": int(turn.learning and self.learning_enabled),
            }
            cur = self.db.execute(
                f"INSERT INTO turns({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values())
            )
            turn_id = cur.lastrowid
            self.db.execute(
                "INSERT INTO turn_tokens(turn_id, prompt_ids, reply_ids) VALUES (?, ?, ?)",
                [turn_id, pack_ids(turn.prompt_ids), pack_ids(turn.reply_ids)],
            )
            if one_step:
                self.db.execute(
                    "INSERT INTO steps(turn_id, idx, prompt_ids, reply_ids, reply_content, reply_thinking, status,"
                    " adapter_version, started_at, finished_at) VALUES (?, 0, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        turn_id, pack_ids(turn.prompt_ids), pack_ids(turn.reply_ids), turn.reply_content,
                        turn.reply_thinking, turn.status, turn.adapter_version, turn.started_at, turn.finished_at,
                    ],
                )  # fmt: skip
            title = title_from(turn.user_content) if session.n_turns == 0 and session.title == "New chat" else None
            self.db.execute(
                "UPDATE sessions SET updated_at = ?, title = coalesce(?, title) WHERE id = ?",
                [turn.finished_at, title, session_id],
            )
        return turn_id

    def list_turns(self, session_id: int) -> list[Turn]:
        rows = self._rows("SELECT * FROM turns WHERE session_id = ? ORDER BY seq", [session_id])
        return [Turn.from_row(r) for r in rows]

    def get_turn(self, turn_id: int) -> Turn:
        rows = self._rows("SELECT * FROM turns WHERE id = ?", [turn_id])
        if not rows:
            raise NotFoundError(f"no turn with id {turn_id}")
        return Turn.from_row(rows[0])

    def turn_tokens(self, turn_id: int) -> tuple[list[int], list[int]]:
        row = self.db.execute("SELECT prompt_ids, reply_ids FROM turn_tokens WHERE turn_id = ?", [turn_id]).fetchone()
        if row is None:
            raise NotFoundError(f"no token record for turn {turn_id}")
        return unpack_ids(row[0]), unpack_ids(row[1])

    def count_turns(self) -> int:
        return self.db.execute("SELECT count(*) FROM turns").fetchone()[0]

    # -- model identity cache ---------------------------------------------------------------

    def cached_sha256(self, path: Path, size: int, mtime_ns: int) -> str | None:
        row = self.db.execute(
            "SELECT sha256 FROM model_files WHERE path = ? AND size = ? AND mtime_ns = ?",
            [str(path), size, mtime_ns],
        ).fetchone()
        return row[0] if row else None

    def cache_sha256(self, path: Path, size: int, mtime_ns: int, sha256: str) -> None:
        with self.transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO model_files(path, size, mtime_ns, sha256) VALUES (?, ?, ?, ?)",
                [str(path), size, mtime_ns, sha256],
            )

    # -- helpers --------------------------------------------------------------------------

    def _rows(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        return list(self.db.query(sql, params or []))


class _Tx:
    """``with store.transaction():`` — one transaction, SQLite errors become StoreError."""

    def __init__(self, store: Store):
        self.store = store

    def __enter__(self):
        db = self.store.db
        # The outermost transaction begins IMMEDIATE: one that reads before it writes (add_turn's
        # seq, record_version's used-sample check) would otherwise fail at once with "database is
        # locked" when another process committed in between (a stale WAL snapshot is not retried
        # by busy_timeout); IMMEDIATE waits for the write lock up front instead. Nested: a savepoint.
        self._ctx = db.atomic() if db.conn.in_transaction else _immediate(db)
        try:
            return self._ctx.__enter__()
        except sqlite3.Error as err:
            raise StoreError(_write_failed(self.store.path, err)) from err

    def __exit__(self, exc_type, exc, tb):
        try:
            result = self._ctx.__exit__(exc_type, exc, tb)
        except sqlite3.Error as err:
            raise StoreError(_write_failed(self.store.path, err)) from err
        if isinstance(exc, sqlite3.Error):
            raise StoreError(_write_failed(self.store.path, exc)) from exc
        if isinstance(exc, UnicodeEncodeError):  # a lone surrogate: SQLite only stores valid UTF-8
            bad = exc.object[exc.start : exc.end]
            raise InputError(
                f"cannot save text containing U+{ord(bad[0]):04X} (half of a broken character pair) to "
                f"{self.store.path}: it is not valid Unicode. Remove it and try again; nothing was written."
            ) from exc
        return result


@contextlib.contextmanager
def _immediate(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """sqlite-utils' ``atomic()`` for an outermost transaction, begun with ``BEGIN IMMEDIATE``."""
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.conn.rollback()
        raise
    try:
        db.conn.execute("COMMIT")
    except BaseException:
        db.conn.rollback()
        raise


def _write_failed(path: Path, err: sqlite3.Error) -> str:
    """The StoreError message for a failed write; a full disk (or file size limit) says what to do."""
    code = getattr(err, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL or (code is not None and code & 0xFF == sqlite3.SQLITE_IOERR):
        return (
            f"could not write to {path}: {err}. The disk may be full: free disk space and try again "
            "(the transaction was rolled back; earlier turns are intact)."
        )
    return f"could not write to {path}: {err}"
