"""Bad input for every CLI command: numbers out of range, missing files, a broken config.toml, empty
stdin and Ctrl-C. Each must end with exit ≠ 0 and exactly one ``clawdesk: error:`` line naming the
thing, never a traceback, and (except Ctrl-C) before any model is loaded, so these stay fast.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys

import pytest

from clawdesk.cli import main
from clawdesk.store import NewTurn, Store, now_iso
from tests.support.demo_lora import write_version_dir

HUGE = "99999999999999999999"  # > SQLite's 64-bit integers: used to reach the database as an OverflowError


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error(code, err, *needles):
    assert code not in (0, None), err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "clawdesk: error:" in line]
    assert len(lines) == 1 and lines[0].startswith("clawdesk: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _numeric_cases():
    out = "{tmp}/out"
    flags = [
        (["ask", "--session", "{v}", "hi"], "--session"),
        (["ask", "--rate", "+1", "--session", "{v}"], "--session"),
        (["judge", "--limit", "{v}"], "--limit"),
        (["train", "--steps", "{v}"], "--steps"),
        (["train", "--batch-size", "{v}"], "--batch-size"),
        (["adapters", "use", "{v}"], "N"),
        (["export", "--out", out, "--version", "{v}"], "--version"),
        *(
            (["eval", "--persona", "brief", "--out", out, flag, "{v}"], flag)
            for flag in ("--interactions", "--train-every", "--batch-size", "--epochs", "--max-reply-tokens")
        ),
    ]
    cases = [(argv, flag, v) for argv, flag in flags for v in ("0", "-1", HUGE, "2.5", "abc")]
    cases += [(["eval", "--persona", "brief", "--out", out, "--seed", "{v}"], "--seed", v) for v in ("-1", HUGE)]
    cases += [(["eval", "--persona", "brief", "--out", out, "--lr", "{v}"], "--lr", v) for v in ("0", "-1", "nan")]
    # In the parser's range, outside the config's: the config's range decides, and the flag is named.
    cases += [
        (["train", "--batch-size", "{v}"], "--batch-size", "1025"),
        (["eval", "--persona", "brief", "--out", out, "--batch-size", "{v}"], "--batch-size", "1025"),
        (["eval", "--persona", "brief", "--out", out, "--epochs", "{v}"], "--epochs", "17"),
        (["eval", "--persona", "brief", "--out", out, "--lr", "{v}"], "--lr", "1e300"),
    ]
    return cases


@pytest.mark.parametrize("argv, flag, value", _numeric_cases())
def test_out_of_range_numbers_name_the_flag(home, capsys, tmp_path, argv, flag, value):
    argv = [a.format(v=value, tmp=tmp_path) for a in argv]
    code, _, err = run(capsys, *argv)
    assert code == 2  # a usage error, found before anything is opened
    assert_one_error(code, err, flag)
    assert not (tmp_path / "out").exists()


def _add_turns(home, n: int, *, learning: bool = True) -> list[int]:
    """``n`` recorded turns in one session (the judge sees n − 1 of them as pending)."""
    store = Store.open(home / "clawdesk.db")
    try:
        store.set_learning(learning)
        session = store.create_session(system_prompt="sys")
        at = now_iso()
        ids = []
        for i in range(n):
            turn = NewTurn(
                user_content=f"question {i}", reply_content=f"answer {i}", reply_thinking="", status="finished",
                thinking=False, model_name="m", model_path="/m.gguf", model_sha256="sha", prompt_ids=[1, 2],
                reply_ids=[3], started_at=at, finished_at=at,
            )  # fmt: skip
            ids.append(store.add_turn(session.id, turn))
        return ids
    finally:
        store.close()


MISSING_MODEL = [
    ["chat"],
    ["ask", "hi"],
    ["judge"],
    ["train"],
    ["adapters"],
    ["adapters", "off"],
    ["eval", "--persona", "brief", "--probe"],
    ["eval", "--judge-set"],
]


@pytest.mark.parametrize("argv", MISSING_MODEL, ids=" ".join)
def test_missing_model_is_named(home, capsys, tmp_path, argv):
    _add_turns(home, 2)  # something to judge, so `judge` needs the model
    missing = tmp_path / "no-such-model.gguf"
    code, _, err = run(capsys, "--model", str(missing), *argv)
    assert_one_error(code, err, str(missing), "not found")


def test_paths_reports_a_missing_model_without_failing(home, capsys, tmp_path):
    code, out, _ = run(capsys, "--model", str(tmp_path / "gone.gguf"), "paths")
    assert code == 0 and "serving: (none: model file not found" in out and str(tmp_path / "gone.gguf") in out


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["eval", "--persona", "{tmp}/missing.toml", "--probe"], ["{tmp}/missing.toml", "does not exist"]),
        (["eval", "--persona", "{tmp}/missing.toml", "--out", "{tmp}/o"], ["{tmp}/missing.toml"]),
        (["eval", "--persona", "no-such-persona", "--probe"], ["no-such-persona"]),
        (["eval", "--judge-set", "{tmp}/missing.jsonl"], ["{tmp}/missing.jsonl"]),
        (["eval", "--judge-set", "{tmp}"], ["{tmp}"]),  # a folder
        (["eval", "--judge-set", "--out", "{tmp}/a-file/x"], ["{tmp}/a-file/x", "--out"]),  # checked before judging
        (["eval", "--persona", "brief", "--out", "{tmp}/a-file/x"], ["{tmp}/a-file/x"]),
        (["export-data", "--out", "{tmp}/a-file/x/data.jsonl"], ["{tmp}/a-file/x", "--out"]),  # parent is a file
        (["export-data", "--out", "{tmp}"], ["{tmp}", "is a folder"]),
        (["export", "--out", "{tmp}/a-file/x"], ["{tmp}/a-file/x", "--out"]),
        (["export", "--out", "{tmp}/a-file"], ["{tmp}/a-file", "--out"]),  # an existing file, not a folder
        (["export", "--version", "7", "--out", "{tmp}/o"], ["v7"]),
        (["adapters", "use", "7"], ["v7"]),
        (["ask", "--session", "424242", "hi"], ["424242"]),
        (["ask", "--rate", "+1"], ["turn"]),  # nothing to rate yet
        (["ask"], ["give a message"]),
        (["pull", "no-such-model"], ["no-such-model"]),
    ],
)
def test_missing_files_and_things_are_named(home, capsys, tmp_path, argv, needles):
    (tmp_path / "a-file").write_text("not a folder")
    _ready_adapter_row(home, tmp_path)  # so `export` gets as far as its --out folder
    fill = {"tmp": tmp_path}
    code, _, err = run(capsys, *(a.format(**fill) for a in argv))
    assert_one_error(code, err, *(n.format(**fill) for n in needles))
    assert (tmp_path / "a-file").read_text() == "not a folder"


def _ready_adapter_row(home, tmp_path) -> None:
    """A 'ready' v1 whose files exist, recorded as the trainer records it (without training one)."""
    write_version_dir(tmp_path / "v1", sha="sha", layers=1)  # intact files: export checks them first
    store = Store.open(home / "clawdesk.db")
    try:
        with store.transaction():
            store.db.execute(
                """INSERT INTO adapters(version, status, parent_version, base_name, base_sha256, path, n_samples,
                       metrics, validation, note, created_at) VALUES (1, 'ready', NULL, 'm', 'sha', ?, 0, '{}', '{}',
                       '', ?)""",
                [str(tmp_path / "v1"), now_iso()],
            )
    finally:
        store.close()


def test_export_data_creates_a_missing_folder(home, capsys, tmp_path):
    out = tmp_path / "new" / "deeper" / "data.jsonl"
    code, stdout, _ = run(capsys, "export-data", "--out", str(out))
    assert code == 0 and out.is_file() and "wrote 0 judged sample(s)" in stdout
    assert not out.with_suffix(".jsonl.tmp").exists()


ALL_COMMANDS = [
    ["chat"],
    ["ask", "hi"],
    ["ask", "--rate", "+1"],
    ["sessions"],
    ["judge"],
    ["train"],
    ["adapters"],
    ["export", "--out", "{tmp}/o"],
    ["export-data", "--out", "{tmp}/o.jsonl"],
    ["eval", "--persona", "brief", "--probe"],
    ["eval", "--judge-set"],
    ["learning", "off"],
    ["pull"],
    ["paths"],
]
BAD_CONFIGS = {
    "not-toml": ("[train\nbatch_size = 8\n", "not valid TOML"),
    "bad-value": ("[train]\nbatch_size = 0\n", "train.batch_size"),
    "wrong-type": ('[model]\nn_ctx = "big"\n', "model.n_ctx"),
    "unknown-key": ("[chat]\ntemprature = 0.5\n", "temprature"),
    "unknown-section": ("[trian]\nlr = 0.1\n", "trian"),
    "not-utf8": (b"[chat]\nsystem_prompt = '\xff\xfe'\n", "not valid TOML"),
}


@pytest.mark.parametrize("argv", ALL_COMMANDS, ids=" ".join)
@pytest.mark.parametrize("kind", list(BAD_CONFIGS))
def test_bad_config_toml_is_named_by_every_command(home, capsys, tmp_path, argv, kind):
    text, needle = BAD_CONFIGS[kind]
    home.mkdir(parents=True)
    path = home / "config.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    code, _, err = run(capsys, *(a.format(tmp=tmp_path) for a in argv))
    assert_one_error(code, err, str(path), needle)
    assert not (home / "clawdesk.db").exists()  # nothing was opened on a bad config


@pytest.mark.parametrize("stdin", ["", "  \n\t\n"])
def test_ask_dash_with_empty_stdin(home, capsys, monkeypatch, stdin):
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code, out, err = run(capsys, "ask", "-")
    assert code == 2 and out == ""
    assert_one_error(code, err, "empty")
    assert not (home / "clawdesk.db").exists()  # failed before the log was opened


def test_ask_dash_with_closed_stdin_in_a_real_process(home):
    proc = subprocess.run(
        [sys.executable, "-m", "clawdesk", "ask", "-"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=os.environ,
    )  # fmt: skip
    assert proc.returncode == 2
    assert_one_error(proc.returncode, proc.stderr, "empty")


def _interrupt_when(argv: list[str], ready: str) -> None:
    """Run ``clawdesk ARGV``, send SIGINT to its process group (a terminal's Ctrl-C) once a stderr line
    starts with ``ready``, and check it exits 130 with exactly one `clawdesk: interrupted` line."""
    # A terminal's child gets Ctrl-C whatever the test runner's own disposition is: a runner started in
    # the background by a non-interactive shell ignores SIGINT, and its children would inherit that.
    proc = subprocess.Popen(
        [sys.executable, "-m", "clawdesk", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        seen = []
        for line in proc.stderr:  # wait until it is really working, never a blind sleep
            seen.append(line)
            if line.startswith(ready):
                break
        assert seen and seen[-1].startswith(ready), "".join(seen)
        os.killpg(proc.pid, signal.SIGINT)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = "".join(seen) + (rest or "")
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("clawdesk:")] == ["clawdesk: interrupted"], err


def test_ctrl_c_during_a_long_command_exits_130_with_one_line(home, tmp_path):
    """While `eval` is scoring: the base model is loaded and the held-out prompts are being answered."""
    _interrupt_when(
        ["eval", "--persona", "brief", "--judge", "oracle", "--interactions", "4", "--out", str(tmp_path / "run")],
        "[score]",
    )


def test_ctrl_c_while_judging_exits_130_and_keeps_what_was_saved(home, capsys):
    """SIGINT while `clawdesk judge` works through a backlog: exit 130, one line, every saved judgment whole."""
    import sqlite3

    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[chat]\nmax_reply_tokens = 12\ntemperature = 0.0\n")
    for i, text in enumerate(["Name a fruit.", "Too long. One word please.", "Name a colour.", "Thanks."]):
        assert main(["ask", *(["-c"] if i else []), text]) == 0
    capsys.readouterr()
    _interrupt_when(["judge"], "judge [")  # the bar prints a line per percent when stderr is not a terminal
    db = sqlite3.connect(home / "clawdesk.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for votes, reward in db.execute("SELECT votes, reward FROM judgments WHERE status = 'judged'"):
            assert votes is not None and reward is not None  # a judgment is saved whole or not at all
    finally:
        db.close()
