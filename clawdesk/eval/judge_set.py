"""Measuring the self-judge on a hand-labelled set of (request, reply, next state) cases.

``assets/judge-set.jsonl`` holds one case per line: ``id, category, request, reply, next,
next_role, label (+1/0/-1), directive (bool)``. The judge under test is the app's own
:class:`~clawdesk.judge.runner.Judge` with the app's settings; it sees each case exactly as it
would see a logged turn (:meth:`~clawdesk.judge.runner.Judge.vote`).
Reported: reward accuracy (all cases, and the *clear* ones: thanks, moving
on and building on it against redo, correction and complaint), the 3×3 confusion matrix, hint
acceptance precision/recall against ``directive``, the acceptance rate on satisfied cases, and
seconds per judged case.

Each line may name its ``kind`` (default ``turn``); a file may mix kinds, and ``clawdesk eval
--judge-set`` without a file runs the three shipped files:

- ``turn`` (``assets/judge-set.jsonl``): the keys above.
- ``tool-step`` (``assets/judge-set-tools.jsonl``): ``id, category, request, reply, calls, label,
  directive`` and optionally ``expected`` (the hint a reader would want); ``calls`` is a list of
  ``{name, arguments, status, result}`` (status ``ok | error | denied | timeout``). Judged exactly
  as a logged tool step (:func:`clawdesk.judge.tool_steps.next_state`, then
  :meth:`~clawdesk.judge.runner.Judge.vote`): the rules decide when the statuses say it all, the
  model with the tool framings otherwise. *Clear* tool cases are the ones the model judges
  (categories ``worked`` and ``hidden-failure``: every call ``ok``).
- ``standing`` (``assets/judge-set-standing.jsonl``): ``id, category, request, next, hint,
  label`` (``standing``, ``one-off`` or ``praise``): :func:`clawdesk.judge.standing.classify_hint` on
  the accepted hint; ``unsure`` counts as wrong in the accuracy and is reported on its own. The
  *keep accuracy* is what the memory does with the call: it keeps a standing or unsure hint and
  drops the others, so a one-off taken for praise is wrong in the accuracy but right there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clawdesk.errors import InputError
from clawdesk.judge.standing import LABELS as STANDING_LABELS
from clawdesk.judge.standing import classify_hint_votes
from clawdesk.judge.tool_steps import next_state as tool_next_state
from clawdesk.judge.vote import NextState
from clawdesk.preferences import NOT_KEPT
from clawdesk.store.steps import ToolCallRecord

CLEAR = {"thanks", "moving-on", "building-on", "redo", "correction", "complaint"}
TOOL_CLEAR = {"worked", "hidden-failure"}
LABELS = (1, 0, -1)
KINDS = ("turn", "tool-step", "standing")
SHIPPED_JUDGE_SETS = ("judge-set.jsonl", "judge-set-tools.jsonl", "judge-set-standing.jsonl")  # in assets/
_KEYS = {
    "turn": {"id", "category", "request", "reply", "next", "next_role", "label", "directive"},
    "tool-step": {"id", "category", "request", "reply", "calls", "label", "directive"},
    "standing": {"id", "category", "request", "next", "hint", "label"},
}
_CALL_KEYS = {"name", "arguments", "status", "result"}
CALL_STATUSES = ("ok", "error", "denied", "timeout")


def load_cases(path: Path) -> list[dict[str, Any]]:
    """The cases of a judge-set file; an InputError names the file, the line and the key."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read the judge set {path}: {exc.strerror}") from exc
    cases = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            case = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{n}: not valid JSON ({exc.msg})") from exc
        if not isinstance(case, dict):
            raise InputError(f"{path}:{n}: each line must be a JSON object")
        case.setdefault("kind", "turn")
        if problem := _case_problem(case):
            raise InputError(f"{path}:{n}: {problem}")
        cases.append(case)
    if not cases:
        raise InputError(f"{path} holds no cases")
    return cases


def _case_problem(case: dict[str, Any]) -> str | None:
    """What is wrong with one case, or None (the message names the key)."""
    kind = case["kind"]
    if kind not in KINDS:
        return f"kind must be one of {', '.join(KINDS)}, got {kind!r}"
    if missing := sorted(_KEYS[kind] - set(case)):
        return f"missing key(s) {', '.join(missing)}"
    if kind == "standing":
        if case["label"] not in STANDING_LABELS:
            return "label of a standing case must be " + ", ".join(STANDING_LABELS[:-1]) + f" or {STANDING_LABELS[-1]}"
        return None if str(case["hint"]).strip() else "hint is empty"
    if case["label"] not in LABELS or not isinstance(case["directive"], bool):
        return "label must be 1, 0 or -1 and directive true or false"
    if kind == "turn":
        return None if case["next_role"] in ("user", "tool") else "next_role must be user or tool"
    calls = case["calls"]
    if not isinstance(calls, list) or not calls:
        return "calls must be a non-empty list"
    for i, call in enumerate(calls):
        if not isinstance(call, dict) or (missing := sorted(_CALL_KEYS - set(call))):
            return f"calls[{i}] needs keys {', '.join(sorted(_CALL_KEYS))}"
        if call["status"] not in CALL_STATUSES or not isinstance(call["arguments"], dict):
            return f"calls[{i}]: status must be one of {', '.join(CALL_STATUSES)} and arguments an object"
    return None


