"""The general-ability anchor's prompts: ``assets/anchor-prompts.jsonl``, tokenized as first chat turns.

Owns the anchor prompt set (twelve general questions, none of them a persona prompt, a guard text
or in the eval's neutral set, so neither the guard nor the eval's ``ppl_ratio`` measures the texts
the anchor trains on, and the anchor never holds the policy to the base on a prompt it learns from;
``tests/learn/test_guard.py`` holds it: until stop 42 five of them were persona prompts). The
replies are not stored: the learner samples the base's own replies to these prompts once per run
(:func:`clawdesk.learn.extras.anchor_replies`) and :func:`clawdesk.learn.objective.anchor_kl` keeps
the policy's KL to the base on them small, with weight ``train.anchor_coef``.
"""

from __future__ import annotations

from pathlib import Path

from clawdesk.learn.guard import read_text_rows
from clawdesk.learn.vocab import first_turn_ids

ANCHOR_SET = "anchor-prompts.jsonl"
RESTORE = "restore it from the source checkout, or set train.anchor_coef = 0 to train without the anchor"


def default_anchor_path() -> Path:
    """``assets/anchor-prompts.jsonl`` of the source checkout."""
    return Path(__file__).resolve().parents[2] / "assets" / ANCHOR_SET


def read_prompts(path: Path) -> list[str]:
    """The set's ``{"prompt": ...}`` rows; a :class:`TrainError` names the file and line of a bad one."""
    return [row["prompt"] for row in read_text_rows(path, ("prompt",), "anchor prompt set", "prompts", RESTORE)]


def load_anchor_prompts(base_gguf: Path, path: Path | None = None, *, system_prompt: str = "") -> list[list[int]]:
    """The anchor prompts' token ids, each a first chat turn under ``system_prompt`` (as the guard's)."""
    return first_turn_ids(base_gguf, read_prompts(path or default_anchor_path()), system_prompt=system_prompt)
