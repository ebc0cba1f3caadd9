"""The judge's side work on the served engine must not cost the chat its cached prompt.

Real llama.cpp on the demo GGUF, real judge prompts. A chat call after a judge call evaluates only
the new suffix (the chat's KV prefix is saved before the judge and restored), and its greedy reply
is token-identical to the same conversation on a fresh engine where no judge ran in between.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clawdesk.engine import Engine, Exchange, SamplingParams
from clawdesk.engine.kv_keep import MIN_KEEP_TOKENS, common_prefix
from clawdesk.judge.baselines.prompts import score_messages
from clawdesk.models import DEMO_NAME, resolve_model
from tests.support.demo_lora import lora_state, write_demo_gguf

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
SYSTEM = "You are a helpful assistant. Answer briefly and politely, in plain English, and never use lists."
FIRST, SECOND = "What is the capital of France?", "And what is the capital of Spain?"


def fresh_engine() -> Engine:
    # One thread, fixed: the same arithmetic order in every engine, so greedy replies compare exactly.
    demo = resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True)
    return Engine.load(demo, sha256="t", n_ctx=1024, n_threads=1)


@pytest.fixture
def engines():
    made: list[Engine] = []

    def make() -> Engine:
        made.append(fresh_engine())
        return made[-1]

    yield make
    for eng in made:
        eng.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The conversation on a fresh engine with no judge in between, with and without the adapter (computed once)."""
    lora = write_demo_gguf(lora_state(0), tmp_path_factory.mktemp("lora") / "a.gguf")
    found = {}

    def get(adapter: bool):
        if adapter not in found:
            eng = fresh_engine()
            try:
                if adapter:
                    eng.load_adapter(lora, 1)
                found[adapter] = conversation(eng)
            finally:
                eng.close()
        return found[adapter]

    get.lora = lora
    return get


def judge_ids(eng: Engine, reply) -> list[int]:
    return eng.tokenize(eng.render(score_messages(FIRST, reply.content, SECOND), thinking=False))


def side_logprobs(eng: Engine, reply) -> None:
    ids = judge_ids(eng, reply)
    assert eng.continuation_logprobs(ids, [eng.tokenize_plain(" yes"), eng.tokenize_plain(" no")]) is not None


def side_vote(eng: Engine, reply) -> None:
    eng.generate(judge_ids(eng, reply), SamplingParams(temperature=0.7, max_tokens=8), use_adapter=False, seed=5)


def side_paused_vote(eng: Engine, reply) -> None:
    # The judge stopped for the chat after reading part of its prompt: the cache holds half a judge prompt.
    calls = iter(range(100))
    out = eng.generate(
        judge_ids(eng, reply), GREEDY, use_adapter=False, stop_when=lambda: next(calls) >= 2, prompt_chunk=16
    )
    assert out.status == "cancelled"


def conversation(eng: Engine, side=None, *, between=None, use_adapter: bool = True):
    """Chat, optionally side work (and ``between``), chat again in the same conversation.

    Returns (tokens cached after the first reply, second prompt ids, second reply).
    """
    p1 = eng.build_prompt(SYSTEM, [], FIRST, thinking=False, reply_room=64)
    r1 = eng.generate(p1.token_ids, GREEDY, use_adapter=use_adapter, side=False)
    assert len(p1.token_ids) >= MIN_KEEP_TOKENS  # long enough to be kept
    cached = eng.llm.input_ids[: eng.llm.n_tokens].tolist()
    if side is not None:
        side(eng, r1)
    if between is not None:
        between(eng)
    p2 = eng.build_prompt(SYSTEM, [Exchange(FIRST, r1.content)], SECOND, thinking=False, reply_room=64)
    return cached, p2.token_ids, eng.generate(p2.token_ids, GREEDY)


def suffix_len(cached: list[int], ids: list[int]) -> int:
    return len(ids) - min(common_prefix(cached, ids), len(ids) - 1)


@pytest.mark.parametrize("side", [side_logprobs, side_vote, side_paused_vote], ids=["logprobs", "vote", "paused"])
def test_chat_after_judge_evaluates_only_the_new_suffix(engines, reference, side):
    eng = engines()
    cached, p2, r2 = conversation(eng, side)
    suffix = suffix_len(cached, p2)
    assert suffix < len(p2) - MIN_KEEP_TOKENS  # the conversation so far is most of the prompt
    assert r2.prompt_evaluated == suffix
    assert eng.chat_cache_restores == 1
    assert eng.kept_chat_tokens == 0  # restored into the cache: no second copy kept

    ref_cached, ref_p2, ref = reference(False)  # no judge in between
    assert (ref_cached, ref_p2) == (cached, p2)
    assert ref.prompt_evaluated == suffix
    assert r2.reply_ids == ref.reply_ids


def test_judge_does_not_change_the_chat_reply_under_an_adapter(engines, reference):
    """The chat runs with the adapter, the judge without (the context drops its cache twice): still restored."""
    eng = engines()
    eng.load_adapter(reference.lora, 1)
    cached, p2, r2 = conversation(eng, side_vote)
    assert r2.prompt_evaluated == suffix_len(cached, p2) < len(p2) - MIN_KEEP_TOKENS
    assert r2.reply_ids == reference(True)[2].reply_ids
    assert reference(False)[2].reply_ids != r2.reply_ids  # the adapter changes the reply: wrong KV would show


def test_adapter_swap_in_between_means_full_re_evaluation(engines, reference):
    eng = engines()
    _, p2, r2 = conversation(eng, side_vote, between=lambda e: e.load_adapter(reference.lora, 1))
    assert r2.prompt_evaluated == len(p2)
    assert eng.chat_cache_restores == 0


def test_kv_from_other_adapter_state_is_not_restored(engines, reference):
    """Chat on the base weights with an adapter loaded, then a chat with the adapter on: the saved KV is the base's."""
    eng = engines()
    eng.load_adapter(reference.lora, 1)
    _, p2, r2 = conversation(eng, side_vote, use_adapter=False)
    assert eng.kept_chat_tokens > 0  # still kept, but computed without the adapter the chat now uses
    assert r2.prompt_evaluated == len(p2)
    assert eng.chat_cache_restores == 0


def test_reset_cache_drops_the_saved_prefix(engines):
    eng = engines()

    def reset(e: Engine) -> None:
        assert e.kept_chat_tokens > 0
        e.reset_cache()
        assert e.kept_chat_tokens == 0

    _, p2, r2 = conversation(eng, side_logprobs, between=reset)
    assert r2.prompt_evaluated == len(p2)
    assert eng.chat_cache_restores == 0


def test_short_chat_prefix_is_not_kept(engines):
    """Under MIN_KEEP_TOKENS re-evaluating is cheaper than a copy: nothing saved, the next chat reads it all."""
    eng = engines()
    short = eng.tokenize("The cat sat on the mat.")
    assert len(short) < MIN_KEEP_TOKENS
    eng.generate(short, GREEDY, side=False)
    side_vote(eng, eng.generate(short, GREEDY, side=False))
    assert eng.kept_chat_tokens == 0
    longer = eng.tokenize("The cat sat on the mat. Then it slept.")
    assert eng.generate(longer, GREEDY).prompt_evaluated == len(longer)
