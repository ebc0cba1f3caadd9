"""The built-in tools on real files and real processes, the registry's argument checks and caps, consent, and the
memory notes across two opens of the database."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawdesk.store import Store
from clawdesk.store.forget import forget_all
from clawdesk.store.notes import count_notes
from clawdesk.tools import search
from clawdesk.tools.builtins import SPECS, BuiltinTools
from clawdesk.tools.consent import ALLOW_CHAT, DENY, Consent, instead
from clawdesk.tools.jail import Workspace
from clawdesk.tools.registry import Registry, cap_text
from clawdesk.tools.types import ToolCall


@pytest.fixture
def ws(tmp_path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def _registry(ws: Path, db: Path, *, policies=None, timeout_s=5.0, read_max=2000, out_max=4000) -> Registry:
    tools = BuiltinTools(Workspace(ws), db, read_max_bytes=read_max, output_max_chars=out_max)
    return Registry([tools], policies=policies, timeout_s=timeout_s, output_max_chars=out_max)


@pytest.fixture
def reg(ws, tmp_path) -> Registry:
    return _registry(ws, tmp_path / "home" / "clawdesk.db")


YES = Consent(yes=True)


def run(reg: Registry, name: str, consent: Consent = YES, **arguments):
    return reg.run(ToolCall(name, arguments), consent)


def _alive(pid: int) -> bool:
    """Running, not a zombie (an init that never reaps would keep a killed process as one)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


# -- files --------------------------------------------------------------------------------------


def test_read_file_caps_and_pages_on(reg, ws):
    (ws / "long.txt").write_text("".join(f"line {i:04d}\n" for i in range(1, 1001)))  # 10 bytes a line
    first = run(reg, "read_file", path="long.txt")
    assert first.status == "ok" and first.content.startswith("line 0001\n")
    assert "line 0200\n" in first.content and "line 0201" not in first.content  # 2000 bytes = 200 lines
    assert "start_line=201" in first.content
    second = run(reg, "read_file", path="long.txt", start_line=201)
    assert second.content.startswith("line 0201\n") and "start_line=401" in second.content
    assert run(reg, "read_file", path="long.txt", start_line=2000).content == "long.txt has fewer than 2000 lines"


def test_read_file_refuses_binary_dirs_and_missing_files(reg, ws):
    (ws / "img.bin").write_bytes(b"\x89PNG\x00\x01\x02")
    (ws / "d").mkdir()
    assert "binary" in run(reg, "read_file", path="img.bin").content
    assert "directory" in run(reg, "read_file", path="d").content
    missing = run(reg, "read_file", path="nope.txt")
    assert missing.status == "error" and "does not exist" in missing.content


def test_list_files_plain_and_recursive(reg, ws):
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "a" / "b" / "deep.txt").write_text("x")
    (ws / "top.txt").write_text("hello")
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref")
    (ws / "link").symlink_to("top.txt")
    plain = run(reg, "list_files").content.splitlines()
    assert plain[0] == "./:" and "a/" in plain and "top.txt (5 bytes)" in plain and "link@ (symbolic link)" in plain
    deep = run(reg, "list_files", path=".", recursive=True).content
    assert "a/b/deep.txt (1 bytes)" in deep and "HEAD" not in deep
    assert run(reg, "list_files", path="a/b").content == "a/b/:\ndeep.txt (1 bytes)"


def test_search_files_regex_glob_and_match_cap(reg, ws):
    (ws / "x.py").write_text("def f():\n    return 42\n")
    (ws / "y.txt").write_text("return of the answer\n")
    (ws / "many.txt").write_text("hit\n" * 500)
    found = run(reg, "search_files", pattern=r"return \d+", glob="*.py")
    assert found.content == "x.py:2:     return 42"
    capped = run(reg, "search_files", pattern="^hit$")
    lines = capped.content.splitlines()
    assert len(lines) == search.SEARCH_MAX_MATCHES + 1 and "stopped at 100 matches" in lines[-1]
    bad = run(reg, "search_files", pattern="(unclosed")
    assert bad.status == "error" and "not a valid regular expression" in bad.content
    assert run(reg, "search_files", pattern="zzz").content == "no matches for 'zzz' in ."


