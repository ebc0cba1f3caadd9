"""The levers in the learner and the trainer, on the tiny random Qwen3 GGUF (real transformers + peft on CPU).

- AdamW state: a guard retry starts from the moments before the failed try (exact tensors), a
  version keeps its moments in optimizer.safetensors, the next run loads them (exact tensors) and
  its next step equals the one the first learner would have taken; the file is never exported;
- sampling: seeded, batch-independent (left padding shifts nothing), stops at the end token;
- context distillation: teacher replies learned in the student's prompt with the base's teacher log-probs;
- student samples: the adapter's own replies scored by the teacher; teacher = policy adds no gradient,
  and the term alone brings the adapter's replies closer to the teacher's (reverse KL falls); with
  ``student_topk`` the teacher's top K tokens per position, no gradient where teacher = policy, and the
  term alone lowers the exact KL from the teacher at the adapter's reply positions;
- the anchor: on a fresh LoRA (policy = base) it adds nothing to the gradient;
- the policy teacher: on a fresh LoRA it is the base (the same step); after a step the teacher's log-probs
  are the adapter's with the hint in context, the reference's still the base's;
- the trainer subprocess and `train()` take the options from config.toml.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import torch

from clawdesk.config import TrainConfig
from clawdesk.learn import extras, optim_state, versions
from clawdesk.learn.base_model import load_base
from clawdesk.learn.learner import Learner
from clawdesk.learn.samples import Sample
from clawdesk.learn.sampling import sample_replies
from clawdesk.learn.trainer import train
from clawdesk.testing.judged_log import fill_judged
from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

VOCAB = 283
SHA = "tiny-sha"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_qwen3_gguf(tmp_path_factory.mktemp("tiny") / "tiny-qwen3.gguf")


def _learner(gguf: Path, parent_dir: Path | None = None, **cfg) -> Learner:
    model, info = load_base(gguf, device="cpu", load_in_4bit=False)
    return Learner(model, info, TrainConfig(**({"lr": 1e-2, "epochs": 1} | cfg)), parent_dir=parent_dir)


def _samples(n: int, seed: int, hint: bool = False) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = [rng.randrange(VOCAB) for _ in range(10)]
        out.append(
            Sample(
                turn_id=i, prompt_ids=prompt, reply_ids=[rng.randrange(VOCAB) for _ in range(5 + i)],
                reward=(1.0, -1.0)[i % 2], hint="h" if hint else None,
                teacher_prompt_ids=[*prompt, 7, 8, 9] if hint else None,
            )
        )  # fmt: skip
    return out


def _state(learner: Learner) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in learner.optimizer_tensors().items()}


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() and a
    for key in a:
        assert torch.equal(a[key], b[key]), key


def _step(learner: Learner, samples: list[Sample]) -> dict[str, float]:
    return learner.step(samples, *learner.score(samples), stop=lambda: False)


def test_a_retry_restores_the_moments_from_before_the_failed_try(tiny_gguf):
    learner = _learner(tiny_gguf, keep_optimizer=True)
    _step(learner, _samples(4, seed=1))  # moments ≠ 0
    before = _state(learner)
    snap = learner.snapshot()
    _step(learner, _samples(4, seed=2))  # the "failed try"
    assert not torch.equal(next(iter(_state(learner).values())), next(iter(before.values())))
    learner.restore(snap)
    _assert_same(_state(learner), before)
    # default (today's behaviour): a retry starts a fresh AdamW
    fresh = _learner(tiny_gguf)
    _step(fresh, _samples(4, seed=1))
    snap = fresh.snapshot()
    _step(fresh, _samples(4, seed=2))
    fresh.restore(snap)
    assert fresh.optimizer_tensors() == {}


def test_moments_survive_a_run_and_the_next_step_is_the_same(tiny_gguf, tmp_path):
    first = _learner(tiny_gguf, keep_optimizer=True)
    _step(first, _samples(4, seed=1))
    info = first.info
    versions.write_adapter(first.model, tmp_path, arch=info.arch, n_head=info.n_head, n_head_kv=info.n_head_kv)
    optim_state.save(tmp_path / optim_state.OPTIMIZER_FILE, first.optimizer_tensors())

    second = _learner(tiny_gguf, parent_dir=tmp_path, keep_optimizer=True)
    assert second.optimizer_source == f"kept from {tmp_path.name}"
    _assert_same(_state(second), _state(first))

    nxt = _samples(3, seed=5)
    _step(first, nxt)
    _step(second, nxt)
    for a, b in zip(first.params, second.params, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)  # same weights, same moments: the same step

    cold = _learner(tiny_gguf, parent_dir=tmp_path)  # keep_optimizer off: fresh moments, as today
    assert cold.optimizer_tensors() == {} and cold.optimizer_source == "fresh"


def test_a_damaged_or_foreign_optimizer_file_leaves_fresh_moments(tiny_gguf, tmp_path):
    first = _learner(tiny_gguf, keep_optimizer=True)
    _step(first, _samples(2, seed=1))
    info = first.info
    versions.write_adapter(first.model, tmp_path, arch=info.arch, n_head=info.n_head, n_head_kv=info.n_head_kv)
    tensors = first.optimizer_tensors()
    key = next(k for k in tensors if k.endswith("::exp_avg"))
    optim_state.save(tmp_path / optim_state.OPTIMIZER_FILE, tensors | {key: torch.zeros(3)})
    learner = _learner(tiny_gguf, parent_dir=tmp_path, keep_optimizer=True)
    assert learner.optimizer_tensors() == {} and "shape" in learner.optimizer_source
    (tmp_path / optim_state.OPTIMIZER_FILE).write_bytes(b"not safetensors")
    learner = _learner(tiny_gguf, parent_dir=tmp_path, keep_optimizer=True)
    assert learner.optimizer_tensors() == {} and "delete the file" in learner.optimizer_source


def test_sampling_is_seeded_batch_independent_and_stops_at_the_end_token(tiny_gguf):
    model, _ = load_base(tiny_gguf, device="cpu", load_in_4bit=False)
    prompts = [[5, 6, 7], list(range(20, 45)), [9]]
    kw = {"max_tokens": 12, "eos_ids": [280], "device": "cpu"}
    greedy = sample_replies(model, prompts, temperature=1e-4, seed=0, **kw)  # ≈ argmax
    alone = [sample_replies(model, [p], temperature=1e-4, seed=0, **kw)[0] for p in prompts]
    assert greedy == alone  # left padding changes no row
    a = sample_replies(model, prompts, temperature=1.0, seed=3, **kw)
    assert a == sample_replies(model, prompts, temperature=1.0, seed=3, **kw)
    assert all(1 <= len(r) <= 12 for r in a)
    stop = greedy[0][0]  # its first token made an end token: the reply is that one token
    assert sample_replies(model, [prompts[0]], temperature=1e-4, seed=0, **(kw | {"eos_ids": [stop]}))[0] == [stop]
    # Temperature 0 is exact greedy decoding (the learned check's own replies): the seed does not matter.
    argmax = sample_replies(model, prompts, temperature=0.0, seed=0, **kw)
    assert argmax == greedy == sample_replies(model, prompts, temperature=0.0, seed=99, **kw)


def test_sample_with_the_adapter_writes_what_the_adapter_learned(tiny_gguf):
    # The LoRA's A is random, and unseeded the result hung on the tests run before this one (alone it failed
    # 4 of 6 times). Seeded: seeds 1-5 write the target after 15-20 steps; seed 0's draw oscillates at this lr.
    torch.manual_seed(1)
    learner = _learner(tiny_gguf, lr=5e-2, epochs=1, w_opd=0.0)
    prompt = [5, 6, 7]
    target = [11, 12, 13, 14]
    base_reply = learner.sample([prompt], max_tokens=4, temperature=0.0, seed=0)[0]
    assert target != base_reply
    good = Sample(turn_id=1, prompt_ids=prompt, reply_ids=target, reward=1.0, hint=None, teacher_prompt_ids=None)
    for _ in range(40):
        if learner.sample([prompt], max_tokens=4, temperature=0.0, seed=0, adapter=True)[0] == target:
            break
        learner.step([good], *learner.score([good]), stop=lambda: False)
    assert learner.sample([prompt], max_tokens=4, temperature=0.0, seed=0, adapter=True)[0] == target
    assert learner.sample([prompt], max_tokens=4, temperature=0.0, seed=0)[0] == base_reply  # the base is unchanged


def test_distill_samples_are_teacher_replies_in_the_student_prompt(tiny_gguf):
    learner = _learner(tiny_gguf, distill_samples=2, distill_max_tokens=8)
    samples = [*_samples(2, seed=3, hint=True), *_samples(1, seed=4)]
    extra = extras.distill_samples(learner, samples, seed=11)
    assert len(extra) == 4  # 2 replies for each of the 2 hinted samples, none for the plain one
    for k, x in enumerate(extra):
        s = samples[k // 2]
        assert x.prompt_ids == s.prompt_ids and 1 <= len(x.reply_ids) <= 8  # learned without the hint
        base = learner.logprobs_each([(s.teacher_prompt_ids, x.reply_ids)], adapter=False)[0]
        assert torch.equal(x.target_logp, base)  # the teacher is the base with the hint
    metrics = learner.step(samples, *learner.score(samples), stop=lambda: False, distill=extra)
    assert metrics["n_distill"] == 4 and metrics["distill_weight_mean"] > 0
    before = [float(lp.sum()) for lp in learner.logprobs_each([(x.prompt_ids, x.reply_ids) for x in extra])]
    for _ in range(3):
        learner.step(samples, *learner.score(samples), stop=lambda: False, distill=extra)
    after = [float(lp.sum()) for lp in learner.logprobs_each([(x.prompt_ids, x.reply_ids) for x in extra])]
    assert sum(after) > sum(before)  # the student without the hint now writes the teacher's replies more


def _reverse_kl(learner: Learner, samples: list[Sample], seed: int) -> float:
    """Mean over the adapter's own reply tokens of log π_adapter(student prompt) − log π_base(teacher prompt)."""
    extra = extras.student_samples(learner, samples, seed=seed)
    own = learner.logprobs_each([(x.prompt_ids, x.reply_ids) for x in extra])
    return float(sum((o - x.target_logp).sum() for o, x in zip(own, extra, strict=True))) / sum(
        len(x.reply_ids) for x in extra
    )


