"""Tool calls in the chat: one collapsible line per call, grouped under the reply that made them.

A reply that used tools shows, above its answer, a :class:`ToolTrail`: for each non-final step of
the agent loop, the text the model wrote besides its calls (if any) and one :class:`ToolBlock` per
call (``▸ read_file homework/3.txt · ok``). A block opens to the exact arguments and the result the
model read, cut to :data:`SCREEN_RESULT_CHARS` on screen (the log keeps it whole). Live blocks
start *running* and are finished by the app; blocks of earlier chats are rebuilt from the
``steps`` / ``tool_calls`` tables (:func:`load_trails`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Collapsible, Static

from clawdesk.store import Store
from clawdesk.store.step_judgments import step_summaries
from clawdesk.store.steps import trail_rows

SCREEN_RESULT_CHARS = 1500  # what a block shows of a result; long outputs make the chat unreadable
SUMMARY_CHARS = 60  # the argument shown on a block's one line
# The argument that says most about a call, in order of preference (the rest is in the open block).
_KEY_ARGUMENTS = ("path", "command", "pattern", "query", "text", "url", "name", "id")
STATUS_LABELS = {
    "running": "running…",
    "ok": "ok",
    "error": "error",
    "denied": "denied",
    "timeout": "timed out",
}


@dataclass(frozen=True)
class CallView:
    """One tool call as a block shows it (from the live loop or from the log)."""

    name: str
    arguments: Mapping[str, Any] | str  # a dict, or the recorded JSON text
    status: str  # running | ok | error | denied | timeout
    result: str = ""


@dataclass(frozen=True)
class StepView:
    """A non-final step of a recorded turn: the text beside its calls, and the calls in order."""

    text: str
    calls: tuple[CallView, ...]


def call_summary(name: str, arguments: Mapping[str, Any] | str) -> str:
    """``read_file homework/3.txt``: the tool and its most telling argument, on one line."""
    args = _as_dict(arguments)
    key = next((k for k in _KEY_ARGUMENTS if isinstance(args.get(k), str) and args[k].strip()), None)
    if key is not None:
        shown = " ".join(str(args[key]).split())
    elif args:
        shown = json.dumps(args, ensure_ascii=False, default=str)
    else:
        shown = ""
    if len(shown) > SUMMARY_CHARS:
        shown = shown[: SUMMARY_CHARS - 1] + "…"
    return f"{name} {shown}".rstrip()


def screen_result(text: str, limit: int = SCREEN_RESULT_CHARS) -> str:
    """A result as the block shows it: at most ``limit`` characters, and a note of what was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… {len(text) - limit:,} more characters; the full result is in the chat log]"


def _as_dict(arguments: Mapping[str, Any] | str) -> dict[str, Any]:
    if isinstance(arguments, Mapping):
        return dict(arguments)
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _arguments_text(arguments: Mapping[str, Any] | str) -> str:
    if isinstance(arguments, str):
        try:
            return json.dumps(json.loads(arguments), ensure_ascii=False, indent=2)
        except json.JSONDecodeError:
            return arguments
    return json.dumps(dict(arguments), ensure_ascii=False, indent=2, default=str)


class ToolBlock(Collapsible):
    """One tool call: a collapsed line with its state, opening to its arguments and result."""

    def __init__(self, call: CallView) -> None:
        self.call = call
        self.status = call.status
        self.result = call.result
        super().__init__(
            Static(self._body(), markup=False, classes="tool-body"),
            title=self._heading(),  # type: ignore[arg-type]  # Content: a path's brackets are not markup
            collapsed=True,
            collapsed_symbol="▸",
            expanded_symbol="▾",
            classes=f"tool-block tool-{call.status}",
        )

    @property
    def summary(self) -> str:
        return call_summary(self.call.name, self.call.arguments)

    def _heading(self) -> Content:
        return Content.assemble(self.summary, (f"  · {STATUS_LABELS.get(self.status, self.status)}", "italic"))

    def _body(self) -> str:
        parts = [f"arguments:\n{_arguments_text(self.call.arguments)}"]
        if self.status != "running":
            parts.append(f"result ({STATUS_LABELS.get(self.status, self.status)}):\n{screen_result(self.result)}")
        return "\n\n".join(parts)

    def finish(self, status: str, result: str) -> None:
        """Show how the call ended and what it gave back."""
        self.remove_class(f"tool-{self.status}")
        self.status, self.result = status, result
        self.add_class(f"tool-{status}")
        self.title = self._heading()  # type: ignore[assignment]
        self.query_one(".tool-body", Static).update(self._body())

    @property
    def body_text(self) -> str:
        """What the open block shows (for tests)."""
        return self._body()


