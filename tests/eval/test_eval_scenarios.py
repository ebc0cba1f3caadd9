"""Scenarios: the phase logic on hand-built personas, the TOML contract and its errors, the shipped
scenarios, and one tiny real two-phase run on the bundled demo model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawdesk.cli import main
from clawdesk.errors import InputError
from clawdesk.eval.personas import Check, Persona, load_persona
from clawdesk.eval.report import aggregate_seeds
from clawdesk.eval.scenarios import Phase, Scenario, load_scenario, retention, shipped_scenarios
from clawdesk.eval.topic import OFF_TOPIC_HINT, off_topic_message


def persona(name, checks, prompts=("a", "b", "c"), heldout=("h1", "h2")):
    return Persona(
        name=name, description="", prompts=tuple(f"{name} {p}" for p in prompts),
        heldout=tuple(f"{name} {h}" for h in heldout), checks=tuple(checks),
        satisfied=(f"{name} thanks", f"{name} great"), unsatisfied=(f"{name} no", f"{name} nope"),
        hint=f"{name} hint", path=Path(f"{name}.toml"),
    )  # fmt: skip


SHORT = persona("short", [Check("max_words", value=3)])
NO_X = persona("no-x", [Check("regex_absent", pattern="x")], prompts=("a",))
HELLO = persona("hello", [Check("regex_present", pattern="^Hello"), Check("min_words", value=2)])
ANY = "?"  # a request with no content word: any reply addresses it, so only the checks decide


def test_a_reply_satisfies_a_phase_only_when_every_active_check_holds():
    phase = Phase((SHORT, NO_X), 4)
    assert phase.satisfies("fine and short", ANY)
    assert not phase.satisfies("x marks it", ANY)  # short, but has an x
    assert not phase.satisfies("far too long for this user", ANY)  # no x, but long
    assert not phase.satisfies("  ", ANY)


def test_the_user_answers_with_the_first_failing_personas_message_and_hint():
    phase = Phase((SHORT, NO_X, HELLO), 4)
    r = phase.react(ANY, "Hello there", 0)
    assert (r.satisfied, r.message, r.hint) == (True, "short thanks", None)
    assert phase.react(ANY, "Hello there", 1).message == "short great"  # cycled by the run's interaction count
    r = phase.react(ANY, "Hello x", 1)  # short holds, no-x fails (hello holds too)
    assert (r.satisfied, r.message, r.hint) == (False, "no-x nope", "no-x hint")
    r = phase.react(ANY, "way too long with an x in it", 0)  # short and no-x both fail: short is first
    assert (r.satisfied, r.message, r.hint) == (False, "short no", "short hint")
    r = phase.react(ANY, "Hi", 0)  # only hello fails (both of its checks)
    assert (r.satisfied, r.hint) == (False, "hello hint")


def test_a_reply_that_answers_nothing_is_called_out_before_any_check():
    phase = Phase((SHORT, NO_X), 4)
    request = "How do I brew green tea?"
    assert phase.satisfies("Brew it cooler.", request)  # shares "brew": it answers, and both checks hold
    r = phase.react(request, "Keep it short.", 2)  # both checks hold, but it shares no content word
    assert (r.satisfied, r.message, r.hint) == (False, off_topic_message(2), OFF_TOPIC_HINT)
    assert not phase.satisfies("Keep it short.", request)
    r = phase.react(request, "Green leaves, x.", 0)  # answers, short holds, no-x fails: its complaint
    assert (r.satisfied, r.message, r.hint) == (False, "no-x no", "no-x hint")
    # Held-out scores pair each reply with its own prompt: an off-topic reply scores 0 for its persona.
    short = persona("short", [Check("max_words", value=3)], heldout=("Why is ice slippery?", "Where do owls nest?"))
    assert Phase((short,), 4).own_scores(["Ice melts.", "Ice melts."]) == {"short": 0.5}


def test_training_prompts_interleave_the_active_personas_each_cycling_its_own():
    phase = Phase((SHORT, NO_X), 6)
    assert [phase.prompt(k) for k in range(6)] == ["short a", "no-x a", "short b", "no-x a", "short c", "no-x a"]
    assert [Phase((SHORT,), 4).prompt(k) for k in range(4)] == ["short a", "short b", "short c", "short a"]


def test_a_phase_held_out_set_is_its_personas_held_out_prompts_scored_by_all_checks():
    phase = Phase((SHORT, NO_X), 4)
    assert phase.heldout == ("short h1", "short h2", "no-x h1", "no-x h2")
    assert phase.hint == "short hint no-x hint"
    # Each reply must share a content word with its prompt: "short h1" asks about "short", "no-x h2" about "2".
    replies = ["short, fine", "a long reply of many words", "x", "fine, 2"]
    assert phase.own_scores(replies) == {"short": 0.5, "no-x": 0.5}
    assert [phase.satisfies(r, ANY) for r in replies] == [True, False, False, True]
    with pytest.raises(ValueError, match="3 replies for 4"):
        phase.own_scores(replies[:3])


def test_retention_is_the_own_score_of_earlier_personas_still_active_at_the_end():
    scenario = Scenario("s", "", (Phase((SHORT,), 4), Phase((NO_X, SHORT), 4)))
    assert scenario.starts() == [0, 4] and scenario.total == 8 and scenario.retained() == ["short"]
    # Last phase's held-out order: no-x's, then short's.
    assert retention(scenario, ["x", "x", "short and fine", "a reply far too long"]) == {"short": 0.5}
    reversed_ = Scenario("r", "", (Phase((SHORT,), 4), Phase((NO_X,), 4)))
    assert reversed_.retained() == [] and retention(reversed_, ["ok", "ok"]) == {}


def test_a_persona_run_is_a_one_phase_scenario():
    s = Scenario.single(SHORT, 12)
    assert [p.names for p in s.phases] == [["short"]] and s.total == 12 and s.path is None and s.name == "short"


def _seed_run(seed, phase_scores, ret=1.0, **extra):
    phases = [
        {"personas": ["a"], "start": pts[0][0], "interactions": 4, "base_score": pts[0][1], "scores": pts,
         "final_score": pts[-1][1], "interactions_to_target": None if seed else 4}
        for pts in phase_scores
    ]  # fmt: skip
    scores = [p for pts in phase_scores for p in pts]
    return {"persona": "s", "scenario": "s", "method": "combined", "judge": "oracle", "model": "m", "seed": seed,
            "scores": scores, "with_hint_score": 0.5, "phases": phases, "retention": {"a": ret},
            "max_ppl_ratio": 1.0 + seed / 100, "ppl_ratio": 1.0, "wall_s": 10.0, "train_s": 5.0} | extra  # fmt: skip


def test_seeds_are_averaged_point_by_point():
    agg = aggregate_seeds([_seed_run(0, [[[0, 0.0], [4, 1.0]]], 1.0), _seed_run(1, [[[0, 0.5], [4, 0.5]]], 0.5)])
    assert agg["seeds"] == [0, 1] and agg["scores_mean"] == [[0, 0.25], [4, 0.75]]
    assert agg["scores_min"] == [[0, 0.0], [4, 0.5]] and agg["scores_max"] == [[0, 0.5], [4, 1.0]]
    assert agg["phases"][0]["interactions_to_target"] == [4, None] and agg["phases"][0]["final_score"] == 0.75
    assert agg["retention"] == {"a": 0.75} and agg["max_ppl_ratio"] == 1.01 and agg["wall_s"] == 20.0
    assert agg["best_score"] == 0.75 and agg["interactions_to_target"] is None  # the mean curve never reaches 0.8
    with pytest.raises(ValueError, match="different phases"):
        aggregate_seeds([_seed_run(0, [[[0, 0.0]], [[4, 1.0]]]), _seed_run(1, [[[0, 0.5], [4, 0.5]]])])


def test_seeds_scored_at_different_points_are_aligned_as_step_functions_phase_by_phase():
    # Seed 0's memory changed at interaction 1 (a point there); seed 1's at 3. Phase 2 starts at 4:
    # two points at x = 4 (phase 1's end, phase 2's base on its own set), never mixed across phases.
    a = _seed_run(0, [[[0, 0.0], [1, 0.6], [4, 0.8]], [[4, 0.2], [8, 0.4]]], memory=True, sessions_to_effect=2,
                  score_without_memory=0.5, memory_items=[{"status": "learned"}, {"status": "active"}])  # fmt: skip
    b = _seed_run(1, [[[0, 0.2], [3, 1.0], [4, 1.0]], [[4, 0.0], [8, 0.6]]], memory=True, sessions_to_effect=5,
                  score_without_memory=0.25, memory_items=[{"status": "active"}])  # fmt: skip
    agg = aggregate_seeds([a, b])
    assert agg["scores_mean"] == [[0, 0.1], [1, 0.4], [3, 0.8], [4, 0.9], [4, 0.1], [8, 0.5]]
    assert agg["scores_min"] == [[0, 0.0], [1, 0.2], [3, 0.6], [4, 0.8], [4, 0.0], [8, 0.4]]
    assert agg["memory"] is True and agg["sessions_to_effect"] == [2, 5] and agg["items_learned"] == [1, 0]
    assert agg["score_without_memory"] == 0.375 and agg["score_without_memory_per_seed"] == [0.5, 0.25]
    from clawdesk.cli.evaluate import _summary  # the line `eval --seeds N` prints for the mean

    line = _summary(agg | {"seed": "mean"})
    assert "items learned per seed [1, 0]" in line and "sessions to effect per seed [2, 5]" in line


# -- the file contract ----------------------------------------------------------------------------

TINY_PERSONA = """
name = "tiny"
description = "Test persona."
prompts = ["How do I make tea?", "Name three fruits."]
heldout = ["How do I boil an egg?"]
[[check]]
kind = "max_words"
value = 30
[feedback]
satisfied = ["Thanks."]
unsatisfied = ["Shorter, please."]
hint = "Answer in at most 30 words."
"""

GOOD = """
name = "stack"
description = "Brief first, then also the tiny persona."
[[phase]]
personas = ["brief"]
interactions = 3
[[phase]]
personas = ["brief", "personas/tiny.toml"]
interactions = 5
"""


def write(tmp_path, text, name="s.toml"):
    (tmp_path / "personas").mkdir(exist_ok=True)
    (tmp_path / "personas" / "tiny.toml").write_text(TINY_PERSONA, encoding="utf-8")
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_valid_scenario_loads_shipped_personas_and_paths_relative_to_its_file(tmp_path, monkeypatch):
    path = write(tmp_path, GOOD)
    monkeypatch.chdir("/")  # relative to the scenario file, not to where the command runs
    s = load_scenario(path)
    assert s.name == "stack" and s.path == path and [p.interactions for p in s.phases] == [3, 5]
    assert [p.names for p in s.phases] == [["brief"], ["brief", "tiny"]]
    assert s.phases[1].personas[1].path == tmp_path / "personas" / "tiny.toml"


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda s: s.replace('name = "stack"', "name = ''"), "name"),
        (lambda s: s.replace('description = "Brief', "description = 3 #"), "description"),
        (lambda s: "colour = 'red'\n" + s, "colour"),
        (lambda s: s.split("[[phase]]")[0], "phase"),
        (lambda s: s.replace('personas = ["brief"]', "personas = []"), "phase[0].personas"),
        (lambda s: s.replace('personas = ["brief"]', "personas = [3]"), "phase[0].personas[0]"),
        (lambda s: s.replace('personas = ["brief"]', 'personas = ["no-such"]'), "phase[0].personas[0]"),
        (lambda s: s.replace('"personas/tiny.toml"', '"personas/missing.toml"'), "phase[1].personas[1]"),
        (lambda s: s.replace('"personas/tiny.toml"', '"brief"'), "phase[1].personas[1]"),
        (lambda s: s.replace("interactions = 3", "interactions = 0"), "phase[0].interactions"),
        (lambda s: s.replace("interactions = 5", 'interactions = "5"'), "phase[1].interactions"),
        (lambda s: s.replace("interactions = 3", "interactions = 3\nseed = 1"), "phase[0].seed"),
    ],
)
def test_invalid_scenarios_name_the_file_and_key(tmp_path, edit, key):
    path = write(tmp_path, edit(GOOD))
    with pytest.raises(InputError) as err:
        load_scenario(path)
    assert str(path) in str(err.value) and f": {key}:" in str(err.value)


def test_bad_toml_missing_files_and_unknown_names_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="not valid TOML"):
        load_scenario(write(tmp_path, "name = [unclosed"))
    with pytest.raises(InputError, match="does not exist"):
        load_scenario(tmp_path / "missing.toml")
    with pytest.raises(InputError, match=r"shipped scenarios: .*add-no-lists"):
        load_scenario("no-such-scenario")


def test_shipped_scenarios_cover_added_reversed_and_stacked_preferences():
    scenarios = {p.stem: load_scenario(p.stem) for p in shipped_scenarios()}
    assert len(scenarios) >= 3
    for stem, s in scenarios.items():
        assert s.name == stem and s.total >= 32
    phases = [[tuple(ph.names) for ph in s.phases] for s in scenarios.values()]
    added = any(len(p) >= 2 and set(p[0]) < set(p[1]) for p in phases)
    reversed_ = any(len(p) >= 2 and not set(p[0]) & set(p[1]) for p in phases)
    from_start = any(len(p[0]) >= 2 for p in phases)
    assert added and reversed_ and from_start
    # A persona the model never shows unprompted sits in a stacked phase of some scenario.
    assert any(len(ph.personas) >= 2 and "hi-there" in ph.names for s in scenarios.values() for ph in s.phases)


def test_the_opposite_personas_disagree_on_every_reply():
    one, several = load_persona("one-paragraph"), load_persona("several-paragraphs")
    for reply in ["One block of text.", "First.\n\nSecond.", "A.\n\nB.\n\nC.", "A.\nB."]:
        assert not (one.holds(reply) and several.holds(reply)), reply
    assert several.holds("A.\n\nB.\n\nC.") and one.holds("A.\nB.")


def test_bad_scenario_options_get_a_clear_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CLAWDESK_HOME", str(tmp_path))
    cases = [
        (["--scenario", "add-no-lists", "--interactions", "8", "--out", "x"], "--interactions is for --persona"),
        (["--scenario", "no-such", "--out", "x"], "no scenario named 'no-such'"),
        (["--scenario", "add-no-lists", "--persona", "brief"], "not allowed with argument"),
        (["--persona", "brief", "--seed", "1", "--seeds", "3"], "not allowed with argument"),
    ]
    for args, message in cases:
        try:
            code = main(["eval", *args])
        except SystemExit as exit_:
            code = exit_.code
        err = capsys.readouterr().err
        assert code != 0 and message in err and "Traceback" not in err, (args, err)


# -- one tiny real run ----------------------------------------------------------------------------

LISTS = """
name = "tiny-no-lists"
description = "Test persona: no lists."
prompts = ["How do I make tea?", "Name three fruits."]
heldout = ["Name two planets."]
[[check]]
kind = "regex_absent"
pattern = '(?m)^\\s*([-*•]|\\d+[.)])\\s'
[feedback]
satisfied = ["Thanks."]
unsatisfied = ["No lists, please."]
hint = "Answer in plain prose without lists."
"""

SCENARIO = """
name = "tiny-stack"
[[phase]]
personas = ["short.toml"]
interactions = 2
[[phase]]
personas = ["lists.toml", "short.toml"]
interactions = 2
"""


@pytest.mark.slow
def test_a_tiny_two_phase_scenario_runs_for_real(tmp_path, demo_gguf, monkeypatch):
    (tmp_path / "short.toml").write_text(TINY_PERSONA.replace('name = "tiny"', 'name = "short"'), encoding="utf-8")
    (tmp_path / "lists.toml").write_text(LISTS, encoding="utf-8")
    (tmp_path / "tiny-stack.toml").write_text(SCENARIO, encoding="utf-8")
    monkeypatch.setenv("CLAWDESK_HOME", str(tmp_path / "user-home"))
    args = ["eval", "--scenario", str(tmp_path / "tiny-stack.toml"), "--model", str(demo_gguf), "--judge", "oracle",
            "--train-every", "2", "--batch-size", "2", "--epochs", "1", "--max-reply-tokens", "16",
            "--memory", "off", "--train-option", "max_ppl_ratio=0"]  # fmt: skip  # memory, guard: their own tests
    assert main([*args, "--out", str(tmp_path / "out")]) == 0
    r = json.loads((tmp_path / "out" / "result.json").read_text())
    assert r["scenario"] == "tiny-stack" and r["interactions"] == 4
    assert [(p["personas"], p["start"], p["interactions"]) for p in r["phases"]] == [
        (["short"], 0, 2),
        (["tiny-no-lists", "short"], 2, 2),
    ]
    p0, p1 = r["phases"]
    assert [n for n, _ in p0["scores"]] == [0, 2] and [n for n, _ in p1["scores"]] == [2, 4]
    assert p0["scores"][0][1] == r["base_score"] and r["scores"] == p0["scores"] + p1["scores"]
    assert all(s in (0.0, 0.5, 1.0) for _, s in p1["scores"])  # 2 held-out prompts in phase 2
    assert set(r["retention"]) == {"short"} and r["retention"]["short"] in (0.0, 1.0)
    assert r["max_ppl_ratio"] == max(v for _, v in r["ppl_curve"])
    assert sorted(r["kept_versions"] + r["rejected_versions"]) == [1, 2]  # one training round per phase
    assert (tmp_path / "out" / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_probe_scores_each_distinct_phase_of_a_scenario(tmp_path, demo_gguf, monkeypatch, capsys):
    (tmp_path / "short.toml").write_text(TINY_PERSONA.replace('name = "tiny"', 'name = "short"'), encoding="utf-8")
    (tmp_path / "lists.toml").write_text(LISTS, encoding="utf-8")
    (tmp_path / "s.toml").write_text(SCENARIO + '[[phase]]\npersonas = ["short.toml"]\ninteractions = 1\n')
    monkeypatch.setenv("CLAWDESK_HOME", str(tmp_path / "home"))
    args = ["eval", "--scenario", str(tmp_path / "s.toml"), "--probe", "--model", str(demo_gguf)]
    assert main([*args, "--max-reply-tokens", "8"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "with hint" in line]
    assert [line.split(" on ")[0] for line in lines] == ["short", "tiny-no-lists + short"]  # the repeat is not rescored
    assert "(1 held-out prompts" in lines[0] and "(2 held-out prompts" in lines[1]