def test_a_catastrophic_pattern_times_out_instead_of_hanging(reg, ws, monkeypatch):
    monkeypatch.setattr(search, "SEARCH_TIME_S", 0.3)
    (ws / "a.txt").write_text("a" * 60 + "!\n")
    result = run(reg, "search_files", pattern="(a|aa)+$")  # exponential backtracking
    assert result.status == "error" and "took longer" in result.content


def test_write_file_creates_and_replaces(reg, ws):
    created = run(reg, "write_file", path="notes/today.md", content="# Today\n")
    assert created.status == "ok" and created.content.startswith("created notes/today.md")
    replaced = run(reg, "write_file", path="notes/today.md", content="new\r\nlines\r\n")
    assert replaced.content.startswith("replaced notes/today.md")
    assert (ws / "notes" / "today.md").read_bytes() == b"new\r\nlines\r\n"  # written exactly, no newline translation
    surrogate = run(reg, "write_file", path="notes/today.md", content="bad \ud800")
    assert surrogate.status == "error" and (ws / "notes" / "today.md").read_bytes() == b"new\r\nlines\r\n"


def test_edit_file_needs_exactly_one_match(reg, ws):
    path = ws / "code.py"
    original = "x = 1\r\ny = 1\r\nx = 1\r\n"
    path.write_bytes(original.encode())
    none = run(reg, "edit_file", path="code.py", old_text="z = 1", new_text="z = 2")
    assert none.status == "error" and "was not found" in none.content
    two = run(reg, "edit_file", path="code.py", old_text="x = 1", new_text="x = 2")
    assert two.status == "error" and "occurs 2 times" in two.content and "lines 1, 3" in two.content
    assert path.read_bytes() == original.encode()  # a refused edit changes nothing
    one = run(reg, "edit_file", path="code.py", old_text="y = 1", new_text="y = 2\r\nw = 3")
    assert one.status == "ok" and "at line 2" in one.content
    assert path.read_bytes() == b"x = 1\r\ny = 2\r\nw = 3\r\nx = 1\r\n"  # CRLF kept
    assert "nothing to change" in run(reg, "edit_file", path="code.py", old_text="x", new_text="x").content


def test_current_time(reg):
    result = run(reg, "current_time")
    assert result.status == "ok" and "time zone" in result.content and result.content[:4].isdigit()


# -- run_shell ----------------------------------------------------------------------------------


def test_shell_runs_in_the_workspace_without_stdin_and_reports_the_exit_code(reg, ws):
    (ws / "marker.txt").write_text("m")
    ok = run(reg, "run_shell", command="pwd; ls; cat")  # `cat` would wait for ever on a terminal's stdin
    assert ok.status == "ok"
    assert ok.content.splitlines()[:3] == ["exit code 0", str(ws.resolve()), "marker.txt"]
    failed = run(reg, "run_shell", command="echo oops >&2; exit 3")
    assert failed.status == "error" and failed.content == "exit code 3\noops\n"


def test_shell_output_is_capped_keeping_head_and_tail(ws, tmp_path):
    reg = _registry(ws, tmp_path / "db", out_max=3000)
    result = run(reg, "run_shell", command="echo START; head -c 5000000 /dev/zero | tr '\\0' a; echo; echo END")
    assert result.status == "ok" and len(result.content) <= 3000
    assert "START" in result.content and result.content.rstrip().endswith("END")
    assert "bytes of output left out" in result.content


def test_shell_timeout_kills_the_group_even_what_ignores_sigterm(ws, tmp_path):
    reg = _registry(ws, tmp_path / "db", timeout_s=1.0)  # room for a loaded CI box to start all three
    # An ignored SIGTERM is inherited: the shell, its child and its grandchild all ignore it.
    command = (
        "trap '' TERM; sleep 60 & echo $! > child.pid; "
        "sh -c 'sleep 61 & echo $! > grand.pid; wait' & "
        "while [ ! -s grand.pid ]; do sleep 0.01; done; echo started; wait"
    )
    result = run(reg, "run_shell", command=command)
    assert result.status == "timeout" and "timed out after 1 s" in result.content and "started" in result.content
    pids = [int((ws / name).read_text()) for name in ("child.pid", "grand.pid")]
    assert not any(_alive(pid) for pid in pids)


def test_background_processes_are_stopped_after_the_command_exits(reg, ws):
    result = run(reg, "run_shell", command="sleep 60 & echo $! > bg.pid; echo done")
    assert result.status == "ok" and "done" in result.content and "were stopped" in result.content
    assert not _alive(int((ws / "bg.pid").read_text()))


