"""The same-topic rule measured: which pairs of preference texts replace each other.

Two labelled sets: the shipped personas' unsatisfied messages and hints (what the self judge and the
oracle turn into items), each labelled with its persona's aspect (``teacher`` wants several things at
once and is left out), and ``assets/pref-topics-heldout.jsonl``, 84 statements (12 per aspect) written
by a helper that never saw the lexicon. For each set and each rule — the aspect rule
(:func:`~clawdesk.store.pref_topics.same_topic`) and the shared-words rule it falls back on
(:func:`~clawdesk.store.pref_topics.same_words`, the only rule before it) — prints the aspect accuracy
and, over every pair, how many same-aspect pairs would replace each other (recall) and how many of
the replacements are right (precision). Pure text: no model, a second on this machine.

    python bench/pref_topics.py
"""

from __future__ import annotations

import itertools
import json
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PERSONA_ASPECTS = {
    "brief": "length",
    "follow-up": "closing",
    "great-question": "opening",
    "hi-there": "opening",
    "no-lists": "lists",
    "one-paragraph": "paragraphs",
    "several-paragraphs": "paragraphs",
    "short-answer-first": "opening",
    "student": "lists",
}


def persona_rows() -> list[tuple[str, str]]:
    """(text, aspect) for every unsatisfied message and hint of the single-aspect shipped personas."""
    rows = []
    for name, label in PERSONA_ASPECTS.items():
        feedback = tomllib.loads((ROOT / "assets" / "personas" / f"{name}.toml").read_text())["feedback"]
        rows += [(text, label) for text in [*feedback["unsatisfied"], feedback["hint"]]]
    return rows


def heldout_rows() -> list[tuple[str, str]]:
    lines = (ROOT / "assets" / "pref-topics-heldout.jsonl").read_text().splitlines()
    return [(r["text"], r["aspect"]) for r in map(json.loads, filter(None, lines))]


def pair_counts(rows: list[tuple[str, str]], rule) -> dict[str, int]:
    """Over every unordered pair: tp/fn (same aspect, replaced or not), fp/tn (different aspects)."""
    counts = dict.fromkeys(("tp", "fn", "fp", "tn"), 0)
    for (a, la), (b, lb) in itertools.combinations(rows, 2):
        same, got = la == lb, rule(a, b)
        counts[("t" if same == got else "f") + ("p" if got else "n")] += 1
    return counts


def main() -> None:
    from clawdesk.store.pref_topics import aspect, same_topic, same_words

    print("| set | rule | aspect right | same-aspect pairs replaced (recall) | replacements right (precision) |")
    print("| --- | --- | --- | --- | --- |")
    for set_name, rows in (("shipped personas", persona_rows()), ("held-out", heldout_rows())):
        right = sum(aspect(text) == label for text, label in rows)
        for rule_name, rule in (("aspect", same_topic), ("shared words", same_words)):
            c = pair_counts(rows, rule)
            shown = f"{right}/{len(rows)} = {right / len(rows):.2f}" if rule_name == "aspect" else "–"
            recall = c["tp"] / max(1, c["tp"] + c["fn"])
            precision = c["tp"] / max(1, c["tp"] + c["fp"])
            print(
                f"| {set_name} ({len(rows)}) | {rule_name} | {shown} | {c['tp']}/{c['tp'] + c['fn']} = {recall:.2f} "
                f"| {c['tp']}/{c['tp'] + c['fp']} = {precision:.2f} |"
            )
    misses = [(label, aspect(text), text) for text, label in heldout_rows() if aspect(text) != label]
    print("\nheld-out statements the lexicon gets wrong (label, got, text):")
    for label, got, text in misses:
        print(f"- {label} → {got}: {text}")


if __name__ == "__main__":
    main()
