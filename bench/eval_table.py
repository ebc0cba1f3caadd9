"""Markdown rows for docs/learning.md from `clawdesk eval --seeds N --out DIR` results.

    python bench/eval_table.py runs/mem-no-lists-oracle-on runs/mem-no-lists-oracle-off --at 0,1,8,16,48

One row per DIR, read from DIR/result.json (the mean over seeds) and DIR/seed-K/result.json (each
seed). A single-seed run (no seed-K folders) is a row of one seed. Scores at an interaction are the
held-out score then: the last point scored at or before it (a score holds until the next scoring).
"to ≥ 0.8" is the run's first score ≥ 0.8; "to target (phase 1)" the first phase's rule (≥ 0.8 or ≥ its
base + 0.3, issue #20). A scenario adds one line per phase: its base, final score and each seed's
interactions to target.

    python bench/eval_table.py runs/brief-stu2-s0 --versions

``--versions`` prints, per seed, one line per adapter version from its metadata.json instead: its status,
the general-ability guard's perplexity ratio (and each ratio its retries tried), each preference item's
learned check (decision; the behaviour test's agreeing prompts and mean words with / without the items,
on the item's recent turns and, since stop 35, on new prompts) and the lever terms' step metrics
(``student_adv_mean``, ...).

    python bench/eval_table.py runs/sc-anl-self-ctl-s1 --topic 24

``--topic N`` prints, per seed, how many of the last N served replies to a chat's first message share no
content word with it (words of 3+ letters outside a short stop list, compared on their first 5 letters),
with examples: a crude lexical check for replies that answer no question at all ("Your answer is too
long."), which a persona's form check alone counted as satisfied until the eval's simulated user applied
the same test (:mod:`clawdesk.eval.topic`, stop 37). A reply can miss it and still answer (synonyms), so
read the examples, not only the count.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

from clawdesk.eval.topic import addresses


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"eval_table: cannot read {path}: {exc}") from exc


def _seed_runs(run_dir: Path) -> list[dict]:
    seeds = sorted(run_dir.glob("seed-*/result.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    return [_load(p) for p in seeds] or [_load(run_dir / "result.json")]


def score_at(points: list[list[float]], x: float) -> float | None:
    """The held-out score after ``x`` interactions: the last point scored at or before it."""
    before = [s for px, s in points if px <= x]
    return before[-1] if before else None


def _fmt(v, spec=".2f") -> str:
    return "–" if v is None else format(v, spec)


def _per_seed(values) -> str:
    return " / ".join("–" if v is None else str(v) for v in values)


def row(run_dir: Path, at: list[float]) -> tuple[str, list[str]]:
    """The run's table row and, for a scenario, one line per phase."""
    runs = _seed_runs(run_dir)
    mean = _load(run_dir / "result.json") if len(runs) > 1 else runs[0]
    scores = " / ".join(_fmt(score_at(mean["scores"], x)) for x in at)
    finals = [r["final_score"] for r in runs]
    agreement = [r.get("judge_agreement") for r in runs]
    judged = [a for a in agreement if a]
    judge = (
        "reward "
        + " / ".join(_fmt(a["reward_agreement"]) for a in judged)
        + ", hint on unsatisfied "
        + " / ".join(_fmt(a["hint_rate_unsatisfied"]) for a in judged)
        if judged
        else "oracle"
    )
    memory = runs[0].get("memory")
    cells = [
        run_dir.name,
        _per_seed(r["seed"] for r in runs),
        scores,
        f"{min(finals):.2f}–{max(finals):.2f}",
        _per_seed(r["interactions_to_target"] for r in runs),
        _per_seed(r["phases"][0]["interactions_to_target"] for r in runs),
        _per_seed(r.get("sessions_to_effect") for r in runs),
        (" / ".join(_fmt(r.get("score_without_memory")) for r in runs) if memory else "(off)"),
        (_per_seed(sum(i["status"] == "learned" for i in r.get("memory_items", [])) for r in runs) if memory else "–"),
        f"{max(r['max_ppl_ratio'] for r in runs):.3f}",
        _per_seed(f"{len(r['kept_versions'])}/{len(r['rejected_versions'])}" for r in runs),
        judge,
        f"{sum(r['wall_s'] for r in runs) / len(runs):.0f}",
    ]
    phases = []
    if len(runs[0]["phases"]) > 1:
        for k, ph in enumerate(runs[0]["phases"]):
            base = sum(r["phases"][k]["base_score"] for r in runs) / len(runs)
            final = sum(r["phases"][k]["final_score"] for r in runs) / len(runs)
            to_target = _per_seed(r["phases"][k]["interactions_to_target"] for r in runs)
            phases.append(
                f"  phase {k + 1} ({' + '.join(ph['personas'])}, from {ph['start']}): base {base:.2f} → "
                f"{final:.2f}, to target per seed {to_target}"
            )
        retention = {n: [r["retention"][n] for r in runs] for n in runs[0]["retention"]}
        phases.append("  retention: " + (", ".join(f"{n} {_per_seed(v)}" for n, v in retention.items()) or "none"))
    return "| " + " | ".join(cells) + " |", phases


