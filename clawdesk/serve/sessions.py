"""Which recorded session a request continues.

An OpenAI client sends the whole conversation every time. A request *continues* a session when its
messages, up to its last assistant message, are exactly what that session recorded up to its latest
reply (the system prompt, each user message, each reply as it was sent back): what follows is the
next state of that reply, and it is recorded as the session's next turn, so the judge reads it as
it reads the TUI's next user message. ``X-Session-Id`` names the session outright.

A request that repeats an earlier point of a session (a "regenerate", an edited message) starts a
new session: a branch must not become the next state of a reply it did not follow. Side turns
(``X-Turn-Type: side``: heartbeats, memory or title calls) live in sessions of their own, so they are
never a main reply's next state.

The index maps a digest of the conversation through a reply to its session. It is rebuilt at start
from the newest sessions in the log (their system prompt, user messages and replies), and kept up
to date as turns are recorded, by the worker thread only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clawdesk.store import Store
from clawdesk.tools.format import parse_tool_calls

REBUILD_SESSIONS = 200  # sessions read at start; older ones are continued with X-Session-Id


def canonical(message: dict[str, Any]) -> list[Any]:
    """A message as compared between requests: role, stripped text, and calls (name, arguments)."""
    calls = [
        [c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True, ensure_ascii=False)]
        for c in message.get("tool_calls", ())
    ]
    return [message["role"], (message.get("content") or "").strip(), calls]


def prefix_digests(messages: Sequence[dict[str, Any]]) -> list[str]:
    """``out[k]`` is the digest of ``messages[:k + 1]``."""
    h = hashlib.sha256()
    out = []
    for m in messages:
        h.update(json.dumps(canonical(m), ensure_ascii=False).encode("utf-8") + b"\n")
        out.append(h.copy().hexdigest())
    return out


def recorded_message(reply_content: str, *, tools: bool) -> dict[str, Any]:
    """The assistant message a client sends back for a recorded reply (calls parsed out of the text)."""
    if not tools:
        return {"role": "assistant", "content": reply_content}
    parsed = parse_tool_calls(reply_content)
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.calls:
        message["tool_calls"] = [
            {"type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}} for c in parsed.calls
        ]
    return message


def new_part(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages after the last assistant message: this request's new state."""
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    return list(messages[last + 1 :])


def user_content(new: Sequence[dict[str, Any]]) -> str:
    """The recorded 'user' text of a turn: the user's message, or the tool results (and message) that came back."""
    texts = [m for m in new if m["role"] != "system"]
    if len(texts) == 1 and texts[0]["role"] == "user":
        return texts[0]["content"]
    return "\n\n".join(m["content"] if m["role"] == "user" else f"[tool result]\n{m['content']}" for m in texts)


@dataclass(frozen=True)
class Match:
    session_id: int | None  # None: start a new session
    how: str  # "header" | "continued" | "new"


class SessionIndex:
    """Digest of (side?, conversation through a reply) → (session id, turn seq); owned by one thread."""

    def __init__(self) -> None:
        self._points: dict[str, tuple[int, int]] = {}
        self._last_seq: dict[int, int] = {}
        self._side_of: dict[int, int] = {}  # main session id → its side session (X-Session-Id + side)

    def rebuild(self, store: Store, limit: int = REBUILD_SESSIONS) -> int:
        """Index the newest ``limit`` sessions; returns how many turns were indexed."""
        n = 0
        for session in store.recent_sessions(limit):
            messages: list[dict[str, Any]] = []
            if session.system_prompt:
                messages.append({"role": "system", "content": session.system_prompt})
            for turn in store.list_turns(session.id):
                messages.append({"role": "user", "content": turn.user_content})
                messages.append(recorded_message(turn.reply_content, tools="<tool_call>" in turn.reply_content))
                self.remember(session.id, turn.seq, messages, side=False)
                n += 1
        return n

    def remember(self, session_id: int, seq: int, conversation: Sequence[dict[str, Any]], *, side: bool) -> None:
        """``conversation`` ends with the reply of turn ``seq`` of the session."""
        self._points[self._key(prefix_digests(conversation)[-1], side)] = (session_id, seq)
        self._last_seq[session_id] = max(seq, self._last_seq.get(session_id, 0))

    def match(self, messages: Sequence[dict[str, Any]], *, side: bool) -> Match:
        last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
        if last < 0:
            return Match(None, "new")
        point = self._points.get(self._key(prefix_digests(messages[: last + 1])[-1], side))
        if point is None:
            return Match(None, "new")
        session_id, seq = point
        if self._last_seq.get(session_id, seq) != seq:
            return Match(None, "new")  # an earlier point of the session: a branch
        return Match(session_id, "continued")

    def side_session(self, main_id: int) -> int | None:
        return self._side_of.get(main_id)

    def set_side_session(self, main_id: int, side_id: int) -> None:
        self._side_of[main_id] = side_id

    def forget_session(self, session_id: int) -> None:
        """A session that no longer exists (deleted by ``forget`` from another process)."""
        self._last_seq.pop(session_id, None)
        self._points = {k: v for k, v in self._points.items() if v[0] != session_id}

    @staticmethod
    def _key(digest: str, side: bool) -> str:
        return ("side:" if side else "main:") + digest
