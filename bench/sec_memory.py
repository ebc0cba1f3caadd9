"""Bench section "memory": what the preference memory costs the chat's time to first token.

``memory_ttft_ratio``: time to the first streamed text of a turn run through the real turn runner
(:meth:`AgentService.run_turn`, bundled SmolLM2, greedy) with the memory filled to its budget
(``memory.budget_tokens``, default) ÷ the same turn with the memory off, same process, same store,
rounds interleaved. The clock starts before ``run_turn``, so reading the items, rendering and
tokenizing them count, as well as prefilling the longer prompt.

The memory sits right after the system prompt, so it is part of the prompt prefix every chat shares
and llama.cpp keeps evaluated between turns. Three cases, each as its own ratio:

- the value: the first turn of a *new chat* after an earlier chat with the same memory (the app's
  steady state: only the new message is evaluated, the memory's tokens are cached);
- ``raw.warm_ratio``: the second turn of a chat;
- ``raw.cold_ratio``: the first turn on an emptied KV cache (after the app starts, or after the
  memory changed): the whole memory is prefilled. On a short prompt this is roughly the ratio of the
  prompt lengths, since prefill dominates time to first token.

``raw.cpu_ratio`` gives the same three ratios in process CPU time, which a busy machine does not
inflate (``raw.load_average`` says how busy it was).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

GOAL = "<= 1.10"


def _fill(store, count_tokens: Callable[[str], int], budget: int, placement: str) -> int:
    """Add items until the memory, rendered for ``placement``, reaches ``budget``; returns its tokens."""
    from clawdesk.preferences import memory_block
    from clawdesk.store.prefs import active_preferences, add_preference

    topics = ["metric units", "British spelling", "a formal tone", "short paragraphs", "code in Python", "no emojis"]
    i = 0
    while True:
        text = f"Preference {i}: please prefer {topics[i % len(topics)]} (variant {i})."
        add_preference(store, text, replaces=lambda new, old: False)
        block, shown = memory_block(active_preferences(store), count_tokens, budget, placement)
        if len(shown) < i + 1:  # the last one no longer fits: the memory is at its budget
            return count_tokens(block)
        i += 1


def _turn_ttft(service, store, session_id: int, text: str) -> tuple[float, float]:
    """(wall ms, process CPU ms) from calling ``run_turn`` to its first streamed text.

    CPU time is the work done, whatever else the machine runs: on a loaded machine the wall clock
    mostly measures waiting for a core, the CPU clock still compares the two prompts' cost.
    """
    first: list[tuple[float, float]] = []
    start, cpu = time.monotonic(), time.process_time()

    def on_delta(delta) -> None:
        if not first:
            first.append((time.monotonic(), time.process_time()))

    service.run_turn(store, session_id, text, on_delta=on_delta)
    end, cpu_end = first[0] if first else (time.monotonic(), time.process_time())
    return (end - start) * 1000, (cpu_end - cpu) * 1000


def measure(quick: bool, log: Callable[[str], None]) -> dict[str, dict]:
    import dataclasses

    from clawdesk.agent import AgentService
    from clawdesk.config import ChatConfig, MemoryConfig
    from clawdesk.engine import Engine
    from clawdesk.models import DEMO_NAME, resolve_model
    from clawdesk.store import Store

    rounds = 3 if quick else 15
    # The cached placement by default: what memory_ttft_ratio measures. CLAWDESK_BENCH_MEMORY_PLACEMENT=user
    # measures the items after the message instead (the demo model's "auto"): not in the cached prefix.
    placement = os.environ.get("CLAWDESK_BENCH_MEMORY_PLACEMENT", "system")
    # CLAWDESK_BENCH_MEMORY_BUDGET=32 fills a smaller memory (about two items), what one correction costs.
    budget = int(os.environ.get("CLAWDESK_BENCH_MEMORY_BUDGET", MemoryConfig().budget_tokens))
    memory = MemoryConfig(placement=placement, budget_tokens=budget)
    model = resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True)
    # One thread: the ratio compares two prompts on the same engine, and a single thread keeps it readable on a
    # machine busy with other work (llama.cpp's threads wait on each other when the cores are oversubscribed).
    engine = Engine.load(model, sha256="bench", n_ctx=2048, n_threads=1)
    chat = dataclasses.replace(ChatConfig(), temperature=0.0, max_reply_tokens=4)
    try:
        with tempfile.TemporaryDirectory(prefix="clawdesk-bench-memory-") as tmp:
            store = Store.open(Path(tmp) / "clawdesk.db")
            try:
                used = _fill(store, lambda t: len(engine.tokenize(t)), memory.budget_tokens, placement)
                services = {"memory": AgentService(engine, chat, memory=memory), "off": AgentService(engine, chat)}
                cases = ("new_chat", "warm", "cold")
                ttft: dict[str, dict[str, list[float]]] = {c: {k: [] for k in services} for c in cases}
                cpu: dict[str, dict[str, list[float]]] = {c: {k: [] for k in services} for c in cases}

                def timed(case: str, name: str, session_id: int, text: str) -> None:
                    wall, used_cpu = _turn_ttft(services[name], store, session_id, text)
                    ttft[case][name].append(wall)
                    cpu[case][name].append(used_cpu)

                for r in range(rounds):
                    for name, service in services.items():
                        engine.reset_cache()
                        first = service.new_session(store).id
                        timed("cold", name, first, "What is the capital of France?")
                        timed("warm", name, first, "And of Spain?")
                        timed("new_chat", name, service.new_session(store).id, "Name a large river.")
                    now = {c: ttft[c]["memory"][-1] / ttft[c]["off"][-1] for c in cases}
                    log(f"round {r + 1}/{rounds}: " + ", ".join(f"{c} {v:.2f}x" for c, v in now.items()))
            finally:
                store.close()
    finally:
        engine.close()
    med = {c: {k: statistics.median(v) for k, v in ttft[c].items()} for c in ttft}
    ratio = {c: med[c]["memory"] / med[c]["off"] for c in med}
    med_cpu = {c: {k: statistics.median(v) for k, v in cpu[c].items()} for c in cpu}
    cpu_ratio = {c: med_cpu[c]["memory"] / med_cpu[c]["off"] for c in med_cpu}
    return {
        "memory_ttft_ratio": {
            "value": ratio["new_chat"],
            "unit": "x",
            "goal": GOAL,
            "what": "time to first token of a new chat, memory at its budget ÷ memory off",
            "raw": {
                "placement": placement,
                "budget_tokens": memory.budget_tokens,
                "memory_tokens": used,
                "rounds": rounds,
                "n_threads": 1,
                "warm_ratio": ratio["warm"],
                "cold_ratio": ratio["cold"],
                "cpu_ratio": cpu_ratio,
                "ttft_ms_median": med,
                "ttft_ms": ttft,
                "cpu_ms_median": med_cpu,
                "load_average": os.getloadavg()[0],
            },
        }
    }
