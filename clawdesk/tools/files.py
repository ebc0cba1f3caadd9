"""The file tools: ``list_files``, ``read_file``, ``search_files``, ``write_file``, ``edit_file``.

Every path goes through the :class:`~clawdesk.tools.jail.Workspace`; every result is bounded
(entries, bytes, matches, search time) so one call cannot flood the model's context or hang the
agent. Problems the model can fix are :class:`~clawdesk.errors.ToolInputError` with what to do.
The arguments were already checked against each spec's schema by the registry.
"""

from __future__ import annotations

import fnmatch
import os
import time
from pathlib import Path

import regex  # like `re`, but a search can time out: a model-written pattern may backtrack for ever

from clawdesk.errors import ToolInputError
from clawdesk.tools.jail import Workspace, is_inside, write_text
from clawdesk.tools.types import ToolSpec, object_schema

LIST_MAX_ENTRIES = 300
SEARCH_MAX_MATCHES = 100
SEARCH_MAX_FILE_BYTES = 2_000_000  # larger files are skipped (logs, data): read_file pages through them
SEARCH_TIME_S = 10.0
SEARCH_LINE_CHARS = 300  # a matching line is shown up to this many characters
EDIT_MAX_BYTES = 5_000_000
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", ".mypy_cache", ".ruff_cache"})
BINARY_PROBE = 8192


_PATH = {"type": "string", "description": "path relative to the workspace"}

SPECS = (
    ToolSpec(
        "list_files",
        "List the files and directories at a path in the workspace (directories end in '/').",
        object_schema(
            {
                "path": {"type": "string", "description": "directory relative to the workspace (default '.')"},
                "recursive": {"type": "boolean", "description": "also list everything below it (default false)"},
            },
            [],
        ),
        default_policy="auto",
    ),
    ToolSpec(
        "read_file",
        "Read a text file in the workspace. Long files are cut; read on with start_line.",
        object_schema(
            {"path": _PATH, "start_line": {"type": "integer", "description": "first line to read (default 1)"}},
            ["path"],
        ),
        default_policy="auto",
    ),
    ToolSpec(
        "search_files",
        "Search the text files in the workspace for a regular expression; returns path:line: text for each match.",
        object_schema(
            {
                "pattern": {"type": "string", "description": "regular expression (Python syntax)"},
                "path": {"type": "string", "description": "file or directory to search (default '.')"},
                "glob": {"type": "string", "description": "only file names matching this, e.g. '*.py'"},
            },
            ["pattern"],
        ),
        default_policy="auto",
    ),
    ToolSpec(
        "write_file",
        "Write a text file in the workspace (creates it, or replaces all of its content).",
        object_schema(
            {"path": _PATH, "content": {"type": "string", "description": "the complete new content"}},
            ["path", "content"],
        ),
        default_policy="ask",
    ),
    ToolSpec(
        "edit_file",
        "Replace one exact piece of text in a workspace file. old_text must occur exactly once: "
        "copy it from read_file, including whitespace.",
        object_schema(
            {
                "path": _PATH,
                "old_text": {"type": "string", "description": "the exact text to replace"},
                "new_text": {"type": "string", "description": "what to put in its place"},
            },
            ["path", "old_text", "new_text"],
        ),
        default_policy="ask",
    ),
)


def list_files(ws: Workspace, path: str = ".", recursive: bool = False) -> str:
    real = ws.resolve(path)
    shown = ws.relative(real)
    if not real.exists():
        raise ToolInputError(f"{path!r} does not exist; list_files with path '.' shows the workspace")
    if not real.is_dir():
        return f"{shown} ({real.stat().st_size} bytes)"
    lines: list[str] = []
    more = False
    if recursive:
        for top, dirs, files in os.walk(real):  # symlinked directories are listed, not entered
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            base = Path(top)
            for name in dirs + sorted(files):
                lines.append(_entry(base / name, os.path.relpath(base / name, real)))
            if len(lines) > LIST_MAX_ENTRIES:
                more = True
                break
    else:
        for entry in sorted(real.iterdir()):
            lines.append(_entry(entry, entry.name))
    if len(lines) > LIST_MAX_ENTRIES:
        lines, more = lines[:LIST_MAX_ENTRIES], True
    if not lines:
        return f"{shown}/ is empty"
    header = f"{shown}/:"
    tail = [f"[only the first {LIST_MAX_ENTRIES} entries are shown; list a subdirectory]"] if more else []
    return "\n".join([header, *lines, *tail])


def _entry(path: Path, label: str) -> str:
    if path.is_symlink():
        return f"{label}@ (symbolic link)"
    if path.is_dir():
        return f"{label}/"
    try:
        return f"{label} ({path.stat().st_size} bytes)"
    except OSError:
        return label


