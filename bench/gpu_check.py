"""The GPU check: a 4-bit QLoRA training step on CUDA, and whether llama.cpp serves its adapter as PEFT computes it.

    python bench/gpu_check.py [--4b] [--json OUT.json] [--device cpu]

Runs the real trainer (:func:`clawdesk.learn.trainer.train`, ``train.device = "cuda"``,
``train.load_in_4bit = true``) on judged turns written into a temporary SQLite log:

1. the tiny random Qwen3 (``clawdesk.testing.tiny_qwen3``): one step, then the written version is
   checked with :func:`clawdesk.testing.lora_check.llama_cpp_vs_peft`, the same check the CPU test
   ``test_llama_cpp_serves_the_adapter_as_peft_computes_it`` makes;
2. with ``--4b``, the Qwen3-4B-shaped random model that ``bench/sec_model4b.py`` builds: one step on
   one 512-token sample, and the same check.

Printed per model: load and step seconds, peak VRAM (``torch.cuda.max_memory_allocated``), peak RSS
of this process so far, tokens/s, the LoRA check. Exit 0 when everything passed, 1 when a check
failed. Without a CUDA device it prints "no CUDA device: the GPU path is untested here" and exits 0;
``--device cpu`` runs the same steps on the CPU (NF4 via bitsandbytes' CPU kernels) to test this script.
``bench/gpu_check.sh`` sets up a fresh CUDA machine and runs this. Not a test: nothing here runs in CI.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
SHA = "gpu-check"
MODEL4B_SAMPLE = (384, 128)  # prompt and reply tokens of the one 512-token sample, as bench/sec_model4b.py


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _fill(db: Path, n: int, *, prompt_len: int, reply_len: int, vocab: int, seed: int) -> None:
    """``n`` judged turns (rewards alternating ±1) with random token ids below ``vocab``."""
    from clawdesk.testing.judged_log import fill_judged

    fill_judged(
        db, n, seed=seed, vocab=vocab, sha=SHA, rewards=(-1, 1), prompt_len=prompt_len, reply_len=reply_len,
        model_path="/check.gguf",
    )  # fmt: skip


def train_and_check(
    name: str, gguf: Path, work: Path, *, device: str, n: int, prompt_len: int, reply_len: int, lr: float
) -> dict:
    """One 4-bit training step through the real trainer, then the llama.cpp-vs-PEFT check of its adapter."""
    import torch

    from clawdesk.config import TrainConfig
    from clawdesk.gguf.header import read_header
    from clawdesk.learn.base_model import gguf_architecture
    from clawdesk.learn.trainer import train
    from clawdesk.testing.lora_check import llama_cpp_vs_peft

    db, adapters = work / f"{name}.db", work / f"{name}-adapters"
    vocab = len(read_header(gguf, arrays=True).fields["tokenizer.ggml.tokens"])  # token ids < vocab
    _fill(db, n, prompt_len=prompt_len, reply_len=reply_len, vocab=vocab, seed=0)
    config = TrainConfig(
        batch_size=n, epochs=1, lr=lr, device=device, load_in_4bit=True, max_logprob_drop=50.0,
        token_budget=max(64, n * (prompt_len + reply_len)),
    )  # fmt: skip
    seen = []
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    made = train(db, adapters, gguf, name, SHA, config, steps=1, on_progress=seen.append)
    total_s = time.perf_counter() - started
    out = {
        "model": name,
        "arch": gguf_architecture(gguf),
        "gpu": torch.cuda.get_device_name() if cuda else "no GPU (--device cpu)",
        "peak_vram_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0,
        "peak_rss_mb_so_far": _peak_rss_mb(),
        "train_total_s": total_s,
        "versions": made,
    }
    for p in seen:
        if p.phase == "loading" and p.message.startswith("base loaded"):
            out["load_message"] = p.message
        if p.phase == "step" and p.metrics:
            out |= {"step_s": p.metrics["seconds"], "tokens_per_s": p.metrics["tokens_per_s"]}
            out["loss"] = p.metrics["loss"]
        if p.phase == "validating" and "ready" in p.metrics:
            out["version_ready"] = bool(p.metrics["ready"])
    if not made:
        out["lora_check"] = {"passed": False, "why": "no version was made"}
        return out
    started = time.perf_counter()
    out["lora_check"] = llama_cpp_vs_peft(gguf, adapters / f"v{made[0]}")
    out["lora_check_s"] = time.perf_counter() - started
    return out


def _model4b_builder(n_layers: int | None = None):
    """``bench/sec_model4b.py``'s writer of the Qwen3-4B-shaped GGUF as ``f(path) -> path``, or ``(None, why)``."""
    path = BENCH_DIR / "sec_model4b.py"
    if not path.is_file():
        return None, f"{path.name} does not exist"
    spec = importlib.util.spec_from_file_location("sec_model4b", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    write_model, dims = getattr(module, "write_model", None), getattr(module, "QWEN3_4B", None)
    if not callable(write_model) or not isinstance(dims, dict):
        return None, f"{path.name} has no write_model(path, n_layers) and QWEN3_4B dims"

    def build(gguf: Path) -> Path:
        gguf.parent.mkdir(parents=True, exist_ok=True)
        write_model(gguf, n_layers or dims["n_layers"])
        return gguf

    return build, ""


def _print(result: dict) -> None:
    check = result.get("lora_check", {})
    print(f"{result['model']} ({result['arch']}) on {result['gpu']}: {result.get('load_message', 'not loaded')}")
    print(
        f"  step {result.get('step_s', float('nan')):.2f} s ({result.get('tokens_per_s', 0):.0f} tok/s), "
        f"peak VRAM {result['peak_vram_mb']:.0f} MiB, peak RSS so far {result['peak_rss_mb_so_far']:.0f} MiB, "
        f"version ready: {result.get('version_ready')}"
    )
    if "effect" in check:
        print(
            f"  llama.cpp vs PEFT: adapter moves logits by {check['effect']:.4f}; llama.cpp lands within "
            f"{check['gap']:.2e} of PEFT ({check['gap_fraction']:.4f} of the move), logit deltas correlate at "
            f"{check['delta_corr']:.4f} ({'quantized' if check['quantized'] else 'float'} base): "
            f"{'PASSED' if check['passed'] else 'FAILED'}"
        )
    else:
        print(f"  llama.cpp vs PEFT: FAILED ({check.get('why')})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--4b", dest="model4b", action="store_true", help="also the Qwen3-4B-shaped model")
    parser.add_argument(
        "--4b-layers",
        dest="layers4b",
        type=int,
        default=None,
        help="fewer layers than Qwen3-4B's 36 (a smoke run of --4b; its numbers mean nothing)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--device", default="cuda", help='"cuda" (default), "cuda:N", or "cpu" to test this script')
    args = parser.parse_args(argv)

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"no CUDA device: the GPU path is untested here (torch {torch.__version__})")
        return 0
    import bitsandbytes
    import llama_cpp

    if args.device.startswith("cuda"):
        torch.cuda.set_device(args.device)
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        machine = {
            "gpu": props.name,
            "capability": f"{props.major}.{props.minor}",
            "bf16": torch.cuda.is_bf16_supported(),
            "vram_total_mb": props.total_memory / 2**20,
        }
    else:
        machine = {"gpu": "none (--device cpu)"}
    machine |= {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "bitsandbytes": bitsandbytes.__version__,
        "llama_cpp": llama_cpp.__version__,
    }
    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()))
    from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

    results = []
    with tempfile.TemporaryDirectory(prefix="clawdesk-gpu-check-") as tmp:
        work = Path(tmp)
        tiny = write_tiny_qwen3_gguf(work / "tiny-qwen3.gguf")
        # The CPU test's settings (4 samples, lr 0.02), so its effect/gap bar applies unchanged.
        common = {"device": args.device, "lr": 0.02}
        results.append(train_and_check("tiny-qwen3", tiny, work, n=4, prompt_len=16, reply_len=8, **common))
        _print(results[-1])
        if args.model4b:
            builder, why = _model4b_builder(args.layers4b)
            if builder is None:
                print(f"4B-shaped model skipped: {why}")
            else:
                gguf = builder(work / "model4b" / "qwen3-4b-shaped.gguf")
                prompt_len, reply_len = MODEL4B_SAMPLE
                results.append(
                    train_and_check("qwen3-4b-shaped", gguf, work, n=1, prompt_len=prompt_len, reply_len=reply_len,
                                    **common)
                )  # fmt: skip
                _print(results[-1])
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "results": results}, indent=2) + "\n")
    passed = all(r.get("lora_check", {}).get("passed") and r.get("version_ready") for r in results)
    print("GPU check " + ("passed" if passed else "FAILED"))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
