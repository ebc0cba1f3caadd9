"""The one thread that owns the engine: requests queue here and are served one at a time.

Each :class:`Job` is a validated request plus how to reach its client (``emit``, called on this
thread with :class:`Started`, :class:`Text`, then :class:`Finished` or :class:`Failed`) and a
``cancel`` event that the HTTP side sets when the client goes away; the engine checks it between
tokens, as it checks the TUI's Esc. Every reply that started is recorded with its exact prompt and
reply ids like a TUI turn (cancelled ones as ``cancelled``), in this thread's own store connection,
and the learning loop is told after each main turn. Serve keeps this generation path of its own
instead of :class:`clawdesk.agent.AgentService` because the API client sends the whole conversation
and runs the tools itself (one model call per request, never a loop), and a reply may be cut at the
client's stop strings; the turn row is built by the same :func:`clawdesk.chat.new_turn`.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from clawdesk.chat import new_turn
from clawdesk.config import Config
from clawdesk.engine import Engine, Reply, SamplingParams
from clawdesk.engine.gate import ChatGate
from clawdesk.engine.prompt import MIN_REPLY_ROOM
from clawdesk.errors import ClawDeskError, NotFoundError
from clawdesk.serve.schema import ApiError, ChatRequest, api_error, tool_call_entries, usage
from clawdesk.serve.sessions import SessionIndex, new_part, user_content
from clawdesk.serve.view import ReplyView
from clawdesk.store import NewTurn, Store
from clawdesk.tools.format import ParsedReply, parse_tool_calls, tool_call_grammar

log = logging.getLogger("clawdesk.serve")


class LearningLoop(Protocol):
    """What the server needs of ``clawdesk.loop``'s loop (``runtime.build_learning_loop``)."""

    def turn_recorded(self) -> None: ...

    def serving(self) -> str: ...


@dataclass(frozen=True)
class Started:
    session_id: int | None  # None: a new session, created with the turn (its id comes in Finished)
    prompt_tokens: int


@dataclass(frozen=True)
class Text:
    reasoning: str
    content: str


@dataclass(frozen=True)
class Finished:
    message: dict[str, Any]
    finish_reason: str
    usage: dict[str, int]
    session_id: int
    turn_id: int
    status: str  # as recorded: finished | length | cancelled


@dataclass(frozen=True)
class Failed:
    error: ApiError


Event = Started | Text | Finished | Failed


@dataclass
class Job:
    request: ChatRequest
    emit: Callable[[Event], None]
    side: bool = False
    session_header: int | None = None
    cancel: threading.Event = field(default_factory=threading.Event)


def serving_label(engine: Engine, loop: LearningLoop | None) -> str:
    """The adapter served now: the loop's label, else ``"v3"`` / ``"base"`` from the engine."""
    if loop is not None:
        return str(loop.serving())
    return "base" if engine.adapter_version is None else f"v{engine.adapter_version}"


def _takes_arguments(req: ChatRequest) -> bool:
    """Whether any tool the reply is forced to call has parameters (else its arguments can only be {})."""
    forced = set(req.forced_tools)
    fns = [t["function"] for t in req.tools if t["function"]["name"] in forced]
    return any((fn.get("parameters") or {}).get("properties") for fn in fns)


