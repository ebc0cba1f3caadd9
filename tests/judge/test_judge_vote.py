"""The judge as one interface: turns and tool steps go through ``Judge.vote`` (real demo engine, real SQLite)."""

from __future__ import annotations

import threading
import time

import pytest

from clawdesk.config import JudgeConfig
from clawdesk.engine.gate import ChatGate
from clawdesk.judge import channel
from clawdesk.judge.runner import Judge, JudgeInterrupted, method_for
from clawdesk.judge.tool_steps import RULES_VERSION, next_state
from clawdesk.judge.vote import NextState
from clawdesk.store import NewTurn, now_iso
from clawdesk.store.judgments import pending_turns
from clawdesk.store.step_judgments import pending_steps
from clawdesk.store.steps import NewStep, NewToolCall, add_agent_turn

REQUEST, REPLY = "How do I make tea?", "1. Boil water\n2. Add a tea bag"
COMPLAINT = "Please no lists, one short paragraph."
RESULT = "2026-12-03 09:00 (Thursday)"


def _ok(result=RESULT) -> NewToolCall:
    return NewToolCall("current_time", {}, "<tool_call>", result, "ok", 0.01)


def _record_turn_and_step(store, engine):
    """A chat turn with a next message, and an agent turn whose first step called a tool."""
    at = now_iso()
    session = store.create_session(system_prompt="sys")
    for user, reply in ((REQUEST, REPLY), (COMPLAINT, "Boil water, then add a tea bag.")):
        ids = engine.tokenize(user)
        turn = NewTurn(
            user_content=user, reply_content=reply, reply_thinking="", status="finished", thinking=False,
            model_name="demo", model_path="/m.gguf", model_sha256="other", prompt_ids=ids, reply_ids=[1],
            started_at=at, finished_at=at,
        )  # fmt: skip
        store.add_turn(session.id, turn)
    steps = [
        NewStep([1, 2], [3], "<tool_call>", "", "finished", at, at, calls=(_ok(),)),
        NewStep([1, 2, 3, 4], [5], "It is 9:00.", "", "finished", at, at),
    ]
    final = NewTurn(
        user_content="What time is it?", reply_content="It is 9:00.", reply_thinking="", status="finished",
        thinking=False, model_name="demo", model_path="/m.gguf", model_sha256="other", prompt_ids=[1, 2, 3, 4],
        reply_ids=[5], started_at=at, finished_at=at,
    )  # fmt: skip
    add_agent_turn(store, store.create_session(system_prompt="sys").id, final, steps)
    return pending_turns(store)[0], pending_steps(store)[0]


def test_a_turn_and_a_tool_step_are_judged_by_the_same_vote_method(engine, store):
    pending_turn, pending_step = _record_turn_and_step(store, engine)
    judge = Judge(engine, JudgeConfig(votes=3))
    assert judge.method is channel.TURN  # the shipped default; the baselines are not loaded for it
    calls: list[tuple[str, NextState]] = []
    vote = judge.vote

    def recording(request, reply, state, **kw):
        calls.append((reply, state))
        return vote(request, reply, state, **kw)

    judge.vote = recording
    judgment = judge.judge(store, pending_turn)
    step_judgment = judge.judge_step(store, pending_step)
    del judge.vote
    assert [(r, s.role, s.is_tool_step) for r, s in calls] == [(REPLY, "user", False), ("<tool_call>", "tool", True)]
    assert calls[0][1].text == COMPLAINT and calls[1][1].text == RESULT

    # Each judgment is the verdict of that one call: a direct vote on the same inputs gives the same tokens.
    direct = judge.vote(REQUEST, REPLY, NextState(COMPLAINT), seed=pending_turn.turn.id)
    assert (judgment.prompt_version, judgment.score_outputs, judgment.votes) == (
        channel.VERSION, direct.score_outputs, direct.votes
    )  # fmt: skip
    assert (judgment.hint_outputs, judgment.hint) == (direct.hint_outputs, direct.hint)
    direct = judge.vote("What time is it?", "<tool_call>", next_state(pending_step.calls))
    assert (step_judgment.prompt_version, step_judgment.votes) == (channel.TOOL.version, direct.votes)
    assert step_judgment.score_outputs == direct.score_outputs
    # Same implementation, two sets of framings: the turn's "satisfied", the step's "worked".
    assert all(o.startswith("channel satisfied=") for o in judgment.score_outputs)
    assert all(o.startswith("channel worked=") for o in step_judgment.score_outputs)
    assert len(judgment.votes) == len(step_judgment.votes) == 3


def test_tool_results_are_judged_by_the_channel_method_whatever_judge_method_says(engine):
    from clawdesk.judge.baselines.fewshot import LogprobMethod

    judge = Judge(engine, JudgeConfig(votes=1, method="logprob"))
    assert isinstance(judge.method, LogprobMethod) and method_for(JudgeConfig()) is channel.TURN
    failed = NewToolCall("read_file", {}, "<tool_call>", "bad arguments", "error", 0.01)
    rules = judge.vote("Read it", "<tool_call>", next_state([failed]))
    assert rules.prompt_version == RULES_VERSION and rules.votes == [-1]
    verdict = judge.vote("What time is it?", "<tool_call>", next_state([_ok()]))
    assert verdict.prompt_version == channel.TOOL.version and verdict.score_outputs[0].startswith("channel worked=")


@pytest.mark.parametrize("state", [NextState(COMPLAINT), next_state([_ok()])], ids=["turn", "tool-step"])
def test_stop_interrupts_a_vote_of_a_turn_or_a_step(engine, state):
    stop = threading.Event()
    stop.set()
    with pytest.raises(JudgeInterrupted):
        Judge(engine, JudgeConfig(votes=1), stop=stop).vote(REQUEST, REPLY, state)


@pytest.mark.parametrize("state", [NextState(COMPLAINT), next_state([_ok()])], ids=["turn", "tool-step"])
def test_a_busy_chat_holds_the_vote_and_the_vote_resumes_to_the_same_result(engine, state):
    gate = ChatGate()
    judge = Judge(engine, JudgeConfig(votes=1), gate=gate)
    expected = judge.vote(REQUEST, REPLY, state)
    progress: list[tuple[int, int, str]] = []
    out = []
    with gate:
        worker = threading.Thread(
            target=lambda: out.append(judge.vote(REQUEST, REPLY, state, on_progress=lambda *a: progress.append(a)))
        )
        worker.start()
        time.sleep(0.5)
        assert worker.is_alive() and not progress  # waiting for the chat, no vote cast
    worker.join(timeout=120)
    assert out and out[0] == expected
    assert progress[-1][:2] == (2, 2)
