"""The conversation model's data: a checked user message, a turn's steps and result, and its turn row.

A turn is a user message answered in one or more *steps* (model calls); a plain chat turn is a
one-step turn. :class:`TurnResult` is the one result type of :mod:`clawdesk.agent`'s turn runner,
and :func:`new_turn` the one place a ``NewTurn`` row is built (the runner and ``clawdesk serve``
record through it).
"""

from __future__ import annotations

import time
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from clawdesk.engine import ModelIdentity, Prompt, Reply
from clawdesk.errors import InputError
from clawdesk.store import NewTurn
from clawdesk.tools.format import CallError
from clawdesk.tools.types import ToolCall, ToolResult


def clean_message(text: str, max_chars: int) -> str:
    """Reject empty, oversized or non-text input; strip NULs and control characters (tabs/newlines stay)."""
    if "\x00" in text or any(unicodedata.category(c) == "Cc" and c not in "\t\n\r" for c in text):
        text = "".join(c for c in text if c in "\t\n\r" or unicodedata.category(c) != "Cc")
    if not text.strip():
        raise InputError("the message is empty; type something to send.")
    # A lone surrogate (from undecodable bytes in argv or a broken paste) cannot be encoded for the
    # tokenizer or SQLite; refuse it here rather than fail with a UnicodeEncodeError further down.
    bad = next((i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff"), None)
    if bad is not None:
        raise InputError(
            f"the message is not valid text: character {bad + 1} is U+{ord(text[bad]):04X}, half of a broken "
            "character pair (often bytes that are not UTF-8). Remove it or re-encode the text as UTF-8."
        )
    if len(text) > max_chars:
        raise InputError(
            f"the message is {len(text):,} characters; the limit is {max_chars:,} "
            "(chat.max_message_chars in config.toml). Shorten it or send it in parts."
        )
    return text


@dataclass(frozen=True)
class StepOutcome:
    """One model call of a turn: the reply served, the calls it made (in order) and what each gave back."""

    reply: Reply
    prompt: Prompt
    items: tuple[ToolCall | CallError, ...] = ()
    results: tuple[ToolResult, ...] = ()


@dataclass(frozen=True)
class TurnResult:
    """A recorded turn: its steps (a plain chat turn is one step) and why the loop stopped.

    ``reply`` is the final step's. ``step_ids`` are the ``steps`` rows (one for a turn served
    without tools: its step 0, the answer). ``stopped``: "" (the model answered),
    "cancelled" (between steps or in a tool), "max_steps", or "context" (the results did not fit the
    context window for another step; the turn is recorded as "length").
    """

    turn_id: int
    reply: Reply
    dropped_turns: int
    steps: tuple[StepOutcome, ...] = ()
    step_ids: tuple[int, ...] = ()
    stopped: str = ""

    @property
    def status(self) -> str:
        """The turn's status as recorded: ``finished``, ``cancelled`` or ``length``."""
        return turn_status(self.stopped, self.reply.status)


def turn_status(stopped: str, reply_status: str) -> str:
    """The recorded status of a turn whose loop ended with ``stopped`` on a final reply of ``reply_status``."""
    return {"cancelled": "cancelled", "context": "length"}.get(stopped, reply_status)


def wall_iso(monotonic_t: float) -> str:
    """A ``time.monotonic()`` instant as an ISO UTC timestamp."""
    ago = time.monotonic() - monotonic_t
    return (datetime.now(UTC) - timedelta(seconds=ago)).isoformat(timespec="milliseconds")


def new_turn(
    identity: ModelIdentity,
    user_content: str,
    reply: Reply,
    *,
    status: str,
    thinking: bool,
    started: float,
    finished: float,
    latency_ms: float | None,
    dropped_turns: int = 0,
    reply_content: str | None = None,
    learning: bool = True,
) -> NewTurn:
    """The one place a turn row is built (the turn runner and ``clawdesk serve`` both record through it).

    ``reply`` is the final step's; ``started``/``finished`` are ``time.monotonic()`` instants;
    ``reply_content`` overrides the reply's text (serve records what the client got when a stop
    string cut it).
    """
    return NewTurn(
        user_content=user_content,
        reply_content=reply.content if reply_content is None else reply_content,
        reply_thinking=reply.thinking,
        status=status,
        thinking=thinking,
        model_name=identity.name,
        model_path=str(identity.path),
        model_sha256=identity.sha256,
        prompt_ids=reply.prompt_ids,
        reply_ids=reply.reply_ids,
        started_at=wall_iso(started),
        finished_at=wall_iso(finished),
        adapter_version=reply.adapter_version,
        dropped_turns=dropped_turns,
        latency_ms=latency_ms,
        tokens_per_s=reply.tokens_per_s,
        learning=learning,
    )
