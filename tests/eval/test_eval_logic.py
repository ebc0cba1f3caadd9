"""The eval's own logic, tested like the product: scoring, the judge-set summary, each method's settings,
the shuffled control, agreement counts and the target rule, each with exact numbers on hand-built data.

The only stand-in is the model (an engine that answers from a table and records what it was asked
and whether the adapter was on); everything above it is the eval's real code.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clawdesk.config import Config
from clawdesk.engine.prompt import Prompt
from clawdesk.errors import InputError
from clawdesk.eval.experiment import METHODS, Agreement, EvalOptions, Experiment, shuffle_signals
from clawdesk.eval.judge_set import summarize
from clawdesk.eval.personas import Check, Persona
from clawdesk.eval.scenarios import Scenario, interactions_to_target
from clawdesk.eval.scoring import Scorer
from clawdesk.preferences import ECHO_STOPS

HINT = "Answer in at most three words."
SHORT = (Check("max_words", value=3),)


def persona(name="brief", heldout=("qa", "qb", "qc", "qd"), checks=SHORT, hint=HINT):  # no content word: checks decide
    return Persona(
        name=name, description="", prompts=("p1", "p2"), heldout=tuple(heldout), checks=tuple(checks),
        satisfied=(f"{name}: thanks",), unsatisfied=(f"{name}: no",), hint=hint, path=Path(f"{name}.toml"),
    )  # fmt: skip


@dataclass
class _Reply:
    content: str


@dataclass
class StandInEngine:
    """Answers short to prompts in ``short_with_adapter`` when the adapter is on, and to every prompt
    carrying the hint when it is off; long otherwise. Records each call."""

    short_with_adapter: set[str]
    calls: list[tuple[str, bool, float]] = field(default_factory=list)  # (user message, adapter on, temperature)
    resets: int = 0
    stops: set[tuple[str, ...]] = field(default_factory=set)  # params.stop of every call
    prompts: dict[int, str] = field(default_factory=dict)  # token id → the user message it stands for

    def build_prompt(self, system, history, user, *, thinking=False, reply_room=0):
        self.prompts[len(self.prompts)] = user
        return Prompt(text=user, token_ids=[len(self.prompts) - 1], thinking=thinking)

    def reset_cache(self):
        self.resets += 1

    def generate(self, token_ids, params, *, use_adapter=True):
        user = self.prompts[token_ids[0]]
        self.calls.append((user, use_adapter, params.temperature))
        self.stops.add(params.stop)
        short = (use_adapter and user.split()[0] in self.short_with_adapter) or (not use_adapter and HINT in user)
        return _Reply("ok" if short else "this reply is far too long")


def test_the_scorer_scores_with_the_adapter_and_the_hint_on_the_base_with_exact_fractions():
    engine = StandInEngine(short_with_adapter={"qa", "qc", "qd"})
    scorer = Scorer(engine, persona(), "system", max_tokens=32)
    assert scorer.score() == 3 / 4
    assert [(u, a) for u, a, _ in engine.calls] == [("qa", True), ("qb", True), ("qc", True), ("qd", True)]
    assert scorer.last_replies == ["ok", "this reply is far too long", "ok", "ok"]
    engine.calls.clear()
    # With the hint: every prompt carries it and is served on the base weights (the teacher's ceiling).
    assert scorer.score(hint=True) == 1.0
    assert all(HINT in u and not a for u, a, _ in engine.calls) and len(engine.calls) == 4
    assert all(t == 0.0 for _, _, t in engine.calls)  # greedy
    assert engine.stops == {ECHO_STOPS}  # a score reads the reply as the chat serves it
    assert engine.resets == 8  # a fresh cache for every reply: a score depends on the weights only
    engine.short_with_adapter = {"qb"}
    assert scorer.score() == 1 / 4


def test_the_scorer_scores_a_phase_on_all_its_personas_held_out_prompts_and_checks():
    from clawdesk.eval.scenarios import Phase

    no_long = persona("brief", heldout=("qa", "qb"))
    no_ok = persona("no-ok", heldout=("qc", "qd"), checks=(Check("regex_absent", pattern="^ok$"),), hint="Say more.")
    engine = StandInEngine(short_with_adapter={"qa", "qc"})
    scorer = Scorer(engine, Phase((no_long, no_ok), 4), "system", max_tokens=32)
    # qa "ok": brief holds, no-ok fails; qb long: brief fails; qc "ok": no-ok fails; qd long: brief fails.
    assert scorer.score() == 0.0
    assert [u for u, _, _ in engine.calls] == ["qa", "qb", "qc", "qd"]
    assert Phase((no_long, no_ok), 4).own_scores(scorer.last_replies) == {"brief": 0.5, "no-ok": 0.5}
    engine.calls.clear()
    scorer.score(hint=True)
    assert all(HINT in u and "Say more." in u for u, _, _ in engine.calls)  # the teacher is told every wish


def _row(label, reward, category="thanks", directive=False, hint=None):
    return {"id": "x", "category": category, "label": label, "reward": reward, "votes": [reward],
            "directive": directive, "hint": hint, "seconds": 0.5}  # fmt: skip


def test_summarize_reports_exact_accuracy_confusion_and_hint_precision_recall():
    rows = [
        _row(1, 1, "thanks"),
        _row(1, -1, "moving-on"),
        _row(-1, -1, "correction", directive=True, hint="do X"),
        _row(-1, -1, "redo", directive=True),
        _row(-1, 0, "complaint", directive=False, hint="do Y"),
        _row(0, 0, "unrelated"),
        _row(0, 1, "unrelated"),
        _row(1, 1, "building-on", hint="do Z"),
    ]
    r = summarize(rows, seconds=4.0)
    assert r["n_cases"] == 8 and r["reward_accuracy"] == 5 / 8
    assert r["n_clear"] == 6 and r["clear_accuracy"] == 4 / 6  # 'unrelated' is not a clear category
    assert r["confusion"] == {
        "1": {"1": 2, "0": 0, "-1": 1},
        "0": {"1": 1, "0": 1, "-1": 0},
        "-1": {"1": 0, "0": 1, "-1": 2},
    }
    assert r["hint_precision"] == 1 / 3  # 3 hints accepted, 1 on a directive case
    assert r["hint_recall"] == 1 / 2  # 2 directive cases, 1 hinted
    assert r["hint_rate_satisfied"] == 1 / 3
    assert r["seconds_per_case"] == 0.5
    assert r["by_category"]["unrelated"] == {"n": 2, "accuracy": 0.5, "hint_rate": 0.0}


def test_summarize_of_no_hints_and_no_directives_is_none_not_zero():
    r = summarize([_row(1, 1)], seconds=1.0)
    assert r["hint_precision"] is None and r["hint_recall"] is None and r["reward_accuracy"] == 1.0


@pytest.mark.parametrize("method", METHODS)
def test_each_method_trains_with_its_own_weights(tmp_path, method):
    config = Config(home=tmp_path / "user")
    opts = EvalOptions(method=method, judge="oracle", batch_size=4, seed=3)
    scenario = Scenario.single(persona(), 4)
    cfg = Experiment(config, scenario, opts, tmp_path / "out").run_config()
    expected = {
        "binary": (config.train.w_binary, 0.0),
        "opd": (0.0, config.train.w_opd),
    }.get(method, (config.train.w_binary, config.train.w_opd))  # off, shuffled, combined: the app's own
    assert (cfg.train.w_binary, cfg.train.w_opd) == expected
    assert config.train.w_binary > 0 and config.train.w_opd > 0  # so the zeros above are the method's doing
    assert cfg.train.batch_size == 4 and cfg.model.seed == config.model.seed + 3
    assert cfg.home == tmp_path / "out" / "home" and cfg.chat.thinking is False


def test_the_run_uses_every_core_unless_the_user_fixed_the_thread_count(tmp_path):
    import dataclasses
    import os

    opts = EvalOptions(method="combined", judge="oracle", batch_size=4)
    scenario = Scenario.single(persona(), 4)
    auto = Config(home=tmp_path / "user")
    assert Experiment(auto, scenario, opts, tmp_path / "a").run_config().model.n_threads == (os.cpu_count() or 2)
    fixed = dataclasses.replace(auto, model=dataclasses.replace(auto.model, n_threads=1))
    assert Experiment(fixed, scenario, opts, tmp_path / "b").run_config().model.n_threads == 1


def test_shuffled_keeps_the_multiset_of_rewards_and_hints_and_changes_their_order():
    signals = [(1, None)] * 5 + [(-1, f"hint {k}") for k in range(5)]
    for seed in range(4):
        out = shuffle_signals(signals, seed, salt=10)
        assert Counter(out) == Counter(signals)
        assert out != signals
        assert shuffle_signals(signals, seed, salt=10) == out  # seeded: a rerun reproduces it
    assert shuffle_signals(signals, 0, salt=10) != shuffle_signals(signals, 1, salt=10)
    assert signals[0] == (1, None) and signals[-1] == (-1, "hint 4")  # the input is not shuffled in place


def test_agreement_counts_rewards_and_hints_against_the_truth():
    a = Agreement()
    a.count(reward=1, hinted=False, satisfied=True)
    a.count(reward=-1, hinted=True, satisfied=True)
    a.count(reward=-1, hinted=True, satisfied=False)
    a.count(reward=0, hinted=False, satisfied=False)
    a.count(reward=-1, hinted=False, satisfied=False)
    assert a.result() == {
        "n_turns": 5,
        "reward_agreement": 3 / 5,
        "hint_rate_unsatisfied": 1 / 3,
        "hint_rate_satisfied": 1 / 2,
    }
    assert Agreement().result()["reward_agreement"] is None


def test_a_score_of_exactly_0_8_reaches_the_target():
    assert interactions_to_target([[0, 0.0], [8, 0.75], [16, 0.8]], 0, None) == 16
    assert interactions_to_target([[0, 0.0], [8, 4 / 5]], 0, 0.0) == 8
    assert interactions_to_target([[0, 0.0], [8, 0.79]], 0, None) is None


def test_the_target_is_counted_from_the_phase_start_and_a_gain_of_0_3_reaches_it():
    phase = [[48, 0.25], [56, 0.5], [64, 0.55], [72, 0.9]]
    assert interactions_to_target(phase, 48, 0.25) == 16  # 0.55 ≥ 0.25 + 0.3 (despite 0.25 + 0.3 > 0.55 in floats)
    assert interactions_to_target(phase, 48, None) == 24  # only 0.9 ≥ 0.8
    assert interactions_to_target([[48, 0.9], [56, 0.9]], 48, 0.9) == 0  # already there at its start
    assert interactions_to_target([[48, 0.6], [56, 0.7]], 48, 0.6) is None


def test_a_second_eval_into_a_running_one_s_out_dir_is_refused_and_deletes_nothing(tmp_path):
    """Both would start from a fresh data dir in --out: the second used to delete the running one's (stop 45)."""
    from clawdesk.eval.experiment import claim_out_dir

    out = tmp_path / "out"
    (out / "home").mkdir(parents=True)
    (out / "home" / "clawdesk.db").write_text("the running eval's log")
    opts = EvalOptions(method="combined", judge="oracle", batch_size=4)
    running = claim_out_dir(out)  # the eval already writing there
    try:
        with pytest.raises(InputError, match=r"another clawdesk eval is writing to .*out; wait for it"):
            Experiment(Config(home=tmp_path / "user"), Scenario.single(persona(), 4), opts, out).run()
        assert (out / "home" / "clawdesk.db").read_text() == "the running eval's log"
    finally:
        running.close()
    claim_out_dir(out).close()  # once it is done, the next run may take the dir