def test_student_samples_are_the_adapters_own_replies_scored_by_the_teacher(tiny_gguf):
    learner = _learner(tiny_gguf, student_samples=2, distill_max_tokens=8)
    samples = [*_samples(2, seed=3, hint=True), *_samples(1, seed=4)]
    extra = extras.student_samples(learner, samples, seed=5)
    assert len(extra) == 4  # 2 replies for each of the 2 samples with a teacher, none for the plain one
    own = learner.sample([s.prompt_ids for s in samples[:2] for _ in range(2)], max_tokens=8, temperature=1.0,
                         seed=5, adapter=True)  # fmt: skip
    assert [x.reply_ids for x in extra] == own  # sampled from the adapter, in the prompt without the hint
    for k, x in enumerate(extra):
        s = samples[k // 2]
        assert x.prompt_ids == s.prompt_ids
        teacher = learner.logprobs_each([(s.teacher_prompt_ids, x.reply_ids)], adapter=False)[0]
        assert torch.equal(x.target_logp, teacher)
    assert extras.student_samples(learner, samples, seed=5)[0].reply_ids == extra[0].reply_ids  # seeded


def test_student_term_is_zero_where_the_teacher_is_the_policy(tiny_gguf):
    """Teacher = old ⇒ the OPD advantage is 0 on every token, so the term adds no gradient."""
    samples = _samples(3, seed=6)
    grads = []
    for n in (0, 2):
        torch.manual_seed(0)  # the same fresh LoRA (B = 0: policy = base) both times
        learner = _learner(tiny_gguf, student_samples=n, distill_max_tokens=6)
        # A teacher prompt equal to the student's: the teacher is the base, which the fresh adapter is.
        taught = [dataclasses.replace(s, teacher_prompt_ids=s.prompt_ids) for s in samples]
        student = extras.student_samples(learner, taught, seed=1)
        assert len(student) == 3 * n
        captured: dict[str, torch.Tensor] = {}
        _capture_grads(learner, captured)
        metrics = learner.step(samples, *learner.score(samples), stop=lambda: False, student=student)
        grads.append(captured)
        if n:
            assert metrics["n_student"] == 6 and abs(metrics["student_adv_mean"]) < 1e-5
    _assert_same(grads[0], grads[1])


def test_student_term_moves_the_adapter_toward_its_teacher(tiny_gguf):
    """With only the student term, the adapter's own replies become likelier under the teacher (reverse KL falls)."""
    torch.manual_seed(0)
    learner = _learner(tiny_gguf, student_samples=4, distill_max_tokens=6, w_binary=0.0, beta_kl=0.0, lr=5e-3)
    before, after = _student_term_alone(learner, _reverse_kl)
    print(f"reverse KL of the adapter's own replies to the teacher: {before:.2f} -> {after:.2f} nats/token")  # -s
    assert after < 0.6 * before, (before, after)  # measured: 1.38 → 0.45 (lr 2e-2 overshot: 2.7)


def _student_term_alone(learner: Learner, measure, steps: int = 12) -> tuple[float, float]:
    """``measure(learner, samples, seed)`` before and after ``steps`` steps whose only term is the student's."""
    samples = [dataclasses.replace(s, reward=0.0) for s in _samples(2, seed=8, hint=True)]
    plain = [dataclasses.replace(s, teacher_prompt_ids=None) for s in samples]  # the main term is 0: no reward, no hint
    before = measure(learner, samples, seed=100)
    for k in range(steps):
        student = extras.student_samples(learner, samples, seed=k)
        learner.step(plain, *learner.score(plain), stop=lambda: False, student=student)
    return before, measure(learner, samples, seed=100)


def test_student_topk_samples_hold_the_teacher_s_likeliest_tokens_at_each_position(tiny_gguf):
    learner = _learner(tiny_gguf, student_samples=1, student_topk=5, distill_max_tokens=8)
    samples = _samples(2, seed=3, hint=True)
    extra = extras.student_samples(learner, samples, seed=5)
    assert len(extra) == 2
    for s, x in zip(samples, extra, strict=True):
        T = len(x.reply_ids)
        assert x.target_ids.shape == (T, 5) and x.target_logp.shape == (T, 5)
        assert bool((x.target_logp[:, :-1] >= x.target_logp[:, 1:]).all())  # likeliest first
        # Against the one-token path: where the reply's own token is among them, its teacher log-prob matches.
        own = learner.logprobs_each([(s.teacher_prompt_ids, x.reply_ids)], adapter=False)[0]  # (T,)
        hits = (x.target_ids == torch.tensor(x.reply_ids)[:, None]).nonzero().tolist()
        assert hits  # a tiny random model's sample lands in its teacher's top 5 somewhere
        for t, k in hits:
            assert abs(float(x.target_logp[t, k] - own[t])) < 1e-4


def test_student_topk_term_is_zero_where_the_teacher_is_the_policy(tiny_gguf):
    samples = _samples(3, seed=6)
    grads = []
    for n in (0, 2):
        torch.manual_seed(0)
        learner = _learner(tiny_gguf, student_samples=n, student_topk=8, distill_max_tokens=6)
        taught = [dataclasses.replace(s, teacher_prompt_ids=s.prompt_ids) for s in samples]
        student = extras.student_samples(learner, taught, seed=1)
        captured: dict[str, torch.Tensor] = {}
        _capture_grads(learner, captured)
        metrics = learner.step(samples, *learner.score(samples), stop=lambda: False, student=student)
        grads.append(captured)
        if n:
            assert metrics["n_student"] == 6 and metrics["student_kl"] < 1e-5 and "student_adv_mean" not in metrics
    for key in grads[0]:
        torch.testing.assert_close(grads[0][key], grads[1][key], atol=1e-7, rtol=1e-5)


def _exact_kl(learner: Learner, samples: list[Sample], seed: int) -> float:
    """Mean over the adapter's own reply positions of KL(teacher ‖ adapter) over the whole vocabulary."""
    extra = extras.student_samples(learner, samples, seed=seed)
    total, n = 0.0, 0
    for s, x in zip(samples, extra, strict=True):
        ((t_lp, t_ids),) = learner.topk_each([(s.teacher_prompt_ids, x.reply_ids)], VOCAB, adapter=False)
        ((a_lp, a_ids),) = learner.topk_each([(x.prompt_ids, x.reply_ids)], VOCAB, adapter=True)
        a_sorted = a_lp.gather(-1, a_ids.argsort(-1))  # (T, V) by token id
        t_sorted = t_lp.gather(-1, t_ids.argsort(-1))
        total += float((t_sorted.exp() * (t_sorted - a_sorted)).sum())
        n += len(x.reply_ids)
    return total / n


def test_student_topk_term_lowers_the_kl_from_the_teacher_on_the_adapter_s_own_replies(tiny_gguf):
    torch.manual_seed(0)
    cfg = {"student_samples": 1, "student_topk": 16, "distill_max_tokens": 6, "w_binary": 0.0, "beta_kl": 0.0}
    learner = _learner(tiny_gguf, lr=5e-3, **cfg)
    before, after = _student_term_alone(learner, _exact_kl)
    print(f"KL(teacher || adapter) at the adapter's own reply positions: {before:.2f} -> {after:.2f} nats")  # -s
    assert after < 0.6 * before, (before, after)


def test_the_policy_teacher_is_the_adapter_before_the_step_with_the_hint_in_context(tiny_gguf):
    samples = _samples(3, seed=9, hint=True)
    grads = []
    for teacher in ("base", "policy"):
        torch.manual_seed(0)  # the same fresh LoRA: the policy is the base, so both teachers agree
        learner = _learner(tiny_gguf, teacher=teacher)
        captured: dict[str, torch.Tensor] = {}
        _capture_grads(learner, captured)
        learner.step(samples, *learner.score(samples), stop=lambda: False)
        grads.append(captured)
    _assert_same(grads[0], grads[1])
    torch.manual_seed(0)
    learner = _learner(tiny_gguf, teacher="policy")
    _step(learner, samples)  # the adapter moves away from the base
    ref, teacher = learner.score(samples)
    pairs = [(s.teacher_prompt_ids, s.reply_ids) for s in samples]
    own, base = learner.logprobs_each(pairs), learner.logprobs_each(pairs, adapter=False)
    for got, mine, frozen in zip(teacher, own, base, strict=True):
        assert torch.equal(got, mine) and not torch.allclose(got, frozen, atol=1e-4)
    (ref_base,) = learner.logprobs_each([(samples[0].prompt_ids, samples[0].reply_ids)], adapter=False)
    torch.testing.assert_close(ref[0], ref_base, atol=1e-5, rtol=1e-5)  # the reference stays the base


def _capture_grads(learner: Learner, into: dict[str, torch.Tensor]) -> None:
    """Replace the optimizer step with a copy of the gradient it would apply."""

    def grab() -> None:
        for n, p in zip(learner.param_names, learner.params, strict=True):
            if p.grad is not None:
                into[n] = p.grad.clone()

    learner.optimizer.step = grab


def test_anchor_adds_no_gradient_while_the_policy_is_the_base(tiny_gguf):
    prompts = [[3, 4, 5, 6], [10, 11]]
    samples = _samples(3, seed=6)
    grads = []
    for coef in (0.0, 5.0):
        torch.manual_seed(0)  # the same fresh LoRA (random A, B = 0) both times
        learner = _learner(tiny_gguf, anchor_coef=coef, anchor_max_tokens=6)
        anchor = extras.anchor_replies(learner, prompts, seed=0)
        assert anchor is extras.anchor_replies(learner, prompts, seed=0)  # sampled once per learner
        assert [x.prompt_ids for x in anchor] == prompts
        ref, teacher = learner.score(samples)
        captured: dict[str, torch.Tensor] = {}
        _capture_grads(learner, captured)
        metrics = learner.step(samples, ref, teacher, stop=lambda: False, anchor=anchor)
        grads.append(captured)
        if coef:
            assert metrics["anchor_loss"] == 0.0 and metrics["n_anchor"] == 2
    _assert_same(grads[0], grads[1])


def test_trainer_keeps_the_moments_per_version_and_continues_from_them(tiny_gguf, tmp_path):
    from clawdesk.export import export_adapter

    db, adapters = tmp_path / "clawdesk.db", tmp_path / "adapters"
    fill_judged(db, 8, seed=1, vocab=VOCAB, sha=SHA, rewards=(1, -1), hint_every=2)
    levers = {"keep_optimizer": True, "advantage": "baseline", "anchor_coef": 0.1, "anchor_max_tokens": 4}
    levers |= {"distill_samples": 1, "distill_max_tokens": 4}
    cfg = TrainConfig(batch_size=4, max_ppl_ratio=0, device="cpu", load_in_4bit=False, **levers)
    seen = []
    made = train(db, adapters, tiny_gguf, "tiny", SHA, cfg, steps=1, on_progress=seen.append)
    assert made == [1] and (adapters / "v1" / optim_state.OPTIMIZER_FILE).is_file()
    step = next(p for p in seen if p.phase == "step" and "loss" in p.metrics)
    assert step.metrics["n_distill"] == 2 and step.metrics["n_anchor"] > 0
    saved = optim_state.load(adapters / "v1" / optim_state.OPTIMIZER_FILE)
    seen.clear()
    assert train(db, adapters, tiny_gguf, "tiny", SHA, cfg, steps=1, on_progress=seen.append) == [2]
    assert any("optimizer moments: kept from v1" in p.message for p in seen)
    assert saved.keys() == optim_state.load(adapters / "v2" / optim_state.OPTIMIZER_FILE).keys()

    from clawdesk.store import Store

    store = Store.open(db)
    try:
        export_adapter(store, "peft", tmp_path / "export", n=2)
    finally:
        store.close()
    files = {p.name for p in (tmp_path / "export").rglob("*")}
    assert optim_state.OPTIMIZER_FILE not in files and "adapter_model.safetensors" in files


def test_default_config_writes_no_optimizer_file(tiny_gguf, tmp_path):
    db, adapters = tmp_path / "clawdesk.db", tmp_path / "adapters"
    fill_judged(db, 4, seed=2, vocab=VOCAB, sha=SHA, rewards=(1, -1))
    cfg = dataclasses.replace(TrainConfig(batch_size=4, max_ppl_ratio=0), device="cpu", load_in_4bit=False)
    assert train(db, adapters, tiny_gguf, "tiny", SHA, cfg, steps=1) == [1]
    assert not (adapters / "v1" / optim_state.OPTIMIZER_FILE).exists()


def _grads(gguf: Path, samples: list[Sample], **cfg) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)  # the same fresh LoRA every time
    learner = _learner(gguf, **cfg)
    captured: dict[str, torch.Tensor] = {}
    _capture_grads(learner, captured)
    _step(learner, samples)
    return captured


