"""The one teacher-prompt builder gives token for token what the two builders before it gave.

``clawdesk.judge.teacher.teacher_prompt`` replaced ``judge.runner.teacher_prompt`` (turns) and
``judge.tool_steps.step_teacher_prompt`` (tool steps) in issue #19. Their code is kept below,
verbatim but for names, as the reference: the trainer's OPD term reads these ids, so a different
id (or a prompt where there was none) would change what is trained. Real demo engine, real SQLite.
"""

from __future__ import annotations

import dataclasses

import pytest

from clawdesk.agent import AgentService
from clawdesk.config import ChatConfig
from clawdesk.engine import history_from_turns
from clawdesk.engine.prompt import build_messages
from clawdesk.judge.parse import enhanced_user_message
from clawdesk.judge.teacher import step_context, teacher_prompt, turn_context
from clawdesk.store import NewTurn, now_iso
from clawdesk.store.judgments import pending_turns
from clawdesk.store.step_judgments import pending_steps
from clawdesk.store.steps import NewStep, NewToolCall, add_agent_turn
from clawdesk.tools.format import assistant_message, tool_messages
from clawdesk.tools.types import ToolCall, ToolResult

HINT = "Keep it to one short line, no rhymes."


# -- the builders before issue #19 (the reference) -------------------------------------------


def old_turn_teacher_prompt(store, policy, pending, enhanced_user):
    turn = pending.turn
    if turn.model_sha256 != policy.identity.sha256:
        return None, "served by another model file; no OPD prompt"
    session = store.get_session(turn.session_id)
    earlier = [t for t in store.list_turns(turn.session_id) if t.seq < turn.seq][turn.dropped_turns :]
    history = history_from_turns(earlier)
    served_ids, _ = store.turn_tokens(turn.id)

    def render(user):
        messages = build_messages(session.system_prompt, history, user)
        return policy.tokenize(policy.render(messages, thinking=turn.thinking))

    if render(turn.user_content) != served_ids:
        return None, "served prompt could not be rebuilt exactly; no OPD prompt"
    return render(enhanced_user), ""


OLD_SENTINEL = "\x00clawdesk-user-message\x00"


def old_step_teacher_prompt(policy, pending, enhanced_user):
    turn, served = pending.turn, pending.step.prompt_ids
    if turn.model_sha256 != policy.identity.sha256:
        return None, "served by another model file; no OPD prompt"
    text, first = policy.detokenize(served), policy.detokenize(pending.first_prompt_ids)
    if policy.tokenize(text) != served:
        return None, "served step prompt could not be rebuilt exactly; no OPD prompt"
    sample = policy.render(build_messages("", [], OLD_SENTINEL), thinking=turn.thinking)
    tail = sample[sample.rindex(OLD_SENTINEL) + len(OLD_SENTINEL) :]
    end = len(first) - len(tail)
    user = turn.user_content
    if not first.endswith(user + tail) or text[:end] != first[:end]:
        return None, "the turn's user message was not found in the step prompt; no OPD prompt"
    return policy.tokenize(text[: end - len(user)] + enhanced_user + text[end:]), ""


# -- turns ------------------------------------------------------------------------------------


def _chat(engine, store, *messages):
    service = AgentService(engine, ChatConfig(temperature=0.0, max_reply_tokens=12))
    session = service.new_session(store)
    for m in messages:
        service.run_turn(store, session.id, m)
    return pending_turns(store)


def _both_for_turn(store, engine, pending):
    enhanced = enhanced_user_message(pending.turn.user_content, HINT)
    old = old_turn_teacher_prompt(store, engine, pending, enhanced)
    new = teacher_prompt(engine, turn_context(store, pending.turn), enhanced)
    return old, new


def test_a_turn_with_history_gets_the_same_teacher_ids(engine, store):
    pending = _chat(engine, store, "Write a haiku.", "Shorter please.", "Now one about snow.", "Good.")
    assert len(pending) == 3
    for p in pending:  # the first turn has no history, the later ones replay the earlier turns
        old, new = _both_for_turn(store, engine, p)
        assert old[0] is not None and old[1] == ""
        assert new == old


