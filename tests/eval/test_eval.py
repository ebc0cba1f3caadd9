"""`clawdesk eval` end to end on the bundled demo model: tiny runs, the result contract, the comparison files.

These are runs of the real pipeline (llama.cpp chat, SQLite turn log, judge or oracle, the torch
learner, GGUF adapter, hot-swap) made tiny: 4 interactions, a 2-prompt held-out set, short
replies. They check what the run writes, never how well it learned (scores are measurements,
kept in docs/learning.md).
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from clawdesk.cli import main
from clawdesk.eval.report import write_compare

RESULT_KEYS = {
    "persona", "method", "judge", "model", "interactions", "train_every", "batch_size", "seed", "base_score",
    "final_score", "best_score", "with_hint_score", "scores", "interactions_to_target", "ppl_ratio",
    "judge_agreement", "wall_s", "train_s", "config",
}  # fmt: skip

PERSONA = """
name = "tiny-no-lists"
description = "Test persona: no lists, short."
prompts = ["How do I make tea?", "Name three fruits.", "How do I tie a tie?", "List two colours."]
heldout = ["How do I boil an egg?", "Name two planets."]
[[check]]
kind = "regex_absent"
pattern = '(?m)^\\s*([-*•]|\\d+[.)])\\s'
[feedback]
satisfied = ["Thanks, that's what I wanted."]
unsatisfied = ["Please don't use lists. Write it as a short paragraph."]
hint = "Answer in plain prose without bullet points or numbered lists."
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory, demo_gguf):
    """Two real tiny runs: combined with the oracle (trains twice), and off with the self-judge.

    The combined run's progress lines (stderr) are kept in ``combined.log``."""
    root = tmp_path_factory.mktemp("eval")
    persona = root / "tiny.toml"
    persona.write_text(PERSONA, encoding="utf-8")
    common = ["--persona", str(persona), "--model", str(demo_gguf), "--interactions", "4", "--max-reply-tokens", "24"]
    common += ["--memory", "off"]  # these runs measure training alone (tests/eval/test_eval_memory.py: memory on)
    mp = pytest.MonkeyPatch()
    mp.setenv("CLAWDESK_HOME", str(root / "user-home"))
    try:
        combined = ["eval", *common, "--judge", "oracle", "--train-every", "2", "--batch-size", "2", "--epochs", "2"]
        progress = io.StringIO()
        with contextlib.redirect_stderr(progress):
            assert main([*combined, "--out", str(root / "combined")]) == 0
        (root / "combined.log").write_text(progress.getvalue(), encoding="utf-8")
        off = ["eval", *common, "--method", "off", "--train-every", "4", "--out", str(root / "off")]
        assert main(off) == 0
    finally:
        mp.undo()
    return root


def load(root, name):
    return json.loads((root / name / "result.json").read_text())


def test_a_tiny_combined_run_writes_every_key_and_a_curve(runs):
    r = load(runs, "combined")
    assert set(r) >= RESULT_KEYS
    assert (r["method"], r["judge"], r["interactions"], r["train_every"], r["batch_size"]) == (
        "combined",
        "oracle",
        4,
        2,
        2,
    )
    assert r["scores"][0] == [0, r["base_score"]] and len(r["scores"]) == 3  # before training, after each of 2 steps
    assert [n for n, _ in r["scores"]] == [0, 2, 4]
    assert r["final_score"] == r["scores"][-1][1] and r["best_score"] == max(s for _, s in r["scores"])
    assert all(s in (0.0, 0.5, 1.0) for _, s in r["scores"])  # fractions of the 2 held-out prompts
    assert r["ppl_ratio"] > 0 and r["ppl_ratio"] != 1.0  # a trained adapter changes the neutral set's NLL
    # The same measurement after every step: the served adapter's ratio then; the last is the final one.
    assert [n for n, _ in r["ppl_curve"]] == [0, 2, 4] and r["ppl_curve"][0][1] == 1.0
    assert r["ppl_curve"][-1][1] == pytest.approx(r["ppl_ratio"], rel=1e-9)
    assert r["judge_agreement"] is None  # the oracle is not measured against itself
    assert r["train_s"] > 0 and r["wall_s"] >= r["train_s"] and r["config"]["train"]["epochs"] == 2
    assert (runs / "combined" / "curve.png").read_bytes()[:4] == b"\x89PNG"
    # The run lives in its own data dir under --out, never in the user's.
    assert (runs / "combined" / "home" / "clawdesk.db").is_file() and not (runs / "user-home").exists()
    versions = sorted(p.name for p in (runs / "combined" / "home" / "adapters").iterdir() if p.is_dir())
    assert len(versions) >= 2