class EngineWorker:
    """One generation thread for one engine; :meth:`submit` from any thread."""

    def __init__(self, engine: Engine, config: Config, *, gate: ChatGate, loop: LearningLoop | None = None):
        self.engine = engine
        self.chat = config.chat
        self.db_path = config.db_path
        self.gate = gate
        self.loop = loop
        self.index = SessionIndex()
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="clawdesk-serve-engine", daemon=True)
        self._ready = threading.Event()
        self._closed = False
        self._current: Job | None = None  # the job being served (close() cancels it)
        self._start_error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            raise self._start_error

    def submit(self, job: Job) -> None:
        if self._closed:
            raise ApiError(503, "the server is shutting down", type_="server_error")
        self._jobs.put(job)

    @property
    def queued(self) -> int:
        return self._jobs.qsize()

    def close(self, timeout: float = 30.0) -> None:
        """Stop: the reply being generated ends at its next token and is recorded as cancelled; queued
        jobs are answered 503 (their clients are going away with the server)."""
        self._closed = True
        current = self._current
        if current is not None:
            current.cancel.set()
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.emit(Failed(ApiError(503, "the server is shutting down", type_="server_error")))
        self._jobs.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            store = Store.open(self.db_path)
            self.index.rebuild(store)
        except ClawDeskError as err:
            self._start_error = err
            self._ready.set()
            return
        self._ready.set()
        try:
            while (job := self._jobs.get()) is not None:
                if job.cancel.is_set():
                    continue  # the client left while queued: nothing was served, nothing to record
                self._current = job
                try:
                    self._serve(store, job)
                except ApiError as err:
                    job.emit(Failed(err))
                except ClawDeskError as err:
                    job.emit(Failed(api_error(err)))
                except Exception as err:  # a bug must cost one request, not the server
                    log.exception("serving a request failed")
                    job.emit(Failed(ApiError(500, f"internal error: {err!r}", type_="server_error")))
                finally:
                    self._current = None
        finally:
            store.close()

    def _serve(self, store: Store, job: Job) -> None:
        # The whole turn holds the gate and the engine's chat turn, from rendering on (as the TUI's):
        # a judge working on the same engine stops inside its native call before our first lock.
        with self.gate, self.engine.chat_turn():
            finished = self._turn(store, job)
        job.emit(finished)  # the client first; then the loop may look for a judgeable turn
        if self.loop is not None and not job.side:
            self.loop.turn_recorded()

    def _turn(self, store: Store, job: Job) -> Finished:
        req = job.request
        engine = self.engine
        messages = self._with_system(req.messages)
        tools = req.offered_tools
        if tools and not engine.supports_tools:
            raise ApiError(
                400,
                f"the served model ({engine.identity.name}) cannot call tools: its chat template never reads "
                "`tools`. Serve a Qwen3 model (`clawdesk pull`) or send the request without tools.",
                param="tools",
                code="model_not_supported",
            )
        thinking = self.chat.thinking if req.thinking is None else req.thinking
        text = self._render(messages, thinking, tools)
        prompt_ids = engine.tokenize(text)
        room = engine.n_ctx - len(prompt_ids)
        if room < MIN_REPLY_ROOM:
            raise ApiError(
                400,
                f"the conversation needs {len(prompt_ids)} tokens but the context window holds {engine.n_ctx} "
                f"(with {MIN_REPLY_ROOM} kept for the reply). Send fewer or shorter messages, or raise "
                "model.n_ctx in ClawDesk's config.toml.",
                param="messages",
                code="context_length_exceeded",
            )
        session = self._session(store, job, messages, thinking)
        job.emit(Started(session if isinstance(session, int) else None, len(prompt_ids)))
        started_in_thinking = text.rstrip().endswith("<think>")
        view = ReplyView(tools=bool(tools), stops=req.stop, started_in_thinking=started_in_thinking)

        def on_delta(delta) -> None:
            reasoning, content = view.feed(delta.text)
            if reasoning or content:
                job.emit(Text(reasoning, content))

        params = SamplingParams(
            temperature=self.chat.temperature if req.temperature is None else req.temperature,
            top_p=self.chat.top_p if req.top_p is None else req.top_p,
            max_tokens=min(req.max_tokens or self.chat.max_reply_tokens, room),
            repeat_stop=self.chat.repeat_stop,
        )
        grammar = None
        if req.forced_tools:  # tool_choice "required" or a named function: the reply can only be a call
            grammar = tool_call_grammar(req.forced_tools, no_arguments=not _takes_arguments(req))
        if self.loop is None:
            self._sync_adapter(store)
        with self.gate.computing():
            reply = engine.generate(
                prompt_ids,
                params,
                cancel=job.cancel,
                stop_when=lambda: view.stopped,
                on_delta=on_delta,
                seed=req.seed,
                grammar=grammar,
            )
        reasoning, content = view.finish()
        status = "cancelled" if job.cancel.is_set() else "finished" if view.stopped else reply.status
        calls = self._calls(reply, status, bool(tools), started_in_thinking)
        message, finish_reason, extra = self._message(view, status, calls)
        if reasoning or content or extra:
            job.emit(Text(reasoning, content + extra))
        session_id, turn_id = self._record(store, session, job, messages, reply, view, status, thinking, message, calls)
        return Finished(
            message=message,
            finish_reason=finish_reason,
            usage=usage(len(prompt_ids), len(reply.reply_ids)),
            session_id=session_id,
            turn_id=turn_id,
            status=status,
        )

    def _render(self, messages: list[dict[str, Any]], thinking: bool, tools: list[dict[str, Any]]) -> str:
        import jinja2

        try:
            return self.engine.render(messages, thinking=thinking, tools=tools or None)
        except jinja2.TemplateError as exc:  # a template's raise_exception(), or one that fails on these roles
            raise ApiError(
                400,
                f"the model's chat template cannot render these messages ({exc}). Check the order of the "
                "roles: a system message first, then user / assistant / tool messages.",
                param="messages",
                code="template_error",
            ) from exc

    def _sync_adapter(self, store: Store) -> None:
        """Without a learning loop here, serve the version the TUI or `clawdesk use` chose (between replies)."""
        from clawdesk.reload import AdapterSwitch

        problem = AdapterSwitch(self.engine, store).sync()
        if problem:
            log.warning(problem)

    def _with_system(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The client's messages; ClawDesk's system prompt first when the client sent none (as the TUI has it)."""
        if messages[0]["role"] == "system" or not self.chat.system_prompt:
            return messages
        return [{"role": "system", "content": self.chat.system_prompt}, *messages]

    def _session(self, store: Store, job: Job, messages: list[dict[str, Any]], thinking: bool) -> int | NewSession:
        """The session the turn continues, or the one to create with it (one commit, not two, before the reply)."""
        new = NewSession(messages[0]["content"] if messages[0]["role"] == "system" else "", thinking)
        if job.session_header is not None:
            main = store.get_session(job.session_header)  # NotFoundError: 404
            if not job.side:
                return main.id
            side_id = self.index.side_session(main.id)
            if side_id is not None and self._exists(store, side_id):
                return side_id
            return dataclasses.replace(new, title="side turns", side_of=main.id)
        match = self.index.match(messages, side=job.side)
        if match.session_id is not None and self._exists(store, match.session_id):
            return match.session_id
        return new

    def _exists(self, store: Store, session_id: int) -> bool:
        try:
            store.get_session(session_id)
        except NotFoundError:  # forgotten meanwhile (`clawdesk forget` in another process)
            self.index.forget_session(session_id)
            return False
        return True

    @staticmethod
    def _calls(reply: Reply, status: str, tools: bool, started_in_thinking: bool) -> ParsedReply | None:
        if not tools or status == "cancelled":  # a cut reply's calls were not finished
            return None
        return parse_tool_calls(reply.raw_text, started_in_thinking=started_in_thinking)

    @staticmethod
    def _message(view: ReplyView, status: str, parsed: ParsedReply | None) -> tuple[dict[str, Any], str, str]:
        """(the assistant message, finish_reason, content to send still: malformed call blocks)."""
        calls = parsed.calls if parsed is not None else ()
        # A block the model got wrong cannot be run by the client: it is shown as text.
        extra = "".join("\n" + e.raw for e in parsed.errors) if parsed is not None else ""
        content = view.sent_content + extra
        message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
        if view.sent_reasoning:
            message["reasoning_content"] = view.sent_reasoning
        if calls:
            message["tool_calls"] = tool_call_entries(calls)
        finish = "tool_calls" if calls else "length" if status == "length" else "stop"
        return message, finish, extra

    def _record(self, store, session, job, messages, reply, view, status, thinking, message, parsed) -> tuple[int, int]:
        """Record the turn (and its new session) in one transaction; returns (session id, turn id)."""
        with store.transaction():
            if isinstance(session, NewSession):
                session_id = store.create_session(
                    system_prompt=session.system, thinking=session.thinking, title=session.title
                ).id
            else:
                session_id = session
            turn_id = store.add_turn(session_id, self._new_turn(messages, reply, view, status, job, thinking))
        if isinstance(session, NewSession) and session.side_of is not None:
            self.index.set_side_session(session.side_of, session_id)
        sent = {k: v for k, v in message.items() if k != "tool_calls"}
        if "tool_calls" in message:
            sent["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}} for c in parsed.calls
            ]
        self.index.remember(session_id, store.get_turn(turn_id).seq, [*messages, sent], side=job.side)
        return session_id, turn_id

    def _new_turn(self, messages, reply: Reply, view: ReplyView, status: str, job: Job, thinking: bool) -> NewTurn:
        return new_turn(
            self.engine.identity,
            user_content(new_part(messages)),
            reply,
            status=status,
            thinking=thinking and self.engine.supports_thinking,
            started=reply.started_at,
            finished=reply.finished_at,
            latency_ms=reply.latency_ms,
            # Cut at a stop string: what the client got. Otherwise the answer as the TUI records it
            # (<tool_call> blocks included: the judge reads the calls).
            reply_content=view.sent_content if view.stopped else None,
            learning=not job.side,
        )


@dataclass(frozen=True)
class NewSession:
    """A session to create in the same transaction as its first turn."""

    system: str
    thinking: bool
    title: str = "New chat"
    side_of: int | None = None  # the main session whose side turns it holds (X-Session-Id + side)
