"""The general-ability guard: does a new adapter version still model ordinary text as the base does?

Owns the guard text set (``assets/guard-set.jsonl``: 36 general questions with plain reference
answers), its tokens under the base GGUF's own tokenizer and chat template, and the ratio validation
reads::

    ppl_ratio = exp(NLL_adapter − NLL_base)     NLL = mean negative log-prob per reference-answer token

Why it exists: Binary RL with A = reward on a batch whose rewards are all +1 is supervised training
on the policy's own samples. Once a persona is satisfied most batches look like that, and each one
sharpens the policy further: on ``no-lists`` the k3 KL to the base climbed 0.05 → 0.31 over five
such steps and the neutral-text perplexity ratio ended at 2.81 (docs/learning.md). The earlier
replies the collapse check scores get *more* likely under that drift, so only text the adapter never
trained on can see it. A version whose ratio exceeds ``train.max_ppl_ratio`` is rejected like any
failed validation, and training goes on from the version before it.

No guard question is, or rewords, a persona's prompt, the anchor's, the form probe's or one of the
eval's neutral set (``tests/learn/test_guard.py`` holds it): a version has trained on a persona's
prompts, so there the guard would read the learning itself, not drift on text nobody trained on;
and the eval's ``ppl_ratio`` stays an independent measurement. A third of the questions ask how to
do something practical: such answers drifted most on the versions measured, and three times as many
texts of the old kind read the same as the old twelve (docs/learning.md, "The guard set: 36 texts
no version trained on").

The trainer has no llama.cpp engine, so the tokens come from the GGUF's vocabulary alone
(:mod:`clawdesk.learn.vocab`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawdesk.errors import TrainError
from clawdesk.learn.vocab import first_turn_ids

GUARD_SET = "guard-set.jsonl"
RESTORE = "restore it from the source checkout, or set train.max_ppl_ratio = 0 to train without the check"


def default_guard_path() -> Path:
    """``assets/guard-set.jsonl`` of the source checkout (where ``pip install -e .`` runs the app from)."""
    return Path(__file__).resolve().parents[2] / "assets" / GUARD_SET


@dataclass(frozen=True)
class GuardSet:
    """The guard texts as (prompt ids, answer ids) pairs, each prompt a single rendered chat turn."""

    path: Path
    pairs: list[tuple[list[int], list[int]]]

    @property
    def n_tokens(self) -> int:
        return sum(len(r) for _, r in self.pairs)


def read_rows(path: Path) -> list[dict[str, str]]:
    """The set's ``{"prompt", "reply"}`` rows; a :class:`TrainError` names the file and line of a bad one."""
    return read_text_rows(path, ("prompt", "reply"), "guard text set", "texts", RESTORE)


def read_text_rows(path: Path, keys: tuple[str, ...], what: str, items: str, fix: str) -> list[dict[str, str]]:
    """The rows of a JSONL set (the guard's texts, the anchor's prompts), each with a non-empty string
    under every key; a :class:`TrainError` names the file, the line and ``fix``."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainError(f"Cannot read the {what} {path} ({exc}); {fix}.") from exc
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrainError(f"{path} line {n} is not JSON ({exc.msg}); {fix}.") from exc
        if not isinstance(row, dict) or not all(_text(row.get(k)) for k in keys):
            need = " and ".join(f'"{k}"' for k in keys)
            raise TrainError(f"{path} line {n} needs non-empty {need} string{'s' if len(keys) > 1 else ''}; {fix}.")
        rows.append(row)
    if not rows:
        raise TrainError(f"{path} holds no {items}; {fix}.")
    return rows


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def load_guard_set(base_gguf: Path, path: Path | None = None, *, system_prompt: str = "") -> GuardSet:
    """Tokenize the guard set with ``base_gguf``'s vocabulary and chat template, each question a first turn
    under ``system_prompt`` as the chat renders it (an adapter's drift shows most in the context it serves)."""
    path = path or default_guard_path()
    rows = read_rows(path)
    prompts = first_turn_ids(base_gguf, [row["prompt"] for row in rows], system_prompt=system_prompt)
    replies = first_turn_ids(base_gguf, [row["reply"] for row in rows], plain=True)
    return GuardSet(path, list(zip(prompts, replies, strict=True)))


def check(learner: Any, guard: GuardSet, max_ratio: float) -> dict[str, Any]:
    """The ``validation.guard`` record of the learner's current adapter: ratio, both NLLs, verdict."""
    nll_adapter = learner.mean_nll(guard.pairs, adapter=True)
    nll_base = learner.mean_nll(guard.pairs, adapter=False)
    ratio = math.exp(nll_adapter - nll_base)
    return {
        "ppl_ratio": ratio,
        "nll_adapter": nll_adapter,
        "nll_base": nll_base,
        "n_tokens": guard.n_tokens,
        "max_ppl_ratio": max_ratio,
        "passed": ratio <= max_ratio,  # a nan ratio fails
    }
