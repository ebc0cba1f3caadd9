"""Which prompts the behaviour test should compare on: one adapter version of an eval run, two prompt sets.

    python bench/behaviour_prompts.py runs/brief-bound2-s1 --version 3 --limit 40

For every preference item of the run (``DIR/home/clawdesk.db``) on an aspect the behaviour test reads,
the version's greedy replies (``consolidate.FORM_TOKENS`` tokens, on torch as the trainer writes them)
with the item's memory block and without it, on

- ``recent``: up to 8 of the item's own turns up to the last one the version trained on, fewest items
  first (what the test compared until stop 35: turns the adapter was trained on);
- ``probe``: ``assets/form-prompts.jsonl`` (what it compares now: prompts no turn held).

Per set it prints the prompts whose replies agree under the shipped rule (``reply_form.agreement``,
the item's direction for length), the mean words with / without the item and, with ``--limit N``, how
many replies without the item have at most N words. Compare with the run's held-out score after that
version (``python bench/eval_table.py DIR --at …``): the set whose agreement tracks it is the one to test on.
Nothing is written.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from clawdesk.config import TrainConfig
from clawdesk.learn import reply_form
from clawdesk.learn.base_model import load_base
from clawdesk.learn.consolidate import FORM_PROMPTS, FORM_TOKENS
from clawdesk.learn.form_probe import load_form_probe
from clawdesk.learn.learner import Learner
from clawdesk.store import Store
from clawdesk.store.pref_topics import aspect, length_direction
from clawdesk.store.prefs import list_preferences
from clawdesk.store.turn_memory import item_turns, turn_memory_block


def _row(name: str, learner: Learner, probe, pairs, kind: str, direction: str | None, limit: int | None) -> str:
    prompts = [w for w, _ in pairs] + [wo for _, wo in pairs]
    replies = probe.decode(learner.sample(prompts, max_tokens=FORM_TOKENS, temperature=0.0, seed=0, adapter=True))
    served, own = replies[: len(pairs)], replies[len(pairs) :]
    agree = reply_form.agreement(kind, served, own, direction)
    words = [[len(reply_form.words(r)) for r in rs] for rs in (served, own)]
    line = (
        f"  {name:7s} agree {agree} of {len(pairs)}; words with / without {_mean(words[0]):.0f} / {_mean(words[1]):.0f}"
    )
    if limit is not None:
        line += f"; without the item ≤ {limit} words on {sum(n <= limit for n in words[1])} of {len(pairs)}"
    return line


def _mean(xs: list[int]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="an eval run's --out folder (with home/)")
    ap.add_argument("--version", type=int, required=True, help="the adapter version (home/adapters/vN)")
    ap.add_argument("--limit", type=int, default=None, help="also count replies without the item of at most N words")
    args = ap.parse_args(argv)
    home, result = args.run / "home", json.loads((args.run / "result.json").read_text(encoding="utf-8"))
    gguf, vdir = Path(result["config"]["model_path"]), home / "adapters" / f"v{args.version}"
    if not vdir.is_dir():
        raise SystemExit(f"behaviour_prompts: {vdir} does not exist (was that version kept?)")
    store = Store.open(home / "clawdesk.db")
    try:
        sha, system = store.db.execute(
            "SELECT t.model_sha256, s.system_prompt FROM turns t JOIN sessions s ON s.id = t.session_id LIMIT 1"
        ).fetchone()
        model, info = load_base(gguf, device="cpu", load_in_4bit=False)
        learner = Learner(model, info, TrainConfig(device="cpu", load_in_4bit=False), parent_dir=vdir)
        probe = load_form_probe(gguf, system_prompt=system)
        meta = json.loads((vdir / "metadata.json").read_text(encoding="utf-8"))
        last = max(s["turn_id"] for s in meta["samples"])
        print(f"{args.run.name} v{args.version}:")
        for item in list_preferences(store, statuses=("active", "learned", "removed")):
            kind = aspect(item.text)
            if kind not in reply_form.FORM_ASPECTS:
                continue
            direction = length_direction(item.text) if kind == "length" else None
            # Its turns as the check saw them then: none after the last turn that version trained on.
            turns = [t for t in item_turns(store, item.id, sha, limit=10_000) if t.turn_id <= last][:FORM_PROMPTS]
            if not turns:
                continue
            print(f" #{item.id} ({kind}{', ' + direction if direction else ''}): {item.text}")
            recent = [(t.served_ids, t.student_ids) for t in turns]
            fresh = list(zip(probe.render(turn_memory_block(store, turns[0].turn_id)), probe.student, strict=True))
            for name, pairs in (("recent", recent), ("probe", fresh)):
                print(_row(name, learner, probe, pairs, kind, direction, args.limit))
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
