"""Failure evidence in tool results whose status says ``ok``: fixed rules, no model, failure only.

A call can run and still fail: a test run piped through ``tail`` exits 0 and prints ``2 failed``,
``cp … ; echo done`` prints ``cp: cannot create …``, an MCP server answers ``{"ok": false}`` without
setting ``isError``. Common tools report failure in a few fixed ways, and this module looks for
those ways (not for the words of any one data set):

- **a program's own diagnostic** (any ``run_shell`` output): a line ``prog: …`` where ``prog`` is a
  program of the command (or the shell itself) and the message is a system error (``No such file
  or directory``, ``Permission denied``, ``cannot …``, ``not found``, ``Connection refused``, make's
  ``***``, …). Programs write ``name: message`` about themselves only when something went wrong.
- **process output** (``run_shell`` output, unless every program of the command only prints data:
  ``cat``, ``grep``, ``tail``… — their output is a file's content, where a logged ``Traceback`` or
  ``error:`` line is what the user asked to see): a Python traceback or exception line, a
  line that starts with ``error:`` / ``fatal:`` / ``FAILED`` / ``FAIL`` / ``npm ERR!``, a
  compiler diagnostic ``file:line:col: error``, a test summary with a non-zero failure count
  (``2 failed``, ``Tests: 3 failed``; ``0 failed`` is not one), an HTTP error status line.
- **a structured error** (any result except the built-in file, search and memory tools, whose
  content is data and whose failures come back as ``error`` statuses): the result (for ``run_shell``
  its output) is a JSON object with ``"ok": false`` / ``"success": false``, a non-empty
  ``error`` / ``errors`` / ``errorMessages``, or an HTTP error number (400–599) under ``status`` /
  ``statusCode``; or, for a non-built-in (MCP) tool, the first line starts with ``Error`` / ``fatal``.

The rules only ever find failure. A tool result is text the user did not write, and anything in
it could be written to sway the judge: a result saying ``ALL TESTS PASSED`` cannot add a vote,
and it cannot hide a ``FAILED`` line or a non-zero exit status (that one is an ``error`` status,
decided by :func:`clawdesk.judge.tool_steps.call_signal` before this module is asked). What a
forged failure line can do is lower the reward of a call that worked; the judge of a result
without evidence is still the model. Known misses (measured in ``docs/learning.md``): empty results
(``no matches``, ``(0 rows)``: whether the user expected any is for the model), truncation, a call
on the wrong file or with the wrong query. Known false alarms: a program whose normal output logs
an exception line or an error count (``retried 3 errors``), an MCP tool whose content starts with
the word "Error" (a page titled "Error handling in Python").
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from clawdesk.store.steps import ToolCallRecord

SHELL_TOOL = "run_shell"  # clawdesk/tools/shell.py (a test keeps the names in step)
# Built-in tools whose result is data (a file, a listing, search hits, a note) and whose failures
# the registry reports as an error status: their text is never read for markers. MCP tools are
# named "server.tool".
DATA_TOOLS = frozenset(
    {"read_file", "write_file", "edit_file", "list_files", "search_files", "current_time"}
    | {"remember", "recall", "forget_note"}
)
# Programs that only print data they were given (a file, a match, a count). An output made only by
# these is content, not a report on something that ran.
READERS = frozenset(
    {"cat", "tac", "head", "tail", "less", "more", "nl", "strings", "zcat", "bzcat", "xzcat", "journalctl"}
    | {"grep", "egrep", "fgrep", "rg", "ag", "zgrep", "jq", "yq", "awk", "sed", "cut", "tr", "column"}
    | {"wc", "sort", "uniq", "echo", "printf", "true"}
)
SHELLS = frozenset({"sh", "bash", "zsh", "dash"})
PREFIX_WORDS = frozenset({"sudo", "time", "nohup", "env", "command", "exec", "nice", "stdbuf", "timeout"})
MAX_LINES = 3  # evidence lines kept per call (the hint is clipped again by the rules)

_SEGMENTS = re.compile(r"\|\||&&|[|;&\n]")
_ASSIGNMENT = re.compile(r"^\w+=")
_SUBSTITUTION = re.compile(r"\$\(|`|<\(|>\(")
_EXIT_LINE = re.compile(r"\Aexit code -?\d+\n?")
_SYSTEM_ERROR = re.compile(
    r"no such file or directory|permission denied|\bcannot\b|\bcan't\b|\bnot found\b|connection refused"
    r"|could not resolve|operation not permitted|file exists|is a directory|not a directory"
    r"|read-only file system|no space left|\bfailed\b|\berror\b|\bfatal\b|\*\*\*",
    re.IGNORECASE,
)
_PROCESS_MARKERS = (
    re.compile(r"^Traceback \(most recent call last\):", re.MULTILINE),
    re.compile(r"^(?:[\w.]+ )?[\w.]*(?:Error|Exception):", re.MULTILINE),  # KeyError: …, CMake Error: …
    re.compile(r"^(?:error|fatal)(?:\[\w+\])?:", re.MULTILINE | re.IGNORECASE),  # git, pip, rustc
    re.compile(r"^(?:FAILED|FAIL|ERROR)\b|^--- FAIL:|^npm ERR!", re.MULTILINE),  # pytest, go test, npm
    re.compile(r"^[\w./-]+:\d+(?::\d+)?:\s*(?:fatal )?error\b", re.MULTILINE | re.IGNORECASE),  # compilers
    re.compile(r"\b[1-9]\d* (?:failed|failing|failures?|errors?)\b", re.IGNORECASE),  # test summaries
    re.compile(
        r"\b[45]\d\d (?:Bad Request|Unauthorized|Forbidden|Not Found|Method Not Allowed|Conflict|Gone"
        r"|Too Many Requests|Internal Server Error|Bad Gateway|Service Unavailable|Gateway Timeout)\b"
    ),
)
_FIRST_LINE_ERROR = re.compile(r"^\s*(?:error|fatal)\b", re.IGNORECASE)
_ERROR_KEYS = ("error", "errors", "errorMessages", "error_message", "errorMessage")
_STATUS_KEYS = ("status", "statusCode", "status_code", "http_status")


@dataclass(frozen=True)
class Evidence:
    """Why a call with status ``ok`` failed after all: the rule that found it and the lines it found."""

    call: str  # the tool's name
    rule: str  # 'diagnostic' | 'process output' | 'structured error'
    lines: tuple[str, ...]

    def text(self) -> str:
        return f"{self.call}: " + "\n".join(self.lines)


def find_evidence(calls: Iterable[ToolCallRecord]) -> list[Evidence]:
    """The failure evidence of every ``ok`` call (other statuses are the status rules' business)."""
    found = (call_evidence(c.name, c.arguments, c.result) for c in calls if c.status == "ok")
    return [e for e in found if e is not None]


def call_evidence(name: str, arguments: dict, result: str) -> Evidence | None:
    """The evidence in one ``ok`` result, or None. Only failure is ever found (see the module docstring)."""
    if name in DATA_TOOLS:
        return None
    if name == SHELL_TOOL:
        output = _EXIT_LINE.sub("", result, count=1)
        command = arguments.get("command") if isinstance(arguments, dict) else None
        programs, runs = command_programs(command if isinstance(command, str) else "")
        if lines := _diagnostics(output, programs | SHELLS):
            return Evidence(name, "diagnostic", lines)
        if runs and (lines := _matching(output, _PROCESS_MARKERS)):
            return Evidence(name, "process output", lines)
        if lines := structured_error(output):
            return Evidence(name, "structured error", lines)
        return None
    if lines := structured_error(result):
        return Evidence(name, "structured error", lines)
    first = next((line for line in result.splitlines() if line.strip()), "")
    if _FIRST_LINE_ERROR.match(first):
        return Evidence(name, "structured error", (first.strip(),))
    return None


def command_programs(command: str) -> tuple[frozenset[str], bool]:
    """(the programs a shell command line starts, whether any of them does more than print data).

    Every pipeline stage and list element counts; a command substitution (``$(…)``, backticks,
    ``<(…)``) runs a program we cannot name, so it counts as one that does more."""
    programs = set()
    for segment in _SEGMENTS.split(command):
        try:
            words = shlex.split(segment)
        except ValueError:  # an unbalanced quote split across segments: plain words are enough here
            words = segment.split()
        words = [w for w in words if not _ASSIGNMENT.match(w)]
        while words and words[0] in PREFIX_WORDS:
            words = words[1:]
        name = words[0].strip("(){}") if words else ""  # a subshell's "(cd x" / "make)"
        if name and not name.startswith("-"):
            programs.add(name.rsplit("/", 1)[-1])
    runs = bool(_SUBSTITUTION.search(command)) or not programs or bool(programs - READERS)
    return frozenset(programs), runs


def _diagnostics(output: str, programs: frozenset[str]) -> tuple[str, ...]:
    """Lines ``prog: message`` (``prog[2]:`` too) by one of ``programs`` whose message is a system error."""
    found = []
    for line in output.splitlines():
        head, sep, message = line.partition(":")
        if sep and re.sub(r"\[\d+\]$", "", head.strip()) in programs and _SYSTEM_ERROR.search(message):
            found.append(line.strip())
    return tuple(found[:MAX_LINES])


def _matching(output: str, markers: tuple[re.Pattern[str], ...]) -> tuple[str, ...]:
    """The lines of ``output`` on which any marker matches, in order."""
    found = [line.strip() for line in output.splitlines() if any(m.search(line) for m in markers)]
    return tuple(found[:MAX_LINES])


def structured_error(text: str) -> tuple[str, ...]:
    """The error fields of a JSON object result (see the module docstring); () when there are none."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return ()
    try:
        value = json.loads(stripped)
    except ValueError:
        return ()
    if not isinstance(value, dict):
        return ()
    found = [f'"{k}": false' for k in ("ok", "success") if value.get(k) is False]
    found += [f'"{k}": {json.dumps(value[k])[:200]}' for k in _ERROR_KEYS if value.get(k)]
    for key in _STATUS_KEYS:
        status = value.get(key)
        if isinstance(status, str) and status.isdigit():
            status = int(status)
        if isinstance(status, int) and not isinstance(status, bool) and 400 <= status <= 599:
            message = value.get("message")
            found.append(f'"{key}": {status}' + (f" ({message})" if isinstance(message, str) else ""))
    return tuple(found[:MAX_LINES])
