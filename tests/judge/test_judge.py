"""The self-judge on the real bundled model: pending rules, votes, hints, teacher prompt, yielding."""

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from clawdesk.agent import AgentService
from clawdesk.config import JudgeConfig
from clawdesk.engine import SamplingParams
from clawdesk.engine.gate import ChatGate
from clawdesk.judge.baselines.prompts import PROMPT_VERSION
from clawdesk.judge.baselines.sampled import sample
from clawdesk.judge.parse import enhanced_user_message
from clawdesk.judge.runner import Judge, JudgeInterrupted
from clawdesk.judge.service import JudgeLoop, judge_pending
from clawdesk.judge.teacher import teacher_prompt, turn_context
from clawdesk.store.judgments import (
    backlog,
    drop_stale,
    get_judgment,
    list_judged,
    pending_turns,
    set_rating,
    set_veto,
)

# The v1 sampled votes (judge.method = "sampled"); the v2 logprob votes are in test_judge_v2.py.
FAST = JudgeConfig(votes=3, temperature=0.6, max_tokens=24, method="sampled")
# Long enough for any grammar-constrained score vote: ≤ 100 reason chars + the box.
SCORE_ROOM = JudgeConfig(votes=3, temperature=0.6, max_tokens=128, method="sampled")


def _chat(engine, config, store, *messages, incognito=False):
    service = AgentService(engine, config.chat)
    session = service.new_session(store, incognito=incognito)
    ids = [service.run_turn(store, session.id, m).turn_id for m in messages]
    return session, ids


def test_pending_rules(engine, config, store):
    _, (a, _b) = _chat(engine, config, store, "Tell me a joke.", "That was not funny, try again.")
    _chat(engine, config, store, "Secret question", "Secret follow-up", incognito=True)
    store.set_learning(False)
    _chat(engine, config, store, "Off the record", "still off")
    store.set_learning(True)
    pending = pending_turns(store)
    assert [p.turn.id for p in pending] == [a]  # incognito and learning-OFF turns never queue
    assert pending[0].next_state == "That was not funny, try again."
    assert backlog(store) == (1, 1)  # b waits for a next message
    set_veto(store, a)
    assert pending_turns(store) == []


def test_stale_last_turns_are_dropped(engine, config, store):
    _chat(engine, config, store, "Only message")
    assert drop_stale(store, 1.0) == 0
    assert drop_stale(store, 1.0, now=datetime.now(UTC) + timedelta(hours=2)) == 1
    assert backlog(store) == (0, 0)


def test_judge_records_votes_reward_and_identity(engine, config, store):
    _, (a, _) = _chat(engine, config, store, "What is the capital of France?", "Thanks, that's right!")
    judge = Judge(engine, SCORE_ROOM)
    seen = []
    summary = judge_pending(store, judge, max_age_hours=72, on_event=seen.append)
    assert summary.judged == 1
    row = get_judgment(store, a)
    assert row["status"] == "judged" and row["prompt_version"] == PROMPT_VERSION
    assert len(row["score_outputs"]) == 3 and len(row["hint_outputs"]) == 3
    # Grammar-constrained votes always parse, even on the 135M demo model.
    assert len(row["votes"]) == 3 and all(v in (-1, 0, 1) for v in row["votes"])
    assert row["reward"] in (-1, 0, 1)
    assert row["judge_model_name"] == engine.identity.name and row["judge_model_sha256"] == "test-sha"
    assert row["seconds"] > 0
    assert [e.kind for e in seen].count("vote") == 6 and seen[-1].kind == "judged"
    # The three votes are independent samples, not one sample repeated.
    assert len(set(row["score_outputs"])) > 1 or len(set(row["hint_outputs"])) > 1
    # Judging is idempotent: the turn is no longer pending.
    assert pending_turns(store) == []


