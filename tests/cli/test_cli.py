"""The CLI as a person uses it: real engine on the demo model, real DB under CLAWDESK_HOME."""

import os
import subprocess
import sys

import pytest

from clawdesk.cli import main
from clawdesk.store import Store


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _turns(home):
    st = Store.open(home / "clawdesk.db")
    try:
        return [t for s in st.list_sessions() for t in st.list_turns(s.id)]
    finally:
        st.close()


def test_ask_records_a_turn_and_continue_appends(home, capsys):
    code, out, err = run(capsys, "ask", "Hello! What can you do?")
    assert code == 0 and out.strip()
    assert "demo model" in err  # the fallback note is visible
    code, out, err = run(capsys, "ask", "-c", "Thanks, tell me more.")
    assert code == 0
    turns = _turns(home)
    assert [t.seq for t in turns] == [1, 2] and turns[0].session_id == turns[1].session_id
    assert turns[0].status in ("finished", "length") and turns[0].n_reply_tokens > 0
    assert turns[0].model_name == "smollm2-135m" and len(turns[0].model_sha256) == 64
    code, out, _ = run(capsys, "sessions")
    assert code == 0 and "Hello! What can you do?" in out


def test_ask_cuts_a_reply_that_loops_and_says_so(home, capsys):
    home.mkdir()
    (home / "config.toml").write_text("[chat]\ntemperature = 0.0\n")  # greedy SmolLM2 ends its poem in a loop
    code, out, err = run(capsys, "ask", "Write a poem.")
    assert code == 0 and "A realm of shadows,\nA realm of shadows," in out
    assert "[reply cut: it kept repeating itself (chat.repeat_stop)]" in err
    [turn] = _turns(home)
    assert turn.status == "length" and 64 <= turn.n_reply_tokens < 200  # not the 1,024 of chat.max_reply_tokens
    (home / "config.toml").write_text("[chat]\ntemperature = 0.0\nrepeat_stop = 0\nmax_reply_tokens = 300\n")
    code, out, err = run(capsys, "ask", "Write a poem.")
    assert "repeating" not in err and max(_turns(home), key=lambda t: t.id).n_reply_tokens == 300


def test_learning_toggle_persists(home, capsys):
    assert run(capsys, "learning", "off")[1].strip() == "learning: OFF"
    assert run(capsys, "learning")[1].strip() == "learning: OFF"
    assert run(capsys, "learning", "on")[1].strip() == "learning: ON"


def test_paths_lists_locations(home, capsys):
    code, out, _ = run(capsys, "--data-dir", str(home / "elsewhere"), "paths")
    assert code == 0
    assert str(home / "elsewhere" / "clawdesk.db") in out and "demo model" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["ask", ""], "empty"),
        (["ask", "   \n\t "], "empty"),
        (["ask", "x" * 200_000], "200,000 characters"),
        (["--model", "/no/such/model.gguf", "ask", "hi"], "model file not found"),
        (["ask", "--session", "424242", "hi"], "no session with id 424242"),
        (["ask", "-c", "hi"], "no session to continue"),
    ],
)
def test_bad_input_gives_clear_error_and_nonzero_exit(home, capsys, argv, needle):
    code, _, err = run(capsys, *argv)
    assert code != 0
    assert needle in err and "Traceback" not in err
    assert err.startswith("clawdesk: error: ")


def test_bad_model_files(home, capsys, tmp_path, demo_gguf):
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("hello")
    truncated = tmp_path / "half.gguf"
    with demo_gguf.open("rb") as src:
        truncated.write_bytes(src.read(5_000_000))
    for path, needle in [(not_gguf, "not a GGUF"), (truncated, "truncated"), (tmp_path, "directory")]:
        code, _, err = run(capsys, "--model", str(path), "ask", "hi")
        assert code != 0 and needle in err and str(path) in err


def test_control_characters_are_stripped_not_fatal(home, capsys):
    code, _, _ = run(capsys, "ask", "hel\x00lo\x07 there\x1b[31m")
    assert code == 0
    assert _turns(home)[0].user_content == "hello there[31m"


def test_errors_keep_committed_turns(home, capsys, tmp_path):
    assert run(capsys, "ask", "First message")[0] == 0
    before = _turns(home)
    # An oversized paste, a broken model and an unwritable data dir: none may lose the turn.
    run(capsys, "ask", "-c", "y" * 200_001)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(4000))
    run(capsys, "--model", str(bad), "ask", "-c", "hi")
    assert _turns(home) == before


def test_unwritable_data_dir(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, err = run(capsys, "--data-dir", str(blocker / "data"), "sessions")
    assert code != 0 and "cannot write to the data directory" in err and "--data-dir" in err


def test_corrupted_db(capsys, home):
    home.mkdir(parents=True)
    (home / "clawdesk.db").write_bytes(b"\x13" * 4096)
    code, _, err = run(capsys, "sessions")
    assert code != 0 and "damaged" in err and "Move it aside" in err
    assert (home / "clawdesk.db").read_bytes() == b"\x13" * 4096


def test_module_entry_point_and_no_traceback(home):
    proc = subprocess.run(
        [sys.executable, "-m", "clawdesk", "ask", ""], capture_output=True, text=True, timeout=120, env=os.environ
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "empty" in proc.stderr


def test_import_has_no_side_effects(tmp_path):
    code = (
        "import os, clawdesk, clawdesk.cli, clawdesk.config, clawdesk.store, clawdesk.engine, clawdesk.chat;"
        "print(sorted(os.listdir('.')))"
    )
    env = dict(os.environ, CLAWDESK_HOME=str(tmp_path / "h"), HOME=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "h").exists()
    assert proc.stdout.strip() == "[]"
