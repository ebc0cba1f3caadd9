"""How the standing classifier sorts the shipped personas' own feedback: held out from its judge set.

Every shipped persona's ``satisfied`` messages are thanks ("Lovely, that reads really naturally.")
and should come out ``praise`` (no memory item); its ``unsatisfied`` messages are corrections
("Please don't use lists.") and should not (the memory keeps ``standing`` and ``unsure`` ones).
The self-judged eval showed why this matters: the demo judge scored some thanks −1 with a hint,
and the classifier of the time kept them as preferences. None of these messages was used to
write the framings (``clawdesk/judge/prompts/standing_v2.txt``); they were tuned on the praise
cases of ``assets/judge-set-standing.jsonl``.

Each message is classified as the app does (:func:`clawdesk.judge.standing.classify_hint_votes`,
bare demo engine, 3 votes), with the persona's i-th training prompt as the request. Prints a
markdown row per persona and the totals, and how many messages a rule decided against the votes
(``HintClass.rule``: ``missed-question``, ``thanks``); about 7 minutes on one thread.

    python bench/hint_kinds.py [--threads 1] [--personas no-lists,brief]
"""

from __future__ import annotations

import argparse
from collections import Counter

KINDS = ("standing", "unsure", "one-off", "praise")


def main() -> None:
    from clawdesk.eval.personas import load_persona, shipped_personas
    from clawdesk.judge.standing import classify_hint_votes
    from clawdesk.testing.demo_engine import demo_engine

    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0 = every core)")
    parser.add_argument("--personas", default="", help="comma-separated names (default: every shipped persona)")
    args = parser.parse_args()
    names = [n for n in args.personas.split(",") if n] or [p.stem for p in shipped_personas()]
    engine = demo_engine(args.threads)
    totals = {"satisfied": Counter(), "unsatisfied": Counter()}
    ruled = {"satisfied": Counter(), "unsatisfied": Counter()}  # messages a rule decided, by rule
    header = " / ".join(KINDS)
    print(f"| persona | thanks → {header} | corrections → {header} |")
    print("| --- | --- | --- |")
    try:
        for name in names:
            persona = load_persona(name)
            cells = []
            for side, messages in (("satisfied", persona.satisfied), ("unsatisfied", persona.unsatisfied)):
                found = Counter()
                for i, message in enumerate(messages):
                    request = persona.prompts[i % len(persona.prompts)]
                    decided = classify_hint_votes(engine, message, request, message)
                    found[decided.kind] += 1
                    if decided.rule:
                        ruled[side][decided.rule] += 1
                totals[side].update(found)
                cells.append(" / ".join(str(found[k]) for k in KINDS))
            print(f"| `{name}` | {cells[0]} | {cells[1]} |", flush=True)
    finally:
        engine.close()
    thanks, corrections = totals["satisfied"], totals["unsatisfied"]
    print(
        f"| **all** | {' / '.join(str(thanks[k]) for k in KINDS)} | {' / '.join(str(corrections[k]) for k in KINDS)} |"
    )
    n_thanks, n_corr = sum(thanks.values()), sum(corrections.values())
    print(
        f"\nthanks dropped (praise or one-off): {thanks['praise'] + thanks['one-off']}/{n_thanks}; "
        f"corrections taken for praise: {corrections['praise']}/{n_corr}; "
        f"corrections kept (standing or unsure): {corrections['standing'] + corrections['unsure']}/{n_corr}"
    )
    for side, label in (("satisfied", "thanks"), ("unsatisfied", "corrections")):
        rules = ", ".join(f"{rule} {n}" for rule, n in sorted(ruled[side].items())) or "none"
        print(f"{label} a rule decided against the votes (standing or unsure without it): {rules}")


if __name__ == "__main__":
    main()
