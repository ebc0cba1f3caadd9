"""Measuring the self-judge on a hand-labelled set of (request, reply, next state) cases.

``assets/judge-set.jsonl`` holds one case per line: ``id, category, request, reply, next,
next_role, label (+1/0/-1), directive (bool)``. The judge under test is the app's own
:class:`~clawdesk.judge.runner.Judge` with the app's settings; it sees each case exactly as it
would see a logged turn (:meth:`~clawdesk.judge.runner.Judge.vote`).
Reported: reward accuracy (all cases, and the *clear* ones: thanks, moving
on and building on it against redo, correction and complaint), the 3×3 confusion matrix, hint
acceptance precision/recall against ``directive``, the acceptance rate on satisfied cases, and
seconds per judged case.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clawdesk.errors import InputError
from clawdesk.judge.vote import NextState

CLEAR = {"thanks", "moving-on", "building-on", "redo", "correction", "complaint"}
LABELS = (1, 0, -1)
_KEYS = {"id", "category", "request", "reply", "next", "next_role", "label", "directive"}


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
        if not isinstance(case, dict) or (missing := sorted(_KEYS - set(case))):
            raise InputError(f"{path}:{n}: missing key(s) {', '.join(missing) if isinstance(case, dict) else 'all'}")
        if case["label"] not in LABELS or not isinstance(case["directive"], bool):
            raise InputError(f"{path}:{n}: label must be 1, 0 or -1 and directive true or false")
        if case["next_role"] not in ("user", "tool"):
            raise InputError(f"{path}:{n}: next_role must be user or tool")
        cases.append(case)
    if not cases:
        raise InputError(f"{path} holds no cases")
    return cases


def evaluate(judge, cases: list[dict[str, Any]], *, on_case: Callable[[int, int], None] | None = None) -> dict:
    """Judge every case with ``judge`` (a :class:`~clawdesk.judge.runner.Judge`); the report dict."""
    rows = []
    started = time.monotonic()
    for i, case in enumerate(cases):
        t0 = time.monotonic()
        # A text next state is judged as a turn whatever its role; the role reaches the baselines' prompts.
        next_state = NextState(case["next"], case["next_role"])
        verdict = judge.vote(case["request"], case["reply"], next_state, seed=i + 1)
        rows.append(
            {
                "id": case["id"],
                "category": case["category"],
                "label": case["label"],
                "reward": verdict.reward,
                "votes": verdict.votes,
                "directive": case["directive"],
                "hint": verdict.hint,
                "seconds": time.monotonic() - t0,
            }
        )
        if on_case is not None:
            on_case(i + 1, len(cases))
    return summarize(rows, time.monotonic() - started) | {
        "method": judge.config.method,
        "votes": judge.config.votes,
        "model": judge.engine.identity.name,
    }


def summarize(rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    def accuracy(sel: list[dict[str, Any]]) -> float | None:
        return sum(r["reward"] == r["label"] for r in sel) / len(sel) if sel else None

    clear = [r for r in rows if r["category"] in CLEAR]
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
        "clear_accuracy": accuracy(clear),
        "n_clear": len(clear),
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
    """The report as text: the headline numbers, the confusion matrix and per-category accuracy."""

    def pct(x: float | None) -> str:
        return "  n/a" if x is None else f"{x:5.2f}"

    lines = [
        f"judge set: {report['n_cases']} cases · model {report['model']} · method {report['method']} · "
        f"m = {report['votes']}",
        f"reward accuracy      {pct(report['reward_accuracy'])}  (clear cases: {pct(report['clear_accuracy'])}, "
        f"n = {report['n_clear']})",
        f"hint precision       {pct(report['hint_precision'])}",
        f"hint recall          {pct(report['hint_recall'])}  (directive cases)",
        f"hint rate, satisfied {pct(report['hint_rate_satisfied'])}",
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
        lines.append(f"  {cat:<13}{c['n']:3d}  {pct(c['accuracy'])}     {pct(c['hint_rate'])}")
    return "\n".join(lines)
