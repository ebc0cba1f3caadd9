"""Bench section "Qwen3-4B within 8 GB": a Qwen3-4B-shaped random GGUF, decoded by llama.cpp and trained on.

``measure(quick, log)`` writes a GGUF with Qwen3-4B's dimensions (hidden 2560, 36 layers, 32 heads,
8 KV heads, head_dim 128, ffn 9728, vocab 151,936, tied embeddings) and random Q4_0 weights (the
tiny-Qwen3 builder at full size, tensor by tensor) to a temporary dir, deleted afterwards. Then, each
in its own child process so that its peak RSS (``ru_maxrss``) is its own:

- ``decode``: llama.cpp (all cores) loads the file, evaluates a 64-token prompt and decodes 32 tokens
  greedily: ``model4b_decode_tok_s``.
- ``bf16`` / ``nf4``: the trainer's own :func:`load_base` on the CPU (bf16 weights; or the decoder
  linears in 4-bit NF4 via bitsandbytes' CPU kernels, bf16 compute), then one step of the real
  :class:`Learner` (scoring + one optimizer pass, ``train.epochs = 1``) on one 512-token sample
  (384 prompt + 128 reply tokens, reward +1, no hint): load seconds, step seconds, peak RSS.

- ``judge``: the app's own engine (:class:`clawdesk.engine.Engine`, the default ``[model]`` settings)
  loads the file and the app's :class:`~clawdesk.judge.runner.Judge` (default ``[judge]``: the
  shipped channel method, m votes and the hint question) judges one recorded turn of a temporary
  store (a ~300-token request and reply, then a correcting next message):
  ``model4b_judge_s_per_turn`` (goal <= 30), with every model call's prompt tokens, the part of
  them the previous call had already cached, and its continuation tokens. The channel judge
  generates no tokens: it scores the next message after each framing, so its cost is set by the
  (clipped) texts and by how many votes ask the hint question (only votes that found the user
  unsatisfied do; with random weights that count is chance, so ``raw`` also gives the cost with
  every hint question asked, at the measured seconds per evaluated token).

Keys: ``model4b_train_peak_rss_mb`` (goal <= 8192) and ``model4b_step_s`` are those of the mode
:func:`load_base` picks on this machine by default (``raw["default_mode"]``: NF4 for a 4B model,
see ``nf4_on_cpu``); ``raw`` holds both modes. ``model4b_swap_speedup``: the app's reload vs a hot-swap.
``model4b_decode_tok_s``. ``--quick`` keeps every dimension but uses 2 layers (a smoke run:
its numbers say nothing about a 4B model, and ``raw["n_layers"]`` says so).

Heavy: ~2.3 GB of disk, ~8 GB of RAM and minutes of CPU per mode, so ``bench/run.py`` runs it only
with ``--only model4b`` or ``--full``. Standalone: ``python bench/sec_model4b.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

QWEN3_4B = {"hidden": 2560, "n_layers": 36, "n_head": 32, "n_head_kv": 8, "ffn": 9728}
VOCAB = 151_936
QTYPE = "Q4_0"
PROMPT, REPLY = 384, 128  # one 512-token sample
DECODE_PROMPT, DECODE_TOKENS = 64, 32
GOAL_MB = 8192
CHILD_TIMEOUT_S = 3600
SWAP_ROUNDS = 3
MODES = ("decode", "swap", "nf4", "bf16", "judge")
JUDGE_GOAL_S = 30
# One recorded turn as the judge reads it: a request and reply of a few hundred tokens (each is
# clipped to clawdesk.judge.parse.QUOTE_CHARS in the judge's prompt), then a correcting next message.
JUDGE_REQUEST = (
    "Here is the function that parses our billing config. It grew over two years and nobody likes "
    "touching it. Can you refactor it so that each section is parsed by its own helper, keep the "
    "behaviour exactly the same (including the error messages, some scripts grep for them), and add "
    "type hints? We are on Python 3.11.\n\n"
    "def parse(text):\n    out = {}\n    section = None\n    for n, line in enumerate(text.splitlines(), 1):\n"
    "        line = line.strip()\n        if not line or line.startswith('#'):\n            continue\n"
    "        if line.startswith('[') and line.endswith(']'):\n            section = line[1:-1]\n"
    "            out[section] = {}\n            continue\n        if '=' not in line:\n"
    "            raise ValueError(f'line {n}: expected key = value')\n        key, value = line.split('=', 1)\n"
    "        out[section][key.strip()] = value.strip()\n    return out\n"
)
JUDGE_REPLY = (
    "Here is a refactor that keeps the behaviour and the messages:\n\n"
    "from __future__ import annotations\n\n\ndef parse(text: str) -> dict[str, dict[str, str]]:\n"
    '    """Parse the billing config: [section] headers and key = value lines."""\n'
    "    out: dict[str, dict[str, str]] = {}\n    section: str | None = None\n"
    "    for n, raw in enumerate(text.splitlines(), 1):\n        line = raw.strip()\n"
    "        if _is_blank(line):\n            continue\n        if (name := _section(line)) is not None:\n"
    "            section = name\n            out[section] = {}\n            continue\n"
    "        key, value = _pair(line, n)\n        out[section][key] = value\n    return out\n\n\n"
    "def _is_blank(line: str) -> bool:\n"
    '    """True for empty lines and comments, which the parser skips."""\n'
    "    return not line or line.startswith('#')\n\n\n"
    "def _section(line: str) -> str | None:\n"
    '    """The section name of a [header] line, else None."""\n'
    "    return line[1:-1] if line.startswith('[') and line.endswith(']') else None\n\n\n"
    "def _pair(line: str, n: int) -> tuple[str, str]:\n"
    '    """Split key = value; the error message is unchanged because scripts grep for it."""\n'
    "    if '=' not in line:\n        raise ValueError(f'line {n}: expected key = value')\n"
    "    key, value = line.split('=', 1)\n    return key.strip(), value.strip()\n\n"
    "Each helper does one thing, the loop reads top to bottom, and the messages are the same."
)
JUDGE_NEXT = (
    "Works, thanks. But the docstrings are too long for helpers this small: next time keep each "
    "docstring to a short line, or leave it out for one-line helpers."
)


def _peak_mb() -> float:
    """This process's peak RSS in MiB.

    VmHWM, not ``ru_maxrss``: on Linux a child's ``ru_maxrss`` starts at its parent's peak (it survives
    fork and exec), so a child of a big parent would report the parent's peak as its own.
    """
    try:
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024
    except (OSError, StopIteration):  # not Linux: ru_maxrss (bytes on macOS)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 1024)


def _vocab() -> tuple[tuple[list[str], list[int], list[str]], str]:
    """Qwen3's real 151,936-token vocabulary when the test cache has it, else a stand-in of that size."""
    from clawdesk.testing import qwen3_assets
    from clawdesk.testing.tiny_qwen3 import qwen3_vocab, tiny_vocab

    try:
        return qwen3_vocab(qwen3_assets.qwen3_assets().vocab_path), "qwen3"
    except qwen3_assets.Qwen3AssetsError:
        tokens, types, merges = tiny_vocab()  # byte-level BPE + the chat markers, padded with unused tokens
        filler = [f"<|unused_{i}|>" for i in range(VOCAB - len(tokens))]
        return (tokens + filler, types + [1] * len(filler), merges), "stand-in"


