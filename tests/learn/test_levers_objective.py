"""The levers' loss terms (objective.py): identities and hand-computed gradients, on plain tensors.

- the batch baseline: an all-+1 batch without hints gives exactly zero gradient through the binary term;
- keep_satisfied: on a +1 sample a teacher below the old policy gives no OPD term, one above it the usual
  one, and a −1 or unjudged sample is untouched; "raised" floors only where the teacher is above the base,
  "end" only at each sample's last reply token (padding is not a token);
- context distillation: at ratio 1 the gradient is −w/n per token with w = min(π_T/π_served, max_weight);
  the PPO clip stops a token's push; padding never leaks;
- the anchor: policy = base gives a zero term and a zero gradient; otherwise exp(δ) − δ − 1;
- the top-K KL: policy = teacher gives a zero term and a zero gradient; with K = the vocabulary it is the
  exact KL; a teacher that wants the end token more raises the policy's end-token probability.
"""

from __future__ import annotations

import math

import pytest
import torch

from clawdesk.errors import TrainError
from clawdesk.learn.objective import anchor_kl, centered_reward, combined_loss, distill_loss, topk_kl


def _binary_batch(reward: list[float], hinted: list[bool], seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    B, T = len(reward), 6
    old = -torch.rand(B, T, generator=g) * 3  # (B, T)
    return {
        "logp": (old + 0.2 * torch.randn(B, T, generator=g)).requires_grad_(),  # ratio ≠ 1: the clip could act
        "old_logp": old,
        "teacher_logp": -torch.rand(B, T, generator=g) * 3,
        "ref_logp": -torch.rand(B, T, generator=g) * 3,
        "reward": torch.tensor(reward),
        "has_hint": torch.tensor(hinted),
        "mask": torch.ones(B, T, dtype=torch.bool),
    }


def test_centered_reward_is_reward_minus_the_batch_mean():
    assert centered_reward(torch.tensor([1.0, -1.0, 1.0, 1.0])).tolist() == [0.5, -1.5, 0.5, 0.5]
    assert centered_reward(torch.tensor([1.0] * 5)).tolist() == [0.0] * 5
    assert centered_reward(torch.tensor([-1.0] * 3)).tolist() == [0.0] * 3
    assert centered_reward(torch.tensor([])).numel() == 0


def test_the_baseline_leaves_unjudged_samples_at_zero_and_out_of_the_mean():
    # Two +1, one −1 and two samples in the batch only for their hint or items (reward 0, "unclear").
    got = centered_reward(torch.tensor([1.0, 0.0, 1.0, -1.0, 0.0]))
    mean = 1.0 / 3.0  # over the three judged samples only: with the zeros in it would be 0.2
    assert got.tolist() == pytest.approx([1.0 - mean, 0.0, 1.0 - mean, -1.0 - mean, 0.0])
    assert centered_reward(torch.tensor([1.0, 1.0, 0.0])).tolist() == [0.0, 0.0, 0.0]  # the zero is not pushed down
    assert centered_reward(torch.zeros(4)).tolist() == [0.0] * 4  # the opd method: nothing judged, nothing moves
    stepwise = torch.tensor([1.6667, 0.3333, -1.0])  # tool steps' stepwise rewards count as judged
    assert centered_reward(stepwise).tolist() == pytest.approx((stepwise - stepwise.mean()).tolist())


def test_the_baseline_centres_only_the_samples_it_is_given_the_others_keep_their_reward():
    reward = torch.tensor([1.0, 1.0, -1.0, 1.0, 0.0])
    centre = torch.tensor([True, False, True, False, True])  # own_baseline: served without preference items
    mean = 0.0  # over samples 0 and 2 (sample 4 is unjudged)
    assert centered_reward(reward, centre).tolist() == [1.0 - mean, 1.0, -1.0 - mean, 1.0, 0.0]
    assert centered_reward(torch.tensor([1.0, 1.0]), torch.tensor([True, False])).tolist() == [0.0, 1.0]
    assert centered_reward(reward, torch.zeros(5, dtype=torch.bool)).tolist() == reward.tolist()  # none: unchanged
    assert centered_reward(reward, torch.ones(5, dtype=torch.bool)).tolist() == centered_reward(reward).tolist()


@pytest.mark.parametrize("value", [1.0, -1.0, 1.6667])
def test_a_uniform_batch_without_hints_gives_zero_gradient_through_the_binary_term(value):
    b = _binary_batch([value] * 4, [False] * 4)
    raw = dict(b)
    raw_loss, _ = combined_loss(**raw, beta_kl=0.0)
    raw_loss.backward()
    assert float(b["logp"].grad.abs().max()) > 1e-3  # without the baseline it trains toward (or away from) its samples
    b["logp"].grad = None
    loss, m = combined_loss(**{**b, "reward": centered_reward(b["reward"])}, beta_kl=0.0)
    loss.backward()
    assert torch.equal(b["logp"].grad, torch.zeros_like(b["logp"]))
    assert m["adv_mean"] == 0.0


def test_with_the_baseline_a_hinted_all_minus_one_batch_keeps_only_the_opd_signal():
    b = _binary_batch([-1.0] * 3, [True, False, True], seed=4)
    centered = {**b, "reward": centered_reward(b["reward"])}
    loss, _ = combined_loss(**centered, beta_kl=0.0)
    opd_only, _ = combined_loss(**{**b, "reward": torch.zeros(3)}, beta_kl=0.0)
    assert loss.item() == pytest.approx(opd_only.item(), abs=1e-7)
    assert loss.item() != pytest.approx(combined_loss(**b, beta_kl=0.0)[0].item(), abs=1e-3)


def test_keep_satisfied_floors_the_opd_gap_only_on_satisfied_samples():
    b = _binary_batch([1.0, 1.0, -1.0, 0.0], [True, True, True, True], seed=3)
    b["teacher_logp"] = b["old_logp"].clone()
    b["teacher_logp"][0] -= 1.5  # the teacher less sure of a satisfied reply than the student
    b["teacher_logp"][1] += 0.7  # ... more sure of it
    b["teacher_logp"][2] -= 1.5  # a −1 reply the teacher dislikes more
    b["teacher_logp"][3] -= 0.4  # an unjudged one
    # what keep_satisfied should equal: sample 0's teacher raised to the old policy, the rest as given
    want = {**b, "teacher_logp": b["teacher_logp"].clone()}
    want["teacher_logp"][0] = b["old_logp"][0]
    loss, m = combined_loss(**{**b, "logp": b["logp"].detach()}, keep_satisfied="all")
    ref_loss, ref_m = combined_loss(**{**want, "logp": b["logp"].detach()})
    assert loss.item() == pytest.approx(ref_loss.item(), abs=1e-6)
    assert m["opd_adv_mean"] == pytest.approx(ref_m["opd_adv_mean"], abs=1e-6)
    # the floor acts: without it, sample 0's teacher lowers the mean OPD advantage
    off = combined_loss(**{**b, "logp": b["logp"].detach()})[1]
    assert off["opd_adv_mean"] == pytest.approx(m["opd_adv_mean"] - 1.5 / 4, abs=1e-5)
    assert m["opd_adv_mean"] == pytest.approx((0.0 + 0.7 - 1.5 - 0.4) / 4, abs=1e-5)


def test_keep_satisfied_changes_nothing_where_the_teacher_is_at_or_above_the_old_policy():
    b = _binary_batch([1.0, -1.0, 1.0], [True, True, False], seed=4)
    b["teacher_logp"] = b["old_logp"] + torch.rand(3, 6, generator=torch.Generator().manual_seed(5))
    on = combined_loss(**{**b, "logp": b["logp"].detach()}, keep_satisfied="all")[0]
    off = combined_loss(**{**b, "logp": b["logp"].detach()})[0]
    assert on.item() == pytest.approx(off.item(), abs=1e-7)


def test_keep_satisfied_raised_floors_only_where_the_teacher_is_above_the_base():
    b = _binary_batch([1.0, -1.0], [True, True], seed=6)
    b["logp"] = b["old_logp"].clone().requires_grad_()  # ratio 1: pg = −A exactly
    b["teacher_logp"] = b["old_logp"] - 1.0  # the teacher below the student everywhere
    b["ref_logp"] = b["teacher_logp"].clone()
    b["ref_logp"][:, :3] -= 0.5  # the teacher's context raised the first 3 tokens above the base
    b["ref_logp"][:, 3:] += 0.5  # ... and not the last 3
    loss = combined_loss(**b, keep_satisfied="raised", beta_kl=0.0)[0]
    # sample 0 (+1): A = 1 on the raised tokens, 1 − 1 = 0 on the others; sample 1 (−1): A = −1 − 1 = −2 everywhere
    assert loss.item() == pytest.approx(-((3 * 1 + 3 * 0) / 6 + (-2)) / 2, abs=1e-6)
    assert combined_loss(**b, keep_satisfied="off", beta_kl=0.0)[0].item() == pytest.approx(-(0 + -2) / 2, abs=1e-6)
    with pytest.raises(TrainError, match="keep_satisfied"):
        combined_loss(**b, keep_satisfied="al")


def test_keep_satisfied_end_floors_only_the_last_reply_token():
    b = _binary_batch([1.0, 1.0, -1.0], [True, True, True], seed=8)
    b["logp"] = b["old_logp"].clone().requires_grad_()  # ratio 1: pg = −A exactly
    b["teacher_logp"] = b["old_logp"] - 1.0  # the teacher below the student everywhere: D = −1
    b["mask"][1, 4:] = False  # sample 1's reply is 4 tokens, then padding
    b["teacher_logp"][1, 4:] = float("nan")  # padding never reaches the loss
    loss = combined_loss(**b, keep_satisfied="end", beta_kl=0.0)[0]
    # sample 0 (+1, 6 tokens): A = 0 on 5 tokens, 1 at the last; sample 1 (+1, 4 tokens): 0 on 3, 1 at its 4th;
    # sample 2 (−1): −2 everywhere, the floor never applies to an unsatisfied reply
    assert loss.item() == pytest.approx(-(1 / 6 + 1 / 4 + -2) / 3, abs=1e-6)
    off = combined_loss(**b, keep_satisfied="off", beta_kl=0.0)[0]
    assert off.item() == pytest.approx(-(0 + 0 + -2) / 3, abs=1e-6)
    not_ended = torch.tensor([False, True, False])  # the caller says sample 0 was cut at the token limit
    cut = combined_loss(**b, keep_satisfied="end", satisfied=not_ended, beta_kl=0.0)[0]
    assert cut.item() == pytest.approx(-(0 + 1 / 4 + -2) / 3, abs=1e-6)


def test_keep_satisfied_reads_satisfied_not_the_centred_reward():
    b = _binary_batch([0.0, 0.0], [True, True], seed=7)  # an all-+1 batch after the baseline: every reward 0
    b["logp"] = b["old_logp"].clone().requires_grad_()
    b["teacher_logp"] = b["old_logp"] - 1.0
    both = torch.tensor([True, True])
    floored = combined_loss(**b, keep_satisfied="all", satisfied=both, beta_kl=0.0)[0]
    assert floored.item() == pytest.approx(0.0, abs=1e-7)  # the teacher below the student takes nothing back
    assert combined_loss(**b, keep_satisfied="all", beta_kl=0.0)[0].item() == pytest.approx(1.0, abs=1e-6)


def test_distill_at_ratio_one_is_weighted_sft_with_the_clipped_importance_weight():
    old = torch.tensor([[-2.0, -1.0, -3.0, -0.5]])  # (1, 4)
    teacher = old + torch.tensor([[0.0, math.log(2.0), 5.0, -math.log(4.0)]])  # w = 1, 2, clipped 4, 0.25
    logp = old.clone().requires_grad_()
    mask = torch.ones(1, 4, dtype=torch.bool)
    loss, m = distill_loss(logp, old, teacher, mask, max_weight=4.0)
    w = torch.tensor([[1.0, 2.0, 4.0, 0.25]])
    assert loss.item() == pytest.approx(-float(w.mean()), abs=1e-6)  # ρ = 1: ℓ = −w
    loss.backward()
    torch.testing.assert_close(logp.grad, -w / 4, atol=1e-6, rtol=0)  # ∂/∂logp (−ρ·w) = −w at ρ = 1, over 4 tokens
    assert m["weight_mean"] == pytest.approx(float(w.mean()), abs=1e-6)
    assert m["weight_clip_frac"] == pytest.approx(0.25)
    assert m["clip_frac"] == 0.0


def test_teacher_equal_to_served_policy_is_plain_sft_on_the_teacher_reply():
    g = torch.Generator().manual_seed(2)
    old = -torch.rand(2, 5, generator=g) * 2  # (2, 5)
    logp = old.clone().requires_grad_()
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    loss, _ = distill_loss(logp, old, old.clone(), mask)
    loss.backward()
    expected = -mask.float() / mask.sum(-1, keepdim=True) / 2  # −1/n per token, mean over the 2 samples
    torch.testing.assert_close(logp.grad, expected, atol=1e-7, rtol=0)


def test_the_ppo_clip_stops_a_token_the_student_already_took_far_enough():
    old = torch.tensor([[-2.0, -2.0]])  # (1, 2)
    teacher = old + 1.0  # w = e at both tokens
    logp = (old + torch.tensor([[0.5, 0.1]])).requires_grad_()  # ρ = e^0.5 > 1.28 (clipped), e^0.1 inside
    loss, m = distill_loss(logp, old, teacher, torch.ones(1, 2, dtype=torch.bool), eps_high=0.28)
    loss.backward()
    assert logp.grad[0, 0].item() == 0.0  # pushed far enough this batch: no more gradient
    assert logp.grad[0, 1].item() == pytest.approx(-math.e * math.exp(0.1) / 2, rel=1e-5)
    assert m["clip_frac"] == pytest.approx(0.5)


def test_distill_padding_never_leaks_and_bad_shapes_are_named():
    old = torch.tensor([[-1.0, float("nan")], [-2.0, -1.0]])
    teacher = torch.tensor([[-0.5, float("inf")], [-2.0, -1.0]])
    logp = torch.tensor([[-1.0, float("-inf")], [-2.0, -1.0]], requires_grad=True)
    mask = torch.tensor([[True, False], [True, True]])
    loss, _ = distill_loss(logp, old, teacher, mask)
    loss.backward()
    assert math.isfinite(loss.item()) and bool(torch.isfinite(logp.grad).all())
    assert logp.grad[0, 1].item() == 0.0
    with pytest.raises(TrainError, match="teacher_logp has shape"):
        distill_loss(logp, old, teacher[:, :1], mask)
    with pytest.raises(TrainError, match="max_weight"):
        distill_loss(logp, old, teacher, mask, max_weight=0.5)


def test_anchor_is_zero_with_zero_gradient_where_the_policy_is_the_base():
    g = torch.Generator().manual_seed(5)
    ref = -torch.rand(3, 7, generator=g) * 4  # (3, 7)
    logp = ref.clone().requires_grad_()
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, :3] = False
    loss, m = anchor_kl(logp, ref, mask)
    loss.backward()
    assert loss.item() == 0.0 and m["loss"] == 0.0
    assert torch.equal(logp.grad, torch.zeros_like(logp))
    assert m["n_tokens"] == 18.0


