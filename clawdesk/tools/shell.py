"""The ``run_shell`` tool: one shell command in the workspace, bounded in time and output.

The command runs under ``/bin/sh -c`` with the workspace as its working directory, no stdin, and in
a new session (``start_new_session=True``), so it and everything it starts share one process group.
On timeout or cancel the whole group gets SIGTERM, then SIGKILL after a short grace for anything
that ignores SIGTERM; after a normal exit, processes the command left running in the background
get the same treatment, so a tool call never leaves work running behind the agent's back. Output
(stdout and stderr together) is read while the command runs and only its head and tail are kept,
so a command printing gigabytes costs no memory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from clawdesk.tools.types import ToolResult, ToolSpec, object_schema

KILL_GRACE_S = 1.0  # between SIGTERM and SIGKILL for the process group
POLL_S = 0.05  # how often a running command checks its deadline and the cancel event
CHUNK = 65536

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


def run_shell(
    command: str,
    cwd: Path,
    *,
    timeout_s: float,
    max_chars: int,
    cancel: threading.Event | None = None,
) -> ShellOutcome:
    """Run ``command`` in ``cwd``; never waits much longer than ``timeout_s`` plus the kill grace."""
    env = dict(os.environ, PAGER="cat", GIT_PAGER="cat", TERM="dumb")  # nothing may wait for a keypress
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    capture = _Capture(max_chars)
    reader = threading.Thread(target=_drain, args=(proc.stdout, capture), daemon=True)
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
        # Also on an exception here (KeyboardInterrupt): the group never outlives the call.
        stopped = _stop_group(proc)
    # The pipe closes once every process holding it is gone; the group was just stopped.
    reader.join(KILL_GRACE_S + 1.0)
    stopped_background = stopped and not (timed_out or cancelled)
    exit_code = None if (timed_out or cancelled) else proc.returncode
    return ShellOutcome(exit_code, capture.text(), timed_out, cancelled, stopped_background)


def shell_result(outcome: ShellOutcome, timeout_s: float) -> ToolResult:
    """The tool result the model reads: exit code (or why it stopped) first, then the output."""
    output = outcome.output if outcome.output.strip() else "(no output)"
    if outcome.timed_out:
        head = f"timed out after {timeout_s:g} s: the command and everything it started were stopped"
        return ToolResult("run_shell", "timeout", f"{head}\noutput so far:\n{output}")
    if outcome.cancelled:
        return ToolResult("run_shell", "error", f"stopped by the user\noutput so far:\n{output}")
    note = "\n[processes it left running in the background were stopped]" if outcome.stopped_background else ""
    status = "ok" if outcome.exit_code == 0 else "error"
    return ToolResult("run_shell", status, f"exit code {outcome.exit_code}\n{output}{note}")


def _drain(stream, capture: _Capture) -> None:
    with stream:
        while chunk := stream.read1(CHUNK):
            capture.add(chunk)


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