def test_teacher_prompt_is_the_served_prompt_plus_hint(engine, config, store):
    _, (_, b, _) = _chat(engine, config, store, "Write a haiku.", "Shorter please.", "Good.")
    pending = next(p for p in pending_turns(store) if p.turn.id == b)
    judge = Judge(engine, FAST)
    hint = "Keep it to one short line."
    enhanced = enhanced_user_message("Shorter please.", hint)
    assert enhanced == "Shorter please.\n\n[user's hint / instruction]\nKeep it to one short line."
    ids, note = teacher_prompt(judge.policy, turn_context(store, pending.turn), enhanced)
    assert note == ""
    served, _ = store.turn_tokens(b)
    text = engine.llm.detokenize(ids, special=True).decode()
    assert text == engine.llm.detokenize(served, special=True).decode().replace("Shorter please.", enhanced)


def test_rating_overrides_and_shows_in_learned_view(engine, config, store):
    _, (a, _) = _chat(engine, config, store, "Hi", "ok")
    judge_pending(store, Judge(engine, FAST), max_age_hours=72)
    set_rating(store, a, -1)
    row = list_judged(store)[0]
    assert row.rating == -1 and row.effective_reward == -1


def test_judge_pauses_while_the_chat_is_busy(engine):
    """A held gate stops the judge between tokens; releasing it lets the vote finish."""
    gate = ChatGate()
    judge = Judge(engine, JudgeConfig(votes=1, max_tokens=40), gate=gate)
    prompt = engine.tokenize(engine.render([{"role": "user", "content": "Count to twenty."}], thinking=False))
    out: list[str] = []
    with gate:
        worker = threading.Thread(target=lambda: out.append(sample(judge, prompt, seed=1)))
        worker.start()
        time.sleep(0.5)
        assert worker.is_alive() and not out  # waiting, not generating
        # The chat gets the engine at once while the judge waits.
        reply = engine.generate(prompt, SamplingParams(temperature=0, max_tokens=4))
        assert reply.reply_ids
    worker.join(timeout=60)
    assert out and out[0]


def test_chat_preempts_a_running_vote_within_a_token(engine):
    gate = ChatGate()
    judge = Judge(engine, JudgeConfig(votes=1, max_tokens=400), gate=gate)
    messages = [{"role": "user", "content": "Write a long essay on rivers."}]
    prompt = engine.tokenize(engine.render(messages, thinking=False))
    tokens_after_gate: list[int] = []
    original = engine.generate

    def spy(*args, **kwargs):
        reply = original(*args, **kwargs)
        if kwargs.get("use_adapter") is False and reply.status == "cancelled":
            tokens_after_gate.append(len(reply.reply_ids) - len(kwargs.get("resume_ids", ())))
        return reply

    engine.generate = spy
    try:
        worker = threading.Thread(target=lambda: sample(judge, prompt, seed=3))
        worker.start()
        time.sleep(0.3)  # the vote is generating
        with gate:
            first = original(prompt, SamplingParams(temperature=0, max_tokens=2))
        worker.join(timeout=120)
    finally:
        del engine.generate
    assert first.reply_ids
    assert tokens_after_gate, "the vote was never paused"


def test_stop_interrupts_and_saves_nothing(engine, config, store):
    _chat(engine, config, store, "Hello", "Bye")
    stop = threading.Event()
    stop.set()
    judge = Judge(engine, FAST, stop=stop)
    with pytest.raises(JudgeInterrupted):
        judge.judge(store, pending_turns(store)[0])
    summary = judge_pending(store, judge, max_age_hours=72)
    assert summary.stopped and summary.judged == 0


def test_background_loop_judges_when_learning_on(engine, config, store):
    _chat(engine, config, store, "Give me a number.", "Another one please.")
    events = []
    loop = JudgeLoop(Judge(engine, FAST), config.db_path, max_age_hours=72, on_event=events.append, idle_poll=0.1)
    store.set_learning(False)
    worker = threading.Thread(target=loop.run)
    worker.start()
    try:
        time.sleep(0.5)
        assert not any(e.kind == "judged" for e in events)  # OFF: nothing judged
        store.set_learning(True)
        loop.set_learning(True)
        deadline = time.monotonic() + 120
        while not any(e.kind == "judged" for e in events) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        loop.close()
        worker.join(timeout=60)
    assert any(e.kind == "judged" for e in events)
    assert backlog(store)[0] == 0