def test_the_model_may_shorten_the_timeout_but_not_extend_it(ws, tmp_path):
    reg = _registry(ws, tmp_path / "db", timeout_s=0.4)
    assert "timed out after 0.4 s" in run(reg, "run_shell", command="sleep 30", timeout_s=999).content
    assert "timed out after 0.2 s" in run(reg, "run_shell", command="sleep 30", timeout_s=0.2).content
    assert run(reg, "run_shell", command="true", timeout_s=0).status == "error"


def test_cancel_stops_a_running_command(reg, ws):
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    result = reg.run(ToolCall("run_shell", {"command": "sleep 30 & echo $! > s.pid; wait"}), YES, cancel=cancel)
    assert result.status == "error" and "stopped by the user" in result.content
    assert not _alive(int((ws / "s.pid").read_text()))


# -- registry: arguments, caps ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("fly", {}, "there is no tool called 'fly'; the tools are: list_files"),
        ("read_file", {}, "'path' is required"),
        ("read_file", {"path": 7}, "'path' must be string, got integer 7"),
        ("read_file", {"path": "a", "start_line": True}, "'start_line' must be integer, got boolean true"),
        ("read_file", {"path": "a", "mode": "rb"}, "'mode' is not a parameter"),
        ("read_file", ["a"], "must be a JSON object"),
        ("read_file", "{not json", "not valid JSON"),
    ],
)
def test_bad_calls_are_error_results_the_model_can_fix(reg, name, arguments, expected):
    result = reg.run(ToolCall(name, arguments), YES)  # type: ignore[arg-type]  # what a parser might hand over
    assert result.status == "error" and expected in result.content
    if name != "fly":
        assert "read_file(path: string, start_line?: integer)" in result.content


def test_arguments_as_a_json_string_and_integral_floats_are_accepted(reg, ws):
    (ws / "a.txt").write_text("1\n2\n3\n")
    assert reg.run(ToolCall("read_file", '{"path": "a.txt", "start_line": 3.0}'), YES).content == "3\n"  # type: ignore[arg-type]


def test_cap_text_keeps_head_and_tail():
    text = "H" * 5000 + "T" * 5000
    capped = cap_text(text, 1000)
    assert len(capped) <= 1000 and capped.startswith("H") and capped.endswith("T") and "left out" in capped
    assert cap_text("short", 1000) == "short"


# -- consent ------------------------------------------------------------------------------------


def test_ask_without_consent_is_denied_and_not_run(reg, ws):
    result = run(reg, "write_file", Consent(), path="new.txt", content="x")
    assert result.status == "denied" and "--allow write_file" in result.content
    assert not (ws / "new.txt").exists()
    assert run(reg, "read_file", Consent(), path="new.txt").status == "error"  # auto tools run without consent


def test_never_is_not_run_even_with_yes_and_not_offered(ws, tmp_path):
    reg = _registry(ws, tmp_path / "db", policies={"write_file": "never", "read_file": "ask"})
    result = run(reg, "write_file", Consent(yes=True), path="new.txt", content="x")
    assert result.status == "denied" and "policy never" in result.content and not (ws / "new.txt").exists()
    offered = [s.name for s in reg.specs()]
    assert "write_file" not in offered and "write_file" in [s.name for s in reg.all_specs()]
    assert run(reg, "read_file", Consent(), path="x").status == "denied"  # auto made ask by config


def test_allow_list_consents_only_for_the_tools_it_names(reg, ws):
    consent = Consent(allow={"write_file"})
    assert run(reg, "write_file", consent, path="a.txt", content="x").status == "ok"
    assert run(reg, "run_shell", consent, command="touch b.txt").status == "denied"
    assert (ws / "a.txt").exists() and not (ws / "b.txt").exists()


def test_asked_decisions_deny_instead_and_yes_for_this_chat(reg, ws):
    asked: list[str] = []
    answers = iter([DENY, instead("Put it in notes/ instead."), ALLOW_CHAT])

    def ask(call, spec):
        asked.append(call.arguments["path"])
        return next(answers)

    consent = Consent(ask)
    denied = run(reg, "write_file", consent, path="1.txt", content="x")
    assert denied.status == "denied" and not (ws / "1.txt").exists()
    other = run(reg, "write_file", consent, path="2.txt", content="x")
    assert other.status == "denied" and other.content.endswith("Put it in notes/ instead.")
    assert not (ws / "2.txt").exists()
    assert run(reg, "write_file", consent, path="3.txt", content="x").status == "ok"
    assert run(reg, "write_file", consent, path="4.txt", content="x").status == "ok"  # not asked again
    assert asked == ["1.txt", "2.txt", "3.txt"]
    assert run(reg, "edit_file", Consent(), path="4.txt", old_text="x", new_text="y").status == "denied"  # per chat


