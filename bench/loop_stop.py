"""What `chat.repeat_stop` would have cut in recorded replies, and what the check costs per token.

    python bench/loop_stop.py runs/*/seed-* [--window 64]
    python bench/loop_stop.py --speed [--tokens 300 --rounds 3]

With run folders (``clawdesk eval --out`` dirs, or any data dir holding ``clawdesk.db``) it replays
every served step's token ids through :func:`clawdesk.engine.repeats.repeat_period` and prints each
reply it would have ended: the run, the step's place in it, where it would have ended and the
text it repeated, then the totals. Nothing is written.

``--speed`` times greedy replies of the bundled demo model that never loop (it counts), with the
check off and on in alternation in this process, and prints the ratio on / off, then the check
alone on the same token ids as a share of a token's generation time.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from pathlib import Path

from clawdesk.engine.repeats import repeat_period
from clawdesk.store.tokens import unpack_ids


def scan(runs: list[Path], window: int) -> int:
    total = cut = 0
    for run in runs:
        db = run / "home" / "clawdesk.db" if (run / "home").is_dir() else run / "clawdesk.db"
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT reply_ids, reply_content FROM steps ORDER BY turn_id, idx").fetchall()
        finally:
            conn.close()
        for k, (blob, text) in enumerate(rows, 1):
            ids = unpack_ids(blob)
            total += 1
            end = next((i for i in range(1, len(ids) + 1) if repeat_period(ids[:i], window)), None)
            if end is not None:
                cut += 1
                period = repeat_period(ids[:end], window)
                where = f"step {k} of {len(rows)} ends at token {end} of {len(ids)} (period {period})"
                print(f"{run}: {where}: …{text[-60:]!r}")
    print(f"{cut} of {total} served replies in {len(runs)} runs would end early (window {window})")
    return 0


def speed(tokens: int, rounds: int) -> int:
    from clawdesk.engine import Engine, SamplingParams
    from clawdesk.models import DEMO_NAME, resolve_model

    engine = Engine.load(resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True), sha256="bench", n_ctx=1024)
    prompt = engine.build_prompt("", [], "List the numbers.", thinking=False, reply_room=tokens).token_ids
    times: dict[int, list[float]] = {0: [], 64: []}
    for _ in range(rounds):
        for window in times:
            engine.llm.reset()
            start = time.perf_counter()
            reply = engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=tokens, repeat_stop=window))
            times[window].append(time.perf_counter() - start)
            if reply.cut:
                print(f"the reply looped at token {len(reply.reply_ids)}: choose a prompt that does not")
                return 1
    off, on = statistics.median(times[0]), statistics.median(times[64])
    print(f"{tokens} tokens, median of {rounds}: off {off:.3f} s, on {on:.3f} s, ratio on/off {on / off:.3f}")
    start = time.perf_counter()
    for _ in range(20):  # the check alone, on the same ids, as the engine calls it: what the ratio above holds of it
        grown: list[int] = []
        for tok in reply.reply_ids:
            grown.append(tok)
            repeat_period(grown, 64)
    check = (time.perf_counter() - start) / (20 * len(reply.reply_ids))
    share = check / (off / len(reply.reply_ids))
    print(f"the check alone: {check * 1e6:.1f} µs a token, {share:.4f} of a token's time")
    engine.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="*", help="eval --out folders or data dirs")
    ap.add_argument("--window", type=int, default=64, help="chat.repeat_stop to replay (default 64)")
    ap.add_argument("--speed", action="store_true", help="time the check on the demo model instead")
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if args.speed:
        return speed(args.tokens, args.rounds)
    if not args.runs:
        ap.error("name run folders, or --speed")
    return scan(args.runs, args.window)


if __name__ == "__main__":
    raise SystemExit(main())
