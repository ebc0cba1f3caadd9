"""The file tools: ``list_files``, ``read_file``, ``search_files``, ``write_file``, ``edit_file``.

Every path is opened through the :class:`~clawdesk.tools.jail.Workspace` (beneath it, no link
followed, regular files only); every result is bounded (entries, bytes; ``search_files`` lives in
:mod:`clawdesk.tools.search`) so one call cannot flood the model's context, the app's memory, or
hang the agent. ``read_file`` reads by bytes in chunks, so one enormous line costs no more memory
than the cap. Problems the model can fix are :class:`~clawdesk.errors.ToolInputError` with what to do.
The arguments were already checked against each spec's schema by the registry.
"""

from __future__ import annotations

import os
import stat

from clawdesk.errors import ToolInputError
from clawdesk.tools.jail import Workspace, shown_name, write_text
from clawdesk.tools.search import search_files
from clawdesk.tools.tree import Entry, WalkStats, walk
from clawdesk.tools.types import ToolSpec, object_schema

__all__ = ["SPECS", "edit_file", "list_files", "read_file", "search_files", "write_file"]

LIST_MAX_ENTRIES = 300
EDIT_MAX_BYTES = 5_000_000
BINARY_PROBE = 8192
READ_CHUNK = 65536
READ_SCAN_MAX_BYTES = 512_000_000  # read_file looks this far for start_line, no further


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
    st = ws.lstat(path)
    if st is None:
        raise ToolInputError(f"{path!r} does not exist; list_files with path '.' shows the workspace")
    parts = ws.parts(path)
    shown = ws.relative(ws.real_root.joinpath(*parts))
    if not stat.S_ISDIR(st.st_mode):
        kind = "symbolic link" if stat.S_ISLNK(st.st_mode) else None
        if kind or not stat.S_ISREG(st.st_mode):
            return f"{shown_name(shown)} ({kind or 'special file: FIFO, device or socket'})"
        return f"{shown_name(shown)} ({st.st_size} bytes)"
    ws.resolve(path)  # a directory reached through a link is refused with the jail's words
    lines: list[str] = []
    stats = WalkStats()
    with ws.root_fd() as root:
        for entry, _ in walk(root, parts, recursive=recursive, stats=stats):
            lines.append(_entry(entry))
            if len(lines) > LIST_MAX_ENTRIES:
                break
    more = len(lines) > LIST_MAX_ENTRIES
    lines = lines[:LIST_MAX_ENTRIES]
    if not lines:
        return f"{shown}/ is empty"
    tail = [f"[only the first {LIST_MAX_ENTRIES} entries are shown; list a subdirectory]"] if more else []
    if stats.too_deep:
        tail.append(f"[{stats.too_deep} directories nested too deep were not listed; list a subdirectory]")
    return "\n".join([f"{shown_name(shown)}/:", *lines, *tail])


def _entry(entry: Entry) -> str:
    label = "/".join(shown_name(p) for p in entry.parts)
    if entry.kind == "link":
        return f"{label}@ (symbolic link)"
    if entry.kind == "dir":
        return f"{label}/"
    if entry.kind == "other":
        return f"{label} (special file: FIFO, device or socket)"
    return f"{label} ({entry.size} bytes)"


def read_file(ws: Workspace, path: str, start_line: int = 1, *, max_bytes: int) -> str:
    if start_line < 1:
        raise ToolInputError(f"start_line must be 1 or more, got {start_line}")
    real, fd = ws.open_read(path)
    with os.fdopen(fd, "rb") as f:
        head = f.read(BINARY_PROBE)
        if b"\0" in head:
            raise ToolInputError(f"{path!r} is a binary file, not text; read_file only reads text")
        kept, last, cut = _read_lines(f, head, start_line, max_bytes)
    text = kept.decode("utf-8", errors="replace")
    if not kept and start_line > 1:
        return f"{ws.relative(real)} has fewer than {start_line} lines"
    if cut:
        text += f"\n[… cut after line {last} ({max_bytes} bytes); read on with read_file start_line={last + 1}]"
    return text


def _read_lines(f, head: bytes, start_line: int, max_bytes: int) -> tuple[bytes, int, bool]:
    """(up to ``max_bytes`` from line ``start_line`` on, the last line shown, whether it was cut) in bounded memory."""
    line = 1  # the line the next byte of `buf` belongs to
    buf = head
    scanned = 0
    while line < start_line:  # skip lines chunk by chunk: no line is ever held whole
        at = 0
        while line < start_line and (nl := buf.find(b"\n", at)) >= 0:
            line += 1
            at = nl + 1
        if line == start_line:
            buf = buf[at:]
            break
        scanned += len(buf)
        if scanned > READ_SCAN_MAX_BYTES:
            raise ToolInputError(f"start_line {start_line} is more than {READ_SCAN_MAX_BYTES:,} bytes into the file")
        buf = f.read(READ_CHUNK)
        if not buf:
            return b"", line - 1, False
    out = bytearray(buf[: max_bytes + 1])
    while len(out) <= max_bytes and (more := f.read(min(READ_CHUNK, max_bytes + 1 - len(out)))):
        out += more
    if not out:
        return b"", line - 1, False
    if len(out) <= max_bytes:
        return bytes(out), line + out.count(b"\n", 0, len(out) - 1), False
    out = out[:max_bytes]
    end = out.rfind(b"\n")
    if end >= 0:  # cut after the last whole line
        out = out[: end + 1]
        return bytes(out), line + out.count(b"\n") - 1, True
    return bytes(out), line, True  # one line longer than the cap: its start rather than nothing


def write_file(ws: Workspace, path: str, content: str) -> str:
    existed = write_text(ws, path, content)
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    shown = ws.relative(ws.real_root.joinpath(*ws.parts(path)))
    return f"{'replaced' if existed else 'created'} {shown}: {len(content)} characters, {lines} line(s)"


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
    write_text(ws, path, text[:at] + new_text + text[at + len(old_text) :])
    line = text.count("\n", 0, at) + 1
    old_lines, new_lines = old_text.count("\n") + 1, new_text.count("\n") + 1
    return f"edited {ws.relative(real)} at line {line}: replaced {old_lines} line(s) with {new_lines}"


def _match_lines(text: str, needle: str, limit: int = 10) -> list[int]:
    lines, start = [], 0
    while len(lines) < limit and (at := text.find(needle, start)) >= 0:
        lines.append(text.count("\n", 0, at) + 1)
        start = at + 1
    return lines
