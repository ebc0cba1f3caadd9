"""The workspace jail: every path a tool is given is resolved here, and nothing outside the workspace gets through.

A model-given path is refused when it holds a NUL byte, starts with ``~``, escapes with ``..``, is
absolute and outside the workspace, or reaches outside through a symlink. The symlink check is made
on the *real* path (``os.path.realpath``), which also resolves the parent of a file that does not
exist yet, so a new file under a symlinked directory that leads outside is refused too. Callers open
the returned real path, never the model's spelling of it, and open final components with
``O_NOFOLLOW`` so a link swapped in after the check is not followed.

Errors are :class:`~clawdesk.errors.ToolInputError` whose text the model can act on.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from clawdesk.errors import ToolInputError


class Workspace:
    """The directory tools may read and write; created (0700) on first use."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root).expanduser().absolute()
        self._real: Path | None = None

    @property
    def real_root(self) -> Path:
        """The workspace's real path (symlinks in its own location resolved), created if missing."""
        if self._real is None:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._real = Path(os.path.realpath(self.root))
        return self._real

    def resolve(self, path: object, *, what: str = "path") -> Path:
        """The real path for a model-given ``path`` (relative to the workspace), or ToolInputError."""
        if not isinstance(path, str):
            raise ToolInputError(f"{what} must be a string, got {type(path).__name__}")
        shown = _shown(path)
        if "\x00" in path:
            raise ToolInputError(f"{what} {shown} contains a NUL byte; use a plain path relative to the workspace")
        if path.startswith("~"):
            raise ToolInputError(f"{what} {shown} points outside the workspace; use a path relative to it")
        root = self.real_root
        candidate = Path(path) if os.path.isabs(path) else root / (path or ".")
        # The real path is the only check that counts: realpath resolves `..` the way the OS does (after
        # the link before it, not by spelling) and every symlink, including a symlinked parent of a file
        # that does not exist yet and a dangling link whose target would be created by a write.
        real = Path(os.path.realpath(candidate))
        if not is_inside(real, root):
            via_link = is_inside(Path(os.path.normpath(candidate)), root)
            how = " through a symbolic link" if via_link else ""
            raise ToolInputError(f"{what} {shown} is outside the workspace{how}; use a path relative to it")
        return real

    def relative(self, real: Path) -> str:
        """How a resolved path is shown to the model: relative to the workspace, '.' for the root."""
        rel = os.path.relpath(real, self.real_root)
        return "." if rel == "." else rel

    def open_read(self, path: object, *, what: str = "path") -> tuple[Path, int]:
        """Resolve and open a regular file for reading; returns (real path, fd). Directories and FIFOs are refused."""
        real = self.resolve(path, what=what)
        shown = _shown(path)
        try:
            # O_NONBLOCK: opening a FIFO someone left in the workspace must not hang the agent.
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            raise ToolInputError(f"{shown} does not exist; list_files shows what is there") from None
        except IsADirectoryError:
            raise ToolInputError(f"{shown} is a directory; use list_files for directories") from None
        except OSError as exc:
            raise ToolInputError(f"cannot open {shown}: {exc.strerror}") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            kind = "a directory; use list_files for directories" if stat.S_ISDIR(mode) else "not a regular file"
            raise ToolInputError(f"{shown} is {kind}")
        os.set_blocking(fd, True)
        return real, fd

    def write_path(self, path: object, *, what: str = "path") -> Path:
        """Resolve a path to write, creating its missing parent directories inside the workspace."""
        real = self.resolve(path, what=what)
        if real == self.real_root or real.is_dir():
            raise ToolInputError(f"{_shown(path)} is a directory; give a file path")
        try:
            real.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise ToolInputError(f"a parent of {_shown(path)} is a file, not a directory") from None
        except OSError as exc:
            raise ToolInputError(f"cannot create the directories for {_shown(path)}: {exc.strerror}") from None
        # mkdir may have raced with a link swapped into the parent chain: check the real parent again.
        if not is_inside(Path(os.path.realpath(real.parent)), self.real_root):
            raise ToolInputError(f"{_shown(path)} leads outside the workspace through a symbolic link")
        return real


def write_text(real: Path, content: str) -> None:
    """Write ``content`` to a path from :meth:`Workspace.write_path` without following a link at its end."""
    data = content.encode("utf-8")  # before the file is truncated: text that cannot be encoded changes nothing
    fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def is_inside(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or below it (both already absolute and normalised)."""
    return path == root or root in path.parents


def _shown(path: object, limit: int = 200) -> str:
    """A path as quoted in an error: repr (so control characters show), cut if very long."""
    text = repr(path)
    return text if len(text) <= limit else text[: limit - 1] + "…'"
