"""The learning side of the turn log: which turns await judging, judgments, thumbs and vetoes.

Judgments are keyed by step (``judgments.step_id``, migration m007): a turn's judgment is the one
of its final step (:func:`clawdesk.store.rules.final_step`), judged from the user's next message
(``next_state = 'user'``); tool steps' judgments (``next_state = 'tools'``) are
:mod:`clawdesk.store.step_judgments`'.

A turn can be judged once it has a *next state* (the user's next message in the same session),
when it may be learned from (:func:`clawdesk.store.rules.learnable_turn`: learning ON, not
incognito, not vetoed) and finished (not cancelled). Turns still waiting for a next state past
``pending_max_age_hours`` are marked ``dropped`` so they stop counting as backlog.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from clawdesk.errors import NotFoundError
from clawdesk.store.log import Store, Turn, now_iso
from clawdesk.store.rules import final_step, learnable_turn, turn_judged
from clawdesk.store.tokens import pack_ids, unpack_ids

# ``turns_unjudged`` (m006) holds only the turns the judge still has to look at (``judge_done = 0``): its
# questions after every reply read the backlog, not the whole log. Every rule below still applies.
_JUDGEABLE = f"""
    FROM turns t INDEXED BY turns_unjudged
    JOIN sessions s ON s.id = t.session_id
    LEFT JOIN feedback f ON f.turn_id = t.id
    WHERE t.judge_done = 0 AND NOT {turn_judged("t")} AND {learnable_turn("t", "s", "f")}
      AND t.status IN ('finished', 'length')