def test_anchor_is_the_k3_estimate_and_pulls_back_toward_the_base():
    ref = torch.tensor([[-1.0, -2.0, -3.0]])
    delta = torch.tensor([[0.5, -0.5, 0.0]])
    logp = (ref + delta).requires_grad_()
    loss, _ = anchor_kl(logp, ref, torch.ones(1, 3, dtype=torch.bool))
    expected = float((delta.exp() - delta - 1).mean())
    assert loss.item() == pytest.approx(expected, abs=1e-6) and loss.item() > 0
    loss.backward()
    torch.testing.assert_close(logp.grad, (delta.exp() - 1) / 3, atol=1e-6, rtol=0)
    assert logp.grad[0, 0] > 0 > logp.grad[0, 1]  # descent lowers a token the policy made likelier, raises the other
    with pytest.raises(TrainError, match="share one"):
        anchor_kl(logp, ref[:, :2], torch.ones(1, 3, dtype=torch.bool))


def _logits(B: int, T: int, V: int, seed: int) -> torch.Tensor:
    return torch.randn(B, T, V, generator=torch.Generator().manual_seed(seed)) * 2  # (B, T, V)


def test_topk_kl_is_zero_with_zero_gradient_where_the_policy_is_the_teacher():
    full = torch.log_softmax(_logits(2, 5, 11, 0), -1)  # (B, T, V)
    top, ids = full.topk(4, dim=-1)  # (B, T, K)
    logp_at = full.gather(-1, ids).clone().requires_grad_()
    loss, m = topk_kl(logp_at, top, torch.ones(2, 5, dtype=torch.bool))
    (grad,) = torch.autograd.grad(loss, logp_at)
    assert abs(float(loss.detach())) < 1e-6 and m["kl"] < 1e-6 and m["n_tokens"] == 10
    assert float(grad.abs().max()) < 1e-6


