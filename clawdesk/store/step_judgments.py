"""The learning side of the agent loop's steps: which tool steps await judging, and their judgments.

A *tool step* is a non-final step of a turn (``steps.idx`` below the turn's last, which is the
final answer and is judged as the turn itself). Its next state is already there when it is
recorded: the results of all its tool calls. So it can be judged at once, unlike a turn, which
waits for the user's next message. It is judged only when its turn may be learned from at all
(:func:`clawdesk.store.rules.learnable_turn`) and finished, as for turns. Its judgment is a row
of the one ``judgments`` table, keyed by the step, with ``next_state = 'tools'`` (migration m007).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from clawdesk.store.judgments import decode_judgment_row
from clawdesk.store.log import Store, Turn, now_iso
from clawdesk.store.rules import learnable_turn, tool_step
from clawdesk.store.steps import Step, ToolCallRecord, list_steps, tool_calls
from clawdesk.store.tokens import pack_ids

# Starts from the steps that made calls, not from every step: since m007 every plain turn has one too.
_PENDING = f"""
    FROM (SELECT DISTINCT step_id FROM tool_calls) called
    CROSS JOIN steps st ON st.id = called.step_id
    JOIN turns t ON t.id = st.turn_id
    JOIN sessions s ON s.id = t.session_id
    LEFT JOIN judgments sj ON sj.step_id = st.id
    LEFT JOIN feedback f ON f.turn_id = t.id
    WHERE sj.step_id IS NULL AND {learnable_turn("t", "s", "f")}
      AND t.status IN ('finished', 'length')
      AND st.status IN ('finished', 'length')
      AND {tool_step("st")}
"""


@dataclass(frozen=True)
class PendingStep:
    """A tool step ready to judge: its reply (the calls) and its next state (every call's result, in order)."""

    turn: Turn
    step: Step
    calls: tuple[ToolCallRecord, ...]
    first_prompt_ids: list[int]  # step 0's prompt: where the turn's user message ends (the teacher prompt)


@dataclass(frozen=True)
class StepJudgment:
    step_id: int
    prompt_version: str
    judge_model_name: str
    judge_model_sha256: str
    score_outputs: list[str]
    votes: list[int | None]
    hint_outputs: list[str]
    hint: str | None
    enhanced_prompt_ids: list[int] | None
    seconds: float
    note: str = ""  # why a hint or teacher prompt was not kept (not stored: the runner reports it)

    @property
    def reward(self) -> float:
        """The step's process reward Σ rᵢ / m (an invalid vote counts 0), as the step-wise reward adds it to o."""
        return sum(v for v in self.votes if v is not None) / len(self.votes) if self.votes else 0.0


def pending_steps(store: Store, *, limit: int | None = None) -> list[PendingStep]:
    """Tool steps not yet judged, oldest first."""
    sql = f"SELECT st.id, st.turn_id, st.idx {_PENDING} ORDER BY st.turn_id, st.idx"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    out = []
    for row in store.db.execute(sql).fetchall():
        step_id, turn_id, idx = row
        steps = list_steps(store, turn_id)
        out.append(
            PendingStep(
                turn=store.get_turn(turn_id),
                step=steps[idx],
                calls=tuple(tool_calls(store, step_id)),
                first_prompt_ids=steps[0].prompt_ids,
            )
        )
    return out


def step_backlog(store: Store) -> int:
    """How many tool steps are ready to judge (they never wait for anything)."""
    return int(store.db.execute(f"SELECT count(*) {_PENDING}").fetchone()[0])


def save_step_judgment(store: Store, j: StepJudgment) -> None:
    with store.transaction():
        store.db.execute(
            """INSERT OR REPLACE INTO judgments(step_id, next_state, status, prompt_version, judge_model_name,
                judge_model_sha256, score_outputs, votes, hint, hint_outputs, enhanced_prompt_ids, seconds, judged_at)
               VALUES (?, 'tools', 'judged', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                j.step_id, j.prompt_version, j.judge_model_name, j.judge_model_sha256, json.dumps(j.score_outputs),
                json.dumps(j.votes), j.hint, json.dumps(j.hint_outputs),
                pack_ids(j.enhanced_prompt_ids) if j.enhanced_prompt_ids else None, j.seconds, now_iso(),
            ],
        )  # fmt: skip


def get_step_judgment(store: Store, step_id: int) -> dict[str, Any] | None:
    rows = list(store.db.query("SELECT * FROM judgments WHERE step_id = ? AND next_state = 'tools'", [step_id]))
    return decode_judgment_row(rows[0]) if rows else None


def step_summaries(store: Store, turn_id: int) -> list[dict[str, Any]]:
    """The tool steps of a turn in order, each with what became of it (the "What I learned" detail).

    Keys: ``id, idx``; ``calls`` ("name → status, …", None without calls); ``votes`` (JSON text, None
    when not judged yet) and ``hint`` of its judgment; ``reward`` it was trained with (None = not yet).
    """
    sql = f"""
        SELECT st.id, st.idx, j.votes, j.hint, a.reward,
               (SELECT group_concat(name || ' → ' || status, ', ')
                  FROM (SELECT name, status FROM tool_calls WHERE step_id = st.id ORDER BY idx)) AS calls
        FROM steps st
        LEFT JOIN judgments j ON j.step_id = st.id
        LEFT JOIN adapter_samples a ON a.step_id = st.id
        WHERE st.turn_id = ? AND {tool_step("st")}
        ORDER BY st.idx
    """
    return list(store.db.query(sql, [turn_id]))
