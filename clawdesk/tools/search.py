"""The ``search_files`` tool: a model-written regular expression over the workspace's text files, bounded everywhere.

The pattern is checked before anything compiles it (:func:`check_pattern`: its length, each
counted repeat, and how far nested repeats would multiply it out), then compiled and run in a
separate short-lived process (:mod:`clawdesk.tools.search_worker`) with its own memory cap and a
deadline that covers compiling as well as matching: a pattern like ``a{10000000}`` costs the
app nothing. The files are walked here (:func:`~clawdesk.tools.tree.walk`: iterative, depth-capped,
no links followed) and only regular files with one link are opened, non-blocking, so a FIFO or
a device in the workspace is skipped, never waited on.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

from clawdesk.errors import ToolInputError
from clawdesk.tools.beneath import open_beneath
from clawdesk.tools.jail import Workspace, shown_name
from clawdesk.tools.tree import WalkStats, walk

SEARCH_MAX_MATCHES = 100
SEARCH_MAX_FILE_BYTES = 2_000_000  # larger files are skipped (logs, data): read_file pages through them
SEARCH_MAX_TOTAL_BYTES = 32_000_000  # what one search hands to the worker at most
SEARCH_TIME_S = 10.0
SEARCH_LINE_CHARS = 300  # a matching line is shown up to this many characters
BINARY_PROBE = 8192
PATTERN_MAX_CHARS = 2000
REPEAT_MAX = 1000  # the largest number in a counted repeat {m,n}
EXPANDED_MAX = 20_000  # the pattern's size once nested counted repeats are multiplied out
WORKER = Path(__file__).with_name("search_worker.py")

_QUANT = re.compile(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")


def check_pattern(pattern: str) -> None:
    """Refuse a pattern whose compiled form could be huge, before anything compiles it (ToolInputError)."""
    if len(pattern) > PATTERN_MAX_CHARS:
        raise ToolInputError(f"the pattern is {len(pattern)} characters; keep it under {PATTERN_MAX_CHARS}")
    # Frames of [size so far, size of the last atom]; a counted repeat multiplies the last atom.
    frames: list[list[int]] = [[0, 0]]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        frame = frames[-1]
        if c == "\\":
            frame[0] += 1
            frame[1] = 1
            i += 2
            continue
        if c == "[":
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            frame[0] += 1
            frame[1] = 1
            i = j + 1
            continue
        if c == "(":
            frames.append([0, 0])
        elif c == ")" and len(frames) > 1:
            size = max(1, frames.pop()[0])
            frames[-1][0] += size
            frames[-1][1] = size
        elif c == "{" and (m := _QUANT.match(pattern, i)):
            numbers = [int(x) for x in m.groups() if x]
            bound = max(numbers, default=0)
            if bound > REPEAT_MAX:
                raise ToolInputError(
                    f"the pattern repeats something {bound} times; counted repeats may be at most {REPEAT_MAX} "
                    "(use + or * for 'many')"
                )
            frame[0] += frame[1] * (max(bound, 1) - 1)
            frame[1] *= max(bound, 1)
            i = m.end()
            if frame[0] > EXPANDED_MAX:
                break
            continue
        else:
            frame[0] += 1
            frame[1] = 1
        i += 1
    total = sum(f[0] for f in frames)
    if total > EXPANDED_MAX:
        raise ToolInputError(
            f"nested counted repeats make this pattern about {total} items long once expanded (at most "
            f"{EXPANDED_MAX}); use fewer or smaller repeats"
        )


def search_files(ws: Workspace, pattern: str, path: str = ".", glob: str = "") -> str:
    check_pattern(pattern)
    deadline = time.monotonic() + SEARCH_TIME_S
    st = ws.lstat(path)
    if st is None:
        raise ToolInputError(f"{path!r} does not exist; list_files shows what is there")
    parts = ws.parts(path)
    files: list[tuple[str, bytes]] = []
    skipped = {"big": 0, "special": 0, "linked": 0}
    stats = WalkStats()
    if not stat.S_ISDIR(st.st_mode):
        _, fd = ws.open_read(path)
        with os.fdopen(fd, "rb") as f:
            data = f.read(SEARCH_MAX_FILE_BYTES + 1)
        if len(data) <= SEARCH_MAX_FILE_BYTES and b"\0" not in data[:BINARY_PROBE]:
            files.append((ws.relative(ws.real_root.joinpath(*parts)), data))
    else:
        _collect(ws, parts, glob, files, skipped, stats, deadline)
    matches, done = _run_worker(pattern, files, deadline)
    lines = [f"{shown_name(name)}:{number}: {text}" for name, number, text in matches]
    if len(matches) >= SEARCH_MAX_MATCHES:
        lines.append(f"[stopped at {SEARCH_MAX_MATCHES} matches; use a narrower pattern, path or glob]")
        return "\n".join(lines)
    notes = []
    if skipped["big"]:
        notes.append(f"[{skipped['big']} file(s) over {SEARCH_MAX_FILE_BYTES} bytes were not searched]")
    if skipped["special"] or skipped["linked"]:
        notes.append(
            f"[{skipped['special'] + skipped['linked']} symbolic link(s), special or hard-linked file(s) were skipped]"
        )
    if stats.too_deep:
        notes.append(f"[{stats.too_deep} directories nested too deep were not searched; search a subdirectory]")
    if not done:
        notes.append(f"[only the first {SEARCH_MAX_TOTAL_BYTES:,} bytes of files were searched; narrow the path]")
    if not matches:
        return "\n".join([f"no matches for {pattern!r} in {ws.relative(ws.real_root.joinpath(*parts))}", *notes])
    return "\n".join(lines + notes)


def _collect(ws, parts, glob, files, skipped, stats, deadline) -> None:
    total = 0
    with ws.root_fd() as root:
        for entry, dfd in walk(root, parts, recursive=True, stats=stats):
            if time.monotonic() > deadline:
                raise _timeout()
            if entry.kind in ("link", "other"):
                skipped["special"] += 1
                continue
            if entry.kind != "file" or (glob and not fnmatch.fnmatch(entry.name, glob)):
                continue
            if entry.size > SEARCH_MAX_FILE_BYTES:
                skipped["big"] += 1
                continue
            if entry.nlink > 1:
                skipped["linked"] += 1
                continue
            data = _read_regular(dfd, entry.name)
            if data is None:
                skipped["special"] += 1
                continue
            if b"\0" in data[:BINARY_PROBE]:
                continue
            total += len(data)
            if total > SEARCH_MAX_TOTAL_BYTES:
                files.append(("", b""))  # marks "cut": the worker is told of no more files
                return
            files.append((os.sep.join(parts + entry.parts), data))


def _read_regular(dfd: int, name: str) -> bytes | None:
    """The bytes of a regular file with one link, opened without blocking or following a link; else None."""
    try:
        fd = open_beneath(dfd, (name,), os.O_RDONLY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1 or st.st_size > SEARCH_MAX_FILE_BYTES:
            return None  # swapped after the walk saw it
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(SEARCH_MAX_FILE_BYTES + 1)[:SEARCH_MAX_FILE_BYTES]
    except OSError:
        return None
    finally:
        os.close(fd)


def _timeout() -> ToolInputError:
    return ToolInputError(
        f"the search took longer than {SEARCH_TIME_S:g} s (the pattern backtracks too much, or there is too much "
        "to search); use a simpler pattern or a narrower path or glob"
    )


def _run_worker(pattern: str, files: list[tuple[str, bytes]], deadline: float) -> tuple[list[tuple], bool]:
    """Compile and run the pattern in the worker process; (matches, whether every file was searched)."""
    cut = bool(files) and files[-1] == ("", b"")
    if cut:
        files = files[:-1]
    job = {
        "pattern": pattern,
        "timeout_s": max(0.05, deadline - time.monotonic()),
        "line_chars": SEARCH_LINE_CHARS,
        "max_matches": SEARCH_MAX_MATCHES,
    }
    chunks = [json.dumps(job).encode() + b"\n"]
    for name, data in files:
        chunks += [json.dumps([name, len(data)]).encode() + b"\n", data]
    try:
        proc = subprocess.run(
            [sys.executable, "-I", str(WORKER)],
            input=b"".join(chunks),
            capture_output=True,
            timeout=max(0.1, deadline - time.monotonic()) + 1.0,  # + its start-up
            env={"PATH": os.defpath},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise _timeout() from None
    matches: list[tuple] = []
    for line in proc.stdout.decode("utf-8", errors="replace").splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "match" in item:
            matches.append(tuple(item["match"]))
        elif "error" in item:
            if item["error"] == "timeout":
                raise _timeout()
            raise ToolInputError(f"pattern {pattern!r}: {item['error']}")
        elif "done" in item:
            return matches, not cut
    # No final line: the worker died (killed for memory by the system, or its limit hit outside Python).
    raise ToolInputError(
        f"the search for {pattern!r} stopped without an answer (it needed too much memory or time); use a simpler "
        "pattern or a narrower path"
    )
