"""The chat engine as the turn runner and the UI use it: one ``typing.Protocol`` (:class:`ChatEngine`).

:class:`clawdesk.engine.Engine` (llama.cpp) satisfies it, and so does the scripted engine the UI tests
use (``tests/support/scripted_engine.py``); ``tests/engine/test_engine_protocol.py`` fails when either one's
signature drifts from this one, so a test double cannot quietly accept calls the real engine refuses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from clawdesk.engine.llama import PROMPT_CHUNK
from clawdesk.engine.prompt import Exchange, Prompt
from clawdesk.engine.reply import Delta, ModelIdentity, Reply, SamplingParams

__all__ = ["ChatEngine"]


@runtime_checkable
class ChatEngine(Protocol):
    """What a turn needs from an engine: identity, prompt building, streaming generation, the turn hold."""

    identity: ModelIdentity

    @property
    def n_ctx(self) -> int: ...

    @property
    def supports_thinking(self) -> bool: ...

    @property
    def supports_tools(self) -> bool: ...

    def tokenize(self, text: str) -> list[int]: ...

    def build_prompt(
        self,
        system: str,
        history: Sequence[Exchange],
        user: str,
        *,
        thinking: bool,
        reply_room: int,
        tools: Sequence[dict[str, Any]] | None = None,
        steps: Sequence[dict[str, Any]] = (),
    ) -> Prompt: ...

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        cancel: threading.Event | None = None,
        stop_when: Callable[[], bool] | None = None,
        on_delta: Callable[[Delta], None] | None = None,
        use_adapter: bool = True,
        resume_ids: Sequence[int] = (),
        seed: int | None = None,
        prompt_chunk: int = PROMPT_CHUNK,
        grammar: str | None = None,
        side: bool | None = None,
    ) -> Reply: ...

    def chat_turn(self) -> AbstractContextManager[None]: ...

    def close(self) -> None: ...
