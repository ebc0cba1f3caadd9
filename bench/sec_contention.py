"""Bench section "contention": chat decode while another program keeps a core busy.

llama.cpp's threads wait for each other at every graph node, so a thread that loses its core to
another program stalls the rest (FIELD-NOTES: ``n_threads=2`` on 2 cores collapsed to 12–65 tok/s
beside one busy process). The engine's automatic thread count leaves other programs their cores
(:mod:`clawdesk.engine.cpu_load`); this section checks that it does, on the bundled model:

- ``busy_decode_ratio``: the engine's decode tok/s with one busy process beside it (a Python busy
  loop at the engine's priority) ÷ bare llama-cpp-python's at its best thread count under the same
  load; the bare runs at every thread count 1..cores are what a fixed count would give.
- ``niced_decode_ratio``: the same with the busy process at ``nice 10`` (a background job).
- ``raw`` per condition (quiet, busy, niced): median tok/s of every runner, the thread counts the
  engine chose, and the bare all-cores rate, which is what the engine ran at before it measured
  other programs.

Rounds interleave the runners (engine, bare 1, bare 2, engine, …) so drift hits all of them; each
run stops after ``tokens / 8`` seconds, so a collapsed thread count cannot stall the suite. The
bare runs live in this process, so the engine counts them as its own work, not as other programs.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

SHA = "bench"
SETTLE_S = 1.5  # after a busy process starts or stops: a window of the engine's load reading sees it
CONDITIONS = {"quiet": None, "busy": 0, "niced": 10}  # the busy process's nice value


def _start_busy(nice: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    if nice:
        os.setpriority(os.PRIO_PROCESS, proc.pid, nice)  # not preexec_fn: this process runs threads
    return proc


def measure(quick: bool, log: Callable[[str], None]) -> dict[str, dict]:
    from sec_chat import PROMPT, Bare, _engine_run  # bench/ is on sys.path (run.py puts it there)

    from clawdesk.engine import Engine, SamplingParams
    from clawdesk.engine.threads import all_threads
    from clawdesk.models import DEMO_NAME, resolve_model

    cores = all_threads()
    if cores < 2:
        what = "needs 2 or more cores: with one there is no thread count to choose"
        return {
            key: {"value": None, "unit": "x", "goal": ">= 0.9", "what": what, "raw": {"cores": cores}}
            for key in ("busy_decode_ratio", "niced_decode_ratio")
        }
    tokens, rounds = (64, 1) if quick else (128, 3)
    params = SamplingParams(temperature=0.0, max_tokens=tokens)
    budget_s = tokens / 8
    model = resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True)
    engine = Engine.load(model, sha256=SHA, n_ctx=1024)  # automatic threads, as the app loads it
    bares = [Bare(model.path, t, engine.n_ctx) for t in range(1, cores + 1)]
    ids = engine.build_prompt("", [], PROMPT, thinking=False, reply_room=tokens).token_ids
    runners: dict[str, Callable[[], tuple[float, float | None, int]]] = {
        "engine": lambda: _engine_run(engine, ids, params, budget_s)
    }
    for bare in bares:
        runners[f"bare_{bare.threads}"] = lambda b=bare: b.run(ids, params, budget_s)
    raw: dict[str, dict] = {}
    try:
        for condition, nice in CONDITIONS.items():
            busy = _start_busy(nice) if nice is not None else None
            try:
                time.sleep(SETTLE_S)
                for fn in runners.values():
                    fn()  # warm-up, and the engine's load reading settles on this condition
                rates: dict[str, list[float]] = {name: [] for name in runners}
                threads: list[int] = []
                for r in range(rounds):
                    for name, fn in runners.items():
                        rates[name].append(fn()[1] or 0.0)
                        if name == "engine":
                            threads.append(engine.context_threads()[0])
                    log(
                        f"{condition} round {r + 1}/{rounds}: "
                        + ", ".join(f"{k} {v[-1]:.0f}" for k, v in rates.items())
                        + f" tok/s (engine on {threads[-1]} threads)"
                    )
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
                    time.sleep(SETTLE_S)
            med = {k: statistics.median(v) for k, v in rates.items()}
            best = max((k for k in med if k.startswith("bare_")), key=lambda k: med[k])
            raw[condition] = {
                "tok_s_median": med,
                "tok_s_rounds": rates,
                "engine_threads": threads,
                "best_bare": best,
                "engine_ratio": med["engine"] / med[best] if med[best] else None,
                "all_cores_ratio": med[f"bare_{cores}"] / med[best] if med[best] else None,
            }
    finally:
        for bare in bares:
            bare.close()
        engine.close()
    common = {"cores": cores, "tokens": tokens, "rounds": rounds, "conditions": raw}
    return {
        "busy_decode_ratio": {
            "value": raw["busy"]["engine_ratio"],
            "unit": "x",
            "goal": ">= 0.9",
            "what": "engine decode tok/s beside one busy process ÷ bare llama-cpp-python at its best thread count then",
            "raw": common,
        },
        "niced_decode_ratio": {
            "value": raw["niced"]["engine_ratio"],
            "unit": "x",
            "goal": ">= 0.9",
            "what": "the same beside a busy process at nice 10",
            "raw": {"see": "busy_decode_ratio.raw"},
        },
    }