def test_own_baseline_centres_only_the_replies_served_without_items(tiny_gguf):
    # All +1, no hints; samples 0 and 2 were served with preference items (the student learns them without).
    samples = [dataclasses.replace(s, reward=1.0, memory=i % 2 == 0) for i, s in enumerate(_samples(4, seed=8))]
    own = _grads(tiny_gguf, samples, advantage="own_baseline")
    # The served-with-items replies keep their +1 (consolidation); the student's own +1 replies are centred to 0.
    expected = [dataclasses.replace(s, reward=0.0) if not s.memory else s for s in samples]
    _assert_same(own, _grads(tiny_gguf, expected, advantage="reward"))
    assert any(float(g.abs().max()) > 0 for g in own.values())
    # The plain baseline centres them all: an all-+1 batch without hints trains nothing.
    assert all(float(g.abs().max()) == 0 for g in _grads(tiny_gguf, samples, advantage="baseline").values())


def test_keep_satisfied_floors_by_the_judges_reward_even_after_the_baseline(tiny_gguf):
    # All +1 with a teacher: the baseline centres every reward to 0, so only the OPD term trains; the floor
    # must still know these replies were satisfied (it reads the reward's sign, not the centred advantage).
    samples = [dataclasses.replace(s, reward=1.0) for s in _samples(4, seed=9, hint=True)]
    off = _grads(tiny_gguf, samples, advantage="baseline")
    kept = _grads(tiny_gguf, samples, advantage="baseline", opd_keep_satisfied="all")
    assert any(not torch.equal(off[k], kept[k]) for k in off)  # the teacher's "less likely" was dropped
    # An all-−1 batch is not satisfied: the floor changes nothing.
    unsatisfied = [dataclasses.replace(s, reward=-1.0) for s in samples]
    _assert_same(
        _grads(tiny_gguf, unsatisfied, advantage="baseline"),
        _grads(tiny_gguf, unsatisfied, advantage="baseline", opd_keep_satisfied="all"),
    )


