"""The engine's value types: the served model's identity, sampling settings, streamed deltas and finished replies."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ModelIdentity:
    name: str
    path: Path
    sha256: str
    arch: str
    is_demo: bool = False
    note: str = ""


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7
    top_p: float = 0.9
    max_tokens: int = 1024
    top_k: int = 40
    min_p: float = 0.05
    stop: tuple[str, ...] = ()  # the reply ends before the first of these it writes (clawdesk.engine.stops)
    repeat_stop: int = 0  # the reply ends once it repeats itself this many tokens (clawdesk.engine.repeats); 0 = never


@dataclass(frozen=True)
class Delta:
    """A piece of streamed reply text."""

    text: str
    thinking: bool  # True while the model is still inside its <think> block
    n_tokens: int  # reply tokens so far


@dataclass
class Reply:
    """A finished (or cancelled, or length-capped) reply, with the exact served token ids."""

    prompt_ids: list[int]
    reply_ids: list[int]
    raw_text: str
    thinking: str
    content: str
    status: str  # 'finished' (an end token or a stop string) | 'cancelled' | 'length'
    latency_ms: float | None
    tokens_per_s: float | None
    started_at: float
    finished_at: float
    adapter_version: int | None = None
    extra: dict = field(default_factory=dict)
    cut: str = ""  # why a 'length' reply ended: "" (max_tokens or the context's end) or "repeat" (it was looping)
    prompt_evaluated: int = 0  # prompt tokens llama.cpp evaluated for this call (the rest came from the cache)
