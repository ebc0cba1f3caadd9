"""Training samples: which logged steps the learner may use, and their exact token ids.

Owns every rule of sample selection (the learner, the trainer and the UI read them through
:mod:`clawdesk.learn.samples`); the privacy rule itself is :func:`clawdesk.store.rules.learnable_turn`.

Every sample is a *step* (migration m007: a plain turn is a one-step turn) with a judgment
(``judgments``, keyed by step): a turn's final step judged from the user's next message
(``next_state = 'user'``: "the turn's own sample") or a tool step judged from its tool results
(``'tools'``). A step becomes a sample when all of these hold:

- its judgment is ``judged`` and its turn was served by the base being trained (``turns.model_sha256``);
- its turn may be learned from: learning was ON, its session is not incognito and it was not
  vetoed (:func:`~clawdesk.store.rules.learnable_turn`);
- the turn's outcome o is known: the turn was judged (for its own sample, that is this judgment)
  or rated (``feedback.rating``, which overrides the judge's ``reward``);
- it carries a signal: a non-zero reward or an accepted hint *with* the teacher's prompt tokens
  (``judgments.enhanced_prompt_ids``; a hint without them gives no on-policy distillation). The
  reward is o for the turn's own sample; for a tool step, ``train.step_reward``: ``"stepwise"``
  o + Σ rᵢ/m over its m votes (an invalid vote counts 0), ``"outcome"`` o alone;
- no adapter version has used it yet (``adapter_samples.step_id`` is UNIQUE: trained on once);
- it has at least one prompt and one reply token.

The ids are the ones stored when the step was served (``steps``), so the learner scores exactly
what the model produced. A step served with preference items in its prompt (the memory, m009) is
learned in its prompt *without* them (``steps.student_prompt_ids``: the student's prompt), and its
teacher reads the served prompt *with* them: plus the hint when the judge gave one
(``enhanced_prompt_ids``), else the served prompt itself, so its OPD term pulls the student toward
what the items made the reply do (context distillation; docs/learning.md, "Memory").
All selection happens in one SQL query, so :func:`count_ready` (the UI's
"progress toward the next step") and :func:`ready_samples` can never disagree. Samples come oldest
turn first, a turn's tool steps in order before its own sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clawdesk.store.log import Store
from clawdesk.store.rules import final_step, learnable_turn, turn_outcome_join
from clawdesk.store.tokens import unpack_ids

# The turn's outcome o: the explicit thumbs beat the judge's majority vote (o: the turn's own judgment).
_OUTCOME = "coalesce(f.rating, o.reward, 0)"
_VOTE_MEAN = "coalesce((SELECT sum(v.value) * 1.0 / count(*) FROM json_each(j.votes) v), 0)"
_REWARDS = {
    "stepwise": f"(CASE WHEN j.next_state = 'tools' THEN {_OUTCOME} + {_VOTE_MEAN} ELSE {_OUTCOME} END)",
    "outcome": _OUTCOME,
}
_HAS_TEACHER = "(j.hint IS NOT NULL AND j.enhanced_prompt_ids IS NOT NULL AND length(j.enhanced_prompt_ids) > 0)"
# Served with preference items: the student learns without them (m009), the served prompt is a teacher.
_HAS_MEMORY = "(st.student_prompt_ids IS NOT NULL AND length(st.student_prompt_ids) > 0)"
_STUDENT = f"(CASE WHEN {_HAS_MEMORY} THEN st.student_prompt_ids ELSE st.prompt_ids END)"
_TEACHER = f"(CASE WHEN {_HAS_TEACHER} THEN j.enhanced_prompt_ids WHEN {_HAS_MEMORY} THEN st.prompt_ids END)"
# Counted after every reply and judgment, so it starts from the partial index ``judgments_untrained``
# (judgments that may still give a sample, ``sample_done = 0``; not every judgment ever made; m006,
# keyed by step since m007), and CROSS JOINs keep that order. Every rule is still checked here: the
# flag narrows where to look, it never decides.
_READY = f"""
    FROM judgments j INDEXED BY judgments_untrained
    CROSS JOIN steps st ON st.id = j.step_id
    CROSS JOIN turns t ON t.id = st.turn_id
    JOIN sessions s ON s.id = t.session_id
    LEFT JOIN feedback f ON f.turn_id = t.id
    {turn_outcome_join("t", "o")}
    LEFT JOIN adapter_samples a ON a.step_id = st.id
    WHERE j.status = 'judged' AND j.sample_done = 0 AND a.step_id IS NULL
      AND t.model_sha256 = :sha AND {learnable_turn("t", "s", "f")}
      AND st.status IN ('finished', 'length') AND length(st.prompt_ids) > 0 AND length(st.reply_ids) > 0
      AND (f.rating IS NOT NULL OR o.status = 'judged')
"""
# Earlier replies of this base the learner may look at (for held-out validation): their final steps.
_ELIGIBLE = f"""
    FROM turns t
    JOIN sessions s ON s.id = t.session_id
    LEFT JOIN feedback f ON f.turn_id = t.id
    JOIN steps st ON st.turn_id = t.id AND {final_step("st")}
    {turn_outcome_join("t", "o")}
    WHERE t.model_sha256 = :sha AND {learnable_turn("t", "s", "f")}
      AND length(st.prompt_ids) > 0 AND length(st.reply_ids) > 0