def test_keep_satisfied_end_floors_only_replies_that_closed_with_the_end_token(tiny_gguf):
    # Satisfied replies with a teacher: the "end" floor must act on one that ended with the end-of-turn token
    # and leave one cut at the token limit exactly as "off" has it.
    eos = _learner(tiny_gguf)._eos_ids()[0]
    base = [dataclasses.replace(s, reward=1.0) for s in _samples(2, seed=10, hint=True)]
    cut = [dataclasses.replace(s, reply_ids=[t if t not in (eos,) else t + 1 for t in s.reply_ids]) for s in base]
    ended = [dataclasses.replace(s, reply_ids=[*s.reply_ids, eos]) for s in cut]
    _assert_same(_grads(tiny_gguf, cut), _grads(tiny_gguf, cut, opd_keep_satisfied="end"))
    off, kept = _grads(tiny_gguf, ended), _grads(tiny_gguf, ended, opd_keep_satisfied="end")
    # The floor acts at the end token here (the teacher, the base with the hint tokens, is below the student
    # there on this seed); checked to fail when the learner passes the reward sign alone.
    assert any(not torch.equal(off[k], kept[k]) for k in off)
    every = _grads(tiny_gguf, ended, opd_keep_satisfied="all")  # ... and only there: "all" floors more tokens
    assert any(not torch.equal(kept[k], every[k]) for k in kept)
