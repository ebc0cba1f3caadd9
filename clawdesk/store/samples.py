"""Training samples: which logged turns and tool steps the learner may use, and their exact token ids.

Owns every rule of sample selection (the learner, the trainer and the UI read them through
:mod:`clawdesk.learn.samples`); the privacy rule itself is :func:`clawdesk.store.rules.learnable_turn`.

A turn becomes a sample when all of these hold:

- it was judged (``judgments.status = 'judged'``) and served by the base being trained
  (``turns.model_sha256``);
- learning was ON when it happened (``turns.learning = 1``), its session is not incognito and it
  was not vetoed (``feedback.vetoed``);
- it carries a signal: a non-zero reward (the thumbs rating in ``feedback.rating`` overrides the
  judge's ``judgments.reward``) or an accepted hint *with* the teacher's prompt tokens
  (``judgments.enhanced_prompt_ids``; a hint without them gives no on-policy distillation);
- no adapter version has used it yet (``adapter_samples.turn_id`` is UNIQUE: trained on once);
- it has at least one prompt and one reply token.

The prompt and reply ids are the ones stored when the reply was served (``turn_tokens``), so the
learner scores exactly what the user saw. All selection happens in SQL so that :func:`count_ready`
(the UI's "progress toward the next step") and :func:`ready_samples` can never disagree.

A *tool step* (a non-final model call of an agent-loop turn, ``steps``; the final one is the turn
itself) is a sample too, with the exact ids of that call, when its turn passes the same rules
(base, learning ON, not incognito, not vetoed), it was judged from its tool results
(``step_judgments``), and the turn's outcome o is known: the turn was judged or rated. Its reward
is ``train.step_reward``: ``"stepwise"`` o + Σ rᵢ/m over the step's m votes (an invalid vote counts
0), ``"outcome"`` o alone. It needs a non-zero reward or a teacher prompt, like a turn, and is
trained once (``adapter_step_samples.step_id`` is UNIQUE). Samples come oldest turn first, a turn's
steps in order before the turn's own sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clawdesk.store.log import Store
from clawdesk.store.rules import learnable_turn, tool_step
from clawdesk.store.tokens import unpack_ids

# Turns the learner may ever look at: same base, learning ON, not incognito, not vetoed, has tokens.
_ELIGIBLE_WHERE = f"""t.model_sha256 = :sha AND {learnable_turn("t", "s", "f")}
      AND t.n_reply_tokens > 0 AND t.n_prompt_tokens > 0"""
_ELIGIBLE = f"""
    FROM turns t
    JOIN sessions s ON s.id = t.session_id
    LEFT JOIN judgments j ON j.turn_id = t.id
    LEFT JOIN feedback f ON f.turn_id = t.id
    LEFT JOIN adapter_samples a ON a.turn_id = t.id
    JOIN turn_tokens tt ON tt.turn_id = t.id
    WHERE {_ELIGIBLE_WHERE}
"""
# The effective reward: the explicit thumbs beats the judge's majority vote.
_REWARD = "coalesce(f.rating, j.reward, 0)"
_HAS_TEACHER = "(j.hint IS NOT NULL AND j.enhanced_prompt_ids IS NOT NULL AND length(j.enhanced_prompt_ids) > 0)"
# Counted after every reply and judgment, so it starts from the partial index ``judgments_untrained``
# (m006: judgments that may still give a sample, ``sample_done = 0``; not every judgment ever made) and
# checks the signal right after the thumbs (CROSS JOIN keeps that order), before reading a turn row or
# a token blob. Every rule is still checked here: the flag narrows where to look, it never decides.
_READY = f"""
    FROM judgments j INDEXED BY judgments_untrained
    LEFT JOIN feedback f ON f.turn_id = j.turn_id
    CROSS JOIN turns t ON t.id = j.turn_id
    JOIN sessions s ON s.id = t.session_id
    LEFT JOIN adapter_samples a ON a.turn_id = t.id
    JOIN turn_tokens tt ON tt.turn_id = t.id
    WHERE j.status = 'judged' AND j.sample_done = 0 AND ({_REWARD} != 0 OR {_HAS_TEACHER})
      AND {_ELIGIBLE_WHERE} AND a.turn_id IS NULL
