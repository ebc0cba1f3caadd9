"""Which prompts the behaviour test should compare on: one adapter version of an eval run, two prompt sets.

    python bench/behaviour_prompts.py runs/brief-bound2-s1 --version 3 --limit 40

For every preference item of the run (``DIR/home/clawdesk.db``) on an aspect the behaviour test reads,
the version's greedy replies (``consolidate.form_replies``: as the trainer's check writes them, on torch)
with the item's memory block and without it, on

- ``recent``: up to 8 of the item's own turns up to the last one the version trained on, the newest
  (what the test compares since stop 49; ``--fewest-first``: fewest items first, as until stop 48);
- ``probe``: ``assets/form-prompts.jsonl`` (what it compares now: prompts no turn held).

Per set it prints the prompts whose replies agree under the shipped rule (``reply_form.agreement``,
the item's direction for length), the mean words with / without the item, with ``--limit N`` how
many replies without the item have at most N words, and with ``--word-limit`` how many agree under
``train.item_word_limit`` (the item's own word limit decides). Compare with the run's held-out score after that
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
from clawdesk.learn.consolidate import FORM_PROMPTS, form_replies
from clawdesk.learn.form_probe import load_form_probe
from clawdesk.learn.learner import Learner
from clawdesk.store import Store
from clawdesk.store.pref_topics import aspect, length_bound, length_direction
from clawdesk.store.prefs import list_preferences
from clawdesk.store.turn_memory import item_turns, turn_memory_block


def _row(
    name: str, served: list[str], own: list[str], kind: str, direction: str | None, limit: int | None, bound: int | None
) -> str:
    agree = reply_form.agreement(kind, served, own, direction)
    mean = f"{reply_form.mean_words(served):.0f} / {reply_form.mean_words(own):.0f}"
    line = f"  {name:7s} agree {agree} of {len(served)}; words with / without {mean}"
    if bound is not None:  # the same replies under train.item_word_limit
        line += f"; with the item's {bound}-word limit {reply_form.agreement(kind, served, own, direction, bound)}"
    if limit is not None:
        within = sum(len(reply_form.words(r)) <= limit for r in own)
        line += f"; without the item ≤ {limit} words on {within} of {len(own)}"
    return line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="an eval run's --out folder (with home/)")
    ap.add_argument("--version", type=int, required=True, help="the adapter version (home/adapters/vN)")
    ap.add_argument("--limit", type=int, default=None, help="also count replies without the item of at most N words")
    ap.add_argument("--fewest-first", action="store_true", help="the item's turns fewest items first (until stop 48)")
    ap.add_argument(
        "--word-limit", action="store_true", help="also count agreement as train.item_word_limit does (stop 50)"
    )
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
            bound = length_bound(item.text) if args.word_limit and kind == "length" else None
            # Its turns as the check saw them then: none after the last turn that version trained on.
            fewest = [t for t in item_turns(store, item.id, sha, limit=10_000) if t.turn_id <= last]
            newest = sorted(fewest, key=lambda t: t.turn_id, reverse=True)  # the same turns: no second query
            turns = (fewest if args.fewest_first else newest)[:FORM_PROMPTS]
            if not turns:
                continue
            print(f" #{item.id} ({kind}{', ' + direction if direction else ''}): {item.text}")
            recent = [(t.served_ids, t.student_ids) for t in turns]
            # The new prompts carry the block of the item's fewest-items turn, as in the check.
            fresh = list(zip(probe.render(turn_memory_block(store, fewest[0].turn_id)), probe.student, strict=True))
            replies = form_replies(learner, probe.decode, [recent, fresh])  # as the check writes them
            for name, (served, own) in zip(("recent", "probe"), replies, strict=True):
                print(_row(name, served, own, kind, direction, args.limit, bound))
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
