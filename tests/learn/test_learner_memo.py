"""Validation work done once: held-out log-probs are memoized per LoRA weights, never served stale.

The trainer scores the held-out replies before and after every step; the "after" of one step is the
"before" of the next (same weights), and a rejected version's restore brings back the weights of
the "before". These tests count the replies the learner really scores and check every memoized
value against a fresh computation. Real transformers + peft on the tiny random Qwen3 GGUF.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from clawdesk.config import TrainConfig
from clawdesk.learn import versions
from clawdesk.learn.base_model import load_base
from clawdesk.learn.learner import Learner
from clawdesk.learn.samples import Sample
from clawdesk.learn.trainer import train
from clawdesk.store import Store
from clawdesk.testing.judged_log import fill_judged
from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

VOCAB = 283  # the tiny Qwen3's vocabulary
SHA = "tiny-sha"
_UNCOUNTED = Learner.logprobs_each  # the real scorer, for reference values the counter must not see


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_qwen3_gguf(tmp_path_factory.mktemp("tiny") / "tiny-qwen3.gguf")


@pytest.fixture
def scored(monkeypatch) -> list[int]:
    """How many replies each ``logprobs_each`` call with the adapter on scored (the held-out path)."""
    calls: list[int] = []
    inner = Learner.logprobs_each

    def counting(self, pairs, *, adapter=True):
        if adapter:
            calls.append(len(pairs))
        return inner(self, pairs, adapter=adapter)

    monkeypatch.setattr(Learner, "logprobs_each", counting)
    return calls


def _samples(n: int, seed: int, reward: float) -> list[Sample]:
    rng = random.Random(seed)
    return [
        Sample(turn_id=i, prompt_ids=[rng.randrange(VOCAB) for _ in range(rng.randrange(6, 16))],
               reply_ids=[rng.randrange(VOCAB) for _ in range(rng.randrange(3, 10))], reward=reward, hint=None,
               teacher_prompt_ids=None)
        for i in range(n)
    ]  # fmt: skip


def _fresh_mean(learner: Learner, samples: list[Sample]) -> float:
    each = _UNCOUNTED(learner, [(s.prompt_ids, s.reply_ids) for s in samples])
    return float(sum(x.double().sum() for x in each) / sum(x.numel() for x in each))


def test_heldout_logprobs_are_scored_once_per_weights_and_follow_every_change(tiny_gguf, scored):
    model, info = load_base(tiny_gguf, device="cpu")
    learner = Learner(model, info, TrainConfig(lr=2e-2, epochs=1), parent_dir=None)
    held, batch = _samples(5, seed=1, reward=0.0), _samples(4, seed=2, reward=-1.0)

    first = learner.mean_logprob(held)
    assert learner.mean_logprob(held[:3]) == learner.mean_logprob(held[:3])  # a subset: memo hits only
    assert learner.mean_logprob(held) == first
    assert scored == [5]
    saved = learner.snapshot()

    learner.step(batch, *learner.score(batch), stop=lambda: False)  # the weights change...
    after = learner.mean_logprob(held)
    assert scored[-1] == 5  # ...so every reply is scored again
    assert after["mean"] != pytest.approx(first["mean"], abs=1e-4)  # a stale memo would return `first`
    assert after["mean"] == pytest.approx(_fresh_mean(learner, held), abs=1e-6)

    learner.restore(saved)  # a rejected version: back to the weights `first` was computed on
    n = len(scored)
    again = learner.mean_logprob(held)
    assert len(scored) == n and again == first
    assert again["mean"] == pytest.approx(_fresh_mean(learner, held), abs=1e-6)

    other_model, _ = load_base(tiny_gguf, device="cpu")  # another learner's snapshot carries no memo here
    other = Learner(other_model, info, learner.config, parent_dir=None)
    other.restore(learner.snapshot())
    n = len(scored)
    assert other.mean_logprob(held) == pytest.approx(first) and scored[n:] == [5]


def _fill(db: Path, n: int, *, seed: int, rewards: tuple[int, ...]) -> list[int]:
    return fill_judged(db, n, seed=seed, vocab=VOCAB, sha=SHA, rewards=rewards, prompt_len=(6, 20), reply_len=(3, 10))


def test_a_run_scores_the_heldout_replies_once_per_step_plus_once(tiny_gguf, tmp_path, scored):
    """Two steps, the same 6 held-out replies: before v1, after v1 (= before v2), after v2 — 18 replies, not 24.

    The second batch's good replies are newer than the quiet ones: held out from v1 they would change
    the set between the steps, so the run keeps every turn it is going to train on out of it.
    """
    db, adapters = tmp_path / "clawdesk.db", tmp_path / "adapters"
    quiet = _fill(db, 6, seed=1, rewards=(0,))  # no signal: held out (and never trained on)
    _fill(db, 8, seed=2, rewards=(1, -1))  # two batches
    # Without the general-ability guard: its texts go through the same scoring path (tests/learn/test_guard.py).
    config = TrainConfig(batch_size=4, lr=1e-3, max_logprob_drop=50.0, max_ppl_ratio=0)
    made = train(db, adapters, tiny_gguf, "tiny", SHA, config)
    assert made == [1, 2]
    store = Store.open(db)
    try:
        v1, v2 = (versions.get_version(store, n) for n in made)
    finally:
        store.close()
    assert v1.ready and v2.ready
    assert sorted(v1.validation["heldout"]["turn_ids"]) == sorted(v2.validation["heldout"]["turn_ids"]) == quiet
    assert sum(scored) == 3 * 6
    # v2's "before" is v1's "after": the same weights, the same replies.
    assert v2.validation["heldout"]["logp_before"] == v1.validation["heldout"]["logp_after"]
    assert v2.validation["heldout"]["logp_after"] != v2.validation["heldout"]["logp_before"]
    assert torch.isfinite(torch.tensor(v2.validation["heldout"]["logp_after"]))
