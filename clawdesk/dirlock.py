"""One process per directory: the advisory lock that the trainer's adapters dir and an eval's ``--out`` hold.

A POSIX ``flock`` on a lock file, released when the handle closes or the process ends however it ends, so a
crash never leaves a stale lock behind. Where ``fcntl`` is missing (Windows) nothing is locked; each caller
says what still guards it there. The callers turn "held" into their own error with their own advice.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO


def try_lock(lock_file: Path) -> IO[str] | None:
    """Open ``lock_file`` (its directory made, owner-only) and take an exclusive lock without waiting.

    Returns the open handle, which holds the lock until it is closed, or None when another process holds it.
    An :class:`OSError` from making the directory or opening the file propagates (the caller names the path).
    """
    lock_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    handle = open(lock_file, "w")  # noqa: SIM115 -- held by the caller for the whole run
    try:
        import fcntl
    except ImportError:
        return handle
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle
