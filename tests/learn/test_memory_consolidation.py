"""Consolidation of the preference memory into the weights, on the real demo model.

Real components: llama.cpp on the bundled SmolLM2 GGUF (serving, the tokenizer, the chat template),
SQLite, and torch + peft on the same model's weights for the learner. The student's prompt is the
served one without the items, the teacher's has them; the learned check retires an item the adapter
carries and brings it back when it does not.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest
import torch

from clawdesk.agent import AgentService
from clawdesk.config import MemoryConfig, TrainConfig
from clawdesk.judge.parse import HINT_HEADER, enhanced_user_message
from clawdesk.judge.teacher import teacher_prompt, turn_context
from clawdesk.learn import consolidate
from clawdesk.learn.objective import combined_loss
from clawdesk.preferences import USER_MEMORY_HEADER, memory_block
from clawdesk.store.judgments import Judgment, pending_turns, save_judgment
from clawdesk.store.prefs import (
    Preference,
    active_preferences,
    add_preference,
    get_preference,
    remove_preference,
    restore_preference,
)
from clawdesk.store.samples import ready_samples
from clawdesk.store.steps import list_steps
from clawdesk.store.turn_memory import item_turns, turn_memory_block, turn_memory_items

ITEM = "Answer in plain sentences, never in lists."


def _served(engine, config, store, *, memory: bool, text: str = "Name three fruits.", placement: str = "system"):
    """One served turn (memory on or off) and the user's next message, so it can be judged."""
    memory_config = MemoryConfig(enabled=memory, budget_tokens=128, placement=placement)
    service = AgentService(engine, config.chat, memory=memory_config)
    session = service.new_session(store)
    result = service.run_turn(store, session.id, text)
    stopped = threading.Event()
    stopped.set()  # the next message is recorded without a reply (as the eval does): it is only the next state
    service.run_turn(store, session.id, "Thanks.", cancel=stopped)
    return result.turn_id


def _judge(store, engine, turn_id: int, *, reward: int, hint: str | None = None) -> Judgment:
    (pending,) = [p for p in pending_turns(store) if p.turn.id == turn_id]
    enhanced = enhanced_user_message(pending.turn.user_content, hint) if hint else None
    ids, note = teacher_prompt(engine, turn_context(store, pending.turn), enhanced) if enhanced else (None, "")
    j = Judgment(
        turn_id=turn_id, next_turn_id=pending.next_turn_id, prompt_version="test", judge_model_name="test",
        judge_model_sha256=engine.identity.sha256, score_outputs=[], votes=[reward], reward=reward, hint_outputs=[],
        hint=hint, enhanced_user=enhanced, enhanced_prompt_ids=ids, seconds=0.0, note=note,
    )  # fmt: skip
    save_judgment(store, j)
    return j


@pytest.mark.parametrize("placement", ["system", "user"])
def test_the_student_prompt_has_no_items_and_the_teacher_prompt_has_them(engine, config, store, placement):
    item = add_preference(store, ITEM).item
    turn_id = _served(engine, config, store, memory=True, placement=placement)
    (step,) = list_steps(store, turn_id)
    block, _ = memory_block(active_preferences(store), lambda t: len(engine.tokenize(t)), 128, placement)
    assert turn_memory_block(store, turn_id) == block and turn_memory_items(store, turn_id) == [item.id]
    served = engine.detokenize(step.prompt_ids)
    assert ITEM in served and block in served
    # The student prompt, token for token, is the chat's prompt rendered without the memory.
    system = store.get_session(store.get_turn(turn_id).session_id).system_prompt
    assert system and system in served
    plain = engine.build_prompt(system, [], "Name three fruits.", thinking=False, reply_room=32).token_ids
    (mt,) = item_turns(store, item.id, engine.identity.sha256)
    assert mt.student_ids == list(plain) and ITEM not in engine.detokenize(mt.student_ids)
    assert mt.served_ids == step.prompt_ids != mt.student_ids

    # No hint, reward +1: a sample learned without the items, taught by the served prompt with them.
    _judge(store, engine, turn_id, reward=1)
    (sample,) = ready_samples(store, engine.identity.sha256)
    assert sample.memory and sample.prompt_ids == list(plain) and sample.teacher_prompt_ids == step.prompt_ids
    assert sample.has_hint  # an OPD signal without any hint


@pytest.mark.parametrize("placement", ["system", "user"])
def test_a_hinted_turn_served_with_items_gets_a_teacher_with_items_and_hint(engine, config, store, placement):
    add_preference(store, ITEM)
    turn_id = _served(engine, config, store, memory=True, placement=placement)
    # Before m009's block was read back, the served prompt (with the block) could not be rebuilt: no teacher.
    hint = "Keep it under twenty words."
    j = _judge(store, engine, turn_id, reward=-1, hint=hint)
    assert j.enhanced_prompt_ids is not None, j.note
    teacher = engine.detokenize(j.enhanced_prompt_ids)
    assert ITEM in teacher and hint in teacher
    if placement == "user":  # the served message with the hint inserted before its block: the served prompt + hint
        served = engine.detokenize(list_steps(store, turn_id)[0].prompt_ids)
        assert USER_MEMORY_HEADER in served and teacher.index(hint) < teacher.index(ITEM)
        assert teacher.replace(HINT_HEADER + hint, "", 1) == served
    (sample,) = ready_samples(store, engine.identity.sha256)
    assert sample.teacher_prompt_ids == j.enhanced_prompt_ids and ITEM not in engine.detokenize(sample.prompt_ids)


def test_without_items_or_hint_there_is_no_teacher_and_the_opd_term_is_zero(engine, config, store):
    turn_id = _served(engine, config, store, memory=True)  # memory on, but no item kept
    (step,) = list_steps(store, turn_id)
    assert turn_memory_block(store, turn_id) == ""
    _judge(store, engine, turn_id, reward=1)
    (sample,) = ready_samples(store, engine.identity.sha256)
    assert not sample.memory and sample.teacher_prompt_ids is None and sample.prompt_ids == step.prompt_ids
    # The identity: without a teacher the objective's OPD advantage is exactly 0 whatever the log-probs.
    T = len(sample.reply_ids)
    logp = torch.randn(1, T)
    _, m = combined_loss(
        logp, logp, torch.randn(1, T), logp, torch.tensor([0.0]), torch.tensor([sample.has_hint]),
        torch.ones(1, T, dtype=torch.bool),
    )  # fmt: skip
    assert m["opd_adv_mean"] == 0.0 and m["adv_mean"] == 0.0 and m["n_hinted"] == 0.0


# -- the learned check ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def learner(demo_gguf):
    from clawdesk.learn.trainer import load_learner

    torch.manual_seed(0)
    return load_learner(demo_gguf, TrainConfig(device="cpu", load_in_4bit=False, lr=2e-3), None)


@pytest.mark.slow
def test_the_learned_check_retires_an_item_the_adapter_carries_and_brings_it_back(learner, engine, config, store):
    item = add_preference(store, ITEM).item
    turn_ids = [
        _served(engine, config, store, memory=True, text=t) for t in ("Name three fruits.", "List two colours.")
    ]
    sha = engine.identity.sha256
    # Before any training the adapter (fresh LoRA: B = 0) is the base: the gap is the item's whole effect.
    (before,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids)
    assert before.decision == "kept" and before.n_turns == 2 and before.n_tokens > 0
    assert before.gap == pytest.approx(before.base_gap, abs=1e-4) and before.base_gap > 0.05
    # Not trained on: never learned, however generous the threshold.
    (untrained,) = consolidate.check_items(store, learner, sha, learn_ratio=10.0, min_effect=0.0)
    assert untrained.n_trained == 0 and untrained.decision == "kept"

    # Distil the item into the adapter: the student (no items) learns the served replies' teacher log-probs.
    for t in turn_ids:
        _judge(store, engine, t, reward=1)
    samples = ready_samples(store, sha)
    assert all(s.memory for s in samples)
    snapshot = learner.snapshot()
    cfg = learner.config
    learner.config = dataclasses.replace(cfg, epochs=1, w_binary=0.0)
    try:
        for _ in range(12):
            ref, teacher = learner.score(samples)
            learner.step(samples, ref, teacher, stop=lambda: False)
        (after,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids)
        assert after.gap < before.gap / 2, (before, after)  # the weights took over most of what the item did
        (learned,) = consolidate.check_items(
            store, learner, sha, trained_now=turn_ids, learn_ratio=after.gap / after.base_gap + 1e-6
        )
        assert learned.decision == "learned"
        assert consolidate.apply_checks(store, [learned])
        assert get_preference(store, item.id).status == "learned" and get_preference(store, item.id).learned_at
        assert memory_block(active_preferences(store), lambda t: len(engine.tokenize(t)), 128) == ("", [])
    finally:
        learner.restore(snapshot)
        learner.config = cfg
    # Back at the base's weights the behaviour does not hold: the learned item returns to the prompt.
    (lost,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids)
    assert lost.status == "learned" and lost.gap > consolidate.RETURN_RATIO * lost.base_gap
    assert lost.decision == "active"
    consolidate.apply_checks(store, [lost])
    assert get_preference(store, item.id).status == "active"
    assert [p.id for p in active_preferences(store)] == [item.id]


def test_the_check_decides_by_its_thresholds_and_a_person_s_change_beats_it(learner, engine, config, store):
    item = add_preference(store, ITEM).item
    turn_ids = [
        _served(engine, config, store, memory=True, text=t) for t in ("Name three fruits.", "List two colours.")
    ]
    sha = engine.identity.sha256
    (c,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids)  # a fresh LoRA: the base
    assert c.gap == pytest.approx(c.base_gap, abs=1e-4) and c.n_trained == 2
    assert 0 < c.n_tokens <= 2 * consolidate.CHECK_TOKENS
    assert c.base_gap > consolidate.MIN_EFFECT and c.decision == "kept"  # the item matters; nothing taken over yet
    # Agrees (the gap within the threshold): learned, and out of the prompt.
    (agree,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids, learn_ratio=1.01)
    assert agree.decision == "learned"
    # An item with less measured effect than min_effect is never retired, however close the gap.
    (blind,) = consolidate.check_items(
        store, learner, sha, trained_now=turn_ids, learn_ratio=1.01, min_effect=c.base_gap + 0.01
    )
    assert blind.decision == "kept"
    assert consolidate.apply_checks(store, [agree]) and get_preference(store, item.id).status == "learned"
    assert memory_block(active_preferences(store), lambda t: len(engine.tokenize(t)), 128) == ("", [])
    # A learned item within the return threshold stays learned; beyond it, it is active again.
    (held,) = consolidate.check_items(store, learner, sha, return_ratio=1.01)
    assert held.decision == "kept"
    (lost,) = consolidate.check_items(store, learner, sha, return_ratio=0.99)
    assert lost.decision == "active"
    # Unless a related item was noted since it was learned (a reversal, maybe): then it is held out.
    time.sleep(0.003)  # noted after it was learned, in the millisecond timestamps
    never = lambda new, old: False  # noqa: E731 - kept beside it (ITEM's three topic words make any related item the same)
    newer = add_preference(store, "Use plain words and short paragraphs, not lists.", replaces=never).item
    assert get_preference(store, item.id).status == "learned"
    checks = consolidate.check_items(store, learner, sha, return_ratio=0.99)
    (kept_out,) = [c for c in checks if c.item_id == item.id]
    assert (kept_out.decision, kept_out.held_by) == ("held", newer.id)
    assert [c.decision for c in checks if c.item_id == newer.id] == ["skipped"]  # no turn served with it yet
    (line,) = consolidate.apply_checks(store, checks)
    assert f"#{item.id} is no longer carried" in line and f"#{newer.id}" in line
    assert get_preference(store, item.id).status == "learned"
    remove_preference(store, newer.id)
    (back,) = consolidate.check_items(store, learner, sha, return_ratio=0.99)
    assert back.decision == "active" and back.held_by is None
    remove_preference(store, item.id)  # meanwhile the person removed it: their choice stands
    assert consolidate.apply_checks(store, [lost]) == []
    assert get_preference(store, item.id).status == "removed"
    restore_preference(store, item.id)
    assert consolidate.apply_checks(store, [lost]) == []  # checked as learned, now active: nothing to do
    # Disagrees (the gap above the threshold): kept in the prompt.
    (disagree,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids, learn_ratio=0.99)
    assert disagree.decision == "kept" and get_preference(store, item.id).status == "active"


# -- the behaviour test: what the adapter writes without the item ---------------------------------

OPENING = "Begin your reply with the exact words 'Hi there!' and then answer."


def _probe(demo_gguf, config, tmp_path, *texts: str):
    """The behaviour test's probe on ``texts`` (the shipped set's loader, a test set of prompts)."""
    from clawdesk.learn.form_probe import load_form_probe

    path = tmp_path / "form-prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
    return load_form_probe(demo_gguf, system_prompt=config.chat.system_prompt, path=path)


@pytest.mark.parametrize("placement", ["system", "user"])
def test_the_probe_serves_its_prompts_as_the_chat_serves_a_turn_with_that_memory(
    engine, config, store, demo_gguf, tmp_path, placement
):
    """Rendered with a turn's recorded block, a probe prompt is token for token the prompt the chat served
    that turn; without it, the turn's student prompt. So the test compares what the chat would serve."""
    item = add_preference(store, ITEM).item
    turn_id = _served(engine, config, store, memory=True, text="What do libraries offer?", placement=placement)
    (turn,) = item_turns(store, item.id, engine.identity.sha256)
    probe = _probe(demo_gguf, config, tmp_path, "What do libraries offer?")
    assert probe.render(turn_memory_block(store, turn_id)) == [turn.served_ids]
    assert probe.student == [turn.student_ids] and turn.served_ids != turn.student_ids


def test_the_shipped_probe_prompts_are_no_training_or_held_out_prompt():
    """The behaviour test's prompts are new to every persona, the anchor, the guard and the neutral set."""
    from clawdesk.eval.personas import assets_dir, load_persona
    from clawdesk.learn.anchor import read_prompts
    from clawdesk.learn.form_probe import read_form_prompts
    from clawdesk.learn.guard import read_rows

    probe = {t.casefold() for t in read_form_prompts()}
    assert len(probe) == consolidate.FORM_PROMPTS
    seen: set[str] = set(read_prompts(assets_dir() / "anchor-prompts.jsonl"))
    seen |= {r["prompt"] for r in read_rows(assets_dir() / "guard-set.jsonl")}
    seen |= {
        json.loads(line)["prompt"] for line in (assets_dir() / "neutral-set.jsonl").read_text().splitlines() if line
    }
    for path in sorted((assets_dir() / "personas").glob("*.toml")):
        persona = load_persona(path.stem)
        seen |= set(persona.prompts) | set(persona.heldout)
    assert not probe & {t.casefold() for t in seen}


