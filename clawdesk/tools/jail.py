"""The workspace jail: every path a tool is given is opened here, beneath the workspace; nothing outside gets through.

A model-given path is first checked by spelling (:meth:`Workspace.parts`): a NUL byte, a leading
``~``, a ``..`` that climbs above the workspace, an absolute path outside it are refused, and what
is left is a tuple of plain components under the workspace's real path. Then it is *opened*
component by component beneath the workspace without following any link
(:func:`~clawdesk.tools.beneath.open_beneath`: ``openat2`` with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS``, or an ``O_NOFOLLOW`` directory-fd walk): there is no gap between a check
and the open for a racing process to swap a directory for a link, because the kernel does both.
File tools follow no symbolic link at all, not even one that stays inside.

Only regular files are read or written, and only directories listed: FIFOs, devices and sockets
are opened non-blocking, seen by ``fstat`` and refused, so nothing can hang in ``open``. A file
with more than one hard link is refused for reading (the other name may be outside the
workspace), and every write goes to a new temporary file in the same directory that then
replaces the name (``os.replace``), so a write never goes *through* a hard link or an existing
file's inode. Names with control characters are refused for new files.

Errors are :class:`~clawdesk.errors.ToolInputError` whose text the model can act on.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from clawdesk.errors import ToolInputError
from clawdesk.tools.beneath import open_beneath

_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
NAME_MAX = 255


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

    # -- spelling ---------------------------------------------------------------------------

    def parts(self, path: object, *, what: str = "path") -> tuple[str, ...]:
        """The plain components of a model-given ``path`` under the workspace (``()`` = the root)."""
        if not isinstance(path, str):
            raise ToolInputError(f"{what} must be a string, got {type(path).__name__}")
        shown = shown_path(path)
        if "\x00" in path:
            raise ToolInputError(f"{what} {shown} contains a NUL byte; use a plain path relative to the workspace")
        if path.startswith("~"):
            raise ToolInputError(f"{what} {shown} points outside the workspace; use a path relative to it")
        root = self.real_root
        if os.path.isabs(path):
            norm = os.path.normpath(path)
            for base in (str(root), str(self.root)):
                if norm == base or norm.startswith(base.rstrip(os.sep) + os.sep):
                    rel = os.path.relpath(norm, base)
                    break
            else:
                raise ToolInputError(f"{what} {shown} is outside the workspace; use a path relative to it")
        else:
            # No link is ever followed, so `..` resolved by spelling is what the opens will do.
            rel = os.path.normpath(path or ".")
        if rel == os.curdir:
            return ()
        parts = tuple(rel.split(os.sep))
        if parts[0] == os.pardir:
            raise ToolInputError(f"{what} {shown} is outside the workspace; use a path relative to it")
        return parts

    def resolve(self, path: object, *, what: str = "path") -> Path:
        """The path under the real workspace root for ``path``; refused if it is outside or goes through a link.

        A check for messages and previews only: the tools open through :meth:`open_read`,
        :meth:`open_dir` and :meth:`write_bytes`, which the kernel keeps beneath the root.
        """
        return self.real_root.joinpath(*self.checked(path, what=what))

    def checked(self, path: object, *, what: str = "path") -> tuple[str, ...]:
        """:meth:`parts`, refused also when the path goes through a link as it stands now (for clear errors)."""
        parts = self.parts(path, what=what)
        # As spelled (a `..` right after a link would climb from the link's target), then as normalised.
        spelled = parts if os.path.isabs(path) else tuple(p for p in path.split(os.sep) if p not in ("", "."))
        probe = self.real_root
        for part in spelled:
            probe = probe.parent if part == os.pardir else probe / part
            try:
                if part != os.pardir and stat.S_ISLNK(probe.lstat().st_mode):
                    raise ToolInputError(link_message(path, what))
            except (FileNotFoundError, NotADirectoryError):
                if os.pardir not in spelled:
                    break
        return parts

    def relative(self, real: Path) -> str:
        """How a path under the root is shown to the model: relative to the workspace, '.' for the root."""
        rel = os.path.relpath(real, self.real_root)
        return "." if rel == "." else rel

    # -- opening ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def root_fd(self) -> Iterator[int]:
        """An fd of the workspace's root, closed on exit: everything is opened beneath it."""
        fd = os.open(self.real_root, _DIR | getattr(os, "O_CLOEXEC", 0))
        try:
            yield fd
        finally:
            os.close(fd)

    def _open(self, path: object, parts: tuple[str, ...], flags: int, what: str) -> int:
        with self.root_fd() as root:
            try:
                return open_beneath(root, parts, flags)
            except OSError as exc:
                raise ToolInputError(_explain(exc, path, what)) from None

    def open_read(self, path: object, *, what: str = "path") -> tuple[Path, int]:
        """Open a regular file with one link for reading; returns (path, blocking fd). Anything else is refused."""
        parts = self.checked(path, what=what)
        fd = self._open(path, parts, os.O_RDONLY, what)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise ToolInputError(f"{shown_path(path)} is a directory; use list_files for directories")
            if not stat.S_ISREG(st.st_mode):
                raise ToolInputError(f"{shown_path(path)} is not a regular file (a FIFO, device or socket)")
            if st.st_nlink > 1:
                raise ToolInputError(
                    f"{shown_path(path)} has {st.st_nlink} hard links; file tools do not read a file that may also "
                    "be reached from outside the workspace"
                )
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return self.real_root.joinpath(*parts), fd

    def open_dir(self, path: object, *, what: str = "path") -> tuple[Path, int]:
        """Open a directory under the workspace; returns (path, fd). ToolInputError if it is anything else."""
        parts = self.checked(path, what=what)
        fd = self._open(path, parts, _DIR, what)
        return self.real_root.joinpath(*parts), fd

    def lstat(self, path: object, *, what: str = "path") -> os.stat_result | None:
        """What ``path`` is (not following a link at its end), or None if it does not exist."""
        parts = self.checked(path, what=what)
        if not parts:
            return os.stat(self.real_root)
        with contextlib.suppress(FileNotFoundError):
            _, fd = self.open_dir(os.sep.join(parts[:-1]) or ".", what=what)
            try:
                return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            finally:
                os.close(fd)
        return None

    def write_bytes(self, path: object, data: bytes, *, what: str = "path") -> bool:
        """Write ``data`` as the whole content of ``path`` (missing parent directories made); True if it existed.

        The bytes go to a new file next to it, which then replaces the name: an existing file's
        inode (and any hard link to it) is never written through, and a failed write leaves the
        old content.
        """
        parts = self.checked(path, what=what)
        shown = shown_path(path)
        if not parts:
            raise ToolInputError(f"{shown} is a directory; give a file path")
        bad = next((p for p in parts if not clean_name(p)), None)
        if bad is not None:
            raise ToolInputError(
                f"{what} {shown} has a name with a control character, a line break or more than {NAME_MAX} "
                "bytes; use a plain file name"
            )
        dfd = self._make_dirs(path, parts[:-1], what)
        name = parts[-1]
        try:
            try:
                before = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                before = None
            if before is not None and stat.S_ISLNK(before.st_mode):
                raise ToolInputError(link_message(path, what))
            if before is not None and stat.S_ISDIR(before.st_mode):
                raise ToolInputError(f"{shown} is a directory; give a file path")
            if before is not None and not stat.S_ISREG(before.st_mode):
                raise ToolInputError(f"{shown} is not a regular file (a FIFO, device or socket); it was not changed")
            _replace(dfd, name, data, stat.S_IMODE(before.st_mode) if before else 0o644)
        finally:
            os.close(dfd)
        return before is not None

    def _make_dirs(self, path: object, parts: tuple[str, ...], what: str) -> int:
        """An fd of the directory ``parts``, making what is missing, one no-follow step at a time."""
        with self.root_fd() as root:
            fd = os.dup(root)
        try:
            for i, part in enumerate(parts):
                try:
                    nxt = open_beneath(fd, (part,), _DIR)
                except FileNotFoundError:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass  # made meanwhile (or a link appeared): the open below decides
                    except OSError as exc:
                        raise ToolInputError(
                            f"cannot create the directories for {shown_path(path)}: {exc.strerror}"
                        ) from None
                    try:
                        nxt = open_beneath(fd, (part,), _DIR)
                    except OSError as exc:
                        raise ToolInputError(_explain(exc, path, what, parts[: i + 1])) from None
                except OSError as exc:
                    raise ToolInputError(_explain(exc, path, what, parts[: i + 1])) from None
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd


def _replace(dfd: int, name: str, data: bytes, mode: int) -> None:
    tmp = f".{name[:60]}.{secrets.token_hex(6)}.clawdesk-tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise


def write_text(ws: Workspace, path: object, content: str) -> bool:
    """Write ``content`` as UTF-8 (encoded first: text that cannot be encoded changes nothing); True if it existed."""
    return ws.write_bytes(path, content.encode("utf-8"))


def clean_name(name: str) -> bool:
    """Whether a file name may be created: no control characters (line breaks, escapes), not too long."""
    if len(os.fsencode(name)) > NAME_MAX:
        return False
    return not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in name)


def shown_name(name: str) -> str:
    """A name as the model and the terminal see it: as is when clean, else its repr (escapes visible, none raw)."""
    return name if clean_name(name) else repr(name)


def _explain(exc: OSError, path: object, what: str, parts: tuple[str, ...] | None = None) -> str:
    shown = shown_path(path)
    code = exc.errno
    if code in (errno.ELOOP, errno.EMLINK):
        return link_message(path, what)
    if code == errno.EXDEV:
        return f"{what} {shown} is outside the workspace; use a path relative to it"
    if code == errno.ENOENT:
        return f"{shown} does not exist; list_files shows what is there"
    if code == errno.ENOTDIR:
        return f"a part of {shown} is not a directory (or is a symbolic link, which file tools do not follow)"
    if code == errno.EISDIR:
        return f"{shown} is a directory; use list_files for directories"
    return f"cannot open {shown}: {exc.strerror or exc}"


def link_message(path: object, what: str = "path") -> str:
    return (
        f"{what} {shown_path(path)} is or goes through a symbolic link; file tools do not follow links "
        "(a link could lead outside the workspace): use the path it points to"
    )


def is_inside(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or below it (both already absolute and normalised)."""
    return path == root or root in path.parents


def shown_path(path: object, limit: int = 200) -> str:
    """A path as quoted in an error: repr (so control characters show), cut if very long."""
    text = repr(path)
    return text if len(text) <= limit else text[: limit - 1] + "…'"
