"""A chat call stops the judge inside llama.cpp (engine/preempt.py), and the cache stays exact.

Real llama.cpp on the demo model. The side calls here pass ``stop_when=lambda: False``: nothing on
the Python side would ever stop them, so a side call that comes back stopped was aborted inside its
native call. Each side prompt is long and evaluated in one chunk, so it is still inside
``llama_decode`` when the chat arrives (the test waits until it is).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from clawdesk.engine import Engine, SamplingParams
from clawdesk.models import DEMO_NAME, resolve_model

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
LONG = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog near the river bank." for i in range(45))


@pytest.fixture(scope="module")
def eng(demo_gguf):
    engine = Engine.load(resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True), sha256="t", n_ctx=2048)
    yield engine
    engine.close()


@pytest.fixture
def fresh(eng):
    eng.reset_cache()
    return eng


def _chat_ids(engine: Engine, text: str = "Name a colour.") -> list[int]:
    return engine.build_prompt("", [], text, thinking=False, reply_room=64).token_ids


def _side_prompt(engine: Engine) -> list[int]:
    ids = engine.tokenize_plain(LONG, bos=True)
    assert len(ids) > 700  # about a second of prefill on two cores: long enough to be caught inside
    return ids


def _in_background(fn):
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", fn()), daemon=True)
    thread.start()
    return thread, out


def _wait_until_side_runs(engine: Engine) -> None:
    deadline = time.monotonic() + 30
    while not engine._preempt.side_running:
        assert time.monotonic() < deadline, "the side call never started"
        time.sleep(0.001)
    time.sleep(0.05)  # inside its one big prompt chunk now


def test_a_chat_turn_stops_the_judges_scoring_inside_llama_cpp(fresh):
    side_ids = _side_prompt(fresh)
    conts = [fresh.tokenize_plain(" satisfied"), fresh.tokenize_plain(" unclear")]
    before = fresh.preemptions
    thread, out = _in_background(
        lambda: fresh.continuation_logprobs(side_ids, conts, stop_when=lambda: False, prompt_chunk=len(side_ids))
    )
    _wait_until_side_runs(fresh)
    with fresh.chat_turn():
        reply = fresh.generate(_chat_ids(fresh), GREEDY)
    thread.join(60)
    assert out["value"] is None  # stopped, though its own stop_when never said so
    assert fresh.preemptions == before + 1
    assert reply.status in ("finished", "length") and reply.reply_ids
    # The chat's own decodes were never aborted, and the request is cleared after the turn.
    assert not fresh._preempt.requested
    # The aborted work left the cache exact: the same side call and chat reply as on a fresh cache.
    again = fresh.continuation_logprobs(side_ids, conts, stop_when=lambda: False)
    fresh.reset_cache()
    clean = fresh.continuation_logprobs(side_ids, conts)
    assert again == pytest.approx(clean, abs=1e-4)
    fresh.reset_cache()
    assert fresh.generate(_chat_ids(fresh), GREEDY).reply_ids == reply.reply_ids


def test_a_preempted_side_reply_is_cancelled_and_resumes_to_the_same_text(fresh):
    ids = _side_prompt(fresh)
    params = SamplingParams(temperature=0.0, max_tokens=6)
    thread, out = _in_background(
        lambda: fresh.generate(ids, params, use_adapter=False, stop_when=lambda: False, prompt_chunk=len(ids))
    )
    _wait_until_side_runs(fresh)
    with fresh.chat_turn():
        fresh.generate(_chat_ids(fresh), GREEDY)
    thread.join(60)
    cut = out["value"]
    assert cut.status == "cancelled"
    resumed = fresh.generate(ids, params, use_adapter=False, resume_ids=cut.reply_ids, stop_when=lambda: False)
    fresh.reset_cache()
    whole = fresh.generate(ids, params, use_adapter=False)
    assert resumed.reply_ids == whole.reply_ids


def test_side_work_without_stop_when_is_never_preempted(fresh):
    """Only callers that handle "stopped" (they pass stop_when) are interrupted; others finish."""
    side_ids = _side_prompt(fresh)
    conts = [fresh.tokenize_plain(" yes")]
    before = fresh.preemptions
    thread, out = _in_background(lambda: fresh.continuation_logprobs(side_ids, conts, prompt_chunk=len(side_ids)))
    deadline = time.monotonic() + 30
    while fresh.lock.acquire(blocking=False):  # free: the side call has not taken the engine yet
        fresh.lock.release()
        assert time.monotonic() < deadline, "the side call never started"
        time.sleep(0.001)
    with fresh.chat_turn():
        fresh.generate(_chat_ids(fresh), GREEDY)
    thread.join(60)
    assert isinstance(out["value"], list) and fresh.preemptions == before


def test_no_side_work_means_no_request(fresh):
    with fresh.chat_turn():
        assert not fresh._preempt.requested
        reply = fresh.generate(_chat_ids(fresh), GREEDY)
    assert reply.status in ("finished", "length")


def test_aborts_leave_no_llama_cpp_error_lines(fresh, capfd):
    side_ids = _side_prompt(fresh)
    thread, _ = _in_background(
        lambda: fresh.continuation_logprobs(
            side_ids, [fresh.tokenize_plain(" no")], stop_when=lambda: False, prompt_chunk=len(side_ids)
        )
    )
    _wait_until_side_runs(fresh)
    before = fresh.preemptions
    with fresh.chat_turn():
        fresh.generate(_chat_ids(fresh), GREEDY)
    thread.join(60)
    assert fresh.preemptions == before + 1
    err = capfd.readouterr().err
    assert "failed to decode" not in err and "removing memory module" not in err
