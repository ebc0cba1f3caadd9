"""The behaviour test's prompts: general questions no turn trained on, served with an item and without.

Owns ``assets/form-prompts.jsonl`` (eight open questions whose replies have room for length, lists,
paragraphs, an opening and a closing; none is a persona prompt, an anchor prompt, a guard text or in
the eval's neutral set) and :class:`FormProbe`, what the learned check
(:func:`clawdesk.learn.consolidate.check_items`) compares the adapter's replies on.

Why besides the item's own recent turns: those are the turns the adapter was just trained on, and
it answers them better than anything new. Measured on `brief` (docs/learning.md, "The behaviour
test"): 7 of 8 of the recent prompts' replies without the item kept within its 40 words where 5 of
these 8 did (11 of 16 held-out ones), and an item retired on that evidence took the held-out score
from 1.00 to 0.69. A prompt no version trained on asks what the item is for: that the weights carry
the preference into conversations the memory never saw. Why not these alone: they rarely invite a
list, so a list ban agreed on them after one version (`no-lists` left at 8); the check needs both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from clawdesk.learn.guard import read_text_rows
from clawdesk.learn.vocab import detokenize, first_turn_ids
from clawdesk.preferences import place_memory

FORM_SET = "form-prompts.jsonl"
RESTORE = "restore it from the source checkout (the learned check compares replies on these prompts)"


def default_form_path() -> Path:
    """``assets/form-prompts.jsonl`` of the source checkout."""
    return Path(__file__).resolve().parents[2] / "assets" / FORM_SET


def read_form_prompts(path: Path | None = None) -> list[str]:
    """The set's ``{"prompt": ...}`` rows; a :class:`TrainError` names the file and line of a bad one."""
    rows = read_text_rows(path or default_form_path(), ("prompt",), "behaviour test's prompt set", "prompts", RESTORE)
    return [row["prompt"] for row in rows]


@dataclass
class FormProbe:
    """The behaviour test's prompts as token ids, with a preference block and without, and how to read replies.

    ``render(block)``: each prompt as a first chat turn served with ``block`` (a memory block as a turn
    recorded it, placed where its header says); ``student``: each prompt without any block. ``decode``
    turns reply token ids into text. Rendered blocks are kept (a run checks the same few blocks).
    """

    texts: list[str]
    student: list[list[int]]
    to_ids: Callable[[list[str], str], list[list[int]]]  # (user messages, system prompt) -> first-turn ids
    decode: Callable[[Sequence[Sequence[int]]], list[str]]
    system_prompt: str = ""
    _served: dict[str, list[list[int]]] = field(default_factory=dict, init=False, repr=False)

    def render(self, block: str) -> list[list[int]]:
        if block not in self._served:
            system, _ = place_memory(self.system_prompt, "", block)
            users = [place_memory(self.system_prompt, text, block)[1] for text in self.texts]
            self._served[block] = self.to_ids(users, system)
        return self._served[block]


def load_form_probe(base_gguf: Path, *, system_prompt: str = "", path: Path | None = None) -> FormProbe:
    """The shipped prompts under ``base_gguf``'s vocabulary and chat template, rendered under ``system_prompt``."""
    texts = read_form_prompts(path)

    def to_ids(users: list[str], system: str) -> list[list[int]]:
        return first_turn_ids(base_gguf, users, system_prompt=system)

    return FormProbe(texts, to_ids(texts, system_prompt), to_ids, lambda ids: detokenize(base_gguf, ids), system_prompt)
