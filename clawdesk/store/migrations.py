"""Named schema migrations for the turn log (sqlite-utils ``Migrations``).

Each step is append-only: never edit a step that has shipped, add a new one. The tables are
plain and readable in ``sqlite-utils`` or Datasette; token ids live in ``turn_tokens`` as
packed little-endian int32 blobs (see :mod:`clawdesk.store.tokens`) so long prompts stay small.
"""

from __future__ import annotations

from sqlite_utils import Migrations

MIGRATIONS = Migrations("clawdesk")


@MIGRATIONS()
def m001_foundation(db):
    db.execute(
        """
        CREATE TABLE sessions (
            id INTEGER PRIMARY KEY,
            title TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            incognito INTEGER NOT NULL DEFAULT 0,
            thinking INTEGER NOT NULL DEFAULT 1,
            system_prompt TEXT NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE turns (
            id INTEGER PRIMARY KEY,
            session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            user_content TEXT NOT NULL,
            reply_content TEXT NOT NULL,
            reply_thinking TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL CHECK (status IN ('finished', 'cancelled', 'length')),
            thinking INTEGER NOT NULL,
            model_name TEXT NOT NULL,
            model_path TEXT NOT NULL,
            model_sha256 TEXT NOT NULL,
            adapter_version INTEGER,
            n_prompt_tokens INTEGER NOT NULL,
            n_reply_tokens INTEGER NOT NULL,
            dropped_turns INTEGER NOT NULL DEFAULT 0,
            latency_ms REAL,
            tokens_per_s REAL,
            started_at TEXT NOT NULL,
            finished_at TEXT NOT NULL,
            UNIQUE (session_id, seq)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE turn_tokens (
            turn_id INTEGER PRIMARY KEY REFERENCES turns(id) ON DELETE CASCADE,
            prompt_ids BLOB NOT NULL,
            reply_ids BLOB NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE settings (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE model_files (
            path TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            PRIMARY KEY (path, size, mtime_ns)
        )
        """
    )
    # A role/content view, so the log reads like a chat transcript in Datasette.
    db.execute(
        """
        CREATE VIEW messages AS
            SELECT session_id, seq, 0 AS part, 'user' AS role, user_content AS content,
                   '' AS thinking, started_at AS at, id AS turn_id FROM turns
            UNION ALL
            SELECT session_id, seq, 1, 'assistant', reply_content, reply_thinking, finished_at, id
            FROM turns
        """
    )
    db.execute("CREATE INDEX turns_session ON turns(session_id, seq)")