def test_topk_kl_over_the_whole_vocabulary_is_the_exact_kl_and_padding_never_leaks():
    teacher = torch.log_softmax(_logits(2, 4, 7, 1), -1)  # (B, T, V)
    policy = torch.log_softmax(_logits(2, 4, 7, 2), -1).requires_grad_()
    mask = torch.tensor([[False, True, True, True], [True, True, True, True]])
    loss, _ = topk_kl(policy, teacher, mask)  # K = V, the ids 0..V−1 in order: the rest bucket is empty
    exact = (teacher.exp() * (teacher - policy.detach())).sum(-1)  # (B, T)
    want = (exact[0, 1:].mean() + exact[1].mean()) / 2  # the mean over samples of each one's token mean
    assert math.isclose(float(loss.detach()), float(want), rel_tol=1e-5)
    (grad,) = torch.autograd.grad(loss, policy)
    assert float(grad[0, 0].abs().max()) == 0.0  # the padded position
    with pytest.raises(TrainError, match="topk_kl"):
        topk_kl(policy, teacher[:, :3], mask)


def test_topk_kl_teaches_the_teacher_s_end_token_probability_at_a_position_the_policy_went_on():
    """Token 0 is the end token: the teacher gives it 0.6, the policy 0.05. The KL's gradient raises it."""
    V = 6
    policy_logits = torch.zeros(1, 1, V)
    policy_logits[0, 0, 0] = math.log(0.05 / 0.95 * (V - 1))  # p(end) = 0.05
    teacher = torch.full((1, 1, V), math.log(0.4 / (V - 1)))
    teacher[0, 0, 0] = math.log(0.6)
    top, ids = teacher.topk(2, dim=-1)  # the end token and one other; the rest is a bucket
    logits = policy_logits.clone().requires_grad_()
    for _ in range(50):
        loss, _ = topk_kl(torch.log_softmax(logits, -1).gather(-1, ids), top, torch.ones(1, 1, dtype=torch.bool))
        (grad,) = torch.autograd.grad(loss, logits)
        logits = (logits - 1.0 * grad).detach().requires_grad_()
    p_end = float(torch.softmax(logits, -1)[0, 0, 0])
    assert 0.55 < p_end < 0.65, p_end
