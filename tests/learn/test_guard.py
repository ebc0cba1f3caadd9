"""The general-ability guard (clawdesk/learn/guard.py) and the trainer's use of it."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from clawdesk.config import ChatConfig, TrainConfig
from clawdesk.engine.prompt import build_messages
from clawdesk.errors import TrainError
from clawdesk.learn import versions
from clawdesk.learn.base_model import load_base
from clawdesk.learn.guard import GuardSet, check, default_guard_path, load_guard_set, read_rows
from clawdesk.learn.learner import Learner
from clawdesk.learn.samples import ready_samples
from clawdesk.learn.trainer import GUARD_LR_SCALES, train
from clawdesk.store import Store
from clawdesk.testing.judged_log import fill_judged
from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

SHA = "tiny-sha"
VOCAB = 283  # the tiny Qwen3's vocabulary


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_qwen3_gguf(tmp_path_factory.mktemp("tiny") / "tiny-qwen3.gguf")


def test_guard_tokens_are_the_chats_own_rendering(demo_gguf, engine):
    """The trainer tokenizes without an engine; it must see a guard turn exactly as the chat would serve it."""
    rows = read_rows(default_guard_path())
    for system in ("", ChatConfig().system_prompt):
        guard = load_guard_set(demo_gguf, system_prompt=system)
        assert len(guard.pairs) == len(rows) >= 12
        for row, (prompt, reply) in zip(rows, guard.pairs, strict=True):
            served = engine.render(build_messages(system, [], row["prompt"]), thinking=False)
            assert prompt == engine.tokenize(served)
            assert reply == engine.tokenize_plain(row["reply"])
        assert guard.n_tokens == sum(len(r) for _, r in guard.pairs) > 500
    assert ChatConfig().system_prompt and engine.detokenize(guard.pairs[0][0]).count(ChatConfig().system_prompt) == 1


@pytest.mark.parametrize(
    "text, needle",
    [
        ('{"prompt": "a", "reply": "b"}\nnot json\n', "line 2 is not JSON"),
        ('{"prompt": "a"}\n', 'line 1 needs non-empty "prompt" and "reply"'),
        ('{"prompt": "a", "reply": "   "}\n', "line 1 needs"),
        ("\n\n", "holds no texts"),
    ],
)
def test_a_bad_guard_file_is_named_with_its_line(tmp_path, text, needle):
    path = tmp_path / "guard.jsonl"
    path.write_text(text)
    with pytest.raises(TrainError) as info:
        read_rows(path)
    assert needle in str(info.value) and str(path) in str(info.value)
    assert "max_ppl_ratio = 0" in str(info.value)  # how to train without it
    with pytest.raises(TrainError, match="Cannot read"):
        read_rows(tmp_path / "missing.jsonl")


def test_a_fresh_lora_is_the_base_and_a_moved_one_is_not(tiny_gguf):
    model, info = load_base(tiny_gguf, device="cpu", load_in_4bit=False)
    learner = Learner(model, info, TrainConfig(), parent_dir=None)
    guard = load_guard_set(tiny_gguf)
    fresh = check(learner, guard, 1.0)
    assert fresh["ppl_ratio"] == pytest.approx(1.0, abs=1e-6) and fresh["passed"]  # B = 0: no change at all
    torch.manual_seed(0)
    moved = [p.detach() + 0.5 * torch.randn_like(p) for p in learner.params]
    learner.restore(moved)  # new weights: the adapter's remembered NLL must not be reused
    after = check(learner, guard, 1.0)
    assert after["nll_base"] == fresh["nll_base"]
    assert not math.isclose(after["ppl_ratio"], 1.0, abs_tol=1e-3)
    assert check(learner, guard, after["ppl_ratio"] * 0.999)["passed"] is False
    assert check(learner, guard, after["ppl_ratio"] * 1.001)["passed"] is True


def test_a_nan_perplexity_ratio_fails_the_guard(tiny_gguf):
    """An adapter whose weights went NaN scores NaN: that must read as failed, never as "not above the limit"."""
    model, info = load_base(tiny_gguf, device="cpu", load_in_4bit=False)
    learner = Learner(model, info, TrainConfig(), parent_dir=None)
    learner.restore([torch.full_like(p, float("nan")) for p in learner.params])
    record = check(learner, load_guard_set(tiny_gguf), 1e9)
    assert math.isnan(record["ppl_ratio"]) and record["passed"] is False


def _train(tmp_path, gguf, config: TrainConfig, **kw):
    db, adapters = tmp_path / "clawdesk.db", tmp_path / "adapters"
    config = dataclasses.replace(config, device="cpu", load_in_4bit=False)
    made = train(db, adapters, gguf, "tiny", SHA, config, **kw)
    return db, made


def _punished_run(tmp_path, gguf, monkeypatch, max_ppl_ratio: float):
    """Train one step on 4 punished replies, with those very replies as the guard texts.

    Punishing the replies makes them less likely, so the guard's ratio must rise above 1 at every
    learning-rate scale; a smaller scale moves less. Same seeds every call, so the same tries.
    """
    used = fill_judged(tmp_path / "clawdesk.db", 4, seed=40, vocab=VOCAB, sha=SHA, rewards=(-1,))
    store = Store.open(tmp_path / "clawdesk.db")
    pairs = [(list(s.prompt_ids), list(s.reply_ids)) for s in ready_samples(store, SHA)]
    store.close()
    monkeypatch.setattr("clawdesk.learn.trainer.load_guard_set", lambda gguf, path, **_: GuardSet(path, pairs))
    torch.manual_seed(0)  # the fresh LoRA's A matrices
    db, made = _train(tmp_path, gguf, TrainConfig(batch_size=4, max_ppl_ratio=max_ppl_ratio))
    store = Store.open(db)
    try:
        v = versions.get_version(store, made[0])
        assert sorted(s["turn_id"] for s in versions.version_samples(store, v.version)) == used
        return v
    finally:
        store.close()


def test_a_step_that_drifts_at_every_learning_rate_is_rejected(tiny_gguf, tmp_path, monkeypatch):
    v = _punished_run(tmp_path, tiny_gguf, monkeypatch, 1.0)
    assert v.status == "rejected" and "general ability fell" in v.note and "max_ppl_ratio" in v.note
    g = v.validation["guard"]
    assert g["passed"] is False and g["nll_adapter"] > g["nll_base"]
    assert g["lr_scale"] == GUARD_LR_SCALES[-1] and len(g["tried"]) == len(GUARD_LR_SCALES)
    assert all(r > 1.0 for r in g["tried"]) and g["tried"] == sorted(g["tried"], reverse=True)  # less lr, less drift
    assert f"even at {GUARD_LR_SCALES[-1]:g}x the learning rate" in v.note


def test_a_step_that_drifts_too_far_is_taken_again_smaller(tiny_gguf, tmp_path, monkeypatch):
    tried = _punished_run(tmp_path / "probe", tiny_gguf, monkeypatch, 1.0).validation["guard"]["tried"]
    limit = (tried[0] + tried[1]) / 2  # the full step fails it, the half step passes
    v = _punished_run(tmp_path / "kept", tiny_gguf, monkeypatch, limit)
    g = v.validation["guard"]
    assert v.status == "ready" and g["passed"] and g["lr_scale"] == GUARD_LR_SCALES[1]
    assert g["tried"] == pytest.approx(tried[:2], rel=1e-6) and v.metrics["lr_scale"] == GUARD_LR_SCALES[1]


def test_the_shipped_guard_runs_by_default_and_can_be_turned_off(tiny_gguf, tmp_path, monkeypatch):
    loaded = []

    def load(gguf, path, *, system_prompt):
        loaded.append(load_guard_set(gguf, path, system_prompt=system_prompt))
        return loaded[-1]

    monkeypatch.setattr("clawdesk.learn.trainer.load_guard_set", load)
    fill_judged(tmp_path / "a" / "clawdesk.db", 4, seed=41, vocab=VOCAB, sha=SHA, rewards=(1, -1))
    db, made = _train(tmp_path / "a", tiny_gguf, TrainConfig(batch_size=4), system_prompt="Be terse.")
    store = Store.open(db)
    g = versions.get_version(store, made[0]).validation["guard"]
    store.close()
    assert g["n_tokens"] > 500 and g["max_ppl_ratio"] == 1.05 and g["passed"] == (g["ppl_ratio"] <= 1.05)
    assert [x.path for x in loaded] == [default_guard_path()]  # the shipped file, under the chat's system prompt
    assert loaded[0].pairs[0][0] == load_guard_set(tiny_gguf, system_prompt="Be terse.").pairs[0][0]
    assert loaded[0].pairs[0][0] != load_guard_set(tiny_gguf).pairs[0][0]

    fill_judged(tmp_path / "b" / "clawdesk.db", 4, seed=41, vocab=VOCAB, sha=SHA, rewards=(1, -1))
    db, made = _train(tmp_path / "b", tiny_gguf, TrainConfig(batch_size=4, max_ppl_ratio=0))
    store = Store.open(db)
    v = versions.get_version(store, made[0])
    store.close()
    assert v.validation["guard"] == {"skipped": "train.max_ppl_ratio = 0 turns it off"}
    assert v.status == "ready"


def test_without_the_guard_file_training_says_so_and_goes_on(tiny_gguf, tmp_path, monkeypatch):
    missing = tmp_path / "nowhere" / "guard-set.jsonl"
    monkeypatch.setattr("clawdesk.learn.trainer.default_guard_path", lambda: missing)
    fill_judged(tmp_path / "clawdesk.db", 4, seed=42, vocab=VOCAB, sha=SHA, rewards=(1, -1))
    seen = []
    made = train(
        tmp_path / "clawdesk.db", tmp_path / "adapters", tiny_gguf, "tiny", SHA,
        TrainConfig(batch_size=4, device="cpu", load_in_4bit=False), on_progress=seen.append,
    )  # fmt: skip
    assert any("general-ability check skipped" in p.message and str(missing) in p.message for p in seen)
    store = Store.open(tmp_path / "clawdesk.db")
    v = versions.get_version(store, made[0])
    store.close()
    assert str(missing) in v.validation["guard"]["skipped"]


_FILLER = "a an the of to in on and or is are do does did how what why who when where i my you we it its"


def _topic(question: str) -> frozenset[str]:
    """A question's content words, "-our" spelt "-or" and cut to five letters, so that "colour" meets "color"
    and "bacteria" "bacterium"."""
    words = "".join(c if c.isalpha() else " " for c in question.casefold()).split()
    filler = set(_FILLER.split())
    return frozenset(re.sub("our$", "or", w)[:5] for w in words if w not in filler)


def _clashes(questions: list[str], others: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(question, where, other) for every other question on the same topic, or on one inside it."""
    return [(q, where, o) for q in questions for where, o in others if _topic(q) <= _topic(o) or _topic(o) <= _topic(q)]


