"""The levers as settings: config.toml, `--train-option`, and the trainer subprocess reading them.

Every lever defaults to today's behaviour; a bad value is refused with the file (or flag) and key named.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from clawdesk.cli import main
from clawdesk.config import TrainConfig, load_config, parse_train_option
from clawdesk.errors import ConfigError
from clawdesk.learn import optim_state
from clawdesk.testing.judged_log import fill_judged
from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

LEVERS = """[train]
advantage = "baseline"
distill_samples = 2
w_distill = 0.5
distill_max_weight = 3.0
distill_max_tokens = 64
distill_temperature = 1.0
keep_optimizer = true
anchor_coef = 0.05
anchor_max_tokens = 48
student_samples = 2
w_student = 2.0
student_topk = 32
teacher = "policy"
opd_keep_satisfied = "end"
"""


def test_defaults_are_todays_behaviour():
    cfg = TrainConfig()
    assert cfg.advantage == "reward" and cfg.distill_samples == 0 and not cfg.keep_optimizer and cfg.anchor_coef == 0
    assert cfg.student_samples == 0 and cfg.student_topk == 0 and cfg.teacher == "base"
    assert cfg.opd_keep_satisfied == "off"


def test_config_toml_sets_every_lever(tmp_path):
    (tmp_path / "config.toml").write_text(LEVERS)
    t = load_config(tmp_path).train
    assert (t.advantage, t.distill_samples, t.w_distill, t.distill_max_weight) == ("baseline", 2, 0.5, 3.0)
    assert (t.distill_max_tokens, t.distill_temperature, t.keep_optimizer) == (64, 1.0, True)
    assert (t.anchor_coef, t.anchor_max_tokens) == (0.05, 48)
    assert (t.student_samples, t.w_student, t.student_topk, t.teacher) == (2, 2.0, 32, "policy")
    assert t.opd_keep_satisfied == "end"


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('advantage = "mean"', "train.advantage"),
        ("distill_samples = 9", "train.distill_samples"),
        ("w_distill = -1", "train.w_distill"),
        ("distill_max_weight = 0.5", "train.distill_max_weight"),
        ("distill_max_tokens = 0", "train.distill_max_tokens"),
        ("distill_temperature = 0", "train.distill_temperature"),
        ('keep_optimizer = "yes"', "train.keep_optimizer"),
        ("anchor_coef = -0.1", "train.anchor_coef"),
        ("anchor_max_tokens = 5000", "train.anchor_max_tokens"),
        ("student_samples = 9", "train.student_samples"),
        ("student_topk = 257", "train.student_topk"),
        ("student_topk = -1", "train.student_topk"),
        ('teacher = "judge"', "train.teacher"),
        ("opd_keep_satisfied = true", "train.opd_keep_satisfied"),
    ],
)
def test_a_bad_lever_value_names_the_file_and_key(tmp_path, line, needle):
    (tmp_path / "config.toml").write_text(f"[train]\n{line}\n")
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    assert needle in str(err.value) and str(tmp_path / "config.toml") in str(err.value)


def test_parse_train_option():
    assert parse_train_option("advantage=baseline") == ("advantage", "baseline")  # a bare word is a string
    assert parse_train_option('advantage="baseline"') == ("advantage", "baseline")
    assert parse_train_option("keep_optimizer=true") == ("keep_optimizer", True)
    assert parse_train_option("anchor_coef = 0.1") == ("anchor_coef", 0.1)
    assert parse_train_option("distill_samples=2") == ("distill_samples", 2)
    with pytest.raises(ValueError, match="known keys"):
        parse_train_option("no_such_key=1")
    with pytest.raises(ValueError, match="known keys"):
        parse_train_option("advantage")
    with pytest.raises(ValueError, match=r"train\.keep_optimizer must be a bool"):
        parse_train_option("keep_optimizer=1")
    with pytest.raises(ValueError, match=r"train\.distill_samples must be a int"):
        parse_train_option("distill_samples=0.5")


def test_eval_refuses_a_bad_train_option_before_loading_anything(tmp_path, capsys):
    code = main(["--data-dir", str(tmp_path / "home"), "eval", "--persona", "brief", "--train-option",
                 "distill_samples=99", "--out", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "--train-option distill_samples=99" in err and "0..8" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_the_trainer_subprocess_reads_the_levers_from_config_toml(tmp_path):
    gguf = write_tiny_qwen3_gguf(tmp_path / "tiny.gguf")
    db, adapters = tmp_path / "clawdesk.db", tmp_path / "adapters"
    fill_judged(db, 2, seed=5, vocab=283, sha="tiny-sha", rewards=(1, -1), hint_every=2)
    home = tmp_path / "cfg"
    home.mkdir()
    extra = 'batch_size = 2\ndevice = "cpu"\nload_in_4bit = false\nmax_ppl_ratio = 0\nlora_r = 4\n'
    (home / "config.toml").write_text(LEVERS.replace("distill_max_tokens = 64", "distill_max_tokens = 4") + extra)
    cmd = [
        sys.executable, "-m", "clawdesk.learn.trainer", "--db", str(db), "--adapters", str(adapters),
        "--base", str(gguf), "--base-name", "tiny", "--base-sha", "tiny-sha", "--steps", "1",
        "--config-home", str(home),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)  # a loaded 2-core box is slow
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    step = next(line for line in lines if line["phase"] == "step" and "loss" in line["metrics"])
    assert step["metrics"]["n_distill"] == 2 and step["metrics"]["n_anchor"] > 0  # 2 teacher replies, the anchor on
    meta = json.loads((adapters / "v1" / "metadata.json").read_text())
    assert meta["config"]["advantage"] == "baseline" and meta["config"]["keep_optimizer"] is True
    assert (adapters / "v1" / optim_state.OPTIMIZER_FILE).is_file()
