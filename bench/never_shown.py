"""Which wishes the demo model never shows unprompted but follows when told (issue #20's contract).

Issue #20 asks for personas whose base score is ≤ 0.1 and whose score with the hint in the prompt is
≥ 0.4 (``clawdesk eval --persona P --probe``): a wish the policy must learn without ever sampling it,
which a hinted teacher can still show. This script screens candidate wishes at once, on one model
load: each candidate is a shipped persona's prompts and feedback with its own checks and hint; it
prints the base and with-hint score on the persona's 16 held-out prompts (greedy, the eval's
``Scorer``, so the simulated user's rules apply: a reply must answer, and a reply that only repeats
the question answers nothing) and the first ``--show`` with-hint replies, to read whether a
satisfied reply really does what was asked (a placeholder such as ``**[key term]**`` passes a bold
check; "I'm Sam" passes a bare name check, hence the ``not_self`` check on the name wishes).

    python bench/never_shown.py [--only F1,S1] [--threads 1] [--max-tokens 80] [--show 3]

About 20 s per candidate at one thread on an idle core.
"""

from __future__ import annotations

import argparse
from pathlib import Path

QUESTION = {"kind": "regex_present", "pattern": r"\?\s*$"}
TEN_WORDS = {"kind": "min_words", "value": 10}
NOT_SELF = {"kind": "regex_absent", "pattern": r"(?i)\b(I'm|I am|my name is|named)\s+Sam\b"}  # the user is Sam
SAM = {"kind": "regex_present", "pattern": r"\bSam\b"}
EMOJI = {"kind": "regex_present", "pattern": "[\U0001f300-\U0001faff\u2600-\u27bf]"}
BOLD = {"kind": "regex_present", "pattern": r"\*\*[^*]+\*\*"}


def opens(phrase: str) -> list[dict]:
    return [{"kind": "regex_present", "pattern": rf"^\s*{phrase}"}, TEN_WORDS]


def ends(phrase: str) -> list[dict]:
    return [{"kind": "regex_present", "pattern": rf"{phrase}\s*$"}]


# name: (the shipped persona whose prompts it uses, checks, hint); None keeps the persona's own.
# `follow-up` asks for recommendations, `hi-there` asks how-to and what-is questions.
CANDIDATES: dict[str, tuple[str, list[dict] | None, str | None]] = {
    "follow-up": ("follow-up", None, None),  # the shipped persona as it is
    "F1": (
        "follow-up",
        [QUESTION],
        "First answer the question in one or two sentences. "
        "Then end with one short question about the user's own situation.",
    ),
    "F2": (
        "follow-up",
        [QUESTION],
        "Give your answer, then ask the user one follow-up question about their preferences.",
    ),
    "F3": (
        "follow-up",
        ends(r"What do you think\?"),
        "Answer the question, then end your reply with the exact words 'What do you think?'",
    ),
    "F4": (
        "follow-up",
        [QUESTION],
        "Answer in two sentences. Your last sentence must be a question asking what the user has already tried.",
    ),
    "hi-there": ("hi-there", None, None),
    "H1": ("hi-there", opens("Hi there!"), "Write 'Hi there!' and then a full answer of at least two sentences."),
    "H2": (
        "hi-there",
        opens("Hi there!"),
        "Your reply must begin with 'Hi there!'. After that greeting, answer the question.",
    ),
    "H3": ("hi-there", opens("Hi there!"), "Start with 'Hi there!', then explain your answer in full sentences."),
    "S1": ("hi-there", opens("Sure!"), "Start your reply with 'Sure!' followed by a full answer to the question."),
    "S2": ("follow-up", opens("Sure!"), "Begin your reply with 'Sure!' and then answer the question."),
    "O1": ("hi-there", opens("Of course!"), "Start your reply with 'Of course!' and then answer the question in full."),
    "C1": (
        "hi-there",
        ends("Hope this helps!"),
        "Answer in one or two sentences, then finish with the sentence 'Hope this helps!'",
    ),
    "C2": (
        "follow-up",
        ends("Hope this helps!"),
        "Answer in one or two sentences, then finish with the sentence 'Hope this helps!'",
    ),
    "C3": ("follow-up", ends("Hope this helps!"), "End your reply with the exact words 'Hope this helps!'."),
    "N1": ("follow-up", [SAM, NOT_SELF, TEN_WORDS], "The user's name is Sam: address them as Sam in your reply."),
    "N2": ("hi-there", [SAM, NOT_SELF, TEN_WORDS], "Call me Sam: use my name, Sam, in your answer."),
    "N3": (
        "hi-there",
        [SAM, NOT_SELF, TEN_WORDS],
        "My name is Sam. Greet me by name (for example 'Sure, Sam!') and then answer.",
    ),
    "N4": ("hi-there", [SAM, NOT_SELF, TEN_WORDS], "I'm Sam, the user. Address me as Sam when you answer."),
    "W1": (
        "hi-there",
        [{"kind": "regex_present", "pattern": r"(?i)\bindeed\b"}],
        "Use the word 'indeed' in your answer.",
    ),
    "W2": (
        "follow-up",
        [{"kind": "regex_present", "pattern": r"(?i)\bpersonally\b"}],
        "Use the word 'personally' in your answer.",
    ),
    "B1": ("hi-there", [BOLD], "Write the key term of your answer in bold, like **this**."),
    "B2": ("follow-up", [BOLD], "Write the key term of your answer in bold, like **this**."),
    "B3": ("hi-there", [BOLD], "Answer in full sentences and put the most important word in bold, like **this**."),
    "E1": ("follow-up", [EMOJI], "End your reply with a fitting emoji, such as 🙂."),
    "L1": (
        "follow-up",
        [{"kind": "regex_absent", "pattern": "[A-Z]"}],
        "Write your whole reply in lowercase letters only, with no capital letters.",
    ),
}


