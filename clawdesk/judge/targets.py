"""Which file a tool step changed, against the file the person named: a fixed rule, no model, failure only.

A ``write_file`` or ``edit_file`` call that lands next to the file the person asked for reports
success all the same (``created 2025-06-12.md: …``), and the 135M judge reads that as success. The
request says which file was meant when it names one with its directory, so a *near miss* of a named
path is evidence that the step failed:

- the same file name in another directory (``notes/2025-06-12.md`` asked, ``2025-06-12.md`` or
  ``dist/notes/2025-06-12.md`` written), when the request gave the directory;
- in the named file's own directory, an *edit* of a sibling whose name contains the named one's
  or is contained in it (``client.py`` asked, ``client_old.py`` edited), or a write or edit of the
  same name with another extension or one letter off (``notes.md`` asked, ``notes.txt`` written).

and only while the step never wrote or edited the named path itself (a backup written beside the
file it then edits is no miss). A bare name (``utils.py``) counts only for another extension or a
typo beside it: where that file lives is for the step to find, and ``test_utils.py`` may be what
was asked. What the rule leaves to the model, by design: a new file whose name extends the named
one (``notes.md`` read, ``notes-summary.md`` written: a derived output), and any file the request
does not name.

The named paths come from the person's own message and the written ones from the model's call
arguments; no tool result is read, so nothing a file, page or server returns can trip the rule, and the
hint quotes only the named path (:meth:`Miss.hint`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from posixpath import basename, dirname, normpath, splitext

from clawdesk.store.steps import ToolCallRecord

WRITE_TOOLS = frozenset({"write_file", "edit_file"})  # clawdesk/tools/files.py

# A path with an extension that starts with a letter (so "1.4.0" and "3.5" are not files), not part of a URL
# or an e-mail address. The directory part is optional; a leading "./" is kept and normalised away below.
_PATH = re.compile(
    r"(?<![\w@/.:-])(?:\.{1,2}/)?(?:[\w@+-][\w.@+-]*/)*[\w@+-][\w.@+-]*\.[A-Za-z][A-Za-z0-9]{0,7}\b(?!/)"
)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+|\S+@\S+", re.IGNORECASE)


@dataclass(frozen=True)
class Miss:
    """A call that changed ``written`` where the request named ``named``."""

    call: str  # the tool's name
    named: str
    written: str

    def text(self) -> str:
        verb = "edited" if self.call == "edit_file" else "wrote"
        return f"{self.call}: {verb} {self.written}, the request named {self.named}"

    def hint(self) -> str:
        """The directive: the user's own path only (the written one is a model's argument, which text read
        earlier in the turn may have steered, so it never becomes words of the user's)."""
        verb = "Edit" if self.call == "edit_file" else "Write"
        return f"{verb} the file the user named: {self.named}."


def named_paths(request: str) -> list[str]:
    """The file paths the request names, normalised, in order, without repeats (URLs and e-mails left out)."""
    text = _URL.sub(" ", request)
    out: list[str] = []
    for match in _PATH.finditer(text):
        path = _norm(match.group(0))
        if path not in out:
            out.append(path)
    return out


def find_misses(request: str, calls: Iterable[ToolCallRecord]) -> list[Miss]:
    """The ``ok`` write and edit calls that changed a near miss of a path the request named (module docstring)."""
    writes = [(c.name, _norm(str(c.arguments.get("path", "")))) for c in calls if _is_write(c)]
    named = named_paths(request)
    if not writes or not named:
        return []
    changed = {path for _, path in writes}
    # A named file the step did change is no miss: its neighbours may be changed on purpose too.
    untouched = [n for n in named if not any(_same_file(c, [n]) for c in changed)]
    misses = []
    for name, path in writes:
        if _same_file(path, named):
            continue
        near = next((n for n in untouched if _near_miss(name, n, path)), None)
        if near is not None:
            misses.append(Miss(name, near, path))
    return misses


def _is_write(call: ToolCallRecord) -> bool:
    return call.status == "ok" and call.name in WRITE_TOOLS and isinstance(call.arguments, dict)


def _norm(path: str) -> str:
    path = path.strip().strip("'\"`")
    return normpath(path) if path else ""


def _same_file(written: str, named: Iterable[str]) -> bool:
    """``written`` is a named path: the same, or an absolute spelling that ends with it (a shorter path that
    the named one ends with is not: ``2025-06-12.md`` is another file than ``notes/2025-06-12.md``)."""
    return any(written == n or (written.startswith("/") and written.endswith("/" + n)) for n in named if n)


def _near_miss(tool: str, named: str, written: str) -> bool:
    named_dir, written_dir = dirname(named), dirname(written)
    if basename(named) == basename(written):
        return bool(named_dir) and named_dir != written_dir  # a bare name: where it lives is for the step to find
    if named_dir != written_dir:
        return False
    (n_stem, _), (w_stem, _) = splitext(basename(named)), splitext(basename(written))
    if n_stem == w_stem or _one_edit(basename(named), basename(written)):
        return True  # another extension, or a typo
    # An edited sibling (client.py asked, client_old.py edited); not for a bare name, whose tests
    # (test_utils.py for utils.py) may be what was asked, nor for a write, which may be a derived file.
    return (
        bool(named_dir)
        and tool == "edit_file"
        and min(len(n_stem), len(w_stem)) >= 3
        and (n_stem in w_stem or w_stem in n_stem)
    )


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by one inserted, deleted or replaced character."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    return a[i:] == b[i + 1 :] or (len(a) == len(b) and a[i + 1 :] == b[i + 1 :])
