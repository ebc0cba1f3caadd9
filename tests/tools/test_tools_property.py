"""Property: over generated workspaces and paths, no file-tool call reads, writes or hangs outside its limits.

Each example builds a fresh workspace next to an ``outside`` folder and a sibling-prefix folder
``ws-evil`` (both holding a secret), and fills the workspace with what a hostile download could
leave there: symbolic links out, in and to the sibling, hard links to the outside secret, FIFOs,
folders nested deeper than the walk's cap. Optionally a second process swaps a folder for a link
to the outside as fast as it can while the calls run. Then it makes calls with generated paths
(``..``, absolute, ``~``, the sibling's absolute and relative spellings) and checks: every call
returns within its limit, no result holds a secret, and nothing outside changed. Bounded by
``max_examples`` so the file runs in well under a minute on two cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.consent import Consent
from clawdesk.tools.jail import Workspace
from clawdesk.tools.registry import Registry
from clawdesk.tools.types import ToolCall, ToolResult

OUT_SECRET = "OUTSIDE-SECRET-7f3a"
EVIL_SECRET = "SIBLING-SECRET-91c2"
DIRS = ["", "a", "a/b", "sub"]
KINDS = ["dir", "file", "link_out", "link_in", "link_evil", "link_evil_rel", "hard_out", "fifo", "deep"]
SEGMENTS = ["..", ".", "a", "b", "sub", "x", "f.txt", "new.txt", "fifo", "hard", "lnk", "~", "", "ws-evil", "outside"]
CALL_LIMIT_S = 20.0
RACER = """
import os, sys
ws, out = sys.argv[1], sys.argv[2]
os.makedirs(ws + "/a", exist_ok=True)
os.symlink(out, ws + "/.alink")
while True:
    try:
        os.rename(ws + "/a", ws + "/.areal")
        os.rename(ws + "/.alink", ws + "/a")
        os.rename(ws + "/a", ws + "/.alink")
        os.rename(ws + "/.areal", ws + "/a")
    except OSError:
        pass
"""


def _snapshot(root: Path) -> dict[str, bytes]:
    found = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top) / name
            found[str(path.relative_to(root))] = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
    return found


def _build(base: Path, ops: list[tuple[str, str, str]]) -> Path:
    ws, out, evil = base / "ws", base / "outside", base / "ws-evil"
    for d in (ws, out, evil):
        d.mkdir()
    (out / "secret.txt").write_text(OUT_SECRET)
    (evil / "secret.txt").write_text(EVIL_SECRET)
    for kind, where, name in ops:
        parent = ws / where
        parent.mkdir(parents=True, exist_ok=True)
        target = parent / name
        if os.path.lexists(target):
            continue
        if kind == "dir":
            target.mkdir()
        elif kind == "file":
            target.write_text("inside text\n")
        elif kind == "link_out":
            target.symlink_to(out / "secret.txt" if name.endswith(".txt") else out)
        elif kind == "link_in":
            target.symlink_to(ws / "sub")
        elif kind == "link_evil":
            target.symlink_to(evil)
        elif kind == "link_evil_rel":
            target.symlink_to(os.path.relpath(evil, parent))
        elif kind == "hard_out":
            os.link(out / "secret.txt", target)
        elif kind == "fifo":
            os.mkfifo(target)
        elif kind == "deep":
            deep = target
            for _ in range(70):  # deeper than the walk's cap
                deep = deep / "d"
            deep.mkdir(parents=True)
            (deep / "bottom.txt").write_text("deep inside\n")
    return ws


def _path(base: Path, parts: list[str], style: str) -> str:
    rel = "/".join(parts)
    if style == "abs_ws":
        return str(base / "ws") + "/" + rel
    if style == "abs_evil":
        return str(base / "ws-evil") + "/" + rel
    if style == "sibling":
        return "../ws-evil/" + rel
    return rel


def _call(reg: Registry, call: ToolCall) -> ToolResult:
    box: list[ToolResult] = []
    worker = threading.Thread(target=lambda: box.append(reg.run(call, Consent(yes=True))), daemon=True)
    worker.start()
    worker.join(CALL_LIMIT_S)
    assert box, f"{call} hung for more than {CALL_LIMIT_S} s"
    return box[0]


ops_strategy = st.lists(
    st.tuples(st.sampled_from(KINDS), st.sampled_from(DIRS), st.sampled_from(["x", "f.txt", "lnk", "fifo", "hard"])),
    max_size=8,
)
calls_strategy = st.lists(
    st.tuples(
        st.sampled_from(["read_file", "write_file", "edit_file", "list_files", "search_files"]),
        st.lists(st.sampled_from(SEGMENTS), min_size=0, max_size=4),
        st.sampled_from(["rel", "rel", "abs_ws", "abs_evil", "sibling"]),
        st.booleans(),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_strategy, calls=calls_strategy, race=st.booleans())
def test_no_call_reads_writes_or_hangs_outside(ops, calls, race):
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        ws = _build(base, ops)
        before_out, before_evil = _snapshot(base / "outside"), _snapshot(base / "ws-evil")
        tools = BuiltinTools(Workspace(ws), base / "db.sqlite", read_max_bytes=4000, output_max_chars=8000)
        reg = Registry([tools], timeout_s=10)
        racer = subprocess.Popen([sys.executable, "-c", RACER, str(ws), str(base / "outside")]) if race else None
        try:
            if racer is not None:
                time.sleep(0.05)
            for tool, parts, style, flag in calls:
                path = _path(base, parts, style)
                arguments = {
                    "read_file": {"path": path},
                    "write_file": {"path": path, "content": "pwned"},
                    "edit_file": {"path": path, "old_text": "SECRET", "new_text": "pwned"},
                    "list_files": {"path": path, "recursive": flag},
                    "search_files": {"pattern": "SECRET|inside", "path": path},
                }[tool]
                result = _call(reg, ToolCall(tool, arguments))
                assert OUT_SECRET not in result.content and EVIL_SECRET not in result.content, (tool, path, result)
        finally:
            if racer is not None:
                racer.kill()
                racer.wait()
        assert _snapshot(base / "outside") == before_out
        assert _snapshot(base / "ws-evil") == before_evil


def test_the_sibling_prefix_folder_is_outside(tmp_path):
    """A string-prefix check would let ``<base>/ws-evil`` through as if it were inside ``<base>/ws``."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws-evil").mkdir()
    (tmp_path / "ws-evil" / "secret.txt").write_text(EVIL_SECRET)
    (tmp_path / "ws" / "evil").symlink_to(tmp_path / "ws-evil")
    tools = BuiltinTools(Workspace(tmp_path / "ws"), tmp_path / "db", read_max_bytes=4000, output_max_chars=8000)
    reg = Registry([tools])
    for path in ["../ws-evil/secret.txt", str(tmp_path / "ws-evil" / "secret.txt"), "evil/secret.txt"]:
        for call in [ToolCall("read_file", {"path": path}), ToolCall("write_file", {"path": path, "content": "x"})]:
            result = reg.run(call, Consent(yes=True))
            assert result.status == "error" and EVIL_SECRET not in result.content, (call, result)
    assert (tmp_path / "ws-evil" / "secret.txt").read_text() == EVIL_SECRET