def write_model(path: Path, n_layers: int) -> dict:
    from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

    vocab, which = _vocab()
    started = time.perf_counter()
    dims = QWEN3_4B | {"n_layers": n_layers}
    write_tiny_qwen3_gguf(path, **dims, embed_std=0.02, vocab=vocab, qtype=QTYPE, context_length=4096, fast_draws=True)
    return {"write_s": time.perf_counter() - started, "file_mb": path.stat().st_size / 2**20, "vocab": which}


# -- children ------------------------------------------------------------------------------------


def child_decode(path: Path) -> dict:
    import llama_cpp

    threads = os.cpu_count() or 1
    started = time.perf_counter()
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_threads=threads, n_batch=512, verbose=False)
    load_s = time.perf_counter() - started
    rng = random.Random(0)
    prompt = [rng.randrange(1000, 100_000) for _ in range(DECODE_PROMPT)]
    started = time.perf_counter()
    llm.eval(prompt)
    prefill_s = time.perf_counter() - started
    stamps = []
    for _ in llm.generate([], temp=0.0, reset=False):
        stamps.append(time.perf_counter())
        if len(stamps) == DECODE_TOKENS:
            break
    return {
        "load_s": load_s,
        "prefill_tok_s": DECODE_PROMPT / prefill_s,
        "decode_tok_s": (len(stamps) - 1) / (stamps[-1] - stamps[0]),
        "threads": threads,
        "peak_rss_mb": _peak_mb(),
    }