def test_a_turn_served_by_another_model_or_with_tools_gets_none_as_before(engine, store):
    (pending,) = _chat(engine, store, "Hi", "Tell me more.")
    other = dataclasses.replace(pending, turn=dataclasses.replace(pending.turn, model_sha256="another"))
    old, new = _both_for_turn(store, engine, other)
    assert old == (None, "served by another model file; no OPD prompt") and new == old

    # The final answer of an agent turn: its served prompt holds tool calls and results, which
    # the turn's stored messages do not render, so neither builder gives a teacher prompt.
    user = "What is in notes.txt?"
    later = [assistant_message("", [ToolCall("read_file", {"path": "notes.txt"})])]
    later += tool_messages([ToolResult("read_file", "ok", "milk")])
    first = engine.build_prompt("sys", [], user, thinking=False, reply_room=32).token_ids
    second = engine.build_prompt("sys", [], user, thinking=False, reply_room=32, steps=later).token_ids
    _agent_turn(store, engine, user, first, second)
    agent_turn = store.list_turns(store.recent_sessions(1)[0].id)[0]
    assert store.turn_tokens(agent_turn.id)[0] == second
    pending_agent = dataclasses.replace(pending, turn=agent_turn)
    old, new = _both_for_turn(store, engine, pending_agent)
    assert old == (None, "served prompt could not be rebuilt exactly; no OPD prompt") and new == old


# -- tool steps -------------------------------------------------------------------------------


def _agent_turn(store, engine, user, first, second, calls=None):
    at = now_iso()
    calls = calls or (NewToolCall("read_file", {"path": "notes.txt"}, "x", "milk", "ok", 0.01),)
    steps = [
        NewStep(list(first), [7, 8], "call", "", "finished", at, at, calls=tuple(calls)),
        NewStep(list(second), [9], "done", "", "finished", at, at),
    ]
    turn = NewTurn(
        user_content=user, reply_content="done", reply_thinking="", status="finished", thinking=False,
        model_name="demo", model_path="/m.gguf", model_sha256=engine.identity.sha256, prompt_ids=list(second),
        reply_ids=[9], started_at=at, finished_at=at,
    )  # fmt: skip
    session = store.create_session(system_prompt="sys")
    add_agent_turn(store, session.id, turn, steps)


def _both_for_step(engine, pending):
    enhanced = enhanced_user_message(pending.turn.user_content, HINT)
    old = old_step_teacher_prompt(engine, pending, enhanced)
    context = step_context(pending.turn, pending.step.prompt_ids, pending.first_prompt_ids)
    return old, teacher_prompt(engine, context, enhanced)


@pytest.mark.parametrize("user", ["What is in notes.txt?", "Summarise  notes.txt\n\nthen stop."])
def test_a_tool_step_gets_the_same_teacher_ids(engine, store, user):
    first = engine.build_prompt("sys", [], user, thinking=False, reply_room=32).token_ids
    second = [*first, 7, 8, 9]
    _agent_turn(store, engine, user, first, second)
    (pending,) = pending_steps(store)
    old, new = _both_for_step(engine, pending)
    assert old[0] is not None and old[1] == "" and new == old
    assert HINT in engine.detokenize(new[0])


def test_a_tool_step_whose_prompt_does_not_match_gets_none_with_the_same_reason(engine, store):
    user = "What is in notes.txt?"
    first = engine.build_prompt("sys", [], user, thinking=False, reply_room=32).token_ids
    _agent_turn(store, engine, user, first, [*first, 7, 8, 9])
    (pending,) = pending_steps(store)
    # Step 0's prompt cut short: the user message is not where it ends.
    cut = dataclasses.replace(pending, first_prompt_ids=first[:-3])
    old, new = _both_for_step(engine, cut)
    assert old[0] is None and "not found" in old[1] and new == old
    # Served ids that are not what their own text tokenizes to (a word served as single letters).
    word = next(w for w in (" the", " and", " is") if len(engine.tokenize_plain(w)) == 1)
    letters = [i for ch in word for i in engine.tokenize_plain(ch)]
    odd = dataclasses.replace(pending, step=dataclasses.replace(pending.step, prompt_ids=[*first, *letters]))
    old, new = _both_for_step(engine, odd)
    assert old == (None, "served step prompt could not be rebuilt exactly; no OPD prompt") and new == old
    # Another model file served it.
    other = dataclasses.replace(pending, turn=dataclasses.replace(pending.turn, model_sha256="another"))
    old, new = _both_for_step(engine, other)
    assert old == (None, "served by another model file; no OPD prompt") and new == old
