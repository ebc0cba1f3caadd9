"""The agent loop's record: a turn's steps (one per model call) and each step's tool calls.

A turn served through the agent loop (tools offered to the model) has one ``steps`` row per model
call, ``idx`` 0, 1, …, the last one being the final answer, whose ids are also the turn's
``turn_tokens``; each step has its ``tool_calls`` in the order the model wrote them (denied,
failed and malformed calls included, with exactly the result text the model read). A turn served
without tools (the demo model, ``tools.enabled = false``) is a one-step turn: its step 0, written
by :meth:`~clawdesk.store.log.Store.add_turn`, is its answer. Judgments and training samples are
keyed by step (``judgments.step_id``, ``adapter_samples.step_id``, migration m007). Everything of one turn
is written in one transaction (:func:`add_agent_turn`), so a crash never leaves a turn without its
steps or a step without its calls.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clawdesk.store.log import NewTurn, Store
from clawdesk.store.rules import final_step
from clawdesk.store.tokens import pack_ids, unpack_ids

STEP_STATUSES = ("finished", "cancelled", "length")


@dataclass(frozen=True)
class NewToolCall:
    """One call of a step as it will be recorded (``result`` is exactly what the model read)."""

    name: str
    arguments: dict[str, Any]
    raw: str
    result: str
    status: str  # ok | error | denied | timeout
    duration_s: float


@dataclass(frozen=True)
class NewStep:
    """One model call of the agent loop, with the exact ids served, and the calls it made."""

    prompt_ids: list[int]
    reply_ids: list[int]
    reply_content: str  # after any </think>, <tool_call> blocks included
    reply_thinking: str
    status: str  # finished | cancelled | length
    started_at: str
    finished_at: str
    adapter_version: int | None = None
    calls: tuple[NewToolCall, ...] = ()


@dataclass(frozen=True)
class Step:
    id: int
    turn_id: int
    idx: int
    prompt_ids: list[int]
    reply_ids: list[int]
    reply_content: str
    reply_thinking: str
    status: str
    adapter_version: int | None
    started_at: str
    finished_at: str


@dataclass(frozen=True)
class ToolCallRecord:
    id: int
    step_id: int
    idx: int
    name: str
    arguments: dict[str, Any]
    raw: str
    result: str
    status: str
    duration_s: float


def add_agent_turn(store: Store, session_id: int, turn: NewTurn, steps: Sequence[NewStep]) -> tuple[int, list[int]]:
    """Record a turn with its steps and their tool calls in one transaction; (turn id, step ids in order).

    ``turn`` carries the final step's answer and ids, as a plain chat turn would.
    """
    if not steps:
        raise ValueError("an agent turn has at least one step (its final answer)")
    bad = [s.status for s in steps if s.status not in STEP_STATUSES]
    if bad:
        raise ValueError(f"bad step status {bad[0]!r}")
    with store.transaction():
        turn_id = store.add_turn(session_id, turn, one_step=False)  # nested: a savepoint inside this transaction
        step_ids = []
        for idx, step in enumerate(steps):
            cur = store.db.execute(
                "INSERT INTO steps(turn_id, idx, prompt_ids, reply_ids, reply_content, reply_thinking, status,"
                " adapter_version, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    turn_id, idx, pack_ids(step.prompt_ids), pack_ids(step.reply_ids), step.reply_content,
                    step.reply_thinking, step.status, step.adapter_version, step.started_at, step.finished_at,
                ],
            )  # fmt: skip
            step_id = cur.lastrowid
            step_ids.append(step_id)
            for call_idx, call in enumerate(step.calls):
                store.db.execute(
                    "INSERT INTO tool_calls(step_id, idx, name, arguments, raw, result, status, duration_s)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        step_id, call_idx, call.name, json.dumps(call.arguments, ensure_ascii=False), call.raw,
                        call.result, call.status, float(call.duration_s),
                    ],
                )  # fmt: skip
    return turn_id, step_ids


def list_steps(store: Store, turn_id: int) -> list[Step]:
    """The steps of a turn in order (one for a turn served without tools)."""
    rows = store.db.query("SELECT * FROM steps WHERE turn_id = ? ORDER BY idx", [turn_id])
    return [
        Step(
            id=r["id"],
            turn_id=r["turn_id"],
            idx=r["idx"],
            prompt_ids=unpack_ids(r["prompt_ids"]),
            reply_ids=unpack_ids(r["reply_ids"]),
            reply_content=r["reply_content"],
            reply_thinking=r["reply_thinking"],
            status=r["status"],
            adapter_version=r["adapter_version"],
            started_at=r["started_at"],
            finished_at=r["finished_at"],
        )
        for r in rows
    ]


def tool_calls(store: Store, step_id: int) -> list[ToolCallRecord]:
    """The calls of one step in the order the model wrote them."""
    rows = store.db.query("SELECT * FROM tool_calls WHERE step_id = ? ORDER BY idx", [step_id])
    return [
        ToolCallRecord(
            id=r["id"],
            step_id=r["step_id"],
            idx=r["idx"],
            name=r["name"],
            arguments=json.loads(r["arguments"]),
            raw=r["raw"],
            result=r["result"],
            status=r["status"],
            duration_s=r["duration_s"],
        )
        for r in rows
    ]


def turn_tool_calls(store: Store, turn_id: int) -> list[tuple[int, ToolCallRecord]]:
    """Every call of a turn as (step idx, call) in order: what a chat view shows under the answer."""
    rows = store.db.query(
        "SELECT s.idx AS step_idx, c.* FROM tool_calls c JOIN steps s ON s.id = c.step_id"
        " WHERE s.turn_id = ? ORDER BY s.idx, c.idx",
        [turn_id],
    )
    out = []
    for r in rows:
        step_idx = r.pop("step_idx")
        out.append((step_idx, ToolCallRecord(**{**r, "arguments": json.loads(r["arguments"])})))
    return out


def trail_rows(store: Store, turn_ids: Sequence[int]) -> list[dict[str, Any]]:
    """Every step of these turns joined with its calls, in order: what the chat shows of earlier tool use.

    One row per call (a step without calls gives one row whose call columns are None), with the keys
    ``turn_id, step_id, reply_content, final`` (the turn's last step, :func:`clawdesk.store.rules.final_step`)
    and ``name, arguments, result, status`` (``arguments`` as stored: JSON text).
    """
    ids = list(turn_ids)
    if not ids:
        return []
    sql = f"""
        SELECT st.turn_id, st.id AS step_id, st.reply_content, {final_step("st")} AS final,
               c.name, c.arguments, c.result, c.status
        FROM steps st
        LEFT JOIN tool_calls c ON c.step_id = st.id
        WHERE st.turn_id IN ({",".join("?" * len(ids))})
        ORDER BY st.turn_id, st.idx, c.idx
    """
    return list(store.db.query(sql, ids))