def child_swap(path: Path) -> dict:
    """Reload (the app's Engine.load at its n_ctx) vs hot-swap of a random rank-16 LoRA, interleaved."""
    import statistics

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sec_swap import RANK, time_swaps, write_random_adapter

    from clawdesk.config import ModelConfig
    from clawdesk.engine import Engine
    from clawdesk.models import resolve_model

    n_ctx = ModelConfig().n_ctx
    model = resolve_model(str(path), path.parent, explicit=True)
    engine = Engine.load(model, sha256="bench", n_ctx=n_ctx)
    try:
        adapter = write_random_adapter(engine, path.parent / "adapter.gguf")
        time_swaps(engine, adapter, 1)  # warm-up: the adapter file into the page cache
        loads, swaps = [], []
        for _ in range(SWAP_ROUNDS):
            started = time.perf_counter()
            Engine.load(model, sha256="bench", n_ctx=n_ctx).close()
            loads.append((time.perf_counter() - started) * 1000)
            swaps += time_swaps(engine, adapter, 2)
    finally:
        engine.close()
    return {
        "reload_ms": loads,
        "swap_ms": swaps,
        "speedup": statistics.median(loads) / statistics.median(swaps),
        "rank": RANK,
        "adapter_mb": adapter.stat().st_size / 2**20,
        "n_ctx": n_ctx,
        "peak_rss_mb": _peak_mb(),
    }


def child_train(path: Path, mode: str) -> dict:
    import torch

    from clawdesk.config import TrainConfig
    from clawdesk.learn.base_model import load_base
    from clawdesk.learn.learner import Learner
    from clawdesk.learn.samples import Sample

    torch.manual_seed(0)
    before = _peak_mb()
    model, info = load_base(path, device="cpu", load_in_4bit=mode == "nf4", base_dtype="bfloat16")
    loaded_mb = _peak_mb()
    rng = random.Random(0)
    sample = Sample(
        turn_id=1,
        prompt_ids=[rng.randrange(info.vocab_size) for _ in range(PROMPT)],
        reply_ids=[rng.randrange(info.vocab_size) for _ in range(REPLY)],
        reward=1.0,
        hint=None,
        teacher_prompt_ids=None,
    )
    config = TrainConfig(epochs=1, token_budget=PROMPT + REPLY)
    learner = Learner(model, info, config, parent_dir=None)
    started = time.perf_counter()
    ref, teacher = learner.score([sample])
    score_s = time.perf_counter() - started
    started = time.perf_counter()
    metrics = learner.step([sample], ref, teacher, stop=lambda: False)
    step_s = time.perf_counter() - started
    return {
        "load_s": info.load_seconds,
        "score_s": score_s,
        "step_s": step_s,
        "step_total_s": score_s + step_s,
        "peak_rss_mb": _peak_mb(),
        "rss_after_imports_mb": before,
        "peak_after_load_mb": loaded_mb,
        "dtype": info.dtype,
        "quantized": info.quantized,
        "n_params": info.n_params,
        "threads": torch.get_num_threads(),
        "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))},
    }


