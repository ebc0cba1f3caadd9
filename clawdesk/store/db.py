"""Opening the SQLite turn log: file creation (mode 0600), WAL, corruption and permission checks.

One :class:`sqlite_utils.Database` per thread or process (SQLite connections are not shared
across threads here); every opener goes through :func:`open_database`, which also applies the
named migrations from :mod:`clawdesk.store.migrations`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import sqlite_utils

from clawdesk.errors import DataDirError, StoreError

LOCK_WAIT_S = 10.0  # how long a connection waits for another process's write lock
DATA_DIR_FIX = "Choose another location with --data-dir DIR or the CLAWDESK_HOME environment variable."


def ensure_dir(path: Path, what: str = "data directory", fix: str = DATA_DIR_FIX) -> Path:
    """Create ``path`` (mode 0700) and prove it is writable, or raise :class:`DataDirError` ending in ``fix``."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Per process and thread: two processes, or two threads opening their own connections (the chat's
        # turn worker, the learning loop's threads), may probe the same dir at once.
        probe = path / f".clawdesk-write-test-{os.getpid()}-{threading.get_ident()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise DataDirError(f"cannot write to the {what} {path}: {reason}. {fix}") from exc
    return path


def _create_private(path: Path) -> None:
    # Create the file ourselves so it is born 0600: SQLite would use the umask (often 0644),
    # and its -wal/-shm files copy the main file's permissions.
    if not path.exists():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
    os.chmod(path, 0o600)


def _enable_wal(conn: sqlite3.Connection) -> None:
    # Switching a file to WAL takes an exclusive lock that SQLite does not wait for (busy_timeout
    # does not apply), so processes opening a new DB together get "database is locked": retry.
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def open_database(path: Path, *, migrate: bool = True) -> sqlite_utils.Database:
    """Open (creating if needed) the DB at ``path`` with WAL and foreign keys, migrated."""
    ensure_dir(path.parent)
    try:
        _create_private(path)
        conn = sqlite3.connect(str(path), timeout=LOCK_WAIT_S)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open the database {path}: {exc}") from exc
    try:
        _enable_wal(conn)
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={int(LOCK_WAIT_S * 1000)}")
        # Reading the schema is the cheapest query that fails on a file that is not SQLite.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError as exc:
        conn.close()
        if "locked" not in str(exc):
            raise StoreError(f"cannot open the database {path}: {exc}") from exc
        raise StoreError(
            f"the database {path} stayed locked by another program for {LOCK_WAIT_S:g} s; close other "
            "programs using it (another ClawDesk, an sqlite3 shell) and try again. Nothing was changed."
        ) from exc
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(
            f"the database {path} is damaged or is not a ClawDesk database ({exc}). "
            f"Nothing was changed. Move it aside (e.g. `mv {path} {path}.bad`) and start again to "
            "begin a new log; the old file stays for recovery with the sqlite3 tool."
        ) from exc
    db = sqlite_utils.Database(conn)
    if migrate:
        from clawdesk.store.migrations import MIGRATIONS

        try:
            if MIGRATIONS.pending(db):
                # One process migrates at a time: two commands started together on a new (or just
                # upgraded) data dir would otherwise both create the tables ("table ... already
                # exists") or meet a locked database. IMMEDIATE waits on busy_timeout for the lock,
                # and apply() re-reads what is pending under it (its steps nest as savepoints).
                conn.execute("BEGIN IMMEDIATE")
                try:
                    MIGRATIONS.apply(db)
                except BaseException:
                    conn.rollback()
                    raise
                conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"could not upgrade the database {path}: {exc}. Nothing was lost.") from exc
    return db
