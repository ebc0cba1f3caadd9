"""The learner where a fresh LoRA hides bugs: a trained (non-zero) adapter, and micro-batch accumulation.

A fresh LoRA has B = 0, so adapter on and adapter off give the same log-probs: a scorer that forgot
to disable the adapter, or a KL that compared the policy with itself, would pass every test run on
one. Here the adapter is trained first, and the scores are checked against a separately loaded
base model (no peft at all). The accumulation test compares the LoRA gradient of a batch split into
micro-batches with the gradient of the same batch in one forward/backward, before clipping.
Everything runs on the tiny random Qwen3 GGUF (real transformers + peft on CPU).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from clawdesk.config import TrainConfig
from clawdesk.learn.base_model import load_base
from clawdesk.learn.learner import Learner
from clawdesk.learn.logprobs import reply_logprobs
from clawdesk.learn.samples import Sample
from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

VOCAB = 283  # the tiny Qwen3's vocabulary


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_qwen3_gguf(tmp_path_factory.mktemp("tiny") / "tiny-qwen3.gguf")


def _samples(n: int, seed: int) -> list[Sample]:
    """Mixed rewards, every other sample hinted (teacher prompt = prompt + a few hint tokens), varied lengths."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = [rng.randrange(VOCAB) for _ in range(rng.randrange(8, 20))]
        hinted = i % 2 == 0
        out.append(
            Sample(
                turn_id=i, prompt_ids=prompt, reply_ids=[rng.randrange(VOCAB) for _ in range(rng.randrange(4, 14))],
                reward=(1.0, -1.0, 0.0)[i % 3], hint="h" if hinted else None,
                teacher_prompt_ids=[*prompt, *(rng.randrange(VOCAB) for _ in range(6))] if hinted else None,
            )
        )  # fmt: skip
    return out


def _lora_b(learner: Learner) -> list[torch.Tensor]:
    return [p for n, p in learner.model.named_parameters() if "lora_B" in n]


def _base_logprobs(model, pairs) -> list[torch.Tensor]:
    """Reply log-probs of a plain transformers model (no peft), one pair at a time."""
    with torch.no_grad():
        out = []
        for p, r in pairs:
            logp, mask = reply_logprobs(model, [(p, r)], "cpu")
            out.append(logp[0][mask[0]])
        return out


def test_reference_and_teacher_are_the_base_not_the_trained_adapter(tiny_gguf):
    """Design (trainer.py, docs): ref and teacher log-probs come from the frozen base (adapter disabled),
    the policy's from the current adapter; so on a trained adapter they differ, and the KL is > 0."""
    model, info = load_base(tiny_gguf, device="cpu", load_in_4bit=False)
    # an independent base: what "adapter disabled" must reproduce
    plain, _ = load_base(tiny_gguf, device="cpu", load_in_4bit=False)
    learner = Learner(model, info, TrainConfig(lr=2e-2, epochs=1, beta_kl=0.5), parent_dir=None)
    samples = _samples(6, seed=3)
    learner.step(samples, *learner.score(samples), stop=lambda: False)  # train the fresh LoRA once
    assert all(float(b.detach().abs().max()) > 0 for b in _lora_b(learner))  # B ≠ 0: the adapter now changes outputs

    policy = learner.logprobs_each([(s.prompt_ids, s.reply_ids) for s in samples])
    ref, teacher = learner.score(samples)
    base = _base_logprobs(plain, [(s.prompt_ids, s.reply_ids) for s in samples])
    hinted = [i for i, s in enumerate(samples) if s.has_hint]
    base_teacher = _base_logprobs(plain, [(samples[i].teacher_prompt_ids, samples[i].reply_ids) for i in hinted])
    policy_teacher = learner.logprobs_each([(samples[i].teacher_prompt_ids, samples[i].reply_ids) for i in hinted])

    for r, b, p in zip(ref, base, policy, strict=True):
        torch.testing.assert_close(r, b, atol=1e-5, rtol=0)  # reference = base weights
        assert float((r - p).abs().max()) > 1e-3  # and not the trained policy (a swap would make them equal)
    assert [t is None for t in teacher] == [not s.has_hint for s in samples]
    for i, bt, pt in zip(hinted, base_teacher, policy_teacher, strict=True):
        torch.testing.assert_close(teacher[i], bt, atol=1e-5, rtol=0)  # teacher = base with the hint
        assert float((teacher[i] - pt).abs().max()) > 1e-3  # not the adapter with the hint
        assert float((teacher[i] - ref[i]).abs().max()) > 1e-3  # and the hint tokens change it

    # The KL the step reports is the k3 KL(policy ‖ base): > 0 once the adapter is non-zero.
    metrics = learner.step(samples, ref, teacher, stop=lambda: False)
    assert metrics["kl"] > 1e-6
    # Fed the policy's own log-probs as "reference" (the swap bug), the same step would see KL = 0.
    swapped_model, _ = load_base(tiny_gguf, device="cpu", load_in_4bit=False)
    swapped = Learner(swapped_model, info, learner.config, parent_dir=None)
    swapped.restore(learner.snapshot())
    own = swapped.logprobs_each([(s.prompt_ids, s.reply_ids) for s in samples])
    assert swapped.step(samples, own, teacher, stop=lambda: False)["kl"] < 1e-9


def test_micro_batches_accumulate_the_gradient_of_the_whole_batch(tiny_gguf, monkeypatch):
    """token_budget 64 (several micro-batches) and 10^6 (one) must give the same LoRA gradient (fp32)."""
    samples = _samples(7, seed=5)
    start: list[torch.Tensor] = []
    grads, metrics = [], []
    for budget in (64, 1_000_000):
        model, info = load_base(tiny_gguf, device="cpu", load_in_4bit=False)
        learner = Learner(model, info, TrainConfig(epochs=1, token_budget=budget, beta_kl=0.1), parent_dir=None)
        if start:
            learner.restore(start)  # the very same LoRA A and B in both runs
        else:
            g = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for b in _lora_b(learner):  # non-zero B: A gets a gradient, and ref ≠ policy (KL term active)
                    b.copy_(torch.randn(b.shape, generator=g) * 0.05)
            start = learner.snapshot()

        seen: list[list[torch.Tensor]] = []
        clip = torch.nn.utils.clip_grad_norm_

        def record(params, *args, _seen=seen, _clip=clip, **kw):  # the accumulated gradient, before clipping
            params = list(params)
            _seen.append([p.grad.detach().clone() for p in params])
            return _clip(params, *args, **kw)

        monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", record)
        ref, teacher = learner.score(samples)
        metrics.append(learner.step(samples, ref, teacher, stop=lambda: False))
        monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
        assert len(seen) == 1
        grads.append(seen[0])

    assert metrics[0]["n_micro_batches"] >= 3 and metrics[1]["n_micro_batches"] == 1
    split, whole = grads
    assert len(split) == len(whole) == len(start)
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in whole))
    assert norm > 1e-3  # a real gradient, on A as well as B
    assert all(float(g.abs().max()) > 0 for g in whole)
    for s, w in zip(split, whole, strict=True):
        torch.testing.assert_close(s, w, atol=1e-6 + 1e-4 * float(w.abs().max()), rtol=1e-4)
    for key in ("loss", "kl", "pg_loss", "reward_mean", "n_tokens", "n_samples", "n_hinted"):
        assert metrics[0][key] == pytest.approx(metrics[1][key], rel=1e-4, abs=1e-6), key
