"""The teacher prompt (OPD): a reply's served prompt with the hint appended to the turn's user message.

One builder, :func:`teacher_prompt`, for turns and tool steps. It first re-renders the served
prompt with the original user message, which must give exactly the served token ids (otherwise
the reply keeps its reward but gets no OPD prompt), then renders it with the enhanced message.
How a prompt is re-rendered depends on what the log holds of it (:class:`ServedContext`):

- a turn: its messages (the session's system prompt and the user message, the preference memory
  block it was served with after the one ``memory.placement`` chose, :mod:`clawdesk.store.turn_memory`;
  the earlier turns after the dropped ones) are rendered again with the served model's template
  (:func:`turn_context`); a turn whose stored history no longer gives its served prompt (system
  prompt edited since, tools offered) gets none;
- a tool step: its tools block and earlier calls and results are not stored as messages, so the
  prompt is edited as text (:func:`step_context`): the served ids are decoded, the user message is
  found where step 0's prompt ends it (the template's generation tail follows it there), and the
  enhanced message replaces it. For a template that renders a user message as its plain content
  this is what rendering the enhanced message gives.

``policy`` is always the served engine (its template and tokenizer), even when another GGUF judges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clawdesk.engine import Engine, history_from_turns
from clawdesk.engine.prompt import Exchange, build_messages
from clawdesk.preferences import place_memory
from clawdesk.store import Store
from clawdesk.store.log import Turn
from clawdesk.store.turn_memory import turn_memory_block

_SENTINEL = "\x00clawdesk-user-message\x00"


@dataclass(frozen=True)
class ServedContext:
    """What a teacher prompt is built from: the served prompt and how the log lets it be re-rendered."""

    what: str  # "prompt" (a turn) or "step prompt", for the note
    served_ids: list[int]
    user: str  # the turn's user message, where the hint goes
    model_sha256: str  # the model file that served it
    thinking: bool
    user_suffix: str = ""  # a memory block served after the user message (placement "user"); the hint goes before it
    # A turn: re-rendered from its messages.
    system_prompt: str = ""
    history: tuple[Exchange, ...] = ()
    # A tool step: edited as text; step 0's prompt shows where the user message ends.
    first_prompt_ids: list[int] | None = None


def turn_context(store: Store, turn: Turn) -> ServedContext:
    """A turn's served prompt and the messages that rendered it (its system prompt and memory, the earlier turns)."""
    session = store.get_session(turn.session_id)
    earlier = [t for t in store.list_turns(turn.session_id) if t.seq < turn.seq][turn.dropped_turns :]
    served_ids, _ = store.turn_tokens(turn.id)
    system, served_user = place_memory(session.system_prompt, turn.user_content, turn_memory_block(store, turn.id))
    return ServedContext(
        "prompt", served_ids, turn.user_content, turn.model_sha256, turn.thinking,
        user_suffix=served_user[len(turn.user_content) :], system_prompt=system,
        history=tuple(history_from_turns(earlier)),
    )  # fmt: skip


def step_context(
    turn: Turn, prompt_ids: list[int], first_prompt_ids: list[int], memory_block: str = ""
) -> ServedContext:
    """A tool step's served prompt (``prompt_ids``) in ``turn``, whose step 0 was served ``first_prompt_ids``;
    ``memory_block``: the turn's recorded block (only a user-placed one changes where the message ends)."""
    _, served_user = place_memory("", turn.user_content, memory_block)
    return ServedContext(
        "step prompt", prompt_ids, turn.user_content, turn.model_sha256, turn.thinking,
        user_suffix=served_user[len(turn.user_content) :], first_prompt_ids=first_prompt_ids,
    )  # fmt: skip


def teacher_prompt(policy: Engine, context: ServedContext, enhanced_user: str) -> tuple[list[int] | None, str]:
    """The served prompt with the user message replaced by ``enhanced_user``; else (None, why not)."""
    if context.model_sha256 != policy.identity.sha256:
        return None, "served by another model file; no OPD prompt"
    render = _message_renderer(policy, context) if context.first_prompt_ids is None else _text_renderer(policy, context)
    if isinstance(render, str):
        return None, render
    if render(context.user + context.user_suffix) != context.served_ids:
        return None, f"served {context.what} could not be rebuilt exactly; no OPD prompt"
    return render(enhanced_user + context.user_suffix), ""


def _message_renderer(policy: Engine, context: ServedContext) -> Callable[[str], list[int]]:
    def render(user: str) -> list[int]:
        messages = build_messages(context.system_prompt, context.history, user)
        return policy.tokenize(policy.render(messages, thinking=context.thinking))

    return render


def _text_renderer(policy: Engine, context: ServedContext) -> Callable[[str], list[int]] | str:
    """Renders by editing the decoded served prompt; a string says why it cannot."""
    served, first_ids = context.served_ids, context.first_prompt_ids or []
    text, first = policy.detokenize(served), policy.detokenize(first_ids)
    if policy.tokenize(text) != served:
        return f"served {context.what} could not be rebuilt exactly; no OPD prompt"
    sample = policy.render(build_messages("", [], _SENTINEL), thinking=context.thinking)
    tail = sample[sample.rindex(_SENTINEL) + len(_SENTINEL) :]  # what the template writes after a last user message
    end = len(first) - len(tail)
    user = context.user + context.user_suffix
    if not first.endswith(user + tail) or text[:end] != first[:end]:
        return "the turn's user message was not found in the step prompt; no OPD prompt"
    return lambda replacement: policy.tokenize(text[: end - len(user)] + replacement + text[end:])