"""
# Tool steps: the turn's rules, plus judged from their tool results and the turn's outcome known.
_STEP_VOTE_MEAN = "coalesce((SELECT sum(v.value) * 1.0 / count(*) FROM json_each(sj.votes) v), 0)"
_STEP_REWARDS = {"stepwise": f"({_REWARD} + {_STEP_VOTE_MEAN})", "outcome": _REWARD}
_STEP_HAS_TEACHER = (
    "(sj.hint IS NOT NULL AND sj.enhanced_prompt_ids IS NOT NULL AND length(sj.enhanced_prompt_ids) > 0)"
)
_FINAL_IDX = 1 << 30  # orders a turn's own sample after its steps


def _step_ready(step_reward: str) -> str:
    return f"""
    FROM steps st
    CROSS JOIN turns t ON t.id = st.turn_id  -- CROSS: start from the steps, not a scan of every turn
    JOIN sessions s ON s.id = t.session_id
    JOIN step_judgments sj ON sj.step_id = st.id
    LEFT JOIN judgments j ON j.turn_id = t.id
    LEFT JOIN feedback f ON f.turn_id = t.id
    LEFT JOIN adapter_step_samples a ON a.step_id = st.id
    WHERE t.model_sha256 = :sha AND {learnable_turn("t", "s", "f")}
      AND st.status IN ('finished', 'length') AND length(st.prompt_ids) > 0 AND length(st.reply_ids) > 0
      AND {tool_step("st")}
      AND a.step_id IS NULL
      AND (f.rating IS NOT NULL OR j.status = 'judged')
      AND ({_STEP_REWARDS[step_reward]} != 0 OR {_STEP_HAS_TEACHER})
"""


def _union(step_reward: str) -> str:
    """Every ready sample, turns and tool steps, as one row shape (the one query both readers use)."""
    if step_reward not in _STEP_REWARDS:
        raise ValueError(f'step_reward must be "stepwise" or "outcome", got {step_reward!r}')
    return f"""
        SELECT t.id AS turn_id, NULL AS step_id, {_FINAL_IDX} AS ord, tt.prompt_ids, tt.reply_ids,
               {_REWARD} AS reward, j.hint, j.enhanced_prompt_ids, {_HAS_TEACHER} AS has_teacher
        {_READY}
        UNION ALL
        SELECT t.id, st.id, st.idx, st.prompt_ids, st.reply_ids,
               {_STEP_REWARDS[step_reward]}, sj.hint, sj.enhanced_prompt_ids, {_STEP_HAS_TEACHER}
        {_step_ready(step_reward)}
    """


@dataclass(frozen=True)
class Sample:
    """One training (or held-out) example: s_t, a_t as served, the reward and the OPD teacher prompt."""

    turn_id: int
    prompt_ids: list[int]
    reply_ids: list[int]
    reward: float
    hint: str | None
    teacher_prompt_ids: list[int] | None  # s_t with the hint appended; None = no OPD signal
    step_id: int | None = None  # a tool step of turn ``turn_id`` (``steps.id``); None = the turn's own reply

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
    sql = f"SELECT * FROM ({_union(step_reward)}) ORDER BY turn_id, ord"
    params: dict[str, object] = {"sha": base_sha256}
    if limit is not None:
        sql += " LIMIT :limit"
        params["limit"] = int(limit)
    out = []
    for row in store.db.execute(sql, params).fetchall():
        turn_id, step_id, _, prompt_blob, reply_blob, reward, hint, enhanced_blob, has_teacher = row
        out.append(
            Sample(
                turn_id=turn_id,
                prompt_ids=unpack_ids(prompt_blob),
                reply_ids=unpack_ids(reply_blob),
                reward=float(reward),
                hint=hint,
                teacher_prompt_ids=unpack_ids(enhanced_blob) if has_teacher else None,
                step_id=step_id,
            )
        )
    return out


def count_ready(store: Store, base_sha256: str, *, step_reward: str = "stepwise") -> int:
    """How many samples :func:`ready_samples` would return (for "n of batch_size until the next step")."""
    row = store.db.execute(f"SELECT count(*) FROM ({_union(step_reward)})", {"sha": base_sha256}).fetchone()
    return int(row[0])


def heldout_replies(store: Store, base_sha256: str, exclude: set[int], n: int = 8) -> list[Sample]:
    """Up to ``n`` earlier replies of this base for validation, newest first, none of them in ``exclude``.

    Any finished turn the learner may look at qualifies (judged or not, already trained on or not),
    except replies known to be bad (effective reward −1): an adapter is *meant* to make those less
    likely, so a falling log-prob on them is no sign of collapse. Held-out samples carry no hint.
    """
    sql = f"""
        SELECT t.id, tt.prompt_ids, tt.reply_ids, {_REWARD} AS reward
        {_ELIGIBLE}
          AND t.status = 'finished' AND {_REWARD} >= 0
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
               j.reward, j.hint, f.rating
        FROM judgments j
        JOIN turns t ON t.id = j.turn_id
        JOIN sessions s ON s.id = t.session_id
        LEFT JOIN feedback f ON f.turn_id = t.id
        WHERE j.status = 'judged' AND {learnable_turn("t", "s", "f")} AND {_REWARD} != 0
        ORDER BY t.id
    """
    return list(store.db.query(sql))