def _homes(run_dir: Path) -> list[tuple[str, Path]]:
    """(name, data dir) of each seed of the run in seed order: ``seed-K/home``, or the run's own ``home``."""
    seeds = sorted(run_dir.glob("seed-*/home"), key=lambda p: int(p.parent.name.split("-")[1]))
    return [(home.parent.name, home) for home in seeds] or [(run_dir.name, run_dir / "home")]


def _guard(meta: dict) -> str:
    """The general-ability guard's perplexity ratio of a version, and every ratio it tried (retries)."""
    guard = (meta.get("validation") or {}).get("guard") or {}
    if "ppl_ratio" not in guard:
        return ""
    tried = guard.get("tried") or []
    retries = f" (tried {', '.join(f'{t:.3f}' for t in tried)})" if len(tried) > 1 else ""
    return f", ppl {guard['ppl_ratio']:.3f}{retries}"


def version_lines(run_dir: Path) -> list[str]:
    """One line per adapter version of every seed of the run (``--versions``)."""
    lines = []
    for name, home in _homes(run_dir):
        metas = [_load(p) for p in home.glob("adapters/v*/metadata.json")]
        lines.append(f"{name}:")
        for m in sorted(metas, key=lambda m: m["version"]):
            items = []
            for c in (m.get("validation") or {}).get("memory", []):
                form = ""
                if c.get("form"):
                    with_, without = c["form_words"]
                    form = f", {c['form']} {c['form_agree']} of {c['form_n']} (words {with_:.0f} / {without:.0f})"
                    if c.get("new_n"):  # since stop 35: also on the probe's prompts no turn held
                        with_, without = c["new_words"]
                        form += f", new {c['new_agree']} of {c['new_n']} (words {with_:.0f} / {without:.0f})"
                items.append(f"#{c['item_id']} {c['status']} → {c['decision']}{form}")
            levers = {k: v for k, v in (m.get("metrics") or {}).items() if k.startswith(("student_", "distill_"))}
            lever = "; " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(levers.items())) if levers else ""
            head = f"  v{m['version']} {m['status']}{_guard(m)}: "
            lines.append(head + ("; ".join(items) or "no items checked") + lever)
    return lines


def off_topic(run_dir: Path, last: int) -> list[str]:
    """Per seed: of the last ``last`` served replies to a chat's first message, those sharing no content word."""
    lines = []
    for name, home in _homes(run_dir):
        with sqlite3.connect(f"file:{home / 'clawdesk.db'}?mode=ro", uri=True) as db:
            rows = db.execute(
                "SELECT user_content, reply_content FROM turns t WHERE reply_content != '' AND seq = "
                "(SELECT MIN(seq) FROM turns u WHERE u.session_id = t.session_id) ORDER BY id"
            ).fetchall()[-last:]
        off = [reply for user, reply in rows if not addresses(user, reply)]
        lines.append(f"{name}: {len(off)} of the last {len(rows)} replies share no content word with the question")
        lines += [f"  {reply[:100]!r}" for reply in off[:3]]
    return lines


HEADER = (
    "| run | seeds | mean score at {at} | final (min–max) | to ≥ 0.8 | to target (phase 1) | sessions to effect "
    "| without memory "
    "| items learned | max ppl ratio | versions kept/rejected | judge (per seed) | wall s per seed |"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", type=Path, help="eval --out folders")
    ap.add_argument("--at", default="0,8,16,24,48", help="interactions to show the mean score at")
    ap.add_argument("--versions", action="store_true", help="per-version learned checks and lever metrics")
    ap.add_argument("--topic", type=int, metavar="N", help="off-topic count of the last N served first replies")
    args = ap.parse_args(argv)
    if args.topic:
        for d in args.dirs:
            print("\n".join(off_topic(d, args.topic)))
        return 0
    if args.versions:
        for d in args.dirs:
            print("\n".join(version_lines(d)))
        return 0
    at = [float(x) for x in args.at.split(",")]
    print(HEADER.format(at=" / ".join(f"{x:g}" for x in at)))
    print("|" + " --- |" * (HEADER.count("|") - 1))
    notes = []
    for d in args.dirs:
        line, phases = row(d, at)
        print(line)
        notes += [f"{d.name}:", *phases] if phases else []
    if notes:
        print("\n" + "\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
