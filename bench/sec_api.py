"""Bench section "api": a reply streamed through ``clawdesk serve`` (real openai client, loopback HTTP,
server-sent events) against the same engine generating the same prompt ids directly.

- ``api_decode_ratio``: decode tok/s seen by the client (first to last content chunk, the server's
  token count) ÷ the engine's own (first to last token), greedy, same cold prompt, rounds interleaved.
- ``api_ttft_overhead_ms``: the client's time to its first content chunk minus the engine's time to
  its first token: what the API adds (HTTP, validation, rendering and tokenizing the messages, the
  worker queue, the event stream).

The server runs in this process on a loopback port (clawdesk.testing.api_server), on the bundled
SmolLM2 GGUF with automatic threads, as ``clawdesk serve`` loads it.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PROMPT = "Write a short story about a lighthouse keeper."


def measure(quick: bool, log: Callable[[str], None]) -> dict[str, dict]:
    from clawdesk.config import ChatConfig, Config
    from clawdesk.engine import Engine
    from clawdesk.models import DEMO_NAME, resolve_model
    from clawdesk.testing.api_server import running_server

    model = resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True)
    tokens, rounds = (64, 2) if quick else (128, 7)
    engine = Engine.load(model, sha256="bench", n_ctx=1024)
    try:
        with tempfile.TemporaryDirectory(prefix="clawdesk-bench-api-") as tmp:
            config = Config(home=Path(tmp) / "home", chat=ChatConfig(temperature=0.0, max_reply_tokens=tokens))
            with running_server(engine, config) as server:
                return _rounds(engine, config, server.client(), tokens, rounds, log)
    finally:
        engine.close()


def _rounds(engine, config, client, tokens: int, rounds: int, log) -> dict[str, dict]:
    from clawdesk.engine import SamplingParams

    messages = [{"role": "user", "content": PROMPT}]
    # The ids the server renders for these messages (it puts ClawDesk's system prompt first, as the TUI).
    system = [{"role": "system", "content": config.chat.system_prompt}]
    ids = engine.tokenize(engine.render([*system, *messages], thinking=False))
    params = SamplingParams(temperature=0.0, top_p=config.chat.top_p, max_tokens=tokens)

    def direct() -> tuple[float, float, int]:
        engine.reset_cache()
        start = time.monotonic()
        reply = engine.generate(ids, params)
        ttft = reply.started_at - start + (reply.latency_ms or 0.0) / 1000
        return ttft, reply.tokens_per_s or 0.0, len(reply.reply_ids)

    def api() -> tuple[float, float, int]:
        engine.reset_cache()  # a cold prompt, as the engine's run (the worker is idle between requests)
        start = time.monotonic()
        first = last = None
        n = 0
        stream = client.chat.completions.create(
            model="bench",
            messages=messages,
            max_tokens=tokens,
            temperature=0.0,
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            if chunk.usage is not None:
                n = chunk.usage.completion_tokens
            if chunk.choices and chunk.choices[0].delta.content:
                last = time.monotonic()
                first = first or last
        assert first is not None and last is not None and n > 1, "the API streamed no reply"
        return first - start, (n - 1) / (last - first), n

    runners = {"engine": direct, "api": api}
    ttft: dict[str, list[float]] = {k: [] for k in runners}
    rate: dict[str, list[float]] = {k: [] for k in runners}
    counts: dict[str, set[int]] = {k: set() for k in runners}
    for fn in runners.values():
        fn()  # warm-up
    for r in range(rounds):
        for name, fn in runners.items():
            t, tps, n = fn()
            ttft[name].append(t * 1000)
            rate[name].append(tps)
            counts[name].add(n)
        log(f"api round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.0f} tok/s" for k, v in rate.items()))
    med_rate = {k: statistics.median(v) for k, v in rate.items()}
    med_ttft = {k: statistics.median(v) for k, v in ttft.items()}
    raw = {
        "tokens": tokens,
        "rounds": rounds,
        "prompt_tokens": len(ids),
        "tok_s_median": med_rate,
        "tok_s_rounds": rate,
        "ttft_ms_median": med_ttft,
        "ttft_ms_rounds": ttft,
        "reply_tokens": {k: sorted(v) for k, v in counts.items()},
    }
    return {
        "api_decode_ratio": {
            "value": med_rate["api"] / med_rate["engine"],
            "unit": "x",
            "goal": ">= 0.95",
            "what": "decode tok/s streamed through clawdesk serve (openai client, SSE) ÷ the engine's own",
            "raw": raw,
        },
        "api_ttft_overhead_ms": {
            "value": med_ttft["api"] - med_ttft["engine"],
            "unit": "ms",
            "goal": "<= 20",
            "what": "time to first token through the API minus the engine's (same cold prompt)",
            "raw": {"ttft_ms_median": med_ttft, "ttft_ms_rounds": ttft},
        },
    }
