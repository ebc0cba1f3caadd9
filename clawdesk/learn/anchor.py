"""The general-ability anchor's prompts: ``assets/anchor-prompts.jsonl``, tokenized as first chat turns.

Owns the anchor prompt set (twelve general questions, none of them a persona prompt, a guard text
or in the eval's neutral set, so neither the guard nor the eval's ``ppl_ratio`` measures the texts
the anchor trains on). The replies are not stored: the learner samples the base's own replies to
these prompts once per run (:meth:`clawdesk.learn.learner.Learner.anchor_replies`) and
:func:`clawdesk.learn.objective.anchor_kl` keeps the policy's KL to the base on them small, with
weight ``train.anchor_coef``.
"""

from __future__ import annotations

import json
from pathlib import Path

from clawdesk.errors import TrainError
from clawdesk.learn.guard import first_turn_ids

ANCHOR_SET = "anchor-prompts.jsonl"
RESTORE = "restore it from the source checkout, or set train.anchor_coef = 0 to train without the anchor"


def default_anchor_path() -> Path:
    """``assets/anchor-prompts.jsonl`` of the source checkout."""
    return Path(__file__).resolve().parents[2] / "assets" / ANCHOR_SET


def read_prompts(path: Path) -> list[str]:
    """The set's ``{"prompt": ...}`` rows; a :class:`TrainError` names the file and line of a bad one."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainError(f"Cannot read the anchor prompt set {path} ({exc}); {RESTORE}.") from exc
    prompts = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrainError(f"{path} line {n} is not JSON ({exc.msg}); {RESTORE}.") from exc
        prompt = row.get("prompt") if isinstance(row, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            raise TrainError(f'{path} line {n} needs a non-empty "prompt" string; {RESTORE}.')
        prompts.append(prompt)
    if not prompts:
        raise TrainError(f"{path} holds no prompts; {RESTORE}.")
    return prompts


def load_anchor_prompts(base_gguf: Path, path: Path | None = None, *, system_prompt: str = "") -> list[list[int]]:
    """The anchor prompts' token ids, each a first chat turn under ``system_prompt`` (as the guard's)."""
    return first_turn_ids(base_gguf, read_prompts(path or default_anchor_path()), system_prompt=system_prompt)
