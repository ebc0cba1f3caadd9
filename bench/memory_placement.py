"""Where a preference's words sit in the prompt, and how often the demo model then follows it.

For each persona, its hint as the only item, the held-out prompts are answered greedily (the
eval's reply cap, a fresh cache each) four ways, and each reply is checked with the persona's check:

- ``base``: the chat's system prompt only;
- ``system-memory``: the memory block after the system prompt, as the chat serves it today;
- ``user-hint``: the hint appended to the user message under the judge's hint header, as the OPD
  teacher sees it (the eval's ``with_hint_score``);
- ``system+user-reminder``: the memory block, and a one-line reminder at the end of the user message;
- ``user-memory``: the memory block after the user message, as the chat serves it with
  ``[memory] placement = "user"``;
- ``user-prefix``: the memory block's items *before* the user message, under the same header (a
  prefix every new chat shares, so the engine's cache can keep it);
- ``memory-turn``: the items as an earlier exchange (the user states them, the assistant
  acknowledges), also a shared prefix;
- ``user-pref-bullet``, ``user-pref-quoted``, ``user-pref-plain``: forms tried before it, after the
  user message under ``[user's standing preferences]``: quoted with a bullet, quoted, unquoted.

- ``user-memory-requery``: ``user-memory``, then the user's message again under ``[question]``, so the
  last words the model reads are the request, not the item (stop 37: does the model stop continuing
  an item written as a complaint?).

``--items complaint`` makes the items what the self judge keeps instead of the persona's hint: the
user's own next message after a reply they disliked (the persona's ``unsatisfied`` messages, one
item per prompt, cycled); ``--items complaint-each`` gives one row per such message, every prompt
with that one item (which wording, kept as the item, the model follows). A cell is the fraction
of replies that address their request and pass the persona's checks (the eval's test,
clawdesk.eval.topic), then how many answered nothing.

Prints one markdown row per persona. On an idle 2-core machine it takes about 3 minutes per persona.

    python bench/memory_placement.py [--personas no-lists,hi-there] [--threads 1] [--max-tokens 80]
        [--items hint|complaint|complaint-each] [--modes base,user-memory,...]
        [--adapter RUN/home/adapters/vN/adapter.gguf]

``--adapter`` serves a trained version instead of the base (stop 37: do the forms differ once the
adapter has learned from the items?).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import SimpleNamespace

ACK = "Understood. I will follow this in my replies."  # memory-turn's acknowledgement
PREF = "\n\n[user's standing preferences]"  # the header of the forms tried before the one built
REQUERY = "\n\n[question]\n"  # user-memory-requery: the request again after the items


def main() -> None:
    from clawdesk.config import ChatConfig
    from clawdesk.engine.reply import SamplingParams
    from clawdesk.eval.personas import load_persona
    from clawdesk.testing.demo_engine import demo_engine

    parser = argparse.ArgumentParser()
    parser.add_argument("--personas", default="no-lists,hi-there")
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0 = every core)")
    parser.add_argument("--max-tokens", type=int, default=80, help="reply cap (the eval's --max-reply-tokens)")
    parser.add_argument("--modes", default="", help="a comma-separated subset of the modes (default: all)")
    parser.add_argument(
        "--items", choices=("hint", "complaint", "complaint-each"), default="hint", help="what an item says (above)"
    )
    parser.add_argument("--adapter", default="", help="a GGUF LoRA to serve (RUN/home/adapters/vN/adapter.gguf)")
    args = parser.parse_args()
    engine = demo_engine(args.threads)
    if args.adapter:
        engine.load_adapter(Path(args.adapter), 0)
    system = ChatConfig().system_prompt
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    modes = (
        "base", "system-memory", "user-hint", "system+user-reminder", "user-memory", "user-prefix",
        "memory-turn", "user-pref-bullet", "user-pref-quoted", "user-pref-plain", "user-memory-requery",
    )  # fmt: skip
    modes = tuple(m for m in modes if m in args.modes.split(",")) if args.modes else modes
    print("| persona | " + " | ".join(modes) + " | s per mode |")
    print("|" + " --- |" * (len(modes) + 2))
    try:
        for name in [n for n in args.personas.split(",") if n]:
            persona = load_persona(name)
            if args.items == "complaint-each":  # one row per wording, every prompt with that one item
                rows = [(f"`{name}`: {t}", [t]) for t in persona.unsatisfied]
            else:
                rows = [(f"`{name}`", [persona.hint] if args.items == "hint" else list(persona.unsatisfied))]
            for label, texts in rows:
                _row(engine, params, system, persona, modes, label, texts, args.max_tokens)
    finally:
        engine.close()


def _row(engine, params, system, persona, modes, label, texts, max_tokens) -> None:
    """One table row: each mode's share of held-out replies that pass, prompt ``k`` with item ``texts[k % n]``."""
    from clawdesk.eval.topic import addresses

    cells, started = [], time.monotonic()
    for mode in modes:
        ok = off = 0
        for k, question in enumerate(persona.heldout):
            sys_prompt, history, user = _form(mode, system, question, texts[k % len(texts)])
            built = engine.build_prompt(sys_prompt, history, user, thinking=False, reply_room=max_tokens)
            engine.reset_cache()  # each reply from a fresh cache: reproducible greedy replies
            reply = engine.generate(built.token_ids, params).content
            ok += persona.satisfies(reply, question)
            off += not addresses(question, reply)
        cells.append(f"{ok / len(persona.heldout):.2f} ({ok}/{len(persona.heldout)}), {off} off")
    seconds = (time.monotonic() - started) / len(modes)
    print(f"| {label} | " + " | ".join(cells) + f" | {seconds:.0f} |", flush=True)


def _form(mode: str, system: str, question: str, text: str):
    """(system prompt, history, user message) of ``mode`` for one held-out ``question`` and one item ``text``."""
    from clawdesk.engine.prompt import Exchange
    from clawdesk.judge.parse import enhanced_user_message
    from clawdesk.preferences import MEMORY_HEADER, memory_block, place_memory, plain_item, quote_item, with_memory

    block = "\n".join([MEMORY_HEADER, f"- {quote_item(text)}"])
    reminder = f"\n\n(Remember my stated preference: {quote_item(text)})"
    item = SimpleNamespace(text=text)  # the app's renderer reads an item's text only
    user_block, _ = memory_block([item], lambda _: 0, 1, "user")
    forms = {
        "base": (system, question),
        "system-memory": (with_memory(system, block), question),
        "user-hint": (system, enhanced_user_message(question, text)),
        "system+user-reminder": (with_memory(system, block), question + reminder),
        "user-memory": (system, place_memory(system, question, user_block)[1]),
        "user-prefix": (system, f"{user_block.strip()}\n\n{question}"),
        "memory-turn": (system, question),
        "user-pref-bullet": (system, f"{question}{PREF}\n- {quote_item(text)}"),
        "user-pref-quoted": (system, f"{question}{PREF}\n{quote_item(text)}"),
        "user-pref-plain": (system, f"{question}{PREF}\n{plain_item(text)}"),
        "user-memory-requery": (system, place_memory(system, question, user_block)[1] + REQUERY + question),
    }
    history = [Exchange(user=user_block.strip(), assistant=ACK)] if mode == "memory-turn" else []
    sys_prompt, user = forms[mode]
    return sys_prompt, history, user


if __name__ == "__main__":
    main()
