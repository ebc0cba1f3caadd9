"""Judging a tool step from its next state: the results of all the tool calls it made.

A step of the agent loop that called tools is a training sample of its own (OpenClaw-RL trains
per model call); its next state is not the user's next message but what its calls returned. Each
call's result first goes through fixed rules, with no model (its ``tool_calls.status`` says what
happened, so nothing needs judging):

- ``error`` / ``timeout``: the call did not work: vote −1. The result is what the registry or the
  tool said went wrong (``bad arguments for read_file: 'path' is required. Call it as …``, ``there
  is no tool called …``, a shell command's exit code and stderr), which says how the call should
  have been made: it is the hint (when :func:`clawdesk.judge.parse.hint_problem` accepts it).
- ``denied`` with "No, do this instead…": the user refused the call and said what to do: vote −1,
  and the user's words are the hint (a directive; it wins over any error message of the step).
- ``denied`` by the user (*No*) or by policy ``never`` (a tool that was not offered): vote −1, no hint.
- ``denied`` because nobody could be asked (headless without ``--yes``/``--allow``): no signal
  about the call: vote 0. Training would only teach the model to avoid tools that need consent.
- ``ok``: the call ran; whether it did what was asked (an empty search, a test run that exits 0
  but prints a failure) is for the model to say.

A step with any call voting −1 gets m votes of −1 and the rules' hint (``prompt_version``
``tool-v1-rules``): one wrong call makes the step's reply wrong. A step whose calls are all
no-signal denials gets m votes of 0. Otherwise the base model judges the ``ok`` results together
(``tool-v1-channel``), always with the channel method whatever ``judge.method`` says: vote i
compares "The tool call worked and returned: <results>" with "The tool call failed and returned:
<results>" (framings in ``prompts/tool_v1.txt``) and, on votes that say failed, whether the results
say how the call should have been ("says-how"); when the majority says yes the results' text is the
hint. Votes combine by the same majority rule as for turns; the step's reward in training is
their mean (:attr:`StepJudgment.reward`, the step-wise reward's Σ rᵢ/m).

The teacher prompt (OPD) is the step's served prompt with the hint appended to the turn's user
message, the last user message of the prompt: the assistant's earlier calls and their tool
results after it stay as they were.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from clawdesk.engine import Engine
from clawdesk.engine.prompt import build_messages
from clawdesk.judge import channel
from clawdesk.judge.fewshot import hint_from_next_state
from clawdesk.judge.parse import enhanced_user_message, hint_problem, majority
from clawdesk.judge.runner import Judge, VoteProgress
from clawdesk.store import Store
from clawdesk.store.step_judgments import PendingStep, StepJudgment
from clawdesk.store.steps import ToolCallRecord

TEMPLATE = "tool_v1.txt"
SCORE_SECTIONS = {"worked": 1, "failed": -1}
HINT_SECTIONS = {"says-how yes": 1, "says-how no": 0}
RULES_VERSION = "tool-v1-rules"
CHANNEL_VERSION = "tool-v1-channel"
# The wording of the denials, as clawdesk/tools/registry.py and consent.py write them (a test runs the
# real registry to keep these in step).
INSTEAD_PREFIX = "The user did not run this call and said instead:"
NO_CONSENT_MARK = "needs the user's consent and none was given"
HINT_CHARS = 600  # an error trace can be long; the teacher needs its gist (head and tail kept)
_SENTINEL = "\x00clawdesk-user-message\x00"


@dataclass(frozen=True)
class CallSignal:
    """What the rules make of one call: a vote (None = the model must judge its result) and a hint."""

    vote: int | None
    hint: str | None
    why: str


def call_signal(call: ToolCallRecord) -> CallSignal:
    """The fixed rules for one call's result (see the module docstring)."""
    result = call.result.strip()
    if call.status == "ok":
        return CallSignal(None, None, f"{call.name}: ok")
    if call.status == "denied":
        if result.startswith(INSTEAD_PREFIX):
            return CallSignal(-1, result[len(INSTEAD_PREFIX) :].strip(), f"{call.name}: denied, the user said instead")
        if NO_CONSENT_MARK in result:
            return CallSignal(0, None, f"{call.name}: denied without asking anyone (no signal)")
        return CallSignal(-1, None, f"{call.name}: denied")
    return CallSignal(-1, _clip(f"{call.name}: {result}"), f"{call.name}: {call.status}")


def results_text(calls: tuple[ToolCallRecord, ...] | list[ToolCallRecord]) -> str:
    """The next state the model reads: every result in order, named by its tool when there are several."""
    if len(calls) == 1:
        return calls[0].result
    return "\n".join(f"[{c.name}] {c.result}" for c in calls)


