"""How often the eval's "answers nothing" test (clawdesk.eval.topic) flags the demo model's own replies.

The simulated user calls a reply off topic when it shares no content word with the request. That
test is lexical, so it can miss a reply that answers with other words (a synonym, a pronoun). This
script asks the base model (no adapter, no memory: the eval's starting point) every shipped
persona's held-out prompts, greedily, and prints per persona how many replies the test flags, then
every flagged reply in full so a person can read whether each really answers nothing.

    python bench/topic_check.py [--personas brief,no-lists] [--hint] [--threads 1] [--max-tokens 80]

``--hint`` appends the persona's hint to each prompt as the teacher sees it (the eval's
``with_hint_score`` form). About 20 s per persona at one thread on an idle 2-core machine.
"""

from __future__ import annotations

import argparse


def main() -> None:
    from clawdesk.config import ChatConfig
    from clawdesk.engine.reply import SamplingParams
    from clawdesk.eval.personas import load_persona, shipped_personas
    from clawdesk.eval.topic import addresses
    from clawdesk.judge.parse import enhanced_user_message
    from clawdesk.testing.demo_engine import demo_engine

    parser = argparse.ArgumentParser()
    parser.add_argument("--personas", default="", help="comma-separated names (default: every shipped persona)")
    parser.add_argument("--hint", action="store_true", help="append each persona's hint, as the teacher sees it")
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0 = every core)")
    parser.add_argument("--max-tokens", type=int, default=80, help="reply cap (the eval's --max-reply-tokens)")
    args = parser.parse_args()
    names = [n for n in args.personas.split(",") if n] or [p.stem for p in shipped_personas()]
    engine = demo_engine(args.threads)
    system = ChatConfig().system_prompt
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    flagged: list[tuple[str, str, str]] = []
    total = off_total = 0
    print("| persona | replies | answer nothing |")
    print("| --- | --- | --- |")
    try:
        for name in names:
            persona = load_persona(name)
            off = 0
            for question in persona.heldout:
                user = enhanced_user_message(question, persona.hint) if args.hint else question
                built = engine.build_prompt(system, [], user, thinking=False, reply_room=args.max_tokens)
                engine.reset_cache()  # a fresh cache per reply: greedy replies that depend on the weights only
                reply = engine.generate(built.token_ids, params).content
                if not addresses(question, reply):
                    off += 1
                    flagged.append((name, question, reply))
            total, off_total = total + len(persona.heldout), off_total + off
            print(f"| `{name}` | {len(persona.heldout)} | {off} |", flush=True)
    finally:
        engine.close()
    print(f"| all | {total} | {off_total} ({off_total / max(total, 1):.1%}) |")
    for name, question, reply in flagged:
        print(f"\n[{name}] {question}\n  → {reply!r}")


if __name__ == "__main__":
    main()
