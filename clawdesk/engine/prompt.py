"""Chat prompts: rendering the GGUF's own chat template, and splitting ``<think>`` from answers.

We render the template ourselves (with llama-cpp-python's Jinja2 formatter, which mirrors
transformers' ``apply_chat_template``) because ``create_chat_completion`` does not pass Qwen3's
``enable_thinking`` through. The rendered text is tokenized once and those ids are what is served
and later trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclass(frozen=True)
class Exchange:
    """One earlier user message and the answer shown for it (thinking is not replayed)."""

    user: str
    assistant: str


@dataclass(frozen=True)
class Prompt:
    """A rendered, tokenized prompt ready to be served."""

    text: str
    token_ids: list[int]
    thinking: bool
    dropped_turns: int = 0  # oldest exchanges left out to fit the context window


def build_messages(system: str, history: Sequence[Exchange], user: str) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    if system:
        messages.append({"role": "system", "content": system})
    for ex in history:
        messages.append({"role": "user", "content": ex.user})
        messages.append({"role": "assistant", "content": ex.assistant})
    messages.append({"role": "user", "content": user})
    return messages


class ChatTemplate:
    """The model's chat template, rendered with ``enable_thinking`` passed through."""

    def __init__(self, template: str, *, bos_token: str, eos_token: str):
        self.source = template
        self.supports_thinking = "enable_thinking" in template
        self._formatter = Jinja2ChatFormatter(template=template, bos_token=bos_token, eos_token=eos_token)

    def render(self, messages: list[dict[str, str]], *, thinking: bool) -> str:
        extra = {"enable_thinking": thinking} if self.supports_thinking else {}
        return self._formatter(messages=messages, **extra).prompt


def split_thinking(text: str) -> tuple[str, str]:
    """Split raw model output into (thinking, answer).

    ``<think>…</think>`` at the start is thinking; an unclosed block (cancelled or cut mid-thought)
    is all thinking. Text without a think block is all answer.
    """
    stripped = text.lstrip()
    if not stripped.startswith(THINK_OPEN):
        return "", text.strip()
    body = stripped[len(THINK_OPEN) :]
    thought, closed, answer = body.partition(THINK_CLOSE)
    if not closed:
        return thought.strip(), ""
    return thought.strip(), answer.strip()


def in_thinking(text: str) -> bool:
    """True while streamed output is inside an unclosed leading think block."""
    stripped = text.lstrip()
    if not stripped:
        return False
    if THINK_OPEN.startswith(stripped):
        return True  # "<thi" may become "<think>"
    return stripped.startswith(THINK_OPEN) and THINK_CLOSE not in stripped
