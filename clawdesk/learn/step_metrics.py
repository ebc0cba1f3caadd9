"""One learner step's metrics: the micro-batches' objective metrics combined into the batch's.

Token means are weighted by reply tokens, the loss and reward by samples, the OPD advantage by
hinted tokens; the levers' terms (context distillation, anchor, the adapter's own replies) are
reported beside them (``distill_loss``, ``distill_weight_mean``, ``anchor_loss``, ``student_adv_mean``,
...) only when the step had them.
"""

from __future__ import annotations


class StepMetrics:
    """Combines combined_loss metrics of micro-batches into the batch's (token- or sample-weighted)."""

    TOKEN_MEANS = ("pg_loss", "kl", "adv_mean", "ratio_mean", "clip_frac")
    # Per-token means of the lever parts, reported as "<part>_<key>" over that part's reply tokens.
    PART_TOKEN_MEANS = {
        "distill": ("weight_mean", "weight_clip_frac", "clip_frac"),
        "student": ("adv_mean", "clip_frac", "kl"),  # adv_mean and clip_frac: the OPD advantage; kl: the top-K KL
    }

    def __init__(self):
        self.sums: dict[str, float] = {}
        self.seq_tokens = 0  # prompt + reply tokens through forward and backward

    def _add(self, key: str, value: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value

    def add(self, m: dict[str, float], n_samples: int, hinted_tokens: float, seq_tokens: int) -> None:
        for key in self.TOKEN_MEANS:
            self._add(key, m[key] * m["n_tokens"])
        self._add("loss", m["loss"] * n_samples)
        self._add("reward_mean", m["reward_mean"] * m["n_samples"])
        self._add("opd_adv_mean", m["opd_adv_mean"] * hinted_tokens)
        self._add("hinted_tokens", hinted_tokens)
        for key in ("n_tokens", "n_samples", "n_hinted"):
            self._add(key, m[key])
        self.seq_tokens += seq_tokens

    def add_extra(self, part: str, m: dict[str, float], n: int, seq_tokens: int) -> None:
        """A lever's micro-batch: its loss per sample, and its per-token means (``PART_TOKEN_MEANS``)."""
        self._add(f"{part}_loss", m["loss"] * n)
        self._add(f"n_{part}", float(n))
        for key in self.PART_TOKEN_MEANS.get(part, ()):
            if key in m:  # a part's loss may report some of them (the student's: advantage or top-K KL)
                self._add(f"{part}_{key}", m[key] * m["n_tokens"])
        self._add(f"{part}_tokens", m["n_tokens"])
        self.seq_tokens += seq_tokens

    def result(self, n_batch: int) -> dict[str, float]:
        s, tok = self.sums, self.sums.get("n_tokens", 0.0)
        out = {key: s.get(key, 0.0) / tok if tok else 0.0 for key in self.TOKEN_MEANS}
        out["loss"] = s.get("loss", 0.0) / n_batch
        out["reward_mean"] = s.get("reward_mean", 0.0) / s["n_samples"] if s.get("n_samples") else 0.0
        out["opd_adv_mean"] = s.get("opd_adv_mean", 0.0) / s["hinted_tokens"] if s.get("hinted_tokens") else 0.0
        out |= {key: s.get(key, 0.0) for key in ("n_tokens", "n_samples", "n_hinted")}
        for part in ("distill", "anchor", "student"):
            if s.get(f"n_{part}"):
                out[f"{part}_loss"] = s[f"{part}_loss"] / s[f"n_{part}"]
                out[f"n_{part}"] = s[f"n_{part}"]
        for part, keys in self.PART_TOKEN_MEANS.items():
            if s.get(f"{part}_tokens"):
                out |= {f"{part}_{k}": s[f"{part}_{k}"] / s[f"{part}_tokens"] for k in keys if f"{part}_{k}" in s}
        return out