# -- memory -------------------------------------------------------------------------------------


def test_memory_survives_reopening_and_is_searched_with_fts(ws, tmp_path):
    db = tmp_path / "home" / "clawdesk.db"
    first = _registry(ws, db)
    assert run(first, "remember", text="The dentist appointment is on Tuesdays", tags="health").content == (
        "remembered as note #1"
    )
    assert run(first, "remember", text="User prefers answers without bullet lists").status == "ok"
    again = _registry(ws, db)  # a new chat, another process: a fresh connection each call
    hit = run(again, "recall", query="appointments")  # stemmed
    assert hit.status == "ok" and hit.content.startswith("#1 (") and "[health]: The dentist" in hit.content
    assert "#2" in run(again, "recall", query="bullet list").content
    assert run(again, "recall", query='"unbalanced AND (-* NEAR').status == "ok"  # FTS syntax is text, not a query
    assert run(again, "recall", query="piano").content == "no notes match 'piano'"
    assert run(again, "recall", query="").content.startswith("#2")  # newest first
    assert run(again, "forget_note", id=1).content.startswith("deleted note #1")
    assert "no notes match" in run(again, "recall", query="dentist").content
    assert "there is no note #1" in run(again, "forget_note", id=1).content
    assert run(again, "remember", text="   ").status == "error"


def test_forget_all_deletes_the_notes_and_their_index(tmp_path):
    db = tmp_path / "clawdesk.db"
    reg = _registry(tmp_path, db)
    run(reg, "remember", text="my bank PIN hint is the cat's name")
    store = Store.open(db)
    try:
        result = forget_all(store)
        assert result.notes == 1 and count_notes(store) == 0
        assert store.db.execute("SELECT count(*) FROM notes_fts WHERE notes_fts MATCH 'bank'").fetchone()[0] == 0
    finally:
        store.close()
    assert b"bank PIN" not in db.read_bytes()  # compacted: the text is gone from the file


# -- never raises for what the model writes ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("forget_note", {"id": 2**70}),  # beyond SQLite's integers
        ("run_shell", {"command": "sleep 30", "timeout_s": float("nan")}),  # json.loads reads NaN: never a deadline
        ("run_shell", {"command": "sleep 30", "timeout_s": float("-inf")}),
        ("read_file", {"path": "a\ud800.txt"}),  # a lone surrogate cannot be a file name
        ("recall", {"query": "x", "limit": -1}),
    ],
)
def test_edge_values_are_error_results(reg, name, arguments):
    result = run(reg, name, **arguments)
    assert result.status == "error", result


_text = st.text(st.characters(exclude_categories=()), max_size=12)  # surrogates and NUL included
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | _text,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_text, inner, max_size=2),
    max_leaves=4,
)
_SPECS = {s.name: s for s in SPECS if s.name != "run_shell"}  # random shell commands are not run on a CI box


def test_any_call_gives_a_result_never_an_exception(tmp_path_factory):
    base = tmp_path_factory.mktemp("fuzz")
    (base / "ws").mkdir()
    (base / "ws" / "a.txt").write_text("alpha\nbeta\n")
    reg = _registry(base / "ws", base / "home" / "clawdesk.db", policies={"run_shell": "never"})

    @settings(max_examples=150, deadline=None)
    @given(st.sampled_from([*_SPECS, "run_shell", "nope"]), st.data())
    def check(name, data):
        props = list(_SPECS[name].parameters["properties"]) if name in _SPECS else []
        keys = data.draw(st.lists(st.sampled_from([*props, "extra"]) if props else st.just("extra"), max_size=4))
        arguments = {key: data.draw(_json | st.sampled_from(["a.txt", ".", "beta", "zz/new.txt"])) for key in keys}
        result = reg.run(ToolCall(name, arguments), YES)
        assert result.status in ("ok", "error", "denied") and isinstance(result.content, str)
        assert len(result.content) <= reg.output_max_chars

    check()