def child_judge(path: Path, threads: int = 0) -> dict:
    """The app's judge on one recorded turn: seconds, and every model call's token counts.

    ``threads`` 0 = the app's default (``model.n_threads``: automatic, every core); on a machine
    that other jobs keep busy, two llama.cpp threads wait on each other and 1 is far faster."""
    from clawdesk.config import JudgeConfig, ModelConfig
    from clawdesk.engine import Engine
    from clawdesk.engine.kv_keep import common_prefix
    from clawdesk.judge.runner import Judge
    from clawdesk.models import resolve_model
    from clawdesk.store import Store
    from clawdesk.store.judgments import pending_turns
    from clawdesk.store.log import NewTurn

    mc, jc = ModelConfig(), JudgeConfig()
    load_at_start = os.getloadavg()
    model = resolve_model(str(path), path.parent, explicit=True)
    started = time.perf_counter()
    engine = Engine.load(model, sha256="bench", n_ctx=mc.n_ctx, n_threads=threads or mc.n_threads, seed=mc.seed)
    load_s = time.perf_counter() - started
    calls: list[dict] = []
    real = engine.continuation_logprobs
    last: list[int] = []

    def counted(prompt_ids, continuations, **kwargs):
        # What the engine can reuse is the common prefix with the previous call's prompt (it leaves the
        # cache at the prompt's end, and nothing else uses this engine); at least one token is always evaluated.
        cached = min(common_prefix(last, prompt_ids), len(prompt_ids) - 1)
        began = time.perf_counter()
        out = real(prompt_ids, continuations, **kwargs)
        calls.append({
            "prompt": len(prompt_ids), "cached": cached, "continuation": sum(len(c) for c in continuations),
            "s": time.perf_counter() - began,
        })  # fmt: skip
        last[:] = prompt_ids
        print(json.dumps(calls[-1]), file=sys.stderr, flush=True)  # progress, should the run be cut short
        return out

    engine.continuation_logprobs = counted
    try:
        with tempfile.TemporaryDirectory(prefix="clawdesk-judge-") as tmp, Store.open(Path(tmp) / "c.db") as store:
            session = store.create_session(system_prompt="You are a helpful assistant.")
            for user, reply in ((JUDGE_REQUEST, JUDGE_REPLY), (JUDGE_NEXT, "Noted: one-line docstrings.")):
                at = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
                ids = engine.tokenize_plain(user, bos=True)
                turn = NewTurn(user, reply, "", "finished", False, "qwen3-4b-shaped", str(path), "bench", ids,
                               engine.tokenize_plain(reply), at, at)  # fmt: skip
                store.add_turn(session.id, turn)
            pending = pending_turns(store)[0]
            judge = Judge(engine, jc)
            started = time.perf_counter()
            judgment = judge.judge(store, pending)
            judge_s = time.perf_counter() - started
    finally:
        engine.close()
    evaluated = sum(c["prompt"] - c["cached"] + c["continuation"] for c in calls)
    hint_calls = sum(1 for out in judgment.hint_outputs if not out.startswith("channel not asked"))
    per_question = 2  # a score or hint question scores the next message after two framings
    missing = (jc.votes - hint_calls) * per_question  # hint calls not made because the vote was satisfied
    mean_call = [c["prompt"] - c["cached"] + c["continuation"] for c in calls[per_question:]] or [0]
    worst_tokens = evaluated + missing * sum(mean_call) / len(mean_call)
    return {
        "judge_s": judge_s,
        "load_s": load_s,
        "votes": judgment.votes,
        "hint_questions": hint_calls,
        "hint_accepted": judgment.hint is not None,
        "model_calls": len(calls),
        "prompt_tokens": sum(c["prompt"] for c in calls),
        "prefill_tokens": sum(c["prompt"] - c["cached"] for c in calls),
        "reused_prefix_tokens": sum(c["cached"] for c in calls),
        "continuation_tokens": sum(c["continuation"] for c in calls),
        "decode_tokens": 0,  # the channel judge scores text; it generates none
        "prefix_reused_between_votes": all(c["cached"] > 0 for c in calls[1:]),
        "calls": calls,
        "s_per_evaluated_token": judge_s / evaluated if evaluated else None,
        "worst_case_s": judge_s / evaluated * worst_tokens if evaluated else None,
        "n_ctx": mc.n_ctx,
        "threads": threads or "automatic",
        "cores": os.cpu_count(),
        "load_avg_at_start": load_at_start,
        "peak_rss_mb": _peak_mb(),
    }


def _run_child(path: Path, mode: str, log: Callable[[str], None], extra: tuple[str, ...] = ()) -> dict:
    started = time.perf_counter()
    cmd = [sys.executable, __file__, "--child", mode, "--gguf", str(path), *extra]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log(f"  {mode}: timed out after {CHILD_TIMEOUT_S} s")
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}
    if out.returncode != 0:
        # -9 = killed, most likely by the kernel's OOM killer: that is a result too (it did not fit).
        tail = (out.stderr.strip().splitlines() or [""])[-1][:300]
        log(f"  {mode}: exit {out.returncode} {tail}")
        return {"error": f"exit {out.returncode}: {tail}", "wall_s": time.perf_counter() - started}
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - started
    log(f"  {mode}: " + ", ".join(f"{k} {v:.1f}" for k, v in result.items() if isinstance(v, float)))
    return result


def default_mode(n_params: int) -> str:
    """What load_base picks on this CPU with the default config (train.load_in_4bit, base_dtype "auto")."""
    import psutil
    import torch

    from clawdesk.learn.base_model import nf4_on_cpu
    from clawdesk.learn.gguf_weights import choose_dtype

    available = psutil.virtual_memory().available
    if nf4_on_cpu(n_params, available):
        return "nf4"
    dtype = choose_dtype("auto", n_params=n_params, available_bytes=available)
    return "bf16" if dtype == torch.bfloat16 else "fp32"


