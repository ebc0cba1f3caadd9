"""How often an eval run's served replies pass each active persona's checks, and all of them, per stretch of the run.

    python bench/served_forms.py runs/sc3-brief-hi-there-stop/seed-0 [--every 48]

The held-out score says what the adapter writes greedily; this reads what the simulated user was
actually served (``turns.reply_content`` of each interaction's first turn, in order) and counts,
per ``--every`` interactions, the replies each active persona's checks pass (``Persona.holds``),
those that satisfy every active persona (``Persona.satisfies``: the checks and an answer to the
question, as the oracle rewards), and those that write the memory's header back. Where each wish is
met often but rarely together, the stacked scenario's trouble is the conjunction, not either wish.
Nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

from clawdesk.eval.scenarios import load_scenario
from clawdesk.preferences import ECHO_STOPS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+", help="--scenario runs' --out folders")
    ap.add_argument("--every", type=int, default=48, help="interactions per stretch (default 48)")
    args = ap.parse_args(argv)
    for run in args.runs:
        scenario = load_scenario(json.loads((run / "result.json").read_text(encoding="utf-8"))["scenario"])
        conn = sqlite3.connect(f"file:{run / 'home' / 'clawdesk.db'}?mode=ro", uri=True)
        try:
            served = conn.execute("SELECT user_content, reply_content FROM turns WHERE seq = 1 ORDER BY id").fetchall()
        finally:
            conn.close()
        phase_of = [phase for phase in scenario.phases for _ in range(phase.interactions)]
        for start in range(0, len(served), args.every):
            rows = list(zip(served[start : start + args.every], phase_of[start : start + args.every], strict=False))
            personas = {p.name: p for _, phase in rows for p in phase.personas}
            each = ", ".join(
                f"{name} {sum(p.holds(r) for (_, r), ph in rows if p in ph.personas)}" for name, p in personas.items()
            )
            every = sum(all(p.satisfies(r, q) for p in ph.personas) for (q, r), ph in rows)
            echo = sum(any(s in r for s in ECHO_STOPS) for (_, r), _ in rows)
            print(
                f"{run.parent.name}/{run.name} {start + 1}–{start + len(rows)}: checks pass: {each}; "
                f"all personas satisfied {every} of {len(rows)}; header written back {echo}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