"""
_NEXT = "(SELECT n.id FROM turns n WHERE n.session_id = t.session_id AND n.seq = t.seq + 1)"


@dataclass(frozen=True)
class PendingTurn:
    """A turn ready to judge: the reply a_t plus its next state s_{t+1}."""

    turn: Turn
    next_turn_id: int
    next_state: str
    next_role: str = "user"


@dataclass(frozen=True)
class Judgment:
    turn_id: int
    next_turn_id: int
    prompt_version: str
    judge_model_name: str
    judge_model_sha256: str
    score_outputs: list[str]
    votes: list[int | None]
    reward: int
    hint_outputs: list[str]
    hint: str | None
    enhanced_user: str | None
    enhanced_prompt_ids: list[int] | None
    seconds: float
    note: str = ""


@dataclass(frozen=True)
class JudgedTurn:
    """One row of the "What I learned" view."""

    turn_id: int
    session_id: int
    user_content: str
    reply_content: str
    next_state: str
    reward: int | None
    effective_reward: int | None  # the thumbs rating when given, else r_final
    rating: int | None
    votes: list[int | None]
    hint: str | None
    vetoed: bool
    status: str
    judged_at: str


def pending_turns(store: Store, *, limit: int | None = None) -> list[PendingTurn]:
    sql = f"SELECT t.*, {_NEXT} AS next_id {_JUDGEABLE} AND {_NEXT} IS NOT NULL ORDER BY t.id"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    out = []
    for row in store.db.query(sql):
        nxt = store.get_turn(row["next_id"])
        out.append(PendingTurn(turn=Turn.from_row(row), next_turn_id=nxt.id, next_state=nxt.user_content))
    return out


def backlog(store: Store) -> tuple[int, int]:
    """(turns ready to judge, turns still waiting for the user's next message)."""
    row = store.db.execute(
        f"SELECT sum({_NEXT} IS NOT NULL), sum({_NEXT} IS NULL) {_JUDGEABLE}",
    ).fetchone()
    return int(row[0] or 0), int(row[1] or 0)


def drop_stale(store: Store, max_age_hours: float, *, now: datetime | None = None) -> int:
    """Mark turns that never got a next state within ``max_age_hours`` as dropped."""
    cutoff = ((now or datetime.now(UTC)) - timedelta(hours=max_age_hours)).isoformat(timespec="milliseconds")
    rows = list(store.db.query(f"SELECT t.id {_JUDGEABLE} AND {_NEXT} IS NULL AND t.finished_at < ?", [cutoff]))
    with store.transaction():
        for row in rows:
            store.db.execute(
                "INSERT INTO judgments(step_id, next_state, status, note, judged_at) "
                f"SELECT st.id, 'user', 'dropped', ?, ? FROM steps st WHERE st.turn_id = ? AND {final_step('st')}",
                [f"no next message within {max_age_hours:g} h", now_iso(), row["id"]],
            )
    return len(rows)


def save_judgment(store: Store, j: Judgment) -> None:
    """Record the judgment of turn ``j.turn_id`` (on its final step, from the user), replacing any earlier one."""
    with store.transaction():
        cur = store.db.execute(
            f"""INSERT OR REPLACE INTO judgments(step_id, next_state, status, next_turn_id, prompt_version,
                judge_model_name, judge_model_sha256, score_outputs, votes, reward, hint_outputs, hint, enhanced_user,
                enhanced_prompt_ids, seconds, note, judged_at)
               SELECT st.id, 'user', 'judged', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
               FROM steps st WHERE st.turn_id = ? AND {final_step("st")}""",
            [
                j.next_turn_id, j.prompt_version, j.judge_model_name, j.judge_model_sha256,
                json.dumps(j.score_outputs), json.dumps(j.votes), j.reward, json.dumps(j.hint_outputs), j.hint,
                j.enhanced_user, pack_ids(j.enhanced_prompt_ids) if j.enhanced_prompt_ids else None,
                j.seconds, j.note, now_iso(), j.turn_id,
            ],
        )  # fmt: skip
        if cur.rowcount != 1:
            raise NotFoundError(f"no turn with id {j.turn_id} (or it has no recorded step) to save a judgment for")


def get_judgment(store: Store, turn_id: int) -> dict[str, Any] | None:
    """The turn's own judgment, decoded (with its ``turn_id``), or None when it has none."""
    sql = "SELECT j.*, st.turn_id FROM judgments j JOIN steps st ON st.id = j.step_id"
    rows = list(store.db.query(sql + " WHERE st.turn_id = ? AND j.next_state = 'user'", [turn_id]))
    return decode_judgment_row(rows[0]) if rows else None


def decode_judgment_row(row: dict[str, Any]) -> dict[str, Any]:
    """A ``judgments`` row with its JSON lists and packed teacher ids decoded."""
    row = dict(row)
    for key in ("score_outputs", "votes", "hint_outputs"):
        row[key] = json.loads(row[key]) if row[key] else []
    blob = row.get("enhanced_prompt_ids")
    row["enhanced_prompt_ids"] = unpack_ids(blob) if blob else None
    return row


def set_rating(store: Store, turn_id: int, rating: int | None) -> None:
    """Explicit thumbs up/down (+1/-1; None clears). Overrides r_final for that turn."""
    if rating not in (None, -1, 1):
        raise ValueError("rating must be +1, -1 or None")
    store.get_turn(turn_id)
    with store.transaction():
        store.db.execute(
            "INSERT INTO feedback(turn_id, rating, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT(turn_id) DO UPDATE SET rating = excluded.rating, updated_at = excluded.updated_at",
            [turn_id, rating, now_iso()],
        )


def set_veto(store: Store, turn_id: int, vetoed: bool = True) -> None:
    """A vetoed turn is never judged again and never trained on."""
    store.get_turn(turn_id)
    with store.transaction():
        store.db.execute(
            "INSERT INTO feedback(turn_id, vetoed, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT(turn_id) DO UPDATE SET vetoed = excluded.vetoed, updated_at = excluded.updated_at",
            [turn_id, int(vetoed), now_iso()],
        )


def forget(store: Store, turn_id: int) -> None:
    """Delete what was learned from a turn: its judgments (its tool steps' too) go and it is vetoed.

    So it is never judged again.
    """
    set_veto(store, turn_id, True)
    with store.transaction():
        store.db.execute("DELETE FROM judgments WHERE step_id IN (SELECT id FROM steps WHERE turn_id = ?)", [turn_id])


def last_turn_id(store: Store, session_id: int | None = None) -> int:
    sql = "SELECT id FROM turns" + (" WHERE session_id = ?" if session_id else "") + " ORDER BY id DESC LIMIT 1"
    row = store.db.execute(sql, [session_id] if session_id else []).fetchone()
    if row is None:
        raise NotFoundError("there is no turn to rate yet")
    return row[0]


def list_judged(store: Store, *, limit: int = 200) -> list[JudgedTurn]:
    sql = """
        SELECT t.id, t.session_id, t.user_content, t.reply_content, j.reward, j.votes, j.hint, j.status,
               j.judged_at, f.rating, coalesce(f.vetoed, 0) AS vetoed,
               (SELECT n.user_content FROM turns n WHERE n.id = j.next_turn_id) AS next_state
        FROM judgments j JOIN steps st ON st.id = j.step_id JOIN turns t ON t.id = st.turn_id
        LEFT JOIN feedback f ON f.turn_id = t.id
        WHERE j.status = 'judged' AND j.next_state = 'user' ORDER BY j.judged_at DESC, t.id DESC LIMIT ?
    """
    out = []
    for r in store.db.query(sql, [limit]):
        out.append(
            JudgedTurn(
                turn_id=r["id"],
                session_id=r["session_id"],
                user_content=r["user_content"],
                reply_content=r["reply_content"],
                next_state=r["next_state"] or "",
                reward=r["reward"],
                effective_reward=r["rating"] if r["rating"] is not None else r["reward"],
                rating=r["rating"],
                votes=json.loads(r["votes"]) if r["votes"] else [],
                hint=r["hint"],
                vetoed=bool(r["vetoed"]),
                status=r["status"],
                judged_at=r["judged_at"],
            )
        )
    return out


def reward_counts(store: Store) -> dict[str, int]:
    row = store.db.execute(
        "SELECT sum(reward = 1), sum(reward = -1), sum(reward = 0), sum(hint IS NOT NULL), count(*) "
        "FROM judgments WHERE status = 'judged' AND next_state = 'user'"
    ).fetchone()
    keys = ("+1", "-1", "0", "hints", "judged")
    return {k: int(v or 0) for k, v in zip(keys, row, strict=True)}
