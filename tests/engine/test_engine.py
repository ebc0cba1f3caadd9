"""The llama.cpp engine on the real bundled SmolLM2 GGUF."""

import threading

import pytest

from clawdesk.engine import Exchange, SamplingParams
from clawdesk.engine.prompt import in_thinking, split_thinking
from clawdesk.engine.repeats import repeat_period
from clawdesk.errors import InputError, ModelError
from clawdesk.gguf.files import check_gguf

GREEDY = SamplingParams(temperature=0.0, max_tokens=24)


def test_prompt_uses_the_gguf_chat_template(engine):
    p = engine.build_prompt("Be brief.", [Exchange("Hi", "Hello!")], "What is 2+2?", thinking=True, reply_room=64)
    assert p.text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert p.token_ids == engine.tokenize(p.text)
    assert engine.llm.detokenize(p.token_ids, special=True).decode() == p.text
    assert not engine.supports_thinking and p.thinking is False  # SmolLM2's template has no thinking switch


def test_stream_matches_reply_and_token_ids(engine):
    prompt = engine.build_prompt("", [], "Name a colour.", thinking=False, reply_room=64)
    pieces = []
    reply = engine.generate(prompt.token_ids, GREEDY, on_delta=lambda d: pieces.append(d.text))
    assert reply.status in ("finished", "length")
    assert "".join(pieces) == reply.raw_text
    assert reply.reply_ids and reply.prompt_ids == prompt.token_ids
    # The served ids decode to the text that was shown (the end-of-turn token adds no text).
    assert engine.llm.detokenize(reply.reply_ids, special=False).decode() == reply.raw_text
    assert reply.tokens_per_s is None or reply.tokens_per_s > 0


def test_greedy_is_deterministic_from_a_clean_cache(engine):
    prompt = engine.build_prompt("", [], "Say one word.", thinking=False, reply_room=64)
    engine.llm.reset()
    a = engine.generate(prompt.token_ids, GREEDY)
    engine.llm.reset()
    b = engine.generate(prompt.token_ids, GREEDY)
    assert a.reply_ids == b.reply_ids


def test_cancel_between_tokens_keeps_partial_reply(engine):
    prompt = engine.build_prompt("", [], "Write a long story about a cat.", thinking=False, reply_room=64)
    cancel = threading.Event()
    seen = []

    def on_delta(d):
        seen.append(d)
        if d.n_tokens >= 3:
            cancel.set()

    reply = engine.generate(
        prompt.token_ids, SamplingParams(temperature=0.0, max_tokens=200), cancel=cancel, on_delta=on_delta
    )
    assert reply.status == "cancelled"
    assert 3 <= len(reply.reply_ids) <= 4
    assert reply.content


def test_cancel_before_prompt_is_read(engine):
    prompt = engine.build_prompt("", [], "Hello", thinking=False, reply_room=64)
    cancel = threading.Event()
    cancel.set()
    reply = engine.generate(prompt.token_ids, GREEDY, cancel=cancel)
    assert reply.status == "cancelled" and reply.reply_ids == []


def test_max_tokens_gives_length_status(engine):
    prompt = engine.build_prompt("", [], "Count from one to fifty in words.", thinking=False, reply_room=64)
    reply = engine.generate(prompt.token_ids, SamplingParams(temperature=0.0, max_tokens=5))
    assert reply.status == "length" and len(reply.reply_ids) == 5


def test_a_reply_that_loops_ends_there_and_one_that_counts_does_not(engine):
    # Greedy SmolLM2 writes "A moon's light, a moon's light, …" to this prompt, and counts on to this one.
    loop = engine.build_prompt("", [], "Write a poem.", thinking=False, reply_room=300)
    engine.llm.reset()
    off = engine.generate(loop.token_ids, SamplingParams(temperature=0.0, max_tokens=120))
    engine.llm.reset()
    on = engine.generate(loop.token_ids, SamplingParams(temperature=0.0, max_tokens=120, repeat_stop=64))
    assert (off.status, off.cut, len(off.reply_ids)) == ("length", "", 120)
    assert (on.status, on.cut) == ("length", "repeat")
    assert 64 <= len(on.reply_ids) < 120 and on.reply_ids == off.reply_ids[: len(on.reply_ids)]
    assert repeat_period(on.reply_ids, 64) > 0 and repeat_period(on.reply_ids[:-1], 64) == 0
    assert engine.llm.detokenize(on.reply_ids).decode() == on.raw_text  # the shown text ends where the ids do
    counting = engine.build_prompt("", [], "List the numbers.", thinking=False, reply_room=300)
    engine.llm.reset()
    numbers = engine.generate(counting.token_ids, SamplingParams(temperature=0.0, max_tokens=150, repeat_stop=64))
    assert (numbers.status, numbers.cut, len(numbers.reply_ids)) == ("length", "", 150)


