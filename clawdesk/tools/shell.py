"""The ``run_shell`` tool: one shell command in the workspace, bounded in time, output, environment and reach.

The command runs under ``/bin/sh -c`` with the workspace as its working directory, no stdin, its
own empty TMPDIR, and only an allow-listed environment (:func:`shell_env`: PATH, HOME, LANG,
LC_*, USER, TMPDIR, TERM and the names ``tools.shell_env`` adds), so tokens and keys in the
app's environment never reach it. On Linux it runs below the supervisor in
:mod:`clawdesk.tools.sandbox`: a child subreaper that kills every descendant (``setsid``'ed and
double-forked ones included) when the command ends, times out or is cancelled, and, where the
kernel has Landlock, confines file-system writes to the workspace (:func:`sandbox_state` says
which, for ``clawdesk doctor`` and the consent dialog). Elsewhere the command's process group is
killed, which a process that leaves the group escapes; that is said there too. Output (stdout
and stderr together) is read while the command runs, by a reader that stops at the end of the
call even if a survivor holds the pipe, and only its head and tail are kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from clawdesk.tools import sandbox
from clawdesk.tools.types import ToolResult, ToolSpec, object_schema

KILL_GRACE_S = 1.0  # between SIGTERM and SIGKILL for the process group
POLL_S = 0.05  # how often a running command checks its deadline and the cancel event
CHUNK = 65536
READ_GRACE_S = 1.0  # how long the output is read on after the call ended
SUPERVISOR = Path(sandbox.__file__)
ENV_ALLOWED = frozenset({"PATH", "HOME", "LANG", "USER", "LOGNAME", "TMPDIR", "TERM", "TZ"})
ENV_ALLOWED_PREFIXES = ("LC_",)

SPEC = ToolSpec(
    name="run_shell",
    description=(
        "Run a shell command (/bin/sh) in the workspace directory and return its exit code and output "
        "(stdout and stderr together). No input can be typed into it; it is stopped after the timeout."
    ),
    parameters=object_schema(
        {
            "command": {"type": "string", "description": "the command line, e.g. 'python3 test.py'"},
            "timeout_s": {"type": "number", "description": "seconds before it is stopped (optional, capped)"},
        },
        ["command"],
    ),
    default_policy="ask",
)


@dataclass(frozen=True)
class ShellOutcome:
    exit_code: int | None  # None: it was stopped (timeout or cancel)
    output: str
    timed_out: bool
    cancelled: bool
    stopped_background: bool  # processes left running in the background were stopped
    setup_error: bool = False  # the sandbox could not be set up: nothing ran, ``output`` says why


class _Capture:
    """Keeps the first ``head`` and the last ``tail`` bytes of a stream and counts what fell between."""

    def __init__(self, limit: int):
        self.head_limit = limit // 2
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.tail_limit = limit - self.head_limit
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail.append(data)
        self.tail_size += len(data)
        while self.tail_size - len(self.tail[0]) >= self.tail_limit:
            self.tail_size -= len(self.tail[0])
            self.dropped += len(self.tail.popleft())

    def text(self) -> str:
        tail = b"".join(self.tail)
        cut = max(0, len(tail) - self.tail_limit)
        dropped = self.dropped + cut
        head = self.head.decode("utf-8", errors="replace")
        rest = tail[cut:].decode("utf-8", errors="replace")
        if dropped:
            return f"{head}\n[… {dropped} bytes of output left out …]\n{rest}"
        return head + rest


def shell_env(extra_names: tuple[str, ...] = ()) -> dict[str, str]:
    """A command's environment: the allow-list and ``tools.shell_env``'s names, nothing else (no tokens, no keys)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k in ENV_ALLOWED or k in extra_names or any(k.startswith(p) for p in ENV_ALLOWED_PREFIXES)
    }
    env.setdefault("PATH", os.defpath)
    env.update(PAGER="cat", GIT_PAGER="cat", TERM="dumb")  # nothing may wait for a keypress
    return env


def sandbox_state() -> tuple[bool, str]:
    """(whether run_shell's writes are confined to the workspace here, one line saying how or why not)."""
    if not sys.platform.startswith("linux"):
        return False, (
            f"no sandbox on {sys.platform}: run_shell can write wherever you can, and a process that leaves its "
            "process group may outlive the call"
        )
    abi = sandbox.landlock_abi()
    if abi < 1:
        return False, (
            "no sandbox: this kernel offers no Landlock (Linux 5.13+ with landlock enabled), so run_shell can write "
            "wherever you can; every process it starts is still stopped when the call ends"
        )
    return True, f"Landlock ABI {abi}: run_shell writes only inside the workspace; every process it starts is stopped"