def tool_calls(case: dict[str, Any]) -> tuple[ToolCallRecord, ...]:
    """A tool-step case's calls as the store would hand them to the judge."""
    calls = []
    for i, c in enumerate(case["calls"]):
        raw = json.dumps({"name": c["name"], "arguments": c["arguments"]})
        calls.append(ToolCallRecord(i + 1, 0, i, c["name"], c["arguments"], raw, c["result"], c["status"], 0.0))
    return tuple(calls)


def evaluate(judge, cases: list[dict[str, Any]], *, on_case: Callable[[int, int], None] | None = None) -> dict:
    """Judge every case with ``judge`` (a :class:`~clawdesk.judge.runner.Judge`); the report dict.

    The turn cases' numbers are the report's top level (as before tool steps and standing cases
    existed); ``tool_steps`` and ``standing`` hold theirs when the set has such cases."""
    rows: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    seconds = dict.fromkeys(KINDS, 0.0)
    for i, case in enumerate(cases):
        t0 = time.monotonic()
        kind = case["kind"]
        rows[kind].append(_classified(judge, case) if kind == "standing" else _judged(judge, case, seed=i + 1))
        rows[kind][-1]["seconds"] = took = time.monotonic() - t0
        seconds[kind] += took
        if on_case is not None:
            on_case(i + 1, len(cases))
    report = summarize(rows["turn"], seconds["turn"])
    if rows["tool-step"]:
        report["tool_steps"] = summarize(rows["tool-step"], seconds["tool-step"], clear=TOOL_CLEAR)
    if rows["standing"]:
        report["standing"] = summarize_standing(rows["standing"], seconds["standing"])
    return report | {"method": judge.config.method, "votes": judge.config.votes, "model": judge.engine.identity.name}


def _judged(judge, case: dict[str, Any], *, seed: int) -> dict[str, Any]:
    """One turn or tool-step case judged through :meth:`~clawdesk.judge.runner.Judge.vote`."""
    if case["kind"] == "tool-step":
        next_state = tool_next_state(tool_calls(case))
    else:  # a text next state is judged as a turn whatever its role; the role reaches the baselines' prompts
        next_state = NextState(case["next"], case["next_role"])
    verdict = judge.vote(case["request"], case["reply"], next_state, seed=seed)
    return {
        "id": case["id"], "category": case["category"], "label": case["label"], "reward": verdict.reward,
        "votes": verdict.votes, "score_outputs": verdict.score_outputs, "directive": case["directive"],
        "hint": verdict.hint, "note": verdict.note,
        "prompt_version": verdict.prompt_version,
    }  # fmt: skip


def _classified(judge, case: dict[str, Any]) -> dict[str, Any]:
    found = classify_hint_votes(judge, case["hint"], case["request"], case["next"])
    return {
        "id": case["id"], "category": case["category"], "label": case["label"], "kind": found.kind,
        "margins": [round(m, 3) for m in found.margins],
        "praise_margin": None if found.praise_margin is None else round(found.praise_margin, 3),
        "rule": found.rule,
    }  # fmt: skip