"""


def _ready(step_reward: str) -> str:
    """Every ready sample as one row shape (the one query both readers use)."""
    if step_reward not in _REWARDS:
        raise ValueError(f'step_reward must be "stepwise" or "outcome", got {step_reward!r}')
    reward = _REWARDS[step_reward]
    return f"""
        SELECT t.id AS turn_id, CASE WHEN j.next_state = 'tools' THEN st.id END AS step_id, st.idx AS ord,
               {_STUDENT} AS prompt_ids, st.reply_ids, {reward} AS reward, j.hint, {_TEACHER} AS teacher_ids,
               ({_HAS_TEACHER} OR {_HAS_MEMORY}) AS has_teacher, {_HAS_MEMORY} AS memory
        {_READY} AND ({reward} != 0 OR {_HAS_TEACHER} OR {_HAS_MEMORY})
    """


@dataclass(frozen=True)
class Sample:
    """One training (or held-out) example: s_t, a_t as served, the reward and the OPD teacher prompt."""

    turn_id: int
    prompt_ids: list[int]
    reply_ids: list[int]
    reward: float
    hint: str | None
    # The OPD teacher's prompt: s_t with the preference items it was served with and the hint appended
    # (either may be absent); None = no OPD signal.
    teacher_prompt_ids: list[int] | None
    step_id: int | None = None  # a tool step of turn ``turn_id`` (``steps.id``); None = the turn's own reply
    memory: bool = False  # served with preference items: ``prompt_ids`` is the prompt without them

    @property
    def has_hint(self) -> bool:
        """Whether this sample carries an on-policy-distillation signal (a hint with teacher tokens)."""
        return self.teacher_prompt_ids is not None

    @property
    def n_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.reply_ids)


def ready_samples(
    store: Store, base_sha256: str, *, limit: int | None = None, step_reward: str = "stepwise"
) -> list[Sample]:
    """Samples not yet trained on for the base ``base_sha256``, oldest turn first (its tool steps before it)."""
    sql = f"SELECT * FROM ({_ready(step_reward)}) ORDER BY turn_id, ord"
    params: dict[str, object] = {"sha": base_sha256}
    if limit is not None:
        sql += " LIMIT :limit"
        params["limit"] = int(limit)
    out = []
    for row in store.db.execute(sql, params).fetchall():
        turn_id, step_id, _, prompt_blob, reply_blob, reward, hint, teacher_blob, has_teacher, memory = row
        out.append(
            Sample(
                turn_id=turn_id,
                prompt_ids=unpack_ids(prompt_blob),
                reply_ids=unpack_ids(reply_blob),
                reward=float(reward),
                hint=hint,
                teacher_prompt_ids=unpack_ids(teacher_blob) if has_teacher else None,
                step_id=step_id,
                memory=bool(memory),
            )
        )
    return out


def count_ready(store: Store, base_sha256: str, *, step_reward: str = "stepwise") -> int:
    """How many samples :func:`ready_samples` would return (for "n of batch_size until the next step")."""
    row = store.db.execute(f"SELECT count(*) FROM ({_ready(step_reward)})", {"sha": base_sha256}).fetchone()
    return int(row[0])


def heldout_replies(store: Store, base_sha256: str, exclude: set[int], n: int = 8) -> list[Sample]:
    """Up to ``n`` earlier replies of this base for validation, newest first, none of them in ``exclude``.

    Any finished turn the learner may look at qualifies (judged or not, already trained on or not),
    except replies known to be bad (effective reward −1): an adapter is *meant* to make those less
    likely, so a falling log-prob on them is no sign of collapse. Held-out samples carry no hint.
    """
    sql = f"""
        SELECT t.id, st.prompt_ids, st.reply_ids, {_OUTCOME} AS reward
        {_ELIGIBLE}
          AND t.status = 'finished' AND {_OUTCOME} >= 0
        ORDER BY t.id DESC
    """
    out: list[Sample] = []
    for turn_id, prompt_blob, reply_blob, reward in store.db.execute(sql, {"sha": base_sha256}):
        if turn_id in exclude:
            continue
        out.append(
            Sample(
                turn_id=turn_id,
                prompt_ids=unpack_ids(prompt_blob),
                reply_ids=unpack_ids(reply_blob),
                reward=float(reward),
                hint=None,
                teacher_prompt_ids=None,
            )
        )
        if len(out) >= n:
            break
    return out


def labelled_turns(store: Store) -> list[dict[str, Any]]:
    """Judged turns that may be learned from and carry a label (reward ±1), oldest first: what ``export-data`` writes.

    A turn judged ``0`` (unclear) has no label: a KTO-style trainer would read it as undesirable.
    Keys: ``id, session_id, seq, user_content, reply_content, dropped_turns, system_prompt``, the
    judge's ``reward`` and ``hint``, and the person's ``rating`` (which overrides ``reward``).
    """
    sql = f"""
        SELECT t.id, t.session_id, t.seq, t.user_content, t.reply_content, t.dropped_turns, s.system_prompt,
               o.reward, o.hint, f.rating
        FROM judgments o
        JOIN steps st ON st.id = o.step_id
        JOIN turns t ON t.id = st.turn_id
        JOIN sessions s ON s.id = t.session_id
        LEFT JOIN feedback f ON f.turn_id = t.id
        WHERE o.status = 'judged' AND o.next_state = 'user' AND {learnable_turn("t", "s", "f")} AND {_OUTCOME} != 0
        ORDER BY t.id
    """
    return list(store.db.query(sql))