class ToolTrail(Vertical):
    """The steps before a reply's answer: each step's own text and its tool blocks, in order."""

    def __init__(self, steps: Sequence[StepView] = ()) -> None:
        super().__init__(classes="tool-trail")
        self._steps = list(steps)
        self._blocks: dict[tuple[int, int], ToolBlock] = {}
        self._settled: set[int] = set()

    def compose(self):
        for step in self._steps:
            if step.text.strip():
                yield Static(step.text.strip(), markup=False, classes="step-text")
            yield from (ToolBlock(call) for call in step.calls)

    @property
    def blocks(self) -> list[ToolBlock]:
        return list(self.query(ToolBlock))

    async def settle_step(self, idx: int, text: str) -> None:
        """Step ``idx`` asked for tools: show what it wrote besides the calls (once)."""
        if idx in self._settled:
            return
        self._settled.add(idx)
        if text.strip():
            await self.mount(Static(text.strip(), markup=False, classes="step-text"))

    async def start_call(self, idx: int, call_idx: int, call: CallView) -> ToolBlock:
        block = self._blocks.get((idx, call_idx))
        if block is None:
            block = self._blocks[(idx, call_idx)] = ToolBlock(call)
            await self.mount(block)
        return block

    async def finish_call(self, idx: int, call_idx: int, call: CallView) -> ToolBlock:
        """End a running block, or add a finished one (a denied or unreadable call never ran)."""
        block = self._blocks.get((idx, call_idx))
        if block is None:
            return await self.start_call(idx, call_idx, call)
        block.finish(call.status, call.result)
        return block


# -- earlier chats: the trail from the log -----------------------------------------------


def load_trails(store: Store, turn_ids: Iterable[int]) -> dict[int, list[StepView]]:
    """The tool steps of these turns with their calls, by turn id (turns without tool calls are absent).

    Every step but the last asked for tools; the last is the turn's own answer, shown only for calls
    it made anyway (the step limit was reached: they were answered "not run").
    """
    ids = list(turn_ids)
    if not ids:
        return {}
    rows = trail_rows(store, ids)
    steps: dict[int, dict[int, StepView]] = {}
    for row in rows:
        if row["final"] and row["name"] is None:
            continue
        per_turn = steps.setdefault(row["turn_id"], {})
        text = "" if row["final"] else _step_text(row["reply_content"])
        step = per_turn.setdefault(row["step_id"], StepView(text, ()))
        if row["name"] is not None:
            call = CallView(row["name"], row["arguments"], row["status"], row["result"])
            per_turn[row["step_id"]] = StepView(step.text, (*step.calls, call))
    return {turn_id: list(per_turn.values()) for turn_id, per_turn in steps.items()}


def _step_text(reply_content: str) -> str:
    """What a step wrote besides its ``<tool_call>`` blocks (its thinking is recorded apart)."""
    from clawdesk.tools.format import parse_tool_calls

    return parse_tool_calls(reply_content).content


# -- "What I learned": the tool steps of a judged turn -----------------------------------

_VOTE = {1: "+1", -1: "−1", 0: "0"}


def step_lines(store: Store, turn_id: int) -> list[str]:
    """One line per non-final step of a turn: its calls, and its judge votes or "not judged yet"."""
    rows = step_summaries(store, turn_id)
    lines = []
    for row in rows:
        line = f"step {row['idx'] + 1}: {row['calls'] or 'no call'} · "
        votes = json.loads(row["votes"]) if row["votes"] else None
        if votes is None:
            line += "not judged yet"
        else:
            counted = [v for v in votes if v is not None]
            mean = sum(counted) / len(counted) if counted else 0.0
            line += f"votes {' '.join(_VOTE.get(v, '?') for v in votes)} (mean {mean:+.2f})"
            if row["hint"]:
                line += f" · hint: {' '.join(row['hint'].split())[:60]}"
        if row["reward"] is not None:
            line += f" · trained with reward {row['reward']:+.2f}"
        lines.append(line)
    return lines
