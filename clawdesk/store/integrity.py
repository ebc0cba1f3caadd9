"""The log as a file: consistent copies, integrity checks and read-only inspection.

Owns the SQL that ``clawdesk backup`` / ``restore`` (:mod:`clawdesk.backup`) and ``clawdesk doctor``
(:mod:`clawdesk.doctor`) need below the turn log itself: copying a live database with SQLite's
online backup API, deciding whether a file is a sound ClawDesk database, pointing a restored
copy's adapter rows at their new dir, and opening a log read-only without migrating or creating
anything (a doctor never writes).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import sqlite_utils

from clawdesk.errors import StoreError
from clawdesk.store.log import Store
from clawdesk.store.migrations import MIGRATIONS

# The tables every ClawDesk log has had since its first migration: a valid SQLite file without
# them is some other program's database, whatever its name.
CORE_TABLES = frozenset({"sessions", "turns"})


def copy_database(src: Path, dst: Path) -> None:
    """Copy the live database at ``src`` to a new file ``dst`` (mode 0600), then check the copy.

    One backup step under one read snapshot: in WAL mode writers are not blocked meanwhile, and
    a stepped copy would restart whenever another connection commits.
    """
    try:
        source = sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=10.0)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the database {src} ({exc})") from exc
    fd = os.open(dst, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    target = sqlite3.connect(str(dst))
    try:
        source.execute("PRAGMA busy_timeout=10000")
        source.backup(target)
        # The copy carries the source's WAL flag; a self-contained file travels better. The app
        # switches it back to WAL when it opens it.
        target.execute("PRAGMA journal_mode=DELETE")
        (verdict,) = target.execute("PRAGMA integrity_check").fetchone()
    except sqlite3.Error as exc:
        raise StoreError(
            f"could not copy the database {src} ({exc}); if it is locked, wait for training to finish and retry"
        ) from exc
    finally:
        target.close()
        source.close()
    if verdict != "ok":
        raise StoreError(f"the database {src} is damaged ({verdict}); no backup was written")


def database_problem(path: Path) -> str | None:
    """Why the file at ``path`` is not a sound ClawDesk database (a phrase), or None when it is.

    It must read as SQLite, pass ``PRAGMA integrity_check`` and hold the log's core tables.
    """
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            (verdict,) = conn.execute("PRAGMA integrity_check").fetchone()
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return f"cannot be read ({exc})"
    if verdict != "ok":
        return f"fails PRAGMA integrity_check ({verdict})"
    if not tables >= CORE_TABLES:
        return "is not a ClawDesk database"
    return None


def rebase_adapter_paths(db: Path, adapters_dir: Path, versions: set[int]) -> None:
    """Point the ``adapters.path`` of ``versions`` at ``<adapters_dir>/v<N>`` in the database file ``db``.

    For a restored copy, whose rows still hold the absolute paths of the data dir it came from.
    """
    conn = sqlite3.connect(str(db))
    try:
        with conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'adapters'").fetchone():
                for version in sorted(versions):
                    conn.execute(
                        "UPDATE adapters SET path = ? WHERE version = ?", [str(adapters_dir / f"v{version}"), version]
                    )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot update {db} ({exc})") from exc
    finally:
        conn.close()


def count_chats(db: Path) -> tuple[int, int]:
    """(sessions, turns) in the database file ``db``, read-only."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM turns)").fetchone()
    finally:
        conn.close()
    return int(row[0]), int(row[1])


# -- read-only inspection (clawdesk doctor) ------------------------------------------------------


def open_read_only(path: Path) -> Store:
    """A :class:`Store` on ``path`` that can only read: not migrated, nothing created, nothing left behind.

    With no ``-wal`` file the log was closed cleanly: it is opened immutable, because a read-only
    WAL connection would otherwise leave fresh ``-wal``/``-shm`` files. With one, a chat may be
    running: it is read through its WAL (SQLite's shared ``-shm`` index is then all that is touched).
    Raises :class:`StoreError` when the file is not SQLite.
    """
    wal = path.with_name(path.name + "-wal").exists()
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro{'' if wal else '&immutable=1'}", uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is damaged or not a ClawDesk database ({exc})") from exc
    return Store(sqlite_utils.Database(conn), path)


def integrity_problems(store: Store) -> list[str]:
    """What ``PRAGMA integrity_check`` finds wrong (empty when the file is sound)."""
    try:
        rows = [r[0] for r in store.db.execute("PRAGMA integrity_check").fetchall()]
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    return [] if rows == ["ok"] else rows


def pending_migrations(store: Store) -> list[str]:
    """The names of the schema steps not applied yet (the next read-write open applies them)."""
    return [m.name for m in MIGRATIONS.pending(store.db)]


def has_table(store: Store, name: str) -> bool:
    row = store.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [name]).fetchone()
    return row is not None
