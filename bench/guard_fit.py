"""Does the general-ability guard see what the eval's neutral set sees? Every kept version of eval runs, two text sets.

    python bench/guard_fit.py runs/sc3-brief-hi-there-stop/seed-0 runs/sc3-brief-hi-there-stop/seed-1 ...

The trainer rejects a version whose perplexity ratio on ``assets/guard-set.jsonl`` (12 texts) is over
``train.max_ppl_ratio``; the eval reports the ratio on ``assets/neutral-set.jsonl`` (24 other texts), and
issue #20's goal is on that one. For every version ``home/adapters/vN`` of each run this prints both
ratios (the guard's as ``guard.check`` computes it, beside the one the trainer recorded in
``metadata.json``), and the neutral set's two halves (even and odd lines, 12 texts each). Then, over
all versions: how often the guard passed a version the neutral set puts over the limit, and the mean
gap guard − neutral against the mean gap between the halves. A gap between two halves of one set as
large as guard − neutral says a dozen texts are too few to measure a ratio this close to 1 (sampling
spread), not that they measure something else. ``--candidate FILE`` scores another guard text set
(same format) beside the shipped one, with the same summary and its seconds per version: how a
replacement set would have judged the same versions. ``--per-text`` adds each text's own ratio, most
drifted first (which texts carry a set's ratio); ``--only v2,v8`` limits the versions scored.
Nothing is written.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import time
from pathlib import Path

from clawdesk.config import TrainConfig
from clawdesk.learn import guard
from clawdesk.learn.base_model import load_base
from clawdesk.learn.learner import Learner
from clawdesk.store import Store

NEUTRAL = Path(__file__).resolve().parents[1] / "assets" / "neutral-set.jsonl"


def _ratio(learner: Learner, pairs) -> float:
    return math.exp(learner.mean_nll(pairs, adapter=True) - learner.mean_nll(pairs, adapter=False))


def _per_text(learner: Learner, pairs, texts: list[str]) -> list[tuple[float, str]]:
    """Each text's own ratio, highest first (the learner remembers the scores, so nothing runs twice)."""
    return sorted(((_ratio(learner, [pair]), text) for pair, text in zip(pairs, texts, strict=True)), reverse=True)


def _system_prompt(home: Path) -> str:
    store = Store.open(home / "clawdesk.db")
    try:
        row = store.db.execute("SELECT system_prompt FROM sessions LIMIT 1").fetchone()
        return row[0] if row else ""
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+", help="eval runs' --out folders (with home/ and result.json)")
    ap.add_argument("--limit", type=float, default=1.05, help="the ratio limit (train.max_ppl_ratio)")
    ap.add_argument("--candidate", type=Path, help="another guard text set (JSONL) to score beside the shipped one")
    ap.add_argument("--per-text", action="store_true", help="print each text's own ratio per version and set")
    ap.add_argument("--only", default="", help="comma-separated versions to score (v2,v8); all when empty")
    args = ap.parse_args(argv)
    only = {v.strip() for v in args.only.split(",") if v.strip()}
    rows = []
    for run in args.runs:
        result = json.loads((run / "result.json").read_text(encoding="utf-8"))
        gguf, home = Path(result["config"]["model_path"]), run / "home"
        system = _system_prompt(home)
        paths = {"guard": guard.default_guard_path(), "neutral": NEUTRAL}
        if args.candidate:
            paths["candidate"] = args.candidate
        sets = {name: guard.load_guard_set(gguf, path, system_prompt=system).pairs for name, path in paths.items()}
        questions = {name: [r["prompt"] for r in guard.read_rows(path)] for name, path in paths.items()}
        sets["half_a"], sets["half_b"] = sets["neutral"][0::2], sets["neutral"][1::2]
        versions = sorted((p for p in (home / "adapters").glob("v*") if p.is_dir()), key=lambda p: int(p.name[1:]))
        versions = [v for v in versions if not only or v.name in only]
        base, info = load_base(gguf, device="cpu", load_in_4bit=False)
        for vdir in versions:  # each version on a fresh copy of the base (PEFT wraps the model it is given)
            config = TrainConfig(device="cpu", load_in_4bit=False)
            learner = Learner(copy.deepcopy(base), info, config, parent_dir=vdir)
            ratios, seconds = {}, {}
            for name, pairs in sets.items():
                t0 = time.perf_counter()
                ratios[name] = _ratio(learner, pairs)
                seconds[name] = time.perf_counter() - t0
            rows.append(ratios | {f"{k}_s": v for k, v in seconds.items()})
            meta = json.loads((vdir / "metadata.json").read_text(encoding="utf-8"))
            recorded = ((meta.get("validation") or {}).get("guard") or {}).get("ppl_ratio")
            print(
                f"{run.parent.name}/{run.name} {vdir.name}: guard {ratios['guard']:.3f} (recorded "
                f"{recorded if recorded is None else f'{recorded:.3f}'}), neutral {ratios['neutral']:.3f} "
                f"(halves {ratios['half_a']:.3f} / {ratios['half_b']:.3f})"
                + (f", candidate {ratios['candidate']:.3f}" if "candidate" in ratios else ""),
                flush=True,
            )
            if args.per_text:
                for name, texts in questions.items():
                    print(f"  {name}, each text:")
                    for ratio, question in _per_text(learner, sets[name], texts):
                        print(f"    {ratio:.3f}  {question}")
    if not rows:
        print("no adapter versions in these runs")
        return 1
    over = [r for r in rows if r["neutral"] > args.limit]
    print(f"\n{len(rows)} versions; neutral > {args.limit}: {len(over)}")
    halves = [r["half_a"] - r["half_b"] for r in rows]
    print(f"half a − half b: mean {statistics.mean(halves):+.4f}, mean |·| {statistics.mean(map(abs, halves)):.4f}")
    for name in ("guard", "candidate") if args.candidate else ("guard",):
        _summary(name, rows, over, args.limit)
    return 0


def _summary(name: str, rows: list[dict[str, float]], over: list[dict[str, float]], limit: float) -> None:
    """How set ``name`` judged the versions: misses, false alarms, its gap to the neutral set, its cost."""
    missed = sum(r[name] <= limit for r in over)
    alarms = sum(r[name] > limit and r["neutral"] <= limit for r in rows)
    gap = [r[name] - r["neutral"] for r in rows]
    line = f"{name}: passed {missed} of the {len(over)} over the limit, rejected {alarms} under it; "
    line += f"{name} − neutral mean {statistics.mean(gap):+.4f}, mean |·| {statistics.mean(map(abs, gap)):.4f}"
    if len(rows) > 2:
        line += f", correlation {statistics.correlation([r[name] for r in rows], [r['neutral'] for r in rows]):.3f}"
    seconds = statistics.mean(r[name + "_s"] for r in rows)
    print(line + f"; {seconds:.1f} s per version (both passes, with and without the adapter)")


if __name__ == "__main__":
    raise SystemExit(main())
