"""The process every ``run_shell`` command runs under on Linux: a Landlock sandbox, and a subreaper that kills the rest.

Run as ``python -I -S sandbox.py STATUS_FD MODE WORKSPACE TMPDIR PARENT_PID -- /bin/sh -c CMD`` by
:mod:`clawdesk.tools.shell`; it imports only the standard library (``-S``: not even
site-packages), so it starts in milliseconds. In order:

1. It makes itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): every process the command
   starts stays below it, even one that calls ``setsid`` or double-forks, because an orphan is
   re-parented to the nearest subreaper rather than to init. It asks to get SIGTERM if the app
   dies (``PR_SET_PDEATHSIG``), so an app killed mid-call still takes the command with it.
2. With MODE ``landlock`` it restricts itself, and so everything it starts, with Landlock
   (Linux 5.13+, no package needed): every kind of file-system write is refused except beneath the
   workspace and the call's own TMPDIR (plus writing to ``/dev/null``, ``/dev/zero``, ``/dev/full``).
   Reads are not restricted. If that fails it runs nothing and says why (exit 126).
3. It runs the command, reaps every process that ends below it, and when the command's shell
   exits, or it is sent SIGTERM (timeout, Esc), it signals every descendant still alive —
   SIGTERM, then SIGKILL after a grace — and waits until none is left, so nothing holds the
   output pipe afterwards. It writes one JSON line to STATUS_FD: ``{"exit": code, "signal": n,
   "background": bool}`` or ``{"error": text}``.

:func:`landlock_abi` is the probe ``clawdesk doctor`` and the consent dialog use.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SYS_LANDLOCK_CREATE_RULESET = 444  # the same numbers on every Linux architecture
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1

# Landlock's file-system rights (linux/landlock.h).
FS_WRITE_FILE = 1 << 1
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3

KILL_GRACE_S = 0.5
POLL_S = 0.02
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full")


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers to this process (0 = none: not Linux, too old, or disabled)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        abi = _libc().syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(0, int(abi))


def write_rights(abi: int) -> int:
    rights = (
        FS_WRITE_FILE
        | FS_REMOVE_DIR
        | FS_REMOVE_FILE
        | FS_MAKE_CHAR
        | FS_MAKE_DIR
        | FS_MAKE_REG
        | FS_MAKE_SOCK
        | FS_MAKE_FIFO
        | FS_MAKE_BLOCK
        | FS_MAKE_SYM
    )
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    return rights


def restrict_writes(writable_dirs: list[str]) -> None:
    """Landlock this process: writes only beneath ``writable_dirs`` (and to a few devices); OSError if it cannot."""
    libc = _libc()
    abi = landlock_abi()
    if abi < 1:
        raise OSError("this kernel offers no Landlock")
    handled = write_rights(abi)
    attr = ctypes.c_uint64(handled)  # struct landlock_ruleset_attr's first field: the kernel accepts the short size
    ruleset = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset: " + os.strerror(ctypes.get_errno()))
    try:
        file_rights = FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0)
        rules = [(d, handled) for d in writable_dirs] + [(d, file_rights) for d in WRITABLE_DEVICES]
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                if path in WRITABLE_DEVICES:
                    continue
                raise
            try:
                rule = _PathBeneath(rights, fd)
                if libc.syscall(SYS_LANDLOCK_ADD_RULE, int(ruleset), LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0):
                    err = ctypes.get_errno()
                    raise OSError(err, f"landlock_add_rule {path}: {os.strerror(err)}")
            finally:
                os.close(fd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, int(ruleset), 0):
            err = ctypes.get_errno()
            raise OSError(err, "landlock_restrict_self: " + os.strerror(err))
    finally:
        os.close(int(ruleset))


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (from /proc; zombies count, they are reaped by whoever waits)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone while we looked
        children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


def _reap() -> dict[int, int]:
    """Reap every child that has ended; {pid: wait status}."""
    ended = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended[pid] = status


def _kill_all(me: int) -> bool:
    """SIGTERM everything below ``me``, SIGKILL what is left after the grace, until nothing is; True if any ran."""
    alive = descendants(me)
    if not alive:
        return False
    for pid in alive:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline:
        _reap()
        if not descendants(me):
            return True
        time.sleep(POLL_S)
    for _ in range(1000):  # a process forking as fast as it can is caught within a few rounds
        _reap()
        alive = descendants(me)
        if not alive:
            break
        for pid in alive:
            _signal(pid, signal.SIGKILL)
        time.sleep(POLL_S / 4)
    return True


def _signal(pid: int, sig: int) -> None:
    # Ended meanwhile, or changed its user id (setuid): nothing more can be done from here.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def main(argv: list[str]) -> int:
    status_fd, mode, workspace, tmpdir, parent = int(argv[1]), argv[2], argv[3], argv[4], int(argv[5])
    command = argv[argv.index("--") + 1 :]
    status = os.fdopen(status_fd, "w")
    stop = {"asked": False}

    def on_term(signum, frame):
        stop["asked"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    libc = _libc()
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the app died before the line above: run nothing
        return 1
    if mode == "landlock":
        try:
            restrict_writes([workspace, tmpdir])
        except OSError as exc:
            status.write(json.dumps({"error": f"the sandbox could not be set up ({exc}); the command was not run"}))
            status.close()
            return 126
    shell = os.fork()
    if shell == 0:
        status.close()
        try:
            os.execv(command[0], command)
        finally:
            os._exit(127)
    # Only the command's processes may hold the output pipe: when they are gone, the reader sees EOF.
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    me = os.getpid()
    code = None
    while code is None and not stop["asked"]:
        ended = _reap()
        if shell in ended:
            code = ended[shell]
            break
        time.sleep(POLL_S)
    background = _kill_all(me)
    if code is None:
        code = _reap().get(shell)
    result: dict[str, object] = {"background": background and not stop["asked"], "stopped": stop["asked"]}
    if code is not None:
        if os.WIFEXITED(code):
            result["exit"] = os.WEXITSTATUS(code)
        elif os.WIFSIGNALED(code):
            result["signal"] = os.WTERMSIG(code)
    status.write(json.dumps(result))
    status.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