@pytest.mark.slow
def test_the_behaviour_test_keeps_an_item_whose_replies_would_change_without_it(
    learner, engine, config, store, demo_gguf, tmp_path
):
    """A fresh LoRA is the base: the log-prob criterion is met by a lenient threshold, but without the item
    the replies do not open as they do with it, so the item stays; without a ``probe`` it would have left."""
    item = add_preference(store, OPENING).item
    turn_ids = [_served(engine, config, store, memory=True, text="What is 2 + 2?", placement="user")]
    # Prompts no turn held: with the item the base opens both with "Hi there!"; without it, neither.
    probe = _probe(demo_gguf, config, tmp_path, "Name three fruits.", "How do I descale a kettle?")
    sha = engine.identity.sha256
    (blind,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids, learn_ratio=1.01, min_effect=-1.0)
    assert blind.decision == "learned" and blind.form is None  # the log-prob criterion alone retires it
    lenient = {"learn_ratio": 1.01, "min_effect": -1.0}
    (c,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids, probe=probe, **lenient)
    assert (c.form, c.form_n, c.new_n) == ("opening", 1, 2) and c.new_agree < 2  # its turn, and the new prompts
    assert c.decision == "kept" and c.form_held_back
    # The share of prompts that must agree, and how many are compared, are the test's two knobs.
    (none_needed,) = consolidate.check_items(
        store, learner, sha, trained_now=turn_ids, probe=probe, form_share=0.0, form_prompts=1, **lenient
    )
    assert (none_needed.new_n, none_needed.decision, none_needed.form_held_back) == (1, "learned", False)
    (line,) = consolidate.apply_checks(store, [c])
    assert f"preference #{item.id} stays in the prompt" in line and "differ in opening" in line
    assert get_preference(store, item.id).status == "active"
    # Retired blind (the log-prob criterion alone), it comes back once the adapter is seen not to write it,
    # though its log-probs still say "carried" (return_ratio 1.01: the gap alone would keep it learned).
    consolidate.apply_checks(store, [blind])
    assert get_preference(store, item.id).status == "learned"
    (carried,) = consolidate.check_items(store, learner, sha, return_ratio=1.01, min_effect=-1.0)
    assert carried.decision == "kept" and carried.form is None  # without a probe: the log-probs alone
    (back,) = consolidate.check_items(store, learner, sha, return_ratio=1.01, min_effect=-1.0, probe=probe)
    assert (back.form, back.new_n, back.decision) == ("opening", 2, "active") and not back.form_held_back
    (line,) = consolidate.apply_checks(store, [back])
    assert "back in the prompt" in line
    assert f"agree in opening on {back.form_agree} of 1 recent prompts and {back.new_agree} of 2 new ones" in line
    assert get_preference(store, item.id).status == "active"


@pytest.mark.slow
def test_the_behaviour_test_retires_an_item_whose_replies_agree_without_it(
    learner, engine, config, store, demo_gguf, tmp_path
):
    """Where the replies with and without the item do the same on its aspect, it leaves the prompt."""
    item = add_preference(store, ITEM).item  # no lists: a one-line sum has none either way
    turn_ids = [_served(engine, config, store, memory=True, text="What is 3 + 4?", placement="user")]
    probe = _probe(demo_gguf, config, tmp_path, "What is 2 + 2?")
    sha = engine.identity.sha256
    (blind,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids)
    # Meet the log-prob criterion by construction (a fresh LoRA: gap = base_gap, of either sign).
    lenient = {"min_effect": -1.0, "learn_ratio": 1.01 if blind.base_gap > 0 else 0.99}
    # One turn of its own agreeing is too little to go on: it stays until it has a full set (FORM_PROMPTS).
    (short,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids, probe=probe, **lenient)
    assert (short.form, short.form_agree, short.form_n, short.new_agree, short.new_n) == ("lists", 1, 1, 1, 1)
    assert (short.decision, short.form_needed) == ("kept", consolidate.FORM_PROMPTS) and short.form_held_back
    (line,) = consolidate.apply_checks(store, [short])
    assert f"#{item.id} stays in the prompt: its replies without it agree in lists on 1 of 1 recent" in line
    assert f"only 1 turns to compare on ({consolidate.FORM_PROMPTS} needed)" in line
    assert get_preference(store, item.id).status == "active"
    (c,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids, probe=probe, form_prompts=1, **lenient)
    assert (c.form, c.form_agree, c.form_n, c.new_agree, c.new_n, c.form_needed) == ("lists", 1, 1, 1, 1, None), c
    assert c.decision == "learned"
    (line,) = consolidate.apply_checks(store, [c])
    assert "agree in lists on 1 of 1 recent prompts and 1 of 1 new ones" in line
    assert get_preference(store, item.id).status == "learned"


