"""Decode speed of the engine on its share of the cores vs all of them vs bare llama.cpp.

On the bundled SmolLM2 GGUF, in one process: the engine with the trainer flag set (its share,
:func:`default_threads`), the engine idle (every core), and a plain ``llama_cpp.Llama`` on every
core. Prints median decode tokens/s and the ratios; no assertions (machines are noisy).

    python bench/bench_threads.py
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import llama_cpp

from clawdesk.engine import Engine, SamplingParams
from clawdesk.engine.llama import all_threads, default_threads
from clawdesk.models import DEMO_NAME, resolve_model

TOKENS = 96
ROUNDS = 5
PROMPT = "Write a short story about a lighthouse keeper."


def engine_rate(engine: Engine) -> float:
    ids = engine.build_prompt("", [], PROMPT, thinking=False, reply_room=TOKENS).token_ids
    rates = []
    for _ in range(ROUNDS):
        engine.reset_cache()
        reply = engine.generate(ids, SamplingParams(temperature=0.0, max_tokens=TOKENS))
        rates.append(reply.tokens_per_s or 0.0)
    return statistics.median(rates)


def bare_rate(path: Path, ids: list[int]) -> float:
    n = all_threads()
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=n, n_threads_batch=n, verbose=False)
    rates = []
    try:
        for _ in range(ROUNDS):
            llm.reset()
            first = None
            count = 0
            for _tok in llm.generate(ids, top_k=1, temp=0.0):
                count += 1
                if first is None:
                    first = time.monotonic()  # like Reply.tokens_per_s: from the first token on
                if count >= TOKENS:
                    break
            rates.append((count - 1) / (time.monotonic() - first))
    finally:
        llm.close()
    return statistics.median(rates)


def main() -> None:
    model = resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True)
    engine = Engine.load(model, sha256="bench", n_ctx=512)
    try:
        ids = engine.build_prompt("", [], PROMPT, thinking=False, reply_room=TOKENS).token_ids
        with engine.threads.busy_while("trainer"):
            share = engine_rate(engine)
        full = engine_rate(engine)
    finally:
        engine.close()
    bare = bare_rate(model.path, ids)
    print(f"threads: share {default_threads()}, all {all_threads()}")
    print(f"decode tok/s: share {share:.1f}, all cores {full:.1f}, bare llama.cpp {bare:.1f}")
    print(f"ratios: share/bare {share / bare:.2f}, all/bare {full / bare:.2f}, all/share {full / share:.2f}")


if __name__ == "__main__":
    main()
