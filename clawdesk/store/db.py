"""Opening the SQLite turn log: file creation (mode 0600), WAL, corruption and permission checks.

One :class:`sqlite_utils.Database` per thread or process (SQLite connections are not shared
across threads here); every opener goes through :func:`open_database`, which also applies the
named migrations from :mod:`clawdesk.store.migrations`.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import sqlite_utils

from clawdesk.errors import DataDirError, StoreError


def ensure_dir(path: Path, what: str = "data directory") -> Path:
    """Create ``path`` (mode 0700) and prove it is writable, or raise :class:`DataDirError`."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        probe = path / ".clawdesk-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise DataDirError(
            f"cannot write to the {what} {path}: {reason}. "
            "Choose another location with --data-dir DIR or the CLAWDESK_HOME environment variable."
        ) from exc
    return path


def _create_private(path: Path) -> None:
    # Create the file ourselves so it is born 0600: SQLite would use the umask (often 0644),
    # and its -wal/-shm files copy the main file's permissions.
    if not path.exists():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
    os.chmod(path, 0o600)


def open_database(path: Path, *, migrate: bool = True) -> sqlite_utils.Database:
    """Open (creating if needed) the DB at ``path`` with WAL and foreign keys, migrated."""
    ensure_dir(path.parent)
    try:
        _create_private(path)
        conn = sqlite3.connect(str(path), timeout=10.0)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open the database {path}: {exc}") from exc
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=10000")
        # Reading the schema is the cheapest query that fails on a file that is not SQLite.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
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
            MIGRATIONS.apply(db)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"could not upgrade the database {path}: {exc}. Nothing was lost.") from exc
    return db