def test_the_progress_is_rendered_from_the_learning_loops_events(runs):
    """The eval drives the app's learning loop: its train lines come from the loop's events."""
    lines = (runs / "combined.log").read_text().splitlines()
    r = load(runs, "combined")
    for v in r["kept_versions"]:  # TrainingFinished, then VersionServed (the loop's own message)
        assert f"[train] trained v{v}" in lines
        assert f"[train] Learned adapter v{v} from 2 turn(s); now serving it." in lines
        assert f"[score] scoring adapter v{v}" in lines
    assert "[train] loading the base model for training (once per run)" in lines  # the in-process trainer's


def test_a_rejected_version_is_reported_from_the_loop_and_the_last_point_repeats(tmp_path, demo_gguf, capsys):
    persona = tmp_path / "tiny.toml"
    persona.write_text(PERSONA, encoding="utf-8")
    home = tmp_path / "user-home"
    # A learning rate no step survives: the guard rejects it at every scale, and validation rejects the version.
    args = ["eval", "--data-dir", str(home), "--persona", str(persona), "--model", str(demo_gguf), "--judge",
            "oracle", "--interactions", "2", "--train-every", "2", "--batch-size", "2", "--lr", "0.5",
            "--max-reply-tokens", "24", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(args) == 0
    r = json.loads((tmp_path / "out" / "result.json").read_text())
    assert (r["kept_versions"], r["rejected_versions"]) == ([], [1])
    assert r["scores"] == [[0, r["base_score"]], [2, r["base_score"]]] and r["ppl_curve"] == [[0, 1.0], [2, 1.0]]
    lines = capsys.readouterr().err.splitlines()
    rejected = [line for line in lines if line.startswith("[train] v1 rejected, not served: ")]  # VersionRejected
    assert len(rejected) == 1 and "general ability fell" in rejected[0]
    assert not any("now serving" in line or line.startswith("[score] scoring adapter") for line in lines)


def test_a_self_judged_run_reports_agreement_and_trains_nothing_when_off(runs):
    r = load(runs, "off")
    assert set(r) >= RESULT_KEYS and r["judge"] == "self" and r["method"] == "off"
    assert len(r["scores"]) == 1 and r["ppl_ratio"] == 1.0 and r["train_s"] == 0
    agreement = r["judge_agreement"]
    assert agreement["n_turns"] == 4 and 0.0 <= agreement["reward_agreement"] <= 1.0
    n_unsat = 4 - r["n_satisfied"]
    assert (agreement["hint_rate_unsatisfied"] is None) == (n_unsat == 0)


def test_compare_files_from_real_runs(runs, tmp_path):
    results = [load(runs, "off"), load(runs, "combined")]
    table = write_compare(tmp_path, results)
    assert table.count("\n") == 3 and "| off | self |" in table and "| combined | oracle |" in table
    saved = json.loads((tmp_path / "compare.json").read_text())
    assert [r["method"] for r in saved["runs"]] == ["off", "combined"]
    assert "| combined |" in (tmp_path / "compare.md").read_text()
    assert (tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--persona", "no-such"], "no persona named 'no-such'"),
        (["--persona", "brief", "--interactions", "0", "--out", "x"], "argument --interactions: must be from 1"),
        (["--persona", "brief"], "--out DIR"),
        (["--persona", "brief", "--epochs", "0", "--out", "x"], "argument --epochs: must be from 1"),
        ([], "say which persona"),
    ],
)
def test_bad_eval_options_get_a_clear_message(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.setenv("CLAWDESK_HOME", str(tmp_path))
    try:
        code = main(["eval", *args])
    except SystemExit as exit_:  # argparse rejects a bad number before main() runs a command
        code = exit_.code
    assert code != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