def summarize_standing(rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """Accuracy of the standing/one-off/praise classifier (``unsure`` counts as wrong), its unsure
    rate, the accuracy on the cases it decided, the keep accuracy (kept, i.e. standing or unsure,
    exactly when the label is standing) and the confusion matrix (label → decided kind)."""
    decided = [r for r in rows if r["kind"] != "unsure"]
    kept_right = [(r["kind"] not in NOT_KEPT) == (r["label"] == "standing") for r in rows]  # as note_hint keeps
    confusion = {a: {b: 0 for b in (*STANDING_LABELS, "unsure")} for a in STANDING_LABELS}
    for r in rows:
        confusion[r["label"]][r["kind"]] += 1
    return {
        "n_cases": len(rows),
        "accuracy": sum(r["kind"] == r["label"] for r in rows) / len(rows) if rows else None,
        "decided_accuracy": sum(r["kind"] == r["label"] for r in decided) / len(decided) if decided else None,
        "unsure_rate": (len(rows) - len(decided)) / len(rows) if rows else None,
        "keep_accuracy": sum(kept_right) / len(rows) if rows else None,
        "confusion": confusion,
        "seconds_per_case": seconds / len(rows) if rows else None,
        "cases": rows,
    }


def summarize(rows: list[dict[str, Any]], seconds: float, *, clear: set[str] = CLEAR) -> dict[str, Any]:
    """The numbers of judged turn (or tool-step) rows; ``clear`` names the categories of the clear accuracy."""

    def accuracy(sel: list[dict[str, Any]]) -> float | None:
        return sum(r["reward"] == r["label"] for r in sel) / len(sel) if sel else None

    clear_rows = [r for r in rows if r["category"] in clear]
    confusion = {str(a): {str(b): 0 for b in LABELS} for a in LABELS}  # label → judged reward → count
    for r in rows:
        confusion[str(r["label"])][str(r["reward"])] += 1
    accepted = [r for r in rows if r["hint"] is not None]
    directive = [r for r in rows if r["directive"]]
    satisfied = [r for r in rows if r["label"] == 1]
    by_category = {}
    for cat in sorted({r["category"] for r in rows}):
        sel = [r for r in rows if r["category"] == cat]
        by_category[cat] = {"n": len(sel), "accuracy": accuracy(sel), "hint_rate": _rate(sel)}
    return {
        "n_cases": len(rows),
        "reward_accuracy": accuracy(rows),
        "clear_accuracy": accuracy(clear_rows),
        "n_clear": len(clear_rows),
        "confusion": confusion,
        "hint_precision": sum(r["directive"] for r in accepted) / len(accepted) if accepted else None,
        "hint_recall": _rate(directive),
        "hint_rate_satisfied": _rate(satisfied),
        "seconds_per_case": seconds / len(rows) if rows else None,
        "by_category": by_category,
        "cases": rows,
    }


def _rate(rows: list[dict[str, Any]]) -> float | None:
    return sum(r["hint"] is not None for r in rows) / len(rows) if rows else None


def format_report(report: dict[str, Any]) -> str:
    """The report as text: per kind of case, the headline numbers, the confusion matrix and per-category accuracy."""
    lines = [f"judge set · model {report['model']} · method {report['method']} · m = {report['votes']}"]
    if report["n_cases"]:
        lines += ["", f"turns: {report['n_cases']} cases", *_format_judged(report, "reward accuracy")]
    if tools := report.get("tool_steps"):
        lines += ["", f"tool steps: {tools['n_cases']} cases (clear = the model judges: every call ok)"]
        lines += _format_judged(tools, "tool-step accuracy")
    if standing := report.get("standing"):
        lines += ["", f"standing, one-off or praise hints: {standing['n_cases']} cases", *_format_standing(standing)]
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "  n/a" if x is None else f"{x:5.2f}"


def _format_judged(report: dict[str, Any], headline: str) -> list[str]:
    lines = [
        f"{headline:<21}{_pct(report['reward_accuracy'])}  (clear cases: {_pct(report['clear_accuracy'])}, "
        f"n = {report['n_clear']})",
        f"hint precision       {_pct(report['hint_precision'])}",
        f"hint recall          {_pct(report['hint_recall'])}  (directive cases)",
        f"hint rate, satisfied {_pct(report['hint_rate_satisfied'])}",
        f"seconds per case     {report['seconds_per_case']:.2f}",
        "",
        "confusion (rows: label, columns: judged)   +1    0   -1",
    ]
    for label in LABELS:
        row = report["confusion"][str(label)]
        lines.append(f"  {label:+d}".replace("+0", " 0") + " " * 39 + "".join(f"{row[str(b)]:5d}" for b in LABELS))
    lines.append("")
    lines.append("category        n  accuracy  hint rate")
    for cat, c in report["by_category"].items():
        lines.append(f"  {cat:<13}{c['n']:3d}  {_pct(c['accuracy'])}     {_pct(c['hint_rate'])}")
    return lines


def _format_standing(report: dict[str, Any]) -> list[str]:
    lines = [
        f"accuracy             {_pct(report['accuracy'])}  (unsure counts as wrong)",
        f"unsure rate          {_pct(report['unsure_rate'])}",
        f"accuracy, decided    {_pct(report['decided_accuracy'])}",
        f"keep accuracy        {_pct(report['keep_accuracy'])}  (kept: standing or unsure; right if labelled standing)",
        f"seconds per case     {report['seconds_per_case']:.2f}",
        "",
        f"{'confusion (rows: label, columns: decided)':<43}" + "".join(f"{k:>9}" for k in (*STANDING_LABELS, "unsure")),
    ]
    for label, row in report["confusion"].items():
        lines.append(f"  {label:<41}" + "".join(f"{row[k]:9d}" for k in row))
    return lines
