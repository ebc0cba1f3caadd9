"""combined_loss: identities, a hand-computed clipping case, masking, gradients and metrics."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from clawdesk.errors import TrainError
from clawdesk.learn.objective import combined_loss


def _batch(B: int = 3, T: int = 5, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 3  # (B, T)
    return {
        "logp": (old + 0.3 * torch.randn(B, T, generator=g)).requires_grad_(),
        "old_logp": old,
        "teacher_logp": -torch.rand(B, T, generator=g) * 3,
        "ref_logp": -torch.rand(B, T, generator=g) * 3,
        "reward": torch.tensor([1.0, -1.0, 0.0][:B] + [1.0] * max(0, B - 3)),
        "has_hint": torch.tensor([True, False, True][:B] + [False] * max(0, B - 3)),
        "mask": torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 0]][:B], dtype=torch.bool)[:, :T],
    }


def _loss(b: dict[str, torch.Tensor], **kw) -> torch.Tensor:
    return combined_loss(**b, **kw)[0]


def test_ratio_one_means_no_clipping_and_pg_is_minus_advantage():
    b = _batch()
    b["logp"] = b["old_logp"].clone().requires_grad_()
    loss, m = combined_loss(**b, beta_kl=0.0)
    adv = b["reward"][:, None] + b["has_hint"][:, None] * (b["teacher_logp"] - b["old_logp"])  # (B, T)
    w = b["mask"].float()
    expected = torch.stack([-(adv[i] * w[i]).sum() / w[i].sum() for i in range(3)]).mean()
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert m["clip_frac"] == 0.0
    assert m["pg_loss"] == pytest.approx(-m["adv_mean"], abs=1e-6)
    assert m["ratio_mean"] == pytest.approx(1.0)


def test_teacher_equal_old_removes_opd_term():
    b = _batch()
    b["teacher_logp"] = b["old_logp"].clone()
    loss, m = combined_loss(**b)
    binary_only = _loss({**b, "has_hint": torch.zeros(3, dtype=torch.bool)})
    assert loss.item() == pytest.approx(binary_only.item(), abs=1e-7)
    assert _loss(b, w_opd=0.0).item() == pytest.approx(loss.item(), abs=1e-7)
    assert m["opd_adv_mean"] == 0.0


def test_no_reward_no_hint_gives_zero_pg_and_ref_equal_logp_gives_zero_kl():
    b = _batch()
    b["reward"] = torch.zeros(3)
    b["has_hint"] = torch.zeros(3, dtype=torch.bool)
    loss, m = combined_loss(**b)
    assert m["pg_loss"] == 0.0
    assert m["kl"] > 0
    assert loss.item() > 0  # only the KL term is left, and it is positive

    b["ref_logp"] = b["logp"].detach().clone()
    loss, m = combined_loss(**b)
    assert m["kl"] == pytest.approx(0.0, abs=1e-7)
    assert loss.item() == pytest.approx(0.0, abs=1e-7)


def test_ref_equal_logp_matches_beta_zero():
    b = _batch()
    b["ref_logp"] = b["logp"].detach().clone()
    assert _loss(b).item() == pytest.approx(_loss(b, beta_kl=0.0).item(), abs=1e-7)


def test_hand_computed_clipping_on_both_sides():
    # One sample, three tokens, reward 0 and a hint, so A = teacher − old per token.
    old = torch.tensor([[-1.0, -2.0, -1.0, -3.0]])
    teacher = torch.tensor([[-0.5, -3.0, -0.8, -1.0]])  # A = +0.5, -1, +0.2, +2
    ratios = torch.tensor([[1.5, 0.5, 1.1, 0.5]])
    # token 0: A>0, ρ=1.5 > 1.28 → clipped: −min(0.75, 0.64)   = −0.64   (clipped branch active)
    # token 1: A<0, ρ=0.5 < 0.8  → clipped: −min(−0.5, −0.8)   = +0.8    (clipped branch active)
    # token 2: inside the range:            −min(0.22, 0.22)   = −0.22
    # token 3: A>0, ρ=0.5 < 0.8: min picks the unclipped 1.0 over 1.6 → −1.0 (not counted as clipped)
    logp = (old + ratios.log()).requires_grad_()
    ref = logp.detach().clone()
    ref[0, 0] += math.log(2.0)  # kl at token 0: 2 − ln 2 − 1
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    loss, m = combined_loss(
        logp, old, teacher, ref, torch.tensor([0.0]), torch.tensor([True]), mask, eps=0.2, eps_high=0.28, beta_kl=0.02
    )
    kl0 = 2.0 - math.log(2.0) - 1.0
    pg = [-0.64, 0.8, -0.22, -1.0]
    assert loss.item() == pytest.approx((sum(pg) + 0.02 * kl0) / 4, abs=1e-6)
    assert m["clip_frac"] == pytest.approx(0.5)
    assert m["pg_loss"] == pytest.approx(sum(pg) / 4, abs=1e-6)
    assert m["kl"] == pytest.approx(kl0 / 4, abs=1e-6)
    assert m["adv_mean"] == pytest.approx((0.5 - 1.0 + 0.2 + 2.0) / 4, abs=1e-6)

    loss.backward()
    # Clipped tokens get no policy gradient; unclipped ones get −ρ·A / n; k3 adds β(1 − e^{ref−logp}) / n.
    expected = torch.tensor([[0.02 * (1 - 2.0) / 4, 0.0, -1.1 * 0.2 / 4, -0.5 * 2.0 / 4]])
    torch.testing.assert_close(logp.grad, expected, atol=1e-6, rtol=0)


def test_empty_sample_does_not_change_other_samples_loss():
    b = _batch()
    b["mask"][1] = False
    full = _loss(b)
    without = _loss({k: (v[[0, 2]] if k != "logp" else v[[0, 2]].detach().requires_grad_()) for k, v in b.items()})
    assert full.item() == pytest.approx(without.item(), abs=1e-7)


def test_all_empty_gives_zero_loss_that_backpropagates():
    b = _batch()
    b["mask"] = torch.zeros(3, 5)
    loss, m = combined_loss(**b)
    assert loss.dim() == 0 and loss.item() == 0.0
    loss.backward()
    assert b["logp"].grad is not None
    assert torch.count_nonzero(b["logp"].grad) == 0
    assert m["n_tokens"] == 0.0 and m["n_samples"] == 0.0 and m["reward_mean"] == 0.0


def test_gradient_reaches_only_logp():
    b = _batch()
    for k in ("old_logp", "teacher_logp", "ref_logp"):
        b[k] = b[k].clone().requires_grad_()
    b["reward"] = b["reward"].clone().requires_grad_()
    _loss(b).backward()
    assert b["logp"].grad is not None and torch.count_nonzero(b["logp"].grad) > 0
    for k in ("old_logp", "teacher_logp", "ref_logp", "reward"):
        assert b[k].grad is None, k


def test_sgd_step_makes_rewarded_tokens_more_likely():
    torch.manual_seed(0)
    B, T, V = 2, 4, 7
    logits = torch.nn.Parameter(torch.randn(B, T, V))
    tokens = torch.randint(0, V, (B, T))

    def token_logp() -> torch.Tensor:
        return torch.log_softmax(logits, dim=-1).gather(-1, tokens[..., None])[..., 0]  # (B, T)

    before = token_logp().detach()
    reward = torch.tensor([1.0, -1.0])
    loss, _ = combined_loss(
        token_logp(), before, before, before, reward, torch.zeros(B, dtype=torch.bool), torch.ones(B, T)
    )
    loss.backward()
    with torch.no_grad():
        logits -= 0.5 * logits.grad
    after = token_logp().detach()
    assert bool((after[0] > before[0]).all())  # rewarded sample: every token more likely
    assert bool((after[1] < before[1]).all())  # penalised sample: every token less likely


def test_masked_positions_have_no_effect_even_if_inf_or_nan():
    b = _batch()
    loss, m = combined_loss(**b)
    loss.backward()
    grad = b["logp"].grad.clone()

    dirty = {k: v.detach().clone() for k, v in b.items()}
    hole = ~b["mask"]
    dirty["logp"][hole] = -math.inf
    dirty["old_logp"][hole] = math.nan
    dirty["teacher_logp"][hole] = 50.0
    dirty["ref_logp"][hole] = math.inf
    dirty["logp"].requires_grad_()
    loss2, m2 = combined_loss(**dirty)
    loss2.backward()
    assert loss2.item() == loss.item()
    assert torch.equal(dirty["logp"].grad, grad)
    assert torch.count_nonzero(grad[hole]) == 0
    assert m2 == m


def test_float_mask_equals_bool_mask():
    b = _batch()
    lb, mb = combined_loss(**b)
    lf, mf = combined_loss(**{**b, "mask": b["mask"].float()})
    assert lb.item() == lf.item()
    assert mb == mf


def test_metrics_values():
    old = torch.tensor([[-1.0, -1.0, -2.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    teacher = torch.tensor([[-0.5, -1.5, 9.0], [0.0, 0.0, 0.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]], dtype=torch.bool)
    reward = torch.tensor([1.0, -1.0, 5.0])  # sample 2 is empty: its reward is not counted
    has_hint = torch.tensor([True, False, True])
    logp = old.clone().requires_grad_()
    loss, m = combined_loss(logp, old, teacher, logp.detach(), reward, has_hint, mask, w_opd=2.0)
    # A: sample 0 → 1 + 2·(+0.5), 1 + 2·(−0.5) = 2, 0; sample 1 → −1, −1, −1.
    assert m["n_tokens"] == 5.0
    assert m["n_samples"] == 2.0
    assert m["n_hinted"] == 1.0
    assert m["reward_mean"] == pytest.approx(0.0)
    assert m["opd_adv_mean"] == pytest.approx(0.0)  # (+1 − 1) / 2 over the hinted tokens
    assert m["adv_mean"] == pytest.approx((2 + 0 - 3) / 5)
    assert m["pg_loss"] == pytest.approx(-(2 + 0 - 3) / 5)
    assert m["clip_frac"] == 0.0 and m["kl"] == 0.0
    assert m["loss"] == pytest.approx(loss.item())
    assert loss.item() == pytest.approx((-1.0 + 1.0) / 2)
    assert all(type(v) is float for v in m.values())


def test_shape_errors_are_train_errors():
    b = _batch()
    with pytest.raises(TrainError, match="teacher_logp"):
        combined_loss(**{**b, "teacher_logp": b["teacher_logp"][:, :4]})
    with pytest.raises(TrainError, match="reward"):
        combined_loss(**{**b, "reward": b["reward"][:, None]})
    with pytest.raises(TrainError, match="eps"):
        combined_loss(**b, eps=1.5)


_masked_values = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False) | st.sampled_from([math.inf, -math.inf])


@settings(max_examples=60, deadline=None)
@given(values=st.lists(_masked_values, min_size=4 * 4, max_size=4 * 4), seed=st.integers(0, 2**16))
def test_loss_and_grad_invariant_to_values_at_masked_positions(values, seed):
    b = _batch(seed=seed)
    hole = ~b["mask"]  # 4 masked positions
    ref_loss, ref_m = combined_loss(**b)
    ref_loss.backward()
    ref_grad = b["logp"].grad.clone()

    dirty = {k: v.detach().clone() for k, v in b.items()}
    fill = torch.tensor(values).view(4, 4)
    for i, k in enumerate(("logp", "old_logp", "teacher_logp", "ref_logp")):
        dirty[k][hole] = fill[i]
    dirty["logp"].requires_grad_()
    loss, m = combined_loss(**dirty)
    loss.backward()
    assert loss.item() == ref_loss.item()
    assert torch.equal(dirty["logp"].grad, ref_grad)
    assert m == ref_m
