"""The process ``search_files`` compiles and runs a model-written pattern in, under a memory limit and a deadline.

Run as ``python -I search_worker.py`` by :mod:`clawdesk.tools.search`; imports nothing of
ClawDesk (only the standard library and ``regex``), so it starts in a fraction of a second. It
caps its own address space first (``RLIMIT_AS``), so a pattern that would compile into gigabytes
fails here with ``MemoryError`` instead of taking the app's memory; the parent kills it at the
deadline, which covers compiling as well as matching.

stdin: one JSON line ``{"pattern", "timeout_s", "line_chars", "max_matches"}``, then per file a
JSON line with its display name and byte count, and that many bytes. stdout: JSON lines,
``{"match": [name, line, text]}`` and finally ``{"done": n_files}`` or ``{"error": text}``.
"""

from __future__ import annotations

import json
import sys
import time

MEMORY_LIMIT_BYTES = 768 * 1024 * 1024


def _limit_memory() -> None:
    try:
        import resource
    except ImportError:  # not on this platform: the parent's deadline still holds
        return
    try:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = MEMORY_LIMIT_BYTES if hard == resource.RLIM_INFINITY else min(hard, MEMORY_LIMIT_BYTES)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError):
        pass  # some systems refuse RLIMIT_AS; the deadline still holds


def _emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")


def main() -> int:
    _limit_memory()
    stdin = sys.stdin.buffer
    job = json.loads(stdin.readline())
    deadline = time.monotonic() + float(job["timeout_s"])
    try:
        import regex

        compiled = regex.compile(job["pattern"])
    except MemoryError:
        _emit({"error": "the pattern needs more memory than a search may use; use a simpler pattern"})
        return 0
    except Exception as exc:  # regex.error and whatever else a hostile pattern provokes: said, not raised
        _emit({"error": f"the pattern is not a valid regular expression: {exc}"})
        return 0
    n_files = 0
    found = 0
    try:
        while header := stdin.readline():
            name, size = json.loads(header)
            data = stdin.read(size)
            n_files += 1
            text = data.decode("utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), 1):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                if compiled.search(line, timeout=left):
                    _emit({"match": [name, number, line[: job["line_chars"]]]})
                    found += 1
                    if found >= job["max_matches"]:
                        _emit({"done": n_files, "full": True})
                        return 0
    except TimeoutError:
        _emit({"error": "timeout"})
        return 0
    except MemoryError:
        _emit({"error": "the search needs more memory than a search may use; use a simpler pattern"})
        return 0
    _emit({"done": n_files})
    return 0


if __name__ == "__main__":
    sys.exit(main())
