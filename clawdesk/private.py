"""Owner-only file modes for what ClawDesk writes outside SQLite: adapters, exports, logs.

Libraries (``save_pretrained``, ``shutil.copy2``, ``open``) create files with the process umask,
often 0644, which lets other accounts on the machine read what was learned from a person's
conversations. Everything ClawDesk writes under the data dir or an export folder goes through
here: directories 0700, files 0600 (the SQLite log does the same in :mod:`clawdesk.store.db`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_private(path: Path) -> None:
    """``path`` (and, for a directory, everything below it) readable by its owner only; symlinks are left alone."""
    if path.is_symlink():
        return
    if not path.is_dir():
        os.chmod(path, FILE_MODE)
        return
    os.chmod(path, DIR_MODE)
    for root, dirs, files in os.walk(path):
        for name in dirs:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), DIR_MODE)
        for name in files:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), FILE_MODE)


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if needed; the directory itself ends up 0700 whatever the umask."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path


def open_private(path: Path, mode: str = "w", *, encoding: str | None = "utf-8") -> IO:
    """``open(path, mode)`` for a text/binary write or append, the file born 0600 (an existing one is tightened)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, mode, encoding=None if "b" in mode else encoding)
    except BaseException:
        os.close(fd)
        raise