@pytest.mark.slow
def test_the_behaviour_test_checks_every_item_when_several_are_kept(
    learner, engine, config, store, demo_gguf, tmp_path
):
    """Two items on form aspects, both about to leave: the behaviour test runs for each, and the second
    item's log-prob check still reads its own turns (the first item's test once overwrote their count)."""
    add_preference(store, ITEM)
    add_preference(store, "Answer in at most five words.")
    turn_ids = [_served(engine, config, store, memory=True, text="What is 3 + 4?", placement="user")]
    probe = _probe(demo_gguf, config, tmp_path, "What is 2 + 2?")
    sha = engine.identity.sha256
    (blind, _) = consolidate.check_items(store, learner, sha, trained_now=turn_ids)
    # Both items sit in the one turn's block, so they share its gaps; a fresh LoRA meets the criterion.
    lenient = {"min_effect": -1.0, "learn_ratio": 1.01 if blind.base_gap > 0 else 0.99}
    checks = consolidate.check_items(store, learner, sha, trained_now=turn_ids, probe=probe, **lenient)
    assert sorted((c.form, c.n_turns, c.form_n, c.new_n) for c in checks) == [("length", 1, 1, 1), ("lists", 1, 1, 1)]


@pytest.mark.slow
def test_a_length_item_is_compared_in_its_direction_and_with_item_word_limit_by_its_own_limit(
    learner, engine, config, store, demo_gguf, tmp_path
):
    """ "At most N words" is read as a wish for shorter replies: the test records the direction it used. With
    ``train.item_word_limit`` a reply of five words or fewer keeps it, whatever the reply with the item did;
    the limit is recorded, and the held-back line names it."""
    add_preference(store, "Answer in at most five words.")
    turn_ids = [_served(engine, config, store, memory=True, text="What is 3 + 4?", placement="user")]
    probe = _probe(demo_gguf, config, tmp_path, "What is 2 + 2?")
    sha = engine.identity.sha256
    (blind,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids)
    lenient = {"min_effect": -1.0, "learn_ratio": 1.01 if blind.base_gap > 0 else 0.99}
    (c,) = consolidate.check_items(store, learner, sha, trained_now=turn_ids, probe=probe, form_prompts=1, **lenient)
    assert (c.form, c.form_direction, c.form_n, c.new_n, c.form_bound) == ("length", "shorter", 1, 1, None), c
    assert c.decision == ("learned" if c.form_agree == c.new_agree == 1 else "kept")
    for agree, (with_item, without) in ((c.form_agree, c.form_words), (c.new_agree, c.new_words)):
        assert (agree == 1) is (without <= with_item or without <= 1.3 * with_item or without - with_item <= 5)

    (w,) = consolidate.check_items(
        store, learner, sha, trained_now=turn_ids, probe=probe, form_prompts=1, word_limit=True, **lenient
    )
    assert (w.form_bound, w.form_words, w.new_words) == (5, c.form_words, c.new_words), w  # the same replies
    for agree, (with_item, without) in ((w.form_agree, w.form_words), (w.new_agree, w.new_words)):
        assert (agree == 1) is (without <= with_item or without <= 5), (agree, with_item, without)
    held = dataclasses.replace(w, decision="kept", status="active", form_agree=0, form_needed=None)
    (line,) = consolidate.apply_checks(None, [held])
    assert "replies without it are longer than with it and over its 5 words on 1 of 1" in line


def test_a_held_back_length_item_says_its_replies_go_the_wrong_way():
    held = consolidate.ItemCheck(
        item_id=3, status="active", n_turns=3, n_tokens=96, n_trained=8, gap=0.01, base_gap=0.2, decision="kept",
        form="length", form_agree=4, form_n=8, form_words=(22.0, 43.0), form_direction="shorter",
        new_agree=7, new_n=8, new_words=(25.0, 30.0),
    )  # fmt: skip
    (line,) = consolidate.apply_checks(None, [held])
    assert "#3 stays in the prompt: the adapter's replies without it are longer than with it on 4 of 8 of its" in line
    assert "recent prompts and 1 of 8 new ones" in line and "22 / 43 and 25 / 30" in line
    symmetric = dataclasses.replace(held, form_direction=None)
    assert "differ in length on 4 of 8" in consolidate.apply_checks(None, [symmetric])[0]


