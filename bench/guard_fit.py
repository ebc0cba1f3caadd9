"""Does the general-ability guard see what the eval's neutral set sees? Every kept version of eval runs, two text sets.

    python bench/guard_fit.py runs/sc3-brief-hi-there-stop/seed-0 runs/sc3-brief-hi-there-stop/seed-1 ...

The trainer rejects a version whose perplexity ratio on ``assets/guard-set.jsonl`` (12 texts) is over
``train.max_ppl_ratio``; the eval reports the ratio on ``assets/neutral-set.jsonl`` (24 other texts), and
issue #20's goal is on that one. For every version ``home/adapters/vN`` of each run this prints both
ratios (the guard's as ``guard.check`` computes it, beside the one the trainer recorded in
``metadata.json``), and the neutral set's two halves (even and odd lines, 12 texts each, as large as
the guard set). Then, over all versions: how often the guard passed a version the neutral set puts
over the limit, and the mean gap guard − neutral against the mean gap between the halves. A gap
between two halves of one set as large as guard − neutral says the guard's 12 texts are too few to
measure a ratio this close to 1 (sampling spread), not that they measure something else.
Nothing is written.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
from pathlib import Path

from clawdesk.config import TrainConfig
from clawdesk.learn import guard
from clawdesk.learn.base_model import load_base
from clawdesk.learn.learner import Learner
from clawdesk.store import Store

NEUTRAL = Path(__file__).resolve().parents[1] / "assets" / "neutral-set.jsonl"


def _ratio(learner: Learner, pairs) -> float:
    return math.exp(learner.mean_nll(pairs, adapter=True) - learner.mean_nll(pairs, adapter=False))


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
    args = ap.parse_args(argv)
    rows = []
    for run in args.runs:
        result = json.loads((run / "result.json").read_text(encoding="utf-8"))
        gguf, home = Path(result["config"]["model_path"]), run / "home"
        system = _system_prompt(home)
        sets = {
            "guard": guard.load_guard_set(gguf, system_prompt=system).pairs,
            "neutral": guard.load_guard_set(gguf, NEUTRAL, system_prompt=system).pairs,
        }
        sets["half_a"], sets["half_b"] = sets["neutral"][0::2], sets["neutral"][1::2]
        versions = sorted((p for p in (home / "adapters").glob("v*") if p.is_dir()), key=lambda p: int(p.name[1:]))
        base, info = load_base(gguf, device="cpu", load_in_4bit=False)
        for vdir in versions:  # each version on a fresh copy of the base (PEFT wraps the model it is given)
            config = TrainConfig(device="cpu", load_in_4bit=False)
            learner = Learner(copy.deepcopy(base), info, config, parent_dir=vdir)
            ratios = {name: _ratio(learner, pairs) for name, pairs in sets.items()}
            meta = json.loads((vdir / "metadata.json").read_text(encoding="utf-8"))
            recorded = ((meta.get("validation") or {}).get("guard") or {}).get("ppl_ratio")
            rows.append(ratios)
            print(
                f"{run.parent.name}/{run.name} {vdir.name}: guard {ratios['guard']:.3f} (recorded "
                f"{recorded if recorded is None else f'{recorded:.3f}'}), neutral {ratios['neutral']:.3f} "
                f"(halves {ratios['half_a']:.3f} / {ratios['half_b']:.3f})",
                flush=True,
            )
    over = [r for r in rows if r["neutral"] > args.limit]
    missed = [r for r in over if r["guard"] <= args.limit]
    print(f"\n{len(rows)} versions; neutral > {args.limit}: {len(over)}, of which the guard passed {len(missed)}")
    gap = [r["guard"] - r["neutral"] for r in rows]
    halves = [r["half_a"] - r["half_b"] for r in rows]
    print(f"guard − neutral: mean {statistics.mean(gap):+.4f}, mean |·| {statistics.mean(map(abs, gap)):.4f}")
    print(f"half a − half b: mean {statistics.mean(halves):+.4f}, mean |·| {statistics.mean(map(abs, halves)):.4f}")
    if len(rows) > 2:
        corr = statistics.correlation([r["guard"] for r in rows], [r["neutral"] for r in rows])
        print(f"correlation guard ~ neutral {corr:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
