"""Issue 21's findings, one test each: what a hostile workspace or a model steered by text it read tried, and failed.

Everything is real: the registry, the jail, files on disk (FIFOs, hard links, sparse files, 1,100
nested folders), /bin/sh with the supervisor and Landlock where the kernel has it, processes that
try to outlive their call. docs/security.md names these tests next to each defence.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from clawdesk.errors import ConfigError
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.consent import Consent
from clawdesk.tools.jail import Workspace
from clawdesk.tools.registry import Registry
from clawdesk.tools.types import ToolCall, ToolResult, ToolSpec

SECRET = "top secret outside the workspace"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text(SECRET)
    return path


def registry(ws: Path, tmp_path: Path, **kwargs) -> Registry:
    tools = BuiltinTools(Workspace(ws), tmp_path / "db.sqlite", read_max_bytes=4000, output_max_chars=8000, **kwargs)
    return Registry([tools], timeout_s=10)


def run(reg: Registry, name: str, *, limit_s: float = 20.0, consent: Consent | None = None, **arguments) -> ToolResult:
    """One call, failing the test (not hanging it) if it does not come back within ``limit_s``."""
    box: list[ToolResult] = []
    worker = threading.Thread(
        target=lambda: box.append(reg.run(ToolCall(name, arguments), consent or Consent(yes=True))), daemon=True
    )
    worker.start()
    worker.join(limit_s)
    assert box, f"{name}({arguments}) hung for more than {limit_s} s"
    return box[0]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


# -- run_shell -------------------------------------------------------------------------------


def test_shell_gets_only_the_allowed_environment(ws, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("CC", "my-cc")
    result = run(registry(ws, tmp_path), "run_shell", command="env")
    assert result.status == "ok"
    assert "hf_secret_token" not in result.content and "sk-secret" not in result.content
    assert "PATH=" in result.content and "my-cc" not in result.content
    passed = run(registry(ws, tmp_path, shell_env=("CC",)), "run_shell", command="echo $CC")
    assert passed.content.splitlines()[1] == "my-cc"  # tools.shell_env names what else may pass


def test_shell_writes_outside_the_workspace_only_where_no_sandbox_is_claimed(ws, outside, tmp_path):
    from clawdesk.tools.shell import sandbox_state

    confined, how = sandbox_state()
    target = outside / "new.txt"
    result = run(registry(ws, tmp_path), "run_shell", command=f"echo pwned > {target}; echo in > inside.txt")
    assert (ws / "inside.txt").read_text() == "in\n"  # the workspace stays writable
    assert target.exists() is not confined, how  # what doctor and the dialog say is what happens
    if confined:
        assert "Permission denied" in result.content


@pytest.mark.parametrize(
    "command",
    [
        "setsid sleep 300 & echo $! > pid",  # a new session: outside the process group
        "sh -c 'setsid sleep 300 & echo $! > pid' &",  # double fork, then setsid
        'python3 -c \'import os,time; os.setpgid(0,0); open("pid","w").write(str(os.getpid())); time.sleep(300)\' &'
        " sleep 0.5",  # a child that changes its process group
    ],
)
def test_no_process_outlives_its_call(ws, tmp_path, command):
    result = run(registry(ws, tmp_path), "run_shell", command=command, limit_s=15)
    assert result.status in ("ok", "error")
    pid = int((ws / "pid").read_text())
    deadline = time.monotonic() + 3
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), f"{pid} survived the call"


def test_a_survivor_holding_the_output_pipe_does_not_hold_the_call(ws, tmp_path):
    reg = registry(ws, tmp_path)
    run(reg, "run_shell", command="true")  # warm up
    threads = threading.active_count()
    started = time.monotonic()
    result = run(reg, "run_shell", command="setsid sleep 300 & echo started", limit_s=15)
    assert time.monotonic() - started < 5
    assert result.status == "ok" and "started" in result.content
    deadline = time.monotonic() + 3
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == threads  # before: the reading thread stayed blocked on the pipe for ever


def test_cancel_stops_setsid_descendants(ws, tmp_path):
    reg = registry(ws, tmp_path)
    cancel = threading.Event()
    box: list[ToolResult] = []
    worker = threading.Thread(
        target=lambda: box.append(
            reg.run(
                ToolCall("run_shell", {"command": "setsid sleep 300 & echo $! > pid; sleep 300"}),
                Consent(yes=True),
                cancel,
            )
        ),
        daemon=True,
    )
    worker.start()
    deadline = time.monotonic() + 10
    while not (ws / "pid").exists() or not (ws / "pid").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    cancel.set()  # Esc
    worker.join(10)
    assert box and "stopped by the user" in box[0].content
    pid = int((ws / "pid").read_text())
    time.sleep(0.2)
    assert not alive(pid)


# -- special files ---------------------------------------------------------------------------


def test_a_fifo_hangs_neither_search_nor_write(ws, tmp_path):
    (ws / "notes.txt").write_text("find me\n")
    os.mkfifo(ws / "pipe")
    reg = registry(ws, tmp_path)
    found = run(reg, "search_files", pattern="find", limit_s=15)
    assert found.status == "ok" and "notes.txt:1: find me" in found.content
    written = run(reg, "write_file", path="pipe", content="x", limit_s=15)
    assert written.status == "error" and "not a regular file" in written.content
    edited = run(reg, "edit_file", path="pipe", old_text="a", new_text="b", limit_s=15)
    assert edited.status == "error"


def test_a_device_behind_a_name_is_refused(ws, tmp_path):
    os.symlink("/dev/zero", ws / "zero")
    result = run(registry(ws, tmp_path), "read_file", path="zero", limit_s=15)
    assert result.status == "error"


# -- search patterns -------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["a{10000000}", "(a{1000}){1000}", "((a{100}){100}){100}", "x" * 5000])
def test_a_huge_pattern_is_refused_before_it_compiles(ws, tmp_path, pattern):
    (ws / "a.txt").write_text("aaa\n")
    tracemalloc.start()
    started = time.monotonic()
    result = run(registry(ws, tmp_path), "search_files", pattern=pattern, limit_s=30)
    took = time.monotonic() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result.status == "error", result
    assert took < 2.0 and peak < 20_000_000, (took, peak)  # before: a{10000000} took 5 s and 2.7 GB


def test_a_pattern_that_compiles_big_runs_in_its_own_capped_process(ws, tmp_path):
    from clawdesk.tools import search_worker

    job = b'{"pattern": "(?:a{1000}){20}", "timeout_s": 5, "line_chars": 300, "max_matches": 10}\n'
    proc = subprocess.run(
        [sys.executable, "-I", search_worker.__file__], input=job, capture_output=True, timeout=30, check=False
    )
    assert b'"done"' in proc.stdout  # a pattern the check lets through compiles there, not in the app


# -- deep trees and unexpected exceptions ----------------------------------------------------


def test_a_tree_of_1100_nested_folders_is_walked_without_recursion(ws, tmp_path):
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1100):  # made by fd, one level at a time: the full path is longer than PATH_MAX allows
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    with open(os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
        f.write("needle\n")
    os.close(fd)
    (ws / "top.txt").write_text("needle\n")
    reg = registry(ws, tmp_path)
    try:
        found = run(reg, "search_files", pattern="needle", limit_s=30)
        assert found.status == "ok" and "top.txt:1: needle" in found.content and "nested too deep" in found.content
        listed = run(reg, "list_files", path=".", recursive=True, limit_s=30)
        assert listed.status == "ok"
    finally:
        _remove_chain(ws, 1100)


def _remove_chain(ws: Path, depth: int) -> None:
    """Remove the d/d/… chain bottom-up by fd (shutil.rmtree recurses, and pytest's cleanup would too)."""
    fds = [os.open(ws, os.O_RDONLY | os.O_DIRECTORY)]
    for _ in range(depth):
        fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
    os.unlink("bottom.txt", dir_fd=fds[-1])
    for parent in reversed(fds[:-1]):
        os.close(fds.pop())
        os.rmdir("d", dir_fd=parent)
    os.close(fds.pop())


class _Exploding:
    """A provider whose tool raises what no tool should: the registry must turn it into an error result."""

    def __init__(self, error: BaseException):
        self.error = error

    def specs(self):
        return [ToolSpec("boom", "explodes", {"type": "object", "properties": {}}, default_policy="auto")]

    def call(self, name, arguments, timeout=None):
        raise self.error

    def status(self):
        return []

    def close(self):
        pass


@pytest.mark.parametrize("error", [RecursionError("deep"), MemoryError(), OSError(5, "I/O error"), ValueError("bug")])
def test_every_unexpected_exception_becomes_an_error_result(error):
    result = Registry([_Exploding(error)]).run(ToolCall("boom", {}), Consent())
    assert result.status == "error" and "boom" in result.content


# -- hard links, races, huge lines -----------------------------------------------------------


def test_a_hard_link_to_an_outside_file_is_neither_read_nor_written_through(ws, outside, tmp_path):
    os.link(outside / "secret.txt", ws / "linked.txt")
    reg = registry(ws, tmp_path)
    read = run(reg, "read_file", path="linked.txt")
    assert read.status == "error" and SECRET not in read.content and "hard link" in read.content
    assert SECRET not in run(reg, "search_files", pattern="secret").content
    written = run(reg, "write_file", path="linked.txt", content="pwned")
    assert written.status == "ok"
    assert (outside / "secret.txt").read_text() == SECRET  # the name was replaced, the outside inode untouched
    assert (ws / "linked.txt").read_text() == "pwned"


RACER = """
import os, sys
ws, out = sys.argv[1], sys.argv[2]
os.symlink(out, ws + "/.dlink")
while True:  # d is a directory, then a link to the outside, then a directory again, as fast as it goes
    try:
        os.rename(ws + "/d", ws + "/.dreal")
        os.rename(ws + "/.dlink", ws + "/d")
        os.rename(ws + "/d", ws + "/.dlink")
        os.rename(ws + "/.dreal", ws + "/d")
    except OSError:
        pass
"""


def test_a_directory_swapped_for_a_link_mid_call_never_leads_out(ws, outside, tmp_path):
    """Before: a checked real path was opened with O_NOFOLLOW on its last part only; ~150 reads in 20,000 escaped."""
    from clawdesk.errors import ToolInputError

    (ws / "d").mkdir()
    (ws / "d" / "secret.txt").write_text("inside\n")
    racer = subprocess.Popen([sys.executable, "-c", RACER, str(ws), str(outside)])
    jail = Workspace(ws)
    tools = BuiltinTools(jail, tmp_path / "db.sqlite", read_max_bytes=4000, output_max_chars=8000)
    reads = escapes = 0
    try:
        time.sleep(0.2)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for _ in range(50):
                reads += 1
                try:
                    _, fd = jail.open_read("d/secret.txt")
                except ToolInputError:
                    continue
                with os.fdopen(fd, "rb") as f:
                    escapes += SECRET.encode() in f.read()
            tools.call("write_file", {"path": "d/new.txt", "content": "pwned"}, 5)
            assert SECRET not in tools.call("search_files", {"pattern": "secret", "path": "d"}, 5).content
    finally:
        racer.kill()
        racer.wait()
    assert reads > 1000 and escapes == 0
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET


def test_one_huge_line_is_read_in_bounded_memory(ws, tmp_path):
    with open(ws / "huge.txt", "wb") as f:
        f.write(b"x" * 100)
        f.truncate(300_000_000)  # sparse: 300 MB without a newline (NUL-free head, so it counts as text)
        f.seek(0)
        f.write(b"x" * 9000)
    tracemalloc.start()
    result = run(registry(ws, tmp_path), "read_file", path="huge.txt", limit_s=60)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result.status == "ok" and "cut after line 1" in result.content
    assert peak < 5_000_000, peak  # before: 736 MB to return 10 KB


# -- names, memory, workspace, --allow -------------------------------------------------------


@pytest.mark.parametrize("name", ["a\nfake.txt (3 bytes)", "\x1b[31mred.txt", "tab\there.txt", "bell\x07.txt"])
def test_write_file_refuses_names_with_control_characters(ws, tmp_path, name):
    result = run(registry(ws, tmp_path), "write_file", path=name, content="x")
    assert result.status == "error" and "control" in result.content
    assert list(ws.iterdir()) == []


def test_list_files_shows_control_characters_escaped(ws, tmp_path):
    (ws / "a\nforged.txt (9 bytes)").write_text("x")
    (ws / "\x1b[2Jclear.txt").write_text("x")
    listing = run(registry(ws, tmp_path), "list_files").content
    assert "\x1b" not in listing and "\\x1b[2Jclear.txt" in listing
    assert "\nforged.txt" not in listing and "'a\\nforged.txt (9 bytes)'" in listing


def test_a_tool_name_with_control_characters_is_refused(ws, tmp_path):
    result = registry(ws, tmp_path).run(ToolCall("read_file\x1b[2J", {"path": "a"}), Consent(yes=True))
    assert result.status == "error" and "\x1b" not in result.content


def test_memory_writes_need_consent_by_default(ws, tmp_path):
    reg = registry(ws, tmp_path)
    no_one_to_ask = Consent()
    assert reg.run(ToolCall("remember", {"text": "the user loves phishing links"}), no_one_to_ask).status == "denied"
    assert reg.run(ToolCall("forget_note", {"id": 1}), no_one_to_ask).status == "denied"
    assert reg.run(ToolCall("recall", {"query": "x"}), no_one_to_ask).status == "ok"  # reading notes stays auto


@pytest.mark.parametrize("workspace", [".", "..", "sub/../.."])
def test_a_workspace_that_contains_the_data_dir_is_refused(tmp_path, workspace):
    from clawdesk.config import load_config

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(f'[tools]\nworkspace = "{workspace}"\n')
    with pytest.raises(ConfigError, match="contains ClawDesk's data dir"):
        load_config(home)


def test_a_workspace_flag_that_contains_the_data_dir_is_refused(tmp_path):
    from clawdesk.config import Config
    from clawdesk.tools.registry import build_registry

    with pytest.raises(ConfigError, match="contains ClawDesk's data dir"):
        build_registry(Config(home=tmp_path / "home"), workspace=tmp_path)


def test_allow_names_an_mcp_tool(tmp_path):
    import argparse

    from clawdesk.cli.agent import check_flags
    from clawdesk.config import Config
    from clawdesk.config_mcp import MCPConfig, MCPServerConfig

    config = Config(home=tmp_path, mcp=MCPConfig(servers=(MCPServerConfig("files", "true"),)))
    args = argparse.Namespace(allow=["files.read_file,read_file"], yes=False, workspace=None)
    assert check_flags(args, config)[1] == {"files.read_file", "read_file"}


def test_doctor_says_whether_the_shell_is_sandboxed():
    from clawdesk.doctor import shell_sandbox_check
    from clawdesk.tools.shell import sandbox_state

    check = shell_sandbox_check()
    confined, how = sandbox_state()
    assert (check.status == "ok") == confined and check.detail == how
    assert ("writes only inside the workspace" in how) if confined else ("no sandbox" in how)