def test_where_an_item_stands_is_said_for_every_decision_of_the_check():
    FRENCH = Preference(3, "Answer in French.", None, None, "active", False, None, None, "2026-12-08T01:00", "")

    def stored(check: consolidate.ItemCheck) -> dict:
        return json.loads(json.dumps(check.record()))  # as the version's validation keeps it (tuples → lists)

    def said(check: consolidate.ItemCheck, version: int) -> str:
        return consolidate.standing(stored(check), version, FRENCH)

    kept = consolidate.ItemCheck(3, "active", 3, 96, 2, 0.3, 0.5, "kept")
    assert said(kept, 4) == (
        "stays in the prompt at v4: the weights carry 40% of its effect on its recent replies; it leaves once they "
        "carry 75% (gap 0.300 nats/token, before training 0.500)"
    )
    assert "carry 75% and its replies without it agree on 7 of 8 (gap" in consolidate.standing(
        stored(kept), 4, dataclasses.replace(FRENCH, text="No bullet lists, please.")
    )  # a form the behaviour test reads: its share is named too
    worse = dataclasses.replace(kept, gap=0.7)  # further from the teacher than the base was: nothing carried
    assert "the weights carry 0% of its effect" in said(worse, 4)
    untrained = dataclasses.replace(kept, n_trained=0)
    assert said(untrained, 1) == ("stays in the prompt at v1: no version has trained on a turn that showed it yet")
    faint = dataclasses.replace(kept, base_gap=0.01)
    assert "hardly changes how replies begin (before training 0.010 nats/token, 0.02 needed)" in (said(faint, 4))
    behaviour = dict(form="lists", form_agree=2, form_n=2, form_words=(30.0, 31.0), new_agree=8, new_n=8)
    short = dataclasses.replace(kept, gap=0.05, form_needed=8, new_words=(20.0, 21.0), **behaviour)
    assert said(short, 5) == (
        "stays in the prompt at v5: its replies without it agree in lists on 2 of 2 recent prompts and 8 of 8 new "
        "ones, but it has only 2 turns to compare on (8 needed)"
    )
    longer = dataclasses.replace(
        short, form="length", form_direction="shorter", form_agree=4, form_n=8, form_needed=None, new_words=(25, 30)
    )
    assert said(longer, 5).startswith(
        "stays in the prompt at v5: the adapter's replies without it are longer than with it on 4 of 8 of its recent"
    )
    learned = dataclasses.replace(kept, gap=0.05, decision="learned", new_words=(20.0, 21.0), **behaviour)
    assert said(learned, 6) == (
        "learned at v6: the adapter carries it, so it left the prompt (gap 0.050 nats/token, before training 0.500; "
        "its replies without it agree in lists on 2 of 2 recent prompts and 8 of 8 new ones)"
    )
    carried = dataclasses.replace(kept, status="learned", gap=0.05)
    assert said(carried, 7) == ("still carried by the weights at v7 (gap 0.050 nats/token, before training 0.500)")
    back = dataclasses.replace(kept, status="learned", decision="active")
    assert said(back, 8).startswith("back in the prompt at v8: the weights no longer carry it")
    held = dataclasses.replace(kept, status="learned", decision="held", held_by=9)
    assert "stays out of the prompt: #9, noted since on a related topic" in said(held, 8)
    skipped = consolidate.ItemCheck(3, "active", 0, 0, 0, None, None, "skipped")
    assert said(skipped, 2).startswith("v2 had no turn served with it that fits the check")
    # The trainer's progress line says the same as the screen.
    (line,) = consolidate.apply_checks(None, [longer])
    assert line == "preference #3 " + said(longer, 5).replace(" at v5", "")
    # Checked with other words than the item has now: the line says the check read the old ones.
    worded = stored(dataclasses.replace(kept, wording=consolidate.wording_mark(FRENCH)))
    assert consolidate.standing(worded, 4, FRENCH) == said(kept, 4)
    # A deleted item's words cannot be confirmed from its fingerprint without its creation time.
    assert consolidate.wording_mark(dataclasses.replace(FRENCH, created_at="2026-12-08T01:01")) != worded["wording"]
    assert consolidate.standing(worded, 4, dataclasses.replace(FRENCH, text="Answer in German.")) == (
        "was edited after the check at v4, which read its earlier words; it is in the prompt as written now, and "
        "later checks measure the replies served with it"
    )
