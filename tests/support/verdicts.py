"""A judge's verdict fixed at the model boundary: -1 with a given hint, for tests about what the app does with
a correction (the preference memory, its toast, its learned check) rather than about judging.

Shared by the preference-store tests and the TUI's end-to-end memory test.
"""

from __future__ import annotations

from clawdesk.store.judgments import Judgment


def hinted_verdict(pending, hint: str) -> Judgment:
    """The judgment of ``pending`` (a pending turn) as the judge would save it: one -1 vote, ``hint`` as hint."""
    return Judgment(
        turn_id=pending.turn.id, next_turn_id=pending.next_turn_id, prompt_version="t", judge_model_name="j",
        judge_model_sha256="j", score_outputs=[], votes=[-1], reward=-1, hint_outputs=[hint], hint=hint,
        enhanced_user=None, enhanced_prompt_ids=None, seconds=0.0,
    )  # fmt: skip
