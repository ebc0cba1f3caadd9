"""The one turn runner: one user message → up to ``tools.max_steps`` model calls (*steps*).

``clawdesk ask``, the TUI, ``clawdesk eval`` and the benches run every turn through
:meth:`AgentService.run_turn`; a plain chat turn (no tools offered) is the loop's one-step case, and
every turn is recorded through :func:`clawdesk.chat.new_turn`. Each model call is a *step*
(recorded in ``steps`` with its exact prompt and reply ids); tool calls parsed from a step's reply
run through the tools registry (workspace, consent, caps) and their results become the next step's
``tool`` messages. The UI receives :data:`AgentEvent` values through
``on_event`` and answers consent questions through ``consent``; it never runs a tool itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from clawdesk.chat import StepOutcome, TurnResult, clean_message, new_turn, turn_status, wall_iso
from clawdesk.config import ChatConfig, MemoryConfig, ToolsConfig
from clawdesk.engine import Delta, SamplingParams, history_from_turns
from clawdesk.engine.gate import ChatGate
from clawdesk.engine.protocol import ChatEngine
from clawdesk.errors import InputError
from clawdesk.preferences import ECHO_STOPS, effective_placement, memory_block, place_memory
from clawdesk.store import Session, Store
from clawdesk.store.prefs import active_preferences
from clawdesk.store.steps import NewStep, NewToolCall, add_agent_turn, list_steps
from clawdesk.store.turn_memory import record_turn_memory
from clawdesk.tools.consent import Consent, Decision
from clawdesk.tools.format import CallError, parse_tool_calls, tool_messages
from clawdesk.tools.registry import Registry, check_arguments
from clawdesk.tools.types import ToolCall, ToolResult, ToolSpec


@dataclass(frozen=True)
class StepStarted:
    """Model call number ``idx`` (0-based) of the turn begins."""

    idx: int


@dataclass(frozen=True)
class StepText:
    """Streamed reply text of the current step (as ``run_turn``'s ``on_delta``)."""

    idx: int
    delta: Delta


@dataclass(frozen=True)
class ToolStarted:
    """A tool call is about to run (after consent was given)."""

    idx: int
    call_idx: int
    call: ToolCall


@dataclass(frozen=True)
class ToolFinished:
    """A tool call ended (or was denied / failed to parse); ``result`` is what the model will read."""

    idx: int
    call_idx: int
    call: ToolCall
    result: ToolResult


AgentEvent = StepStarted | StepText | ToolStarted | ToolFinished


# -- the loop -------------------------------------------------------------------------------

# Appended to the last tool result before the last model call a turn may make (tools.max_steps):
# the model reads why it must answer now, in the same prompt layout as every other step (a final
# call rendered without tools would change the system block, lose the KV cache prefix and give
# the learner a step whose prompt no other step shares).
LAST_STEP_NOTE = (
    "\n\n[ClawDesk: this was the last tool call allowed for this message (tools.max_steps = {n} model calls). "
    "Answer the user now with what you have; further tool calls will not be run.]"
)


class AgentService:
    """Runs a user message through up to ``tools.max_steps`` model calls, running the tools it asks for.

    With no registry, tools turned off, no tool offered, or a model whose template cannot render
    tools (the demo model), a turn is one step whose reply is never parsed for calls, recorded as
    the turn row alone (no ``steps`` rows). Otherwise every model call is a step; the turn row and
    ``turn_tokens`` hold the final step's answer and ids, and the steps and their tool calls are
    recorded with the turn in one transaction when the loop ends (finished, cut at length,
    cancelled or at the step limit). The store passed to :meth:`run_turn` must belong to the calling
    thread (see :mod:`clawdesk.store.log`); the call blocks (the UI runs it in a worker thread).
    """

    def __init__(
        self,
        engine: ChatEngine,
        chat: ChatConfig,
        tools: ToolsConfig | None = None,
        registry: Registry | None = None,
        *,
        gate: ChatGate | None = None,
        memory: MemoryConfig | None = None,
    ):
        """``memory``: render the preference memory into every turn's system prompt (None or disabled: never)."""
        self.engine = engine
        self.memory = memory
        self.chat = chat
        self.tools = tools
        self.registry = registry
        # Entered for the whole turn, so background judging pauses from "sent" to "recorded".
        self.gate = gate or ChatGate()

    def new_session(self, store: Store, *, incognito: bool = False, thinking: bool | None = None) -> Session:
        return store.create_session(
            system_prompt=self.chat.system_prompt,
            incognito=incognito,
            thinking=self.chat.thinking if thinking is None else thinking,
        )

    @property
    def tools_active(self) -> bool:
        """Whether turns go through the loop (the model is offered tools)."""
        return (
            self.registry is not None and self.tools is not None and self.tools.enabled and self.engine.supports_tools
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
        on_event: Callable[[AgentEvent], None] | None = None,
        consent: Consent | None = None,
    ) -> TurnResult:
        specs = self.registry.specs() if self.tools_active and self.registry is not None else []
        text = clean_message(text, self.chat.max_message_chars)
        run = _Run(self, store, session_id, text, specs, thinking, cancel, on_delta, on_event, temperature)
        # Headless with no consent given: calls whose policy is `ask` are denied (and recorded).
        run.consent = consent or Consent()
        with self.gate, self.engine.chat_turn():
            return run.serve()


class _Run:
    """One turn through the loop (a separate object so the per-turn state is not kept on the service)."""

    def __init__(self, service, store, session_id, text, specs, thinking, cancel, on_delta, on_event, temperature):
        self.service = service
        self.engine: ChatEngine = service.engine
        self.registry = service.registry  # set whenever a tool is offered (the only time it is used)
        # No tool offered: one step, its reply never parsed for calls (the plain chat turn).
        self.max_steps: int = service.tools.max_steps if specs else 1
        self.store: Store = store
        self.session = store.get_session(session_id)
        self.text = text
        self.schemas = [spec.schema() for spec in specs] or None
        self.thinking = self.session.thinking if thinking is None else thinking
        self.cancel: threading.Event = cancel or threading.Event()
        self.consent = Consent()
        self.on_delta = on_delta
        self.on_event = on_event
        self.memory_block, self.memory_ids = "", []  # the preference items rendered into this turn's prompt
        self.history: list = []
        self.step_messages: list[list[dict]] = []  # each served step's messages after the user's
        chat = service.chat
        self.params = SamplingParams(
            temperature=chat.temperature if temperature is None else temperature,
            top_p=chat.top_p,
            max_tokens=chat.max_reply_tokens,
            stop=ECHO_STOPS,
            repeat_stop=chat.repeat_stop,
        )

    def emit(self, event: AgentEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def serve(self) -> TurnResult:
        started = time.monotonic()
        history = self.history = history_from_turns(self.store.list_turns(self.session.id))
        system, user = self._served_texts()
        messages: list[dict] = []  # this message's assistant tool calls and tool results, for the next step
        outcomes: list[StepOutcome] = []
        stopped = ""
        for idx in range(self.max_steps):
            if idx and self.cancel.is_set():  # Esc between steps: no further model call
                stopped = "cancelled"
                break
            try:
                prompt = self.engine.build_prompt(
                    system,
                    history,
                    user,
                    thinking=self.thinking,
                    reply_room=self.service.chat.max_reply_tokens,
                    tools=self.schemas,
                    steps=messages,
                )
            except InputError:
                if not outcomes:
                    raise  # the message alone does not fit: nothing ran, nothing to record
                # The results so far no longer fit the context (steps are never dropped): end the
                # turn on the last step served, so what ran is recorded instead of lost.
                stopped = "context"
                break
            self.step_messages.append(list(messages))
            self.emit(StepStarted(idx))
            with self.service.gate.computing():
                on_delta = self._text(idx)
                reply = self.engine.generate(prompt.token_ids, self.params, cancel=self.cancel, on_delta=on_delta)
            if reply.status == "cancelled" or self.schemas is None:  # a cut reply's calls are not run
                outcomes.append(StepOutcome(reply, prompt))
                break
            # A template whose prompt already opens <think> (Qwen3-2507) starts the reply mid-thought.
            parsed = parse_tool_calls(reply.raw_text, started_in_thinking=prompt.text.rstrip().endswith("<think>"))
            if not parsed.has_calls:
                outcomes.append(StepOutcome(reply, prompt))
                break
            last = idx == self.max_steps - 1
            note = LAST_STEP_NOTE.format(n=self.max_steps) if idx == self.max_steps - 2 else ""
            results = self._answer(idx, parsed.items, run=not last, note=note)
            outcomes.append(StepOutcome(reply, prompt, parsed.items, tuple(results)))
            if last:
                stopped = "max_steps"
                break
            # Thinking is kept for steps after the user's message, as Qwen3's template wants: the
            # next prompt then holds this step's reply byte for byte (and its KV cache prefix).
            messages += [parsed.message(keep_thinking=True), *tool_messages(results)]
        if self.cancel.is_set() and outcomes[-1].items:
            stopped = "cancelled"  # stopped after (or while) its tools ran
        return self._record(outcomes, stopped, started)

    def _served_texts(self) -> tuple[str, str]:
        """The chat's system prompt and this turn's user message, with the user's stated preferences
        (the memory) after one of them (``memory.placement``) when on.

        Read once per turn, so every step of the turn has the same system block (and KV cache prefix).
        Only this turn's message carries a user-placed block: earlier ones are rendered as stored.
        """
        memory = self.service.memory
        if memory is None or not memory.enabled:
            return self.session.system_prompt, self.text
        placement = effective_placement(memory.placement, self.engine.identity.is_demo)
        block, shown = memory_block(active_preferences(self.store), self._count, memory.budget_tokens, placement)
        self.memory_block, self.memory_ids = block, [p.id for p in shown]
        return place_memory(self.session.system_prompt, self.text, block)

    def _student_prompts(self, outcomes: list[StepOutcome]) -> list[list[int] | None]:
        """Each served step's prompt without the memory block: what training's student sees (docs/learning.md).

        Rendered after the reply, so it costs the chat no time to first token; the same history the
        step was served with (after its dropped exchanges), the same tools and tool results.
        """
        out: list[list[int] | None] = []
        for outcome, steps in zip(outcomes, self.step_messages, strict=False):
            try:
                prompt = self.engine.build_prompt(
                    self.session.system_prompt, self.history[outcome.prompt.dropped_turns :], self.text,
                    thinking=self.thinking, reply_room=self.service.chat.max_reply_tokens, tools=self.schemas,
                    steps=steps,
                )  # fmt: skip
            except InputError:  # cannot happen with a shorter system prompt; then the served prompt is learned
                out.append(None)
                continue
            out.append(list(prompt.token_ids) if prompt.dropped_turns == 0 else None)
        return out

    def _count(self, text: str) -> int:
        return len(self.engine.tokenize(text))

    def _text(self, idx: int) -> Callable[[Delta], None] | None:
        if self.on_event is None:  # `clawdesk ask` without tools: nothing added per token
            return self.on_delta

        def on_delta(delta: Delta) -> None:
            if self.on_delta is not None:
                self.on_delta(delta)
            self.emit(StepText(idx, delta))

        return on_delta

    def _answer(self, idx: int, items: tuple[ToolCall | CallError, ...], *, run: bool, note: str) -> list[ToolResult]:
        """A result for every block, in order: run (consent, caps, cancel), or an error the model can read."""
        results = []
        for call_idx, item in enumerate(items):
            if isinstance(item, CallError):
                call, result = ToolCall(item.name or "?", {}, raw=item.raw), item.result()
            else:
                call = item
                result = self._run_one(idx, call_idx, call, run)
            if note and call_idx == len(items) - 1:
                result = replace(result, content=result.content + note)
            self.emit(ToolFinished(idx, call_idx, call, result))
            results.append(result)
        return results

    def _run_one(self, idx: int, call_idx: int, call: ToolCall, run: bool) -> ToolResult:
        if not run:
            return ToolResult(
                call.name,
                "error",
                f"not run: this message already used its {self.max_steps} model calls (tools.max_steps).",
            )
        if self.cancel.is_set():
            return ToolResult(call.name, "error", "not run: the user stopped the reply before this call.")
        if call.name == "remember" and self.session.incognito:
            # Notes outlive the chat (they are recalled in every chat): an incognito chat leaves none.
            return ToolResult(
                call.name,
                "denied",
                "This is an incognito chat, so nothing from it is remembered: the note was not saved. "
                "Tell the user to ask again in a normal chat if they want it kept.",
            )
        announced = False

        def announce() -> None:
            nonlocal announced
            if not announced:
                announced = True
                self.emit(ToolStarted(idx, call_idx, call))

        spec = self.registry.spec(call.name)
        if spec is not None and self.registry.policy(spec) == "auto" and not check_arguments(spec, call.arguments)[1]:
            announce()  # no consent to wait for: it runs now
        return self.registry.run(call, _Announcing(self.consent, announce), self.cancel)

    def _record(self, outcomes: list[StepOutcome], stopped: str, started: float) -> TurnResult:
        final = outcomes[-1]
        reply = final.reply
        turn = new_turn(
            self.engine.identity,
            self.text,
            reply,
            status=turn_status(stopped, reply.status),
            thinking=final.prompt.thinking,
            started=started,
            finished=time.monotonic(),
            latency_ms=outcomes[0].reply.latency_ms,  # what the user waited for the first text
            dropped_turns=final.prompt.dropped_turns,
        )
        if self.schemas is None:  # a plain turn: the store writes its one step (step 0) with the turn row
            turn_id = self.store.add_turn(self.session.id, turn)
            step_ids = [s.id for s in list_steps(self.store, turn_id)]
        else:
            steps = [
                NewStep(
                    prompt_ids=o.reply.prompt_ids,
                    reply_ids=o.reply.reply_ids,
                    reply_content=o.reply.content,
                    reply_thinking=o.reply.thinking,
                    status=o.reply.status,
                    started_at=wall_iso(o.reply.started_at),
                    finished_at=wall_iso(o.reply.finished_at),
                    adapter_version=o.reply.adapter_version,
                    calls=tuple(_recorded(item, result) for item, result in zip(o.items, o.results, strict=True)),
                )
                for o in outcomes
            ]
            turn_id, step_ids = add_agent_turn(self.store, self.session.id, turn, steps)
        if self.memory_block:
            record_turn_memory(self.store, turn_id, self.memory_block, self.memory_ids, self._student_prompts(outcomes))
        return TurnResult(
            turn_id=turn_id,
            reply=reply,
            dropped_turns=final.prompt.dropped_turns,
            steps=tuple(outcomes),
            step_ids=tuple(step_ids),
            stopped=stopped,
        )


class _Announcing:
    """The chat's consent, telling the UI a call starts once it was allowed (the registry asks it)."""

    def __init__(self, consent: Consent, announce: Callable[[], None]):
        self.consent = consent
        self.announce = announce

    def decide(self, call: ToolCall, spec: ToolSpec) -> Decision:
        decision = self.consent.decide(call, spec)
        if decision.allowed:
            self.announce()
        return decision


def _recorded(item: ToolCall | CallError, result: ToolResult) -> NewToolCall:
    if isinstance(item, CallError):
        return NewToolCall(item.name or "?", {}, item.raw, result.content, result.status, result.duration_s)
    return NewToolCall(item.name, dict(item.arguments), item.raw, result.content, result.status, result.duration_s)
