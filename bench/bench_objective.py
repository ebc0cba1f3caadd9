"""Time combined_loss forward+backward at B=16, T=512 against a plain masked REINFORCE mean.

Run: ``.venv/bin/python bench/bench_objective.py``. Prints milliseconds per call and the ratio, at
torch's default thread count and at one thread; asserts nothing. Both run in this process on the
same inputs, so the ratio is what to compare.
"""

from __future__ import annotations

import time

import torch

from clawdesk.learn.objective import combined_loss

B, T = 16, 512
REPEATS = 50


def _inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(B, T, generator=g) * 4  # (B, T)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)  # (B,)
    return {
        "logp": old + 0.1 * torch.randn(B, T, generator=g),
        "old_logp": old,
        "teacher_logp": -torch.rand(B, T, generator=g) * 4,
        "ref_logp": -torch.rand(B, T, generator=g) * 4,
        "reward": torch.randint(-1, 2, (B,), generator=g).float(),
        "has_hint": torch.rand(B, generator=g) < 0.3,
        "mask": torch.arange(T)[None, :] < lengths[:, None],  # (B, T)
    }


def _time(fn) -> float:
    for _ in range(5):
        fn()
    start = time.perf_counter()
    for _ in range(REPEATS):
        fn()
    return (time.perf_counter() - start) / REPEATS * 1e3


def main() -> None:
    x = _inputs()
    logp = x.pop("logp").requires_grad_()
    mask_f = x["mask"].float()

    def ours() -> None:
        logp.grad = None
        loss, _ = combined_loss(logp, **x)
        loss.backward()

    def baseline() -> None:
        logp.grad = None
        loss = (-(logp * x["reward"][:, None]) * mask_f).sum() / mask_f.sum()
        loss.backward()

    default_threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, B={B} T={T}, {REPEATS} repeats")
    # Both thread settings: on a small, busy machine torch's parallel exp() can stall for
    # milliseconds waiting on a core another process holds, which dwarfs the arithmetic.
    for threads in sorted({default_threads, 1}, reverse=True):
        torch.set_num_threads(threads)
        t_ours = _time(ours)
        t_base = _time(baseline)
        print(
            f"threads={threads}: combined_loss fwd+bwd (with metrics) {t_ours:.3f} ms, "
            f"baseline masked -logp*reward mean {t_base:.3f} ms, ratio {t_ours / t_base:.1f}x"
        )
    torch.set_num_threads(default_threads)


if __name__ == "__main__":
    main()