def main() -> None:
    from clawdesk.config import ChatConfig
    from clawdesk.eval.personas import find_asset, parse_persona, read_toml
    from clawdesk.eval.scenarios import Scenario
    from clawdesk.eval.scoring import Scorer
    from clawdesk.testing.demo_engine import demo_engine

    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="comma-separated candidate names (default: all)")
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0 = every core)")
    parser.add_argument("--max-tokens", type=int, default=80, help="reply cap (the eval's --max-reply-tokens)")
    parser.add_argument("--show", type=int, default=3, help="with-hint replies printed per candidate")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CANDIDATES)
    if unknown := [n for n in names if n not in CANDIDATES]:
        parser.error(f"unknown candidate {unknown[0]!r}; known: {', '.join(CANDIDATES)}")
    engine = demo_engine(args.threads)
    system = ChatConfig().system_prompt
    base_replies: dict[str, list[str]] = {}  # by prompt source: the base's replies do not depend on the checks
    rows, shown = [], []
    print("| candidate | prompts of | base | with hint | hint |")
    print("| --- | --- | --- | --- | --- |")
    try:
        for name in names:
            source, checks, hint = CANDIDATES[name]
            raw = read_toml(find_asset(source, "persona"), "persona")
            raw["name"] = name
            if checks is not None:
                raw.update(check=checks, feedback=dict(raw["feedback"], hint=hint))
            persona = parse_persona(raw, Path(f"{name}.toml"))
            scorer = Scorer(engine, Scenario.single(persona, 16).phases[0], system, args.max_tokens)
            if source not in base_replies:
                scorer.score()
                base_replies[source] = list(scorer.last_replies)
            pairs = zip(base_replies[source], persona.heldout, strict=True)
            base = sum(persona.satisfies(r, q) for r, q in pairs) / len(persona.heldout)
            with_hint = scorer.score(hint=True)
            rows.append((name, with_hint))
            print(f"| {name} | `{source}` | {base:.2f} | {with_hint:.2f} | {persona.hint} |", flush=True)
            replies = zip(persona.heldout, scorer.last_replies, strict=True)
            shown += [(name, q, r, persona.satisfies(r, q)) for q, r in list(replies)[: args.show]]
    finally:
        engine.close()
    print(f"\nwith the hint ≥ 0.4: {', '.join(n for n, s in rows if s >= 0.4) or 'none'}")
    for name, question, reply, ok in shown:
        print(f"\n[{name}] {question} ({'satisfied' if ok else 'not satisfied'})\n  → {reply!r}")


if __name__ == "__main__":
    main()
