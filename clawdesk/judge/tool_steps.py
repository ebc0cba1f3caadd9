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
- ``ok``: the call ran. Failure evidence in its result (a test run that exits 0 but prints
  ``2 failed``, a traceback, ``{"ok": false}``: :mod:`clawdesk.judge.evidence`, fixed rules that
  only ever find failure) votes −1, without a hint (``tool-v3-evidence``;
  ``judge.tool_evidence = false`` turns it off); so does a ``write_file`` / ``edit_file`` that
  changed a near miss of a path the request named (``notes/a.md`` asked, ``a.md`` written:
  :mod:`clawdesk.judge.targets`), with the named path as the hint. Otherwise whether the call did
  what was asked (an empty search, a file the request did not name) is for the model to say.

A step with any call voting −1 gets m votes of −1 and the rules' hint (``prompt_version``
``tool-v1-rules``): one wrong call makes the step's reply wrong; then failure evidence in any
``ok`` result, or a write beside the named file, gives m votes of −1 (``tool-v3-evidence``). A
step whose calls are all no-signal denials gets m votes of 0. Otherwise the base model judges the
``ok`` results together (``tool-v1-channel``), always with the channel method whatever ``judge.method`` says: the same
votes as for a turn (:class:`clawdesk.judge.channel.ChannelMethod`) with the tool framings
(:data:`clawdesk.judge.channel.TOOL`: "The tool call worked / failed and returned: <results>",
then "says how" on votes that say failed); when the majority says yes the results' text is the
hint. Votes combine by the same majority rule as for turns; the step's reward in training is
their mean (:attr:`StepJudgment.reward`, the step-wise reward's Σ rᵢ/m).

This module owns the rules and the step's :class:`~clawdesk.judge.vote.NextState`
(:func:`next_state`); :meth:`clawdesk.judge.runner.Judge.vote` applies them, and
:meth:`~clawdesk.judge.runner.Judge.judge_step` builds the step's judgment and its teacher prompt
(:mod:`clawdesk.judge.teacher`).
"""

from __future__ import annotations

from dataclasses import dataclass

from clawdesk.judge.channel import TOOL
from clawdesk.judge.evidence import find_evidence
from clawdesk.judge.targets import find_misses
from clawdesk.judge.vote import Ballot, NextState
from clawdesk.store.steps import ToolCallRecord

RULES_VERSION = "tool-v1-rules"
EVIDENCE_VERSION = "tool-v3-evidence"  # v3: a write or edit beside the file the request named (judge/targets.py)
CHANNEL_VERSION = TOOL.version
# The wording of the denials, as clawdesk/tools/registry.py and consent.py write them (a test runs the
# real registry to keep these in step).
INSTEAD_PREFIX = "The user did not run this call and said instead:"
NO_CONSENT_MARK = "needs the user's consent and none was given"
HINT_CHARS = 600  # an error trace can be long; the teacher needs its gist (head and tail kept)


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


def next_state(calls: tuple[ToolCallRecord, ...] | list[ToolCallRecord]) -> NextState:
    """A tool step's next state: all its calls (for the rules), and the ``ok`` results as the text a model reads."""
    return NextState(results_text([c for c in calls if c.status == "ok"]), "tool", tuple(calls))


def cast_rules(
    calls: tuple[ToolCallRecord, ...], ballot: Ballot, *, evidence: bool = True, request: str = ""
) -> tuple[str, str | None] | None:
    """The rules' m score and m hint votes and their hint, or None when the model must judge the ``ok`` results.

    The statuses decide first; then, with ``evidence``, failure evidence in the ``ok`` results
    (:mod:`clawdesk.judge.evidence`) or a write beside the file ``request`` named
    (:mod:`clawdesk.judge.targets`) gives m votes of −1 (see :func:`cast_evidence`)."""
    signals = [call_signal(c) for c in calls]
    if not (any(s.vote == -1 for s in signals) or all(s.vote == 0 for s in signals)):
        return cast_evidence(calls, ballot, request) if evidence else None
    value = -1 if any(s.vote == -1 for s in signals) else 0
    instead = [s.hint for s in signals if s.hint and s.why.endswith("said instead")]
    errors = [s.hint for s in signals if s.hint and not s.why.endswith("said instead")]
    hint = "\n".join(instead or errors) or None
    why = "; ".join(s.why for s in signals)
    for _ in range(ballot.m):
        ballot.cast("score", value, f"rules: {why} \\boxed{{{value:+d}}}")
    for _ in range(ballot.m):
        ballot.cast("hint", int(hint is not None), f"rules: {'the result says how' if hint else 'no hint'}")
    return RULES_VERSION, hint


def cast_evidence(
    calls: tuple[ToolCallRecord, ...], ballot: Ballot, request: str = ""
) -> tuple[str, str | None] | None:
    """m votes of −1 when an ``ok`` result shows failure evidence or a write or edit missed the file
    ``request`` named, else None. The logged votes quote what was found.

    Evidence in a result gives no hint: a hint is appended to the teacher's prompt as the user's own
    instruction, and the lines that tripped a rule are text whoever controls the result wrote (a
    page, an MCP server, a script's output): ``error: from now on, always …`` must not become the
    user's words. A missed file's hint names only the path from the user's own request."""
    found = find_evidence(calls)
    misses = [] if found else find_misses(request, calls)
    if not found and not misses:
        return None
    lines = [f"{e.rule} in {e.text()}" for e in found] + [f"another file than named: {m.text()}" for m in misses]
    why = _clip("; ".join(lines)).replace("\n", " | ")
    hint = misses[0].hint() if misses else None
    for _ in range(ballot.m):
        ballot.cast("score", -1, f"evidence: {why} \\boxed{{-1}}")
    for _ in range(ballot.m):
        if hint is None:
            ballot.cast("hint", 0, "evidence: no hint (the lines are the tool's text, not the user's)")
        else:
            ballot.cast("hint", 1, f"evidence: a missed file: {hint}")
    return EVIDENCE_VERSION, hint


def _clip(text: str) -> str:
    if len(text) <= HINT_CHARS:
        return text
    half = (HINT_CHARS - 5) // 2
    return f"{text[:half]} […] {text[-half:]}"
