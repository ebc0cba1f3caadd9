"""Walking a directory of the workspace: iterative, bounded in depth and entries, never following a link.

:func:`walk` is what ``list_files`` and ``search_files`` go through. Each directory is opened
beneath the workspace's root fd (:func:`~clawdesk.tools.beneath.open_beneath`), so a directory
swapped for a link while the walk runs is refused by the kernel, not followed; the walk keeps
its own stack (a tree of thousands of nested folders cannot exhaust Python's recursion) and
stops descending at :data:`MAX_DEPTH`. Entries are classified without following links (``lstat``
semantics): symbolic links, FIFOs, devices and sockets are reported as what they are and never
opened.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from clawdesk.tools.beneath import open_beneath

MAX_DEPTH = 64  # directories deeper than this below the walk's start are not entered
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", ".mypy_cache", ".ruff_cache"})
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)


@dataclass(frozen=True)
class Entry:
    """One name found by the walk; ``kind`` is "dir", "file", "link" or "other" (FIFO, device, socket)."""

    parts: tuple[str, ...]  # below the walk's start
    kind: str
    size: int
    nlink: int

    @property
    def name(self) -> str:
        return self.parts[-1]


@dataclass
class WalkStats:
    too_deep: int = 0  # directories not entered because of MAX_DEPTH
    unreadable: int = 0  # directories that could not be opened (permissions, swapped for a link)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def walk(
    root_fd: int,
    start: tuple[str, ...],
    *,
    recursive: bool,
    stats: WalkStats | None = None,
    max_depth: int = MAX_DEPTH,
) -> Iterator[tuple[Entry, int]]:
    """``(entry, fd of its directory)`` for everything under ``root_fd``/``start``; the fd is valid until the next item.

    Names inside a directory come sorted; a directory's entries come before what is below them.
    Directories in :data:`SKIP_DIRS` are listed but not entered.
    """
    stats = stats if stats is not None else WalkStats()
    pending: list[tuple[tuple[str, ...], int]] = [((), 0)]
    while pending:
        rel, depth = pending.pop()
        try:
            dfd = open_beneath(root_fd, start + rel, _DIR)
        except OSError:
            stats.unreadable += 1
            continue
        try:
            with os.scandir(dfd) as it:
                names = sorted(e.name for e in it)
            below: list[tuple[str, ...]] = []
            for name in names:
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue  # gone meanwhile
                entry = Entry((*rel, name), _kind(st.st_mode), st.st_size, st.st_nlink)
                yield entry, dfd
                if recursive and entry.kind == "dir" and name not in SKIP_DIRS:
                    if depth + 1 > max_depth:
                        stats.too_deep += 1
                    else:
                        below.append(entry.parts)
            pending.extend((p, depth + 1) for p in reversed(below))
        finally:
            os.close(dfd)