def test_the_guard_and_the_anchor_ask_nothing_a_persona_trains_on_or_the_eval_measures_with():
    """The guard must see drift on text no version trained on, and stay independent of the eval's neutral set;
    the anchor (off by default) must not hold the policy to the base on the very prompts it learns from."""
    from clawdesk.eval.personas import assets_dir, load_persona
    from clawdesk.learn.anchor import read_prompts
    from clawdesk.learn.form_probe import read_form_prompts

    personas = []
    for path in sorted((assets_dir() / "personas").glob("*.toml")):
        persona = load_persona(path.stem)
        personas += [(path.stem, q) for q in (*persona.prompts, *persona.heldout)]
    neutral = [("neutral set", r["prompt"]) for r in read_rows(assets_dir() / "neutral-set.jsonl")]
    anchor = read_prompts(assets_dir() / "anchor-prompts.jsonl")
    guard = [r["prompt"] for r in read_rows(default_guard_path())]
    assert len(set(map(_topic, guard))) == len(guard) >= 36  # no two guard texts on one topic either
    others = [("anchor", q) for q in anchor] + [("form probe", q) for q in read_form_prompts()]
    assert not _clashes(guard, others + neutral + personas)
    assert not _clashes(anchor, neutral + personas)
    # The rule catches what the old sets held: a persona's exact prompt, a rewording, another spelling.
    assert _clashes(["What is the difference between a virus and a bacterium?"], personas)
    assert _clashes(["Why do leaves change color in autumn?"], personas)
