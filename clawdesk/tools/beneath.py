"""Opening a path beneath a directory without following any link: the system calls under the workspace jail.

:func:`open_beneath` opens ``rel`` (already split into plain components by the jail: no ``..``,
no ``.``, no empty parts) under an open directory ``root_fd``. Where the kernel has ``openat2``
(Linux 5.6+) one call does it with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS``: the kernel itself refuses every link and every way above ``root_fd``, so a
directory swapped for a link between a check and the open cannot lead out. Elsewhere (macOS, old
kernels, a seccomp filter that refuses the call) the same is done one component at a time:
each directory is opened with ``O_DIRECTORY | O_NOFOLLOW`` relative to the previous one's fd,
and the last component with ``O_NOFOLLOW``; a link at any step fails the open (``ELOOP`` /
``ENOTDIR``), so a swap in between still cannot lead out.

Every open here adds ``O_NONBLOCK`` (a FIFO or a device must not block the caller in ``open``)
and ``O_CLOEXEC`` (no fd leaks into a shell command). Callers ``fstat`` the fd and refuse what is
not a regular file or a directory.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437  # the same number on every Linux architecture (it came after the syscall tables unified)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_openat2_state: dict[str, object] = {}  # "ok": bool once probed; "syscall": the libc function


def _syscall():
    if "syscall" not in _openat2_state:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.syscall
            fn.restype = ctypes.c_long
        except (OSError, AttributeError):
            fn = None
        _openat2_state["syscall"] = fn
    return _openat2_state["syscall"]


def has_openat2() -> bool:
    """Whether this kernel answers ``openat2`` (probed once: ENOSYS or a seccomp EPERM mean no)."""
    if "ok" not in _openat2_state:
        ok = False
        if sys.platform.startswith("linux") and _syscall() is not None:
            try:
                fd = _openat2(os.open("/", os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC), ".", os.O_RDONLY | _O_DIRECTORY, 0)
            except OSError:
                pass
            else:
                os.close(fd)
                ok = True
        _openat2_state["ok"] = ok
    return bool(_openat2_state["ok"])


def _openat2(dir_fd: int, rel: str, flags: int, mode: int, *, close_dir: bool = True) -> int:
    how = _OpenHow(
        flags | _O_CLOEXEC,
        mode if flags & os.O_CREAT else 0,
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    )
    try:
        fd = _syscall()(_SYS_OPENAT2, dir_fd, os.fsencode(rel), ctypes.byref(how), ctypes.sizeof(how))
        err = ctypes.get_errno()
    finally:
        if close_dir:
            os.close(dir_fd)
    if fd < 0:
        raise OSError(err, os.strerror(err), rel)
    return int(fd)


def open_beneath(root_fd: int, parts: tuple[str, ...], flags: int, mode: int = 0o600) -> int:
    """An fd for ``root_fd``/``parts`` opened with ``flags`` (+ no-follow, non-blocking, close-on-exec).

    ``parts`` empty = the root itself (a new fd). Raises ``OSError``: ``ELOOP`` or ``ENOTDIR`` for a
    link on the way, ``EXDEV`` for a way above the root, ``ENOENT`` for a missing component.
    """
    flags |= _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
    if not parts:
        return os.open(".", flags & ~os.O_CREAT, dir_fd=root_fd)
    if any(p in ("", ".", "..") or "/" in p or "\0" in p for p in parts):
        raise OSError(errno.EINVAL, "not a plain path component", "/".join(parts))
    if has_openat2():
        return _openat2(root_fd, "/".join(parts), flags, mode, close_dir=False)
    return _walk_open(root_fd, parts, flags, mode)


def _walk_open(root_fd: int, parts: tuple[str, ...], flags: int, mode: int) -> int:
    """The fallback: one ``O_NOFOLLOW`` open per component, each relative to the fd of the one before."""
    dir_flags = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
    fd = root_fd
    try:
        for part in parts[:-1]:
            nxt = os.open(part, dir_flags, dir_fd=fd)
            if fd != root_fd:
                os.close(fd)
            fd = nxt
        return os.open(parts[-1], flags, mode, dir_fd=fd)
    finally:
        if fd != root_fd:
            os.close(fd)