def judge_step(
    judge: Judge, store: Store, pending: PendingStep, *, on_progress: Callable[[VoteProgress], None] | None = None
) -> StepJudgment:
    """m score votes and m hint votes on one tool step, its hint and its teacher prompt."""
    started = time.monotonic()
    m = judge.config.votes
    turn, step = pending.turn, pending.step
    signals = [call_signal(c) for c in pending.calls]
    outputs: dict[str, list[str]] = {"score": [], "hint": []}
    votes: dict[str, list[int | None]] = {"score": [], "hint": []}

    def done(kind: str, vote: int | None, text: str) -> None:
        outputs[kind].append(text)
        votes[kind].append(vote)
        if on_progress is not None:
            on_progress(VoteProgress(turn.id, kind, len(outputs["score"]) + len(outputs["hint"]), 2 * m))

    hint: str | None = None
    if any(s.vote == -1 for s in signals) or all(s.vote == 0 for s in signals):
        version = RULES_VERSION
        value = -1 if any(s.vote == -1 for s in signals) else 0
        instead = [s.hint for s in signals if s.hint and s.why.endswith("said instead")]
        errors = [s.hint for s in signals if s.hint and not s.why.endswith("said instead")]
        hint = "\n".join(instead or errors) or None
        why = "; ".join(s.why for s in signals)
        for _ in range(m):
            done("score", value, f"rules: {why} \\boxed{{{value:+d}}}")
        for _ in range(m):
            done("hint", int(hint is not None), f"rules: {'the result says how' if hint else 'no hint'}")
    else:
        version = CHANNEL_VERSION
        ok = [c for c in pending.calls if c.status == "ok"]
        next_state = results_text(ok)
        for i in range(m):
            _channel_vote(judge, turn.user_content, step.reply_content, next_state, i, done)
        if majority(votes["hint"]) == 1:
            hint = hint_from_next_state(next_state)
    note = ""
    if hint is not None and (problem := hint_problem(hint, reply=step.reply_content)):
        hint, note = None, problem
    enhanced = None
    if hint is not None:
        enhanced, problem = step_teacher_prompt(judge.policy, pending, enhanced_user_message(turn.user_content, hint))
        note = "; ".join(x for x in (note, problem) if x)
    ident = judge.engine.identity
    return StepJudgment(
        step_id=step.id,
        prompt_version=version,
        judge_model_name=ident.name,
        judge_model_sha256=ident.sha256,
        score_outputs=outputs["score"],
        votes=votes["score"],
        hint_outputs=outputs["hint"],
        hint=hint,
        enhanced_prompt_ids=enhanced,
        seconds=time.monotonic() - started,
        note=note,
    )


def _channel_vote(judge: Judge, request: str, reply: str, next_state: str, vote: int, done) -> None:
    """Vote ``vote``: "worked" vs "failed" on the results, then (unless worked) "says how" vs not."""
    frames = channel.load_template(TEMPLATE, (*SCORE_SECTIONS, *HINT_SECTIONS))
    prefix, cont = channel.context(request, reply, frames), channel.continuation(next_state)

    def best(sections: dict[str, int], prior: dict[str, float] | None = None) -> tuple[int, str]:
        # Judge._continuation yields to the chat like every turn vote (same gate, same stop event).
        found = {name: judge._continuation(prefix + frames.framing(name, vote), cont) for name in sections}
        return channel.decide(found, sections, prior=prior)

    value, text = best(SCORE_SECTIONS)
    done("score", value, f"{text} \\boxed{{{'+1' if value == 1 else '-1'}}}")
    if value == 1:  # a call that worked needs no correction: not asked, counts as "no"
        done("hint", 0, "channel not asked (worked)\nUseful: no")
        return
    says, text = best(HINT_SECTIONS, {"says-how yes": channel.SAYS_HOW_MARGIN})
    done("hint", says, f"{text}\nUseful: {'yes' if says else 'no'}")


def step_teacher_prompt(policy: Engine, pending: PendingStep, enhanced_user: str) -> tuple[list[int] | None, str]:
    """The step's served prompt with the turn's user message replaced by ``enhanced_user``; else (None, why).

    The tools block and the earlier calls and results of the prompt are not stored as messages, so
    the prompt is not re-rendered from messages (as :func:`clawdesk.judge.runner.teacher_prompt`
    does for a turn) but edited as text: the served ids are decoded (and must encode back to
    exactly themselves), the user message is found where step 0's prompt ends it (the template's
    generation tail follows it there), and the hint is inserted right after it. For a template that
    renders a user message as its plain content this is what rendering the enhanced message gives.
    """
    turn, served = pending.turn, pending.step.prompt_ids
    if turn.model_sha256 != policy.identity.sha256:
        return None, "served by another model file; no OPD prompt"
    text, first = policy.detokenize(served), policy.detokenize(pending.first_prompt_ids)
    if policy.tokenize(text) != served:
        return None, "served step prompt could not be rebuilt exactly; no OPD prompt"
    sample = policy.render(build_messages("", [], _SENTINEL), thinking=turn.thinking)
    tail = sample[sample.rindex(_SENTINEL) + len(_SENTINEL) :]  # what the template writes after a last user message
    end = len(first) - len(tail)
    user = turn.user_content
    if not first.endswith(user + tail) or text[:end] != first[:end]:
        return None, "the turn's user message was not found in the step prompt; no OPD prompt"
    return policy.tokenize(text[: end - len(user)] + enhanced_user + text[end:]), ""


def _clip(text: str) -> str:
    if len(text) <= HINT_CHARS:
        return text
    half = (HINT_CHARS - 5) // 2
    return f"{text[:half]} […] {text[-half:]}"
