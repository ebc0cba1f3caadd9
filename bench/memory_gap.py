"""The learned check's scale: how much a preference item moves the demo model's served replies.

For each shipped persona, its hint is the only preference item; ``--prompts`` of its training
prompts are served with the item in the prompt (greedy, as the chat serves them with the memory on),
and :func:`clawdesk.learn.consolidate.check_items` measures, with a fresh LoRA (= the base), the
item's ``base_gap``: the mean per-token log-prob of the served replies with the item in context minus
without it. An adapter that carries the item brings ``gap`` (teacher − adapter without the item) from
``base_gap`` toward 0; ``LEARN_GAP`` is chosen well below the gaps measured here. Also reports the
check's cost (seconds per item on this machine). Prints one markdown table row per persona.

    python bench/memory_gap.py [--prompts 3] [--personas no-lists,brief]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path


def main() -> None:
    from clawdesk.agent import AgentService
    from clawdesk.config import ChatConfig, Config, MemoryConfig, TrainConfig
    from clawdesk.eval.personas import load_persona, shipped_personas
    from clawdesk.learn import consolidate
    from clawdesk.learn.trainer import load_learner
    from clawdesk.models import bundled_demo_path
    from clawdesk.runtime import open_store
    from clawdesk.store.prefs import add_preference, clear_preferences
    from clawdesk.testing.demo_engine import demo_engine

    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--personas", default="")
    args = parser.parse_args()
    names = [n for n in args.personas.split(",") if n] or [p.stem for p in shipped_personas()]
    engine = demo_engine()
    learner = load_learner(bundled_demo_path(), TrainConfig(device="cpu", load_in_4bit=False), None)
    with tempfile.TemporaryDirectory() as tmp:
        config = Config(home=Path(tmp), chat=ChatConfig(temperature=0.0, max_reply_tokens=64))
        store = open_store(config)
        service = AgentService(engine, config.chat, memory=MemoryConfig(budget_tokens=128, placement="system"))
        print("| persona | prompts | tokens | base_gap (nats/token) | check s |")
        print("|---|---|---|---|---|")
        for name in names:
            persona = load_persona(name)
            clear_preferences(store)
            add_preference(store, persona.hint)
            for prompt in persona.prompts[: args.prompts]:
                session = service.new_session(store)
                service.run_turn(store, session.id, prompt)
                stop = threading.Event()
                stop.set()
                service.run_turn(store, session.id, persona.satisfied[0], cancel=stop)
            t0 = time.perf_counter()
            (check,) = consolidate.check_items(store, learner, engine.identity.sha256, turns=args.prompts)
            seconds = time.perf_counter() - t0
            print(f"| {name} | {check.n_turns} | {check.n_tokens} | {check.base_gap:.3f} | {seconds:.1f} |", flush=True)
        store.close()
    engine.close()


if __name__ == "__main__":
    main()