def read_file(ws: Workspace, path: str, start_line: int = 1, *, max_bytes: int) -> str:
    if start_line < 1:
        raise ToolInputError(f"start_line must be 1 or more, got {start_line}")
    real, fd = ws.open_read(path)
    with os.fdopen(fd, "rb") as f:
        if b"\0" in f.read(BINARY_PROBE):
            raise ToolInputError(f"{path!r} is a binary file, not text; read_file only reads text")
        f.seek(0)
        kept: list[bytes] = []
        size = 0
        last = start_line - 1
        cut = False
        for number, line in enumerate(f, 1):
            if number < start_line:
                continue
            if size + len(line) > max_bytes:
                if not kept:  # one line longer than the cap: show its start rather than nothing
                    kept.append(line[:max_bytes])
                    last = number
                cut = True
                break
            kept.append(line)
            size += len(line)
            last = number
    text = b"".join(kept).decode("utf-8", errors="replace")
    if not kept and start_line > 1:
        return f"{ws.relative(real)} has fewer than {start_line} lines"
    if cut:
        text += f"\n[… cut after line {last} ({max_bytes} bytes); read on with read_file start_line={last + 1}]"
    return text


def search_files(ws: Workspace, pattern: str, path: str = ".", glob: str = "") -> str:
    try:
        compiled = regex.compile(pattern)
    except regex.error as exc:
        raise ToolInputError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
    real = ws.resolve(path)
    if not real.exists():
        raise ToolInputError(f"{path!r} does not exist; list_files shows what is there")
    deadline = time.monotonic() + SEARCH_TIME_S
    matches: list[str] = []
    skipped = 0
    for file in _walk_files(ws, real, glob):
        try:
            if file.stat().st_size > SEARCH_MAX_FILE_BYTES:
                skipped += 1
                continue
            data = file.read_bytes()
        except OSError:
            continue
        if b"\0" in data[:BINARY_PROBE]:
            continue
        rel = ws.relative(file)
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            try:
                hit = compiled.search(line, timeout=max(0.001, deadline - time.monotonic()))
            except TimeoutError:
                raise ToolInputError(
                    f"the search took longer than {SEARCH_TIME_S:g} s (the pattern backtracks too much, or there is "
                    "too much to search); use a simpler pattern or a narrower path or glob"
                ) from None
            if hit:
                matches.append(f"{rel}:{number}: {line[:SEARCH_LINE_CHARS]}")
                if len(matches) >= SEARCH_MAX_MATCHES:
                    matches.append(f"[stopped at {SEARCH_MAX_MATCHES} matches; use a narrower pattern, path or glob]")
                    return "\n".join(matches)
    note = [f"[{skipped} file(s) over {SEARCH_MAX_FILE_BYTES} bytes were not searched]"] if skipped else []
    if not matches:
        return "\n".join([f"no matches for {pattern!r} in {ws.relative(real)}", *note])
    return "\n".join(matches + note)


def _walk_files(ws: Workspace, real: Path, glob: str):
    if real.is_file():
        yield real
        return
    for top, dirs, files in os.walk(real):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            if glob and not fnmatch.fnmatch(name, glob):
                continue
            file = Path(top) / name
            # A link to a file is searched only if its target is inside the workspace too.
            if file.is_symlink() and not is_inside(Path(os.path.realpath(file)), ws.real_root):
                continue
            yield file


def write_file(ws: Workspace, path: str, content: str) -> str:
    real = ws.write_path(path)
    existed = real.exists()
    write_text(real, content)
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    return f"{'replaced' if existed else 'created'} {ws.relative(real)}: {len(content)} characters, {lines} line(s)"


def edit_file(ws: Workspace, path: str, old_text: str, new_text: str) -> str:
    if not old_text:
        raise ToolInputError("old_text is empty; give the exact text to replace (use write_file for a new file)")
    if old_text == new_text:
        raise ToolInputError("old_text and new_text are the same; there is nothing to change")
    real, fd = ws.open_read(path)
    with os.fdopen(fd, "rb") as f:
        data = f.read(EDIT_MAX_BYTES + 1)
    if len(data) > EDIT_MAX_BYTES:
        raise ToolInputError(f"{path!r} is larger than {EDIT_MAX_BYTES} bytes; edit_file does not edit files that big")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolInputError(f"{path!r} is not UTF-8 text; edit_file cannot change it safely") from None
    count = text.count(old_text)
    if count == 0:
        raise ToolInputError(
            f"old_text was not found in {path!r}; copy the exact text from read_file, spaces and line breaks included"
        )
    if count > 1:
        lines = _match_lines(text, old_text)
        raise ToolInputError(
            f"old_text occurs {count} times in {path!r} (lines {', '.join(map(str, lines))}); include more of the "
            "surrounding text so that it occurs exactly once. Nothing was changed."
        )
    at = text.index(old_text)
    write_text(ws.write_path(path), text[:at] + new_text + text[at + len(old_text) :])
    line = text.count("\n", 0, at) + 1
    old_lines, new_lines = old_text.count("\n") + 1, new_text.count("\n") + 1
    return f"edited {ws.relative(real)} at line {line}: replaced {old_lines} line(s) with {new_lines}"


def _match_lines(text: str, needle: str, limit: int = 10) -> list[int]:
    lines, start = [], 0
    while len(lines) < limit and (at := text.find(needle, start)) >= 0:
        lines.append(text.count("\n", 0, at) + 1)
        start = at + 1
    return lines
