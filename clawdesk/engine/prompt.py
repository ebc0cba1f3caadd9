"""Chat prompts: rendering the GGUF's own chat template, fitting a prompt into the context, and
splitting ``<think>`` from answers.

We render the template ourselves (with llama-cpp-python's Jinja2 formatter, which mirrors
transformers' ``apply_chat_template``) because ``create_chat_completion`` does not pass Qwen3's
``enable_thinking`` through. The rendered text is tokenized once and those ids are what is served
and later trained on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from clawdesk.errors import InputError, ModelError

MIN_REPLY_ROOM = 64  # a prompt must leave at least this many tokens of context for the reply
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclass(frozen=True)
class Exchange:
    """One earlier user message and the answer shown for it (thinking is not replayed)."""

    user: str
    assistant: str


def history_from_turns(turns) -> list[Exchange]:
    """Earlier exchanges to replay: the answers shown (a cancelled partial answer counts too)."""
    return [Exchange(user=t.user_content, assistant=t.reply_content) for t in turns]


@dataclass(frozen=True)
class Prompt:
    """A rendered, tokenized prompt ready to be served."""

    text: str
    token_ids: list[int]
    thinking: bool
    dropped_turns: int = 0  # oldest exchanges left out to fit the context window


def build_messages(
    system: str, history: Sequence[Exchange], user: str, steps: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """The chat so far; ``steps`` are this user message's agent-loop messages (assistant tool calls
    and role ``"tool"`` results, see :mod:`clawdesk.tools.format`), after the user message."""
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    for ex in history:
        messages.append({"role": "user", "content": ex.user})
        messages.append({"role": "assistant", "content": ex.assistant})
    messages.append({"role": "user", "content": user})
    messages.extend(steps)
    return messages


def fit_prompt(
    render: Callable[[list[Exchange]], tuple[str, list[int]]],
    history: Sequence[Exchange],
    n_ctx: int,
    reply_room: int,
    *,
    thinking: bool,
) -> Prompt:
    """Render (``render(exchanges) -> (text, ids)``), dropping the oldest exchanges until the prompt fits.

    ``reply_room`` tokens are kept free for the reply (at least :data:`MIN_REPLY_ROOM`, at most a
    quarter of ``n_ctx``); ``thinking`` is what the prompt records (the template's support included).
    """
    budget = n_ctx - max(MIN_REPLY_ROOM, min(reply_room, n_ctx // 4))
    history = list(history)
    dropped = 0
    while True:
        text, ids = render(history)
        if len(ids) <= budget:
            return Prompt(text=text, token_ids=ids, thinking=thinking, dropped_turns=dropped)
        if not history:
            raise InputError(
                f"this message is too long for the model: the prompt needs {len(ids)} tokens but the "
                f"context window holds {n_ctx} (with room kept for the reply). Shorten the message, "
                "or raise model.n_ctx in config.toml."
            )
        # Drop in halves when far over budget, one exchange at a time when close.
        over = len(ids) - budget
        step = 1 if over < len(ids) // 4 else max(1, len(history) // 2)
        history = history[step:]
        dropped += step


class ChatTemplate:
    """The model's chat template, rendered with ``enable_thinking`` and ``tools`` passed through."""

    def __init__(self, template: str, *, bos_token: str, eos_token: str):
        self.source = template
        self.supports_thinking = "enable_thinking" in template
        self._formatter = Jinja2ChatFormatter(template=template, bos_token=bos_token, eos_token=eos_token)
        # Whether the template reads the ``tools`` variable at all (Qwen3's does; SmolLM2's does not,
        # and would silently drop them): asked of the parsed template, so a comment or a message
        # text mentioning "tools" does not count.
        self.supports_tools = "tools" in _template_variables(template)

    def render(
        self, messages: list[dict[str, Any]], *, thinking: bool, tools: Sequence[dict[str, Any]] | None = None
    ) -> str:
        """Render ``messages``; ``tools`` (``ToolSpec.schema()`` dicts) go into the template's own tools block."""
        extra: dict[str, Any] = {"enable_thinking": thinking} if self.supports_thinking else {}
        if tools:
            if not self.supports_tools:
                raise ModelError(
                    "this model's chat template cannot render tools (it never reads `tools`), so it cannot "
                    "call them. Tools need a model whose template does, e.g. Qwen3-4B (`clawdesk pull`), "
                    "or set tools.enabled = false in config.toml."
                )
            extra["tools"] = list(tools)
        return self._formatter(messages=messages, **extra).prompt


def gguf_chat_template(model: Any, meta: dict[str, Any], source: object) -> tuple[ChatTemplate, bool]:
    """A loaded GGUF's chat template (with its BOS/EOS texts) and whether its tokenizer adds BOS.

    ``model`` is a llama-cpp-python ``Llama`` or a vocab-only ``_internals.LlamaModel`` (the trainer
    has no engine); both have ``token_bos``/``token_eos``/``detokenize``. ``meta`` is its GGUF
    metadata, ``source`` names the file in the error a GGUF without a template gets.
    """
    template = meta.get("tokenizer.chat_template")
    if not template:
        raise ModelError(f"{source} has no chat template (tokenizer.chat_template); use a chat/instruct GGUF.")
    bos, eos = _token_text(model, model.token_bos()), _token_text(model, model.token_eos())
    add_bos = str(meta.get("tokenizer.ggml.add_bos_token", "false")).lower() == "true"
    return ChatTemplate(template, bos_token=bos, eos_token=eos), add_bos


def _token_text(model: Any, token: int) -> str:
    if token < 0:
        return ""
    return model.detokenize([token], special=True).decode("utf-8", errors="replace")


def _template_variables(template: str) -> set[str]:
    import jinja2
    import jinja2.ext
    from jinja2 import meta

    env = jinja2.Environment(extensions=[Jinja2ChatFormatter.IgnoreGenerationTags, jinja2.ext.loopcontrols])
    return set(meta.find_undeclared_variables(env.parse(template)))


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
