"""One chat turn, end to end: validate the message, build the prompt, serve it, record it.

Shared by ``clawdesk ask`` and the Textual app so a turn is recorded the same way from both.
:meth:`ChatService.run_turn` blocks (call it from a worker thread in the UI) and reports text
through ``on_delta``; the turn is committed to the log when the reply finishes or is cancelled.
The store passed in must belong to the calling thread (see :mod:`clawdesk.store.log`).
"""

from __future__ import annotations

import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from clawdesk.config import ChatConfig
from clawdesk.engine import Delta, Engine, Reply, SamplingParams, history_from_turns
from clawdesk.engine.gate import ChatGate
from clawdesk.errors import InputError
from clawdesk.store import NewTurn, Session, Store


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
class TurnResult:
    turn_id: int
    reply: Reply
    dropped_turns: int


def _wall_iso(monotonic_t: float) -> str:
    """A ``time.monotonic()`` instant as an ISO UTC timestamp."""
    ago = time.monotonic() - monotonic_t
    return (datetime.now(UTC) - timedelta(seconds=ago)).isoformat(timespec="milliseconds")


class ChatService:
    """Runs turns for one engine; the caller supplies a thread-local store."""

    def __init__(self, engine: Engine, chat: ChatConfig, *, gate: ChatGate | None = None):
        self.engine = engine
        self.chat = chat
        # Entered for the whole turn, so background judging pauses from "sent" to "recorded".
        self.gate = gate or ChatGate()

    def new_session(self, store: Store, *, incognito: bool = False, thinking: bool | None = None) -> Session:
        return store.create_session(
            system_prompt=self.chat.system_prompt,
            incognito=incognito,
            thinking=self.chat.thinking if thinking is None else thinking,
        )

    def run_turn(
        self,
        store: Store,
        session_id: int,
        text: str,
        *,
        thinking: bool | None = None,
        cancel: threading.Event | None = None,
        on_delta: Callable[[Delta], None] | None = None,
        temperature: float | None = None,
    ) -> TurnResult:
        text = clean_message(text, self.chat.max_message_chars)
        with self.gate, self.engine.chat_turn():
            return self._serve(store, session_id, text, thinking, cancel, on_delta, temperature)

    def _serve(self, store, session_id, text, thinking, cancel, on_delta, temperature) -> TurnResult:
        session = store.get_session(session_id)
        think = session.thinking if thinking is None else thinking
        history = history_from_turns(store.list_turns(session_id))
        prompt = self.engine.build_prompt(
            session.system_prompt, history, text, thinking=think, reply_room=self.chat.max_reply_tokens
        )
        params = SamplingParams(
            temperature=self.chat.temperature if temperature is None else temperature,
            top_p=self.chat.top_p,
            max_tokens=self.chat.max_reply_tokens,
        )
        with self.gate.computing():
            reply = self.engine.generate(prompt.token_ids, params, cancel=cancel, on_delta=on_delta)
        ident = self.engine.identity
        turn_id = store.add_turn(
            session_id,
            NewTurn(
                user_content=text,
                reply_content=reply.content,
                reply_thinking=reply.thinking,
                status=reply.status,
                thinking=prompt.thinking,
                model_name=ident.name,
                model_path=str(ident.path),
                model_sha256=ident.sha256,
                prompt_ids=reply.prompt_ids,
                reply_ids=reply.reply_ids,
                started_at=_wall_iso(reply.started_at),
                finished_at=_wall_iso(reply.finished_at),
                adapter_version=reply.adapter_version,
                dropped_turns=prompt.dropped_turns,
                latency_ms=reply.latency_ms,
                tokens_per_s=reply.tokens_per_s,
            ),
        )
        return TurnResult(turn_id=turn_id, reply=reply, dropped_turns=prompt.dropped_turns)
