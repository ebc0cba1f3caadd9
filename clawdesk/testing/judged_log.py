"""Filling a turn log with judged turns of random token ids: what the trainer's tests and checks train on.

The turns are real rows written through the store (``add_turn`` + ``save_judgment``), so sample
selection, held-out choice and version bookkeeping run exactly as in the app; only the token ids
are random (below ``vocab``, so any model of that vocabulary can score them).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

Length = int | tuple[int, int]  # a fixed length, or [lo, hi) drawn per turn


def _draw(rng: random.Random, length: Length, vocab: int) -> list[int]:
    n = length if isinstance(length, int) else rng.randrange(*length)
    return [rng.randrange(vocab) for _ in range(n)]


def fill_judged(
    db: Path,
    n: int,
    *,
    seed: int,
    vocab: int,
    sha: str,
    rewards: Sequence[int] = (1, -1),
    prompt_len: Length = (6, 24),
    reply_len: Length = (3, 12),
    hint_every: int = 0,
    model_path: str = "/tiny.gguf",
    judged: bool = True,
) -> list[int]:
    """Add ``n`` turns of one new session to the log at ``db``, judged with ``rewards`` (cycled).

    Every ``hint_every``-th turn (0 = none) gets a hint and a teacher prompt (its prompt + 5 ids).
    ``judged=False`` leaves them for a judge: each turn but the last is then ready to judge (the
    next turn is its next state). Returns the turn ids.
    """
    from clawdesk.store import NewTurn, Store, now_iso
    from clawdesk.store.judgments import Judgment, save_judgment

    rng = random.Random(seed)
    store = Store.open(db)
    try:
        session = store.create_session(system_prompt="sys")
        ids = []
        for i in range(n):
            prompt = _draw(rng, prompt_len, vocab)
            reply = _draw(rng, reply_len, vocab)
            at = now_iso()
            tid = store.add_turn(
                session.id,
                NewTurn(
                    user_content=f"q{i}", reply_content=f"a{i}", reply_thinking="", status="finished", thinking=False,
                    model_name=Path(model_path).stem, model_path=model_path, model_sha256=sha, prompt_ids=prompt,
                    reply_ids=reply, started_at=at, finished_at=at,
                ),
            )  # fmt: skip
            ids.append(tid)
            if not judged:
                continue
            hinted = bool(hint_every) and i % hint_every == 0
            save_judgment(
                store,
                Judgment(
                    turn_id=tid, next_turn_id=tid, prompt_version="t", judge_model_name="j", judge_model_sha256="j",
                    score_outputs=[], votes=[], reward=rewards[i % len(rewards)], hint_outputs=[],
                    hint="Say where the number comes from." if hinted else None, enhanced_user=None,
                    enhanced_prompt_ids=[*prompt, *(rng.randrange(vocab) for _ in range(5))] if hinted else None,
                    seconds=0.0,
                ),
            )  # fmt: skip
        return ids
    finally:
        store.close()