def measure(
    quick: bool, log: Callable[[str], None], modes_wanted: tuple[str, ...] = MODES, judge_threads: int = 0
) -> dict[str, dict]:
    from clawdesk.learn.gguf_weights import gguf_param_count

    n_layers = 2 if quick else QWEN3_4B["n_layers"]
    raw: dict = {"dims": QWEN3_4B | {"n_layers": n_layers, "vocab": VOCAB}, "qtype": QTYPE, "n_layers": n_layers}
    with tempfile.TemporaryDirectory(prefix="clawdesk-4b-") as tmp:
        path = Path(tmp) / "qwen3-4b-shaped.gguf"
        log(f"writing a Qwen3-4B-shaped {QTYPE} GGUF ({n_layers} layers) to {tmp}")
        raw["file"] = write_model(path, n_layers)
        raw["n_params"] = gguf_param_count(path)
        log(f"  {raw['file']['file_mb']:.0f} MB, {raw['n_params'] / 1e9:.2f} B weights, {raw['file']['write_s']:.0f} s")
        extra = {"judge": ("--threads", str(judge_threads))}
        modes = {mode: _run_child(path, mode, log, extra.get(mode, ())) for mode in MODES if mode in modes_wanted}
    raw["modes"] = modes
    # NF4 for a 4B model unless the budget is raised; fp32 is not measured here (it would need 16 GB).
    raw["default_mode"] = default_mode(raw["n_params"])
    return section_results(raw, modes, modes_wanted)


def section_results(raw: dict, modes: dict[str, dict], modes_wanted: tuple[str, ...]) -> dict[str, dict]:
    """The section's keys from the children's results: only the keys of the modes that were asked for."""
    chosen = modes.get(raw.get("default_mode", ""), {})
    results = {
        "model4b_train_peak_rss_mb": {
            "value": chosen.get("peak_rss_mb"),
            "unit": "MB",
            "goal": f"<= {GOAL_MB}",
            "raw": raw,
            "what": "peak RSS of load + one training step on one 512-token sample, the mode train picks here",
        },
        "model4b_step_s": {
            "value": chosen.get("step_total_s"),
            "unit": "s",
            "goal": "",
            "raw": {mode: modes.get(mode, {}) for mode in ("bf16", "nf4")},
            "what": "scoring + one optimizer pass on one 512-token sample, Qwen3-4B-shaped, CPU",
        },
        "model4b_decode_tok_s": {
            "value": modes.get("decode", {}).get("decode_tok_s"),
            "unit": "tok/s",
            "goal": "",
            "raw": modes.get("decode", {}),
            "what": f"llama.cpp greedy decode of the Qwen3-4B-shaped {QTYPE} file, all cores",
        },
        "model4b_judge_s_per_turn": {
            "value": modes.get("judge", {}).get("judge_s"),
            "unit": "s",
            "goal": f"<= {JUDGE_GOAL_S}",
            "raw": modes.get("judge", {}),
            "what": "the app's judge (channel, m votes + hint question) on one recorded turn, Qwen3-4B-shaped, CPU",
        },
        "model4b_swap_speedup": {
            "value": modes.get("swap", {}).get("speedup"),
            "unit": "x",
            "goal": ">= 10",
            "raw": modes.get("swap", {}),
            "what": "Qwen3-4B-shaped: full reload (the app's n_ctx) ÷ hot-swap of a rank-16 LoRA",
        },
    }
    needs = {
        "model4b_decode_tok_s": {"decode"},
        "model4b_swap_speedup": {"swap"},
        "model4b_judge_s_per_turn": {"judge"},
    }
    return {key: r for key, r in results.items() if needs.get(key, {"nf4", "bf16"}) & set(modes_wanted)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 layers instead of 36 (a smoke run)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"which of {', '.join(MODES)} to run (default: all)")
    parser.add_argument(
        "--judge-threads", type=int, default=0, help="llama.cpp threads of the judge mode (0 = the app's default)"
    )
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--gguf", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        path = Path(args.gguf)
        children = {"decode": child_decode, "swap": child_swap, "judge": lambda p: child_judge(p, args.threads)}
        result = children[args.child](path) if args.child in children else child_train(path, args.child)
        print(json.dumps(result))
        return
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not modes or set(modes) - set(MODES):
        parser.error(f"--modes takes some of {', '.join(MODES)}, got {args.modes!r}")
    results = measure(args.quick, lambda line: print(line, flush=True), modes, args.judge_threads)
    for key, result in results.items():
        value = result["value"]
        shown = "—" if value is None else f"{value:.1f}"
        print(f"{key:28} {shown:>10} {result['unit']:6} {result['goal']}")
    print(json.dumps({k: v["raw"] for k, v in results.items()}, indent=1, default=str)[:4000])


if __name__ == "__main__":
    main()