def test_context_overflow_drops_oldest_turns(engine):
    history = [Exchange(f"question {i} " + "words " * 60, f"answer {i} " + "text " * 60) for i in range(12)]
    p = engine.build_prompt("System stays.", history, "latest?", thinking=False, reply_room=128)
    assert p.dropped_turns > 0
    assert len(p.token_ids) <= engine.n_ctx - 128
    assert "System stays." in p.text and "latest?" in p.text
    assert "question 0 " not in p.text and "question 11 " in p.text


def test_message_longer_than_context_is_a_clear_error(engine):
    with pytest.raises(InputError) as info:
        engine.build_prompt("", [], "word " * 5000, thinking=False, reply_room=64)
    assert "too long" in str(info.value) and "n_ctx" in str(info.value)


def test_split_thinking():
    assert split_thinking("<think>\nhmm\n</think>\n\nAnswer.") == ("hmm", "Answer.")
    assert split_thinking("Plain answer") == ("", "Plain answer")
    assert split_thinking("<think>cut off mid tho") == ("cut off mid tho", "")
    assert in_thinking("<thi") and in_thinking("<think>abc") and not in_thinking("<think>a</think>b")
    assert not in_thinking("Hello")


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_text("definitely not a model")
    with pytest.raises(ModelError) as info:
        check_gguf(bad)
    assert str(bad) in str(info.value)


def test_truncated_gguf_fails_cleanly(tmp_path, demo_gguf):
    from clawdesk.engine import Engine
    from clawdesk.models import ResolvedModel

    cut = tmp_path / "cut.gguf"
    with demo_gguf.open("rb") as src:
        cut.write_bytes(src.read(3_000_000))
    with pytest.raises(ModelError) as info:
        Engine.load(ResolvedModel(name="cut", path=cut), sha256="x", n_ctx=256, n_threads=1)
    assert "truncated" in str(info.value) and str(cut) in str(info.value)


def test_qwen3_thinking_switch_and_think_split(tmp_path):
    """On a (tiny, random) Qwen3 GGUF: enable_thinking reaches the template; <think> is split off."""
    from clawdesk.engine import Engine
    from clawdesk.models import ResolvedModel
    from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

    path = write_tiny_qwen3_gguf(tmp_path / "tiny-qwen3.gguf")
    eng = Engine.load(ResolvedModel(name="tiny", path=path), sha256="t", n_ctx=512, n_threads=1)
    try:
        assert eng.identity.arch == "qwen3" and eng.supports_thinking
        on = eng.build_prompt("", [], "Hi", thinking=True, reply_room=64)
        off = eng.build_prompt("", [], "Hi", thinking=False, reply_room=64)
        assert on.thinking and not off.thinking
        assert off.text.endswith("<think>\n\n</think>\n\n") and not on.text.endswith("</think>\n\n")
        reply = eng.generate(off.token_ids, SamplingParams(temperature=0.0, max_tokens=8))
        assert reply.reply_ids and reply.status in ("finished", "length")
    finally:
        eng.close()


def test_separate_judge_model(tmp_path, demo_gguf, engine):
    """judge.model loads a second engine for judging; the served engine still renders the teacher prompt."""
    from clawdesk.config import Config, JudgeConfig
    from clawdesk.runtime import load_judge, open_store

    config = Config(home=tmp_path, judge=JudgeConfig(model=str(demo_gguf)))
    store = open_store(config)
    try:
        judge = load_judge(config, store, engine)
        assert judge.engine is not engine and judge.policy is engine
        assert judge.engine.identity.path == demo_gguf.resolve() and len(judge.engine.identity.sha256) == 64
        judge.engine.close()
        assert load_judge(Config(home=tmp_path), store, engine).engine is engine
    finally:
        store.close()


def test_a_closed_engine_refuses_work_instead_of_touching_freed_memory(demo_gguf):
    """A judge thread finishing its vote after the app closed the model segfaulted in llama.cpp (CI, stop 24)."""
    from clawdesk.engine import Engine
    from clawdesk.errors import EngineClosed
    from clawdesk.models import ResolvedModel

    eng = Engine.load(ResolvedModel(name="demo", path=demo_gguf), sha256="t", n_ctx=512, n_threads=1)
    ids = eng.tokenize("Hello")
    eng.close()
    eng.close()  # twice is harmless
    assert eng.closed and eng.n_ctx == 512
    calls = [
        lambda: eng.tokenize("Hello"),
        lambda: eng.tokenize_plain("Hello", bos=True),
        lambda: eng.detokenize(ids),
        lambda: eng.generate(ids, GREEDY),
        lambda: eng.continuation_logprobs(ids, [[ids[-1]]]),
        lambda: eng.reset_cache(),
        lambda: eng.context_threads(),
    ]
    for call in calls:
        with pytest.raises(EngineClosed, match="shutting down"):
            call()
    errors: list[BaseException] = []  # and from another thread, as the judge meets it

    def late_judge() -> None:
        try:
            eng.tokenize("a vote")
        except EngineClosed as err:
            errors.append(err)

    t = threading.Thread(target=late_judge)
    t.start()
    t.join(10)
    assert len(errors) == 1