def run_shell(
    command: str,
    cwd: Path,
    *,
    timeout_s: float,
    max_chars: int,
    cancel: threading.Event | None = None,
    env_names: tuple[str, ...] = (),
    confine: bool | None = None,
) -> ShellOutcome:
    """Run ``command`` in ``cwd``; never waits much longer than ``timeout_s`` plus the kill grace.

    ``confine`` None = use the sandbox wherever :func:`sandbox_state` finds one (False: never).
    """
    env = shell_env(env_names)
    linux = sys.platform.startswith("linux")
    if confine is None:
        confine = sandbox_state()[0]
    tmpdir = tempfile.mkdtemp(prefix="clawdesk-shell-")
    env["TMPDIR"] = tmpdir
    status_r = status_w = -1
    argv = ["/bin/sh", "-c", command]
    if linux:
        status_r, status_w = os.pipe()
        mode = "landlock" if confine else "none"
        argv = [sys.executable, "-I", "-S", str(SUPERVISOR), str(status_w), mode, str(cwd), tmpdir, str(os.getpid())]
        argv += ["--", "/bin/sh", "-c", command]
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            pass_fds=(status_w,) if linux else (),
        )
    finally:
        if status_w >= 0:
            os.close(status_w)
    capture = _Capture(max_chars)
    done_reading = threading.Event()
    reader = threading.Thread(target=_drain, args=(proc.stdout, capture, done_reading), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    timed_out = cancelled = False
    try:
        while proc.poll() is None:
            if cancel is not None and cancel.is_set():
                cancelled = True
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(POLL_S)
    finally:
        # Also on an exception here (KeyboardInterrupt): nothing the command started outlives the call.
        stopped = _stop(proc, supervised=linux)
        status = _read_status(status_r) if linux else {}
        # The pipe closes once every process holding it is gone; if one escaped, stop reading anyway.
        reader.join(READ_GRACE_S)
        done_reading.set()
        reader.join(READ_GRACE_S)
        shutil.rmtree(tmpdir, ignore_errors=True)
    if "error" in status:
        return ShellOutcome(None, str(status["error"]), False, False, False, setup_error=True)
    stopped_background = bool(status.get("background")) if linux else stopped and not (timed_out or cancelled)
    exit_code = None if (timed_out or cancelled) else status.get("exit", proc.returncode) if linux else proc.returncode
    if linux and "signal" in status and not (timed_out or cancelled):
        exit_code = 128 + int(status["signal"])
    return ShellOutcome(exit_code, capture.text(), timed_out, cancelled, stopped_background)


def shell_result(outcome: ShellOutcome, timeout_s: float) -> ToolResult:
    """The tool result the model reads: exit code (or why it stopped) first, then the output."""
    if outcome.setup_error:
        return ToolResult("run_shell", "error", outcome.output)
    output = outcome.output if outcome.output.strip() else "(no output)"
    if outcome.timed_out:
        head = f"timed out after {timeout_s:g} s: the command and everything it started were stopped"
        return ToolResult("run_shell", "timeout", f"{head}\noutput so far:\n{output}")
    if outcome.cancelled:
        return ToolResult("run_shell", "error", f"stopped by the user\noutput so far:\n{output}")
    note = "\n[processes it left running in the background were stopped]" if outcome.stopped_background else ""
    status = "ok" if outcome.exit_code == 0 else "error"
    return ToolResult("run_shell", status, f"exit code {outcome.exit_code}\n{output}{note}")


def _drain(stream, capture: _Capture, done: threading.Event) -> None:
    """Copy the output into ``capture`` until EOF, or until ``done`` (a survivor holding the pipe cannot keep it)."""
    fd = stream.fileno()
    with stream:
        while not done.is_set():
            ready, _, _ = select.select([fd], [], [], POLL_S)
            if ready:
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    return
                capture.add(chunk)


def _stop(proc: subprocess.Popen, *, supervised: bool) -> bool:
    """End the call: the supervisor is asked to stop the tree (SIGTERM), then the group is killed as a fallback."""
    if supervised and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(KILL_GRACE_S + 2.0)  # it SIGKILLs what ignores SIGTERM after its own grace
    return _stop_group(proc)


def _read_status(fd: int) -> dict:
    with os.fdopen(fd, "rb") as f:
        ready, _, _ = select.select([f], [], [], 0.5)
        raw = f.read() if ready else b""
    try:
        status = json.loads(raw or b"{}")
    except json.JSONDecodeError:
        return {}
    return status if isinstance(status, dict) else {}


def _stop_group(proc: subprocess.Popen) -> bool:
    """SIGTERM the command's process group, SIGKILL what is left after the grace; True if anything was running."""
    pgid = proc.pid  # start_new_session: the shell leads its own group
    proc.poll()
    if not _group_alive(pgid) or not _signal_group(pgid, signal.SIGTERM):
        proc.wait()
        return False
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline:
        proc.poll()  # reap the shell, so a zombie leader does not count as running
        if not _group_alive(pgid):
            break
        time.sleep(POLL_S)
    else:
        _signal_group(pgid, signal.SIGKILL)
    proc.wait()
    return True


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # A member changed its user id (setuid helper): it cannot be signalled, but it was there.
        return True
    return True


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies, which an init that never reaps may keep, do not)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return True
    for entry in proc_dir.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it exited while we looked
        # After the command name: state, ppid, pgrp.
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
