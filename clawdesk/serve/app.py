"""The HTTP side: Starlette routes for ``/v1/chat/completions`` and ``/v1/models``, and the event stream.

Handlers run on uvicorn's event loop and never touch the engine or the store: a request is validated
(:mod:`~clawdesk.serve.schema`), handed to the :class:`~clawdesk.serve.worker.EngineWorker` as a job,
and its events come back through an ``asyncio.Queue``. A client that goes away (disconnects while
streaming, or while waiting for a whole reply) sets the job's ``cancel``: the engine stops at its next
token and the turn is recorded as ``cancelled``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from clawdesk.serve.schema import ApiError, Head, bad, completion_id, parse_request
from clawdesk.serve.security import Guard
from clawdesk.serve.worker import EngineWorker, Failed, Finished, Job, LearningLoop, Started, Text, serving_label

MAX_BODY_BYTES = 32 << 20
GRACEFUL_S = 3  # seconds open streams get at shutdown


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status)


class Api:
    """The routes, bound to one worker (one engine) and the learning loop, if any."""

    def __init__(self, worker: EngineWorker, loop: LearningLoop | None = None):
        self.worker = worker
        self.loop = loop
        self.created = int(time.time())

    @property
    def model_name(self) -> str:
        return self.worker.engine.identity.name

    def head(self) -> Head:
        return Head(completion_id(), self.model_name, serving_label(self.worker.engine, self.loop))

    def model_object(self) -> dict[str, Any]:
        ident = self.worker.engine.identity
        return {
            "id": ident.name,
            "object": "model",
            "created": self.created,
            "owned_by": "clawdesk",
            "clawdesk": {
                "adapter": serving_label(self.worker.engine, self.loop),  # e.g. "v3": the version served now
                "base_sha256": ident.sha256,
                "learning_loop": self.loop is not None,
                "tools": self.worker.engine.supports_tools,
                "queued": self.worker.queued,
            },
        }

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self.model_object()]})

    async def model(self, request: Request) -> Response:
        if request.path_params["model_id"] != self.model_name:
            raise ApiError(404, f"no model {request.path_params['model_id']!r}; this server serves {self.model_name!r}",
                           type_="not_found_error", code="model_not_found")  # fmt: skip
        return JSONResponse(self.model_object())

    async def chat_completions(self, request: Request) -> Response:
        req = parse_request(await _json_body(request))
        job = Job(req, emit=_emitter(events := asyncio.Queue()), side=_side(request), session_header=_session(request))
        self.worker.submit(job)
        try:
            first = await events.get()  # Started, or Failed before anything was served
        except asyncio.CancelledError:
            job.cancel.set()
            raise
        if isinstance(first, Failed):
            return error_response(first.error)
        # A new conversation's session is created with its first turn (one commit, after the reply).
        headers = {} if first.session_id is None else {"X-Session-Id": str(first.session_id)}
        head = self.head()
        if req.stream:
            return EventStream(_sse(events, head, req.include_usage), headers=headers, on_close=job.cancel.set)
        done = await _until_finished(events, request, job)
        if isinstance(done, Failed):
            return error_response(done.error)
        headers.update({"X-Session-Id": str(done.session_id), "X-Turn-Id": str(done.turn_id)})
        body = head.completion(done.message, done.finish_reason, done.usage)
        body["clawdesk"] = _extension(done)
        return JSONResponse(body, headers=headers)


def build_app(
    worker: EngineWorker,
    *,
    token: str,
    hosts: frozenset[str] | None,
    origins: Iterable[str] = (),
    loop: LearningLoop | None = None,
    extra_hosts: Iterable[str] = (),
):
    """The ASGI app: the routes behind the :class:`~clawdesk.serve.security.Guard` (and CORS for allowed origins)."""
    api = Api(worker, loop)
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", api.chat_completions, methods=["POST"]),
            Route("/v1/models", api.models, methods=["GET"]),
            Route("/v1/models/{model_id:path}", api.model, methods=["GET"]),
        ],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
    )
    origins = list(origins)
    guarded = Guard(app, token=token, hosts=hosts, origins=origins, extra_hosts=extra_hosts)
    if not origins:
        return guarded
    # Preflights from an allowed browser origin are answered here; every real request still meets the guard.
    return CORSMiddleware(
        guarded,
        allow_origins=origins,
        allow_methods=["GET", "POST"],
        allow_headers=["authorization", "content-type", "x-session-id", "x-turn-type"],
        expose_headers=["x-session-id", "x-turn-id"],
    )


def make_server(app, host: str, port: int):
    """A uvicorn server for ``app`` (``.run()`` blocks; ``.should_exit = True`` stops it)."""
    import uvicorn

    # On Ctrl-C open streams get a few seconds, then their tasks are cancelled (which cancels their
    # generation; the turn is recorded as cancelled) instead of uvicorn waiting for every reply to end.
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_S,
    )
    return uvicorn.Server(config)


# -- helpers ----------------------------------------------------------------------------------


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        err = ApiError(404, f"no route {request.url.path}; this server has /v1/chat/completions and /v1/models",
                       type_="not_found_error", code="not_found")  # fmt: skip
    else:
        err = ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")
    return error_response(err)


async def _json_body(request: Request) -> Any:
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > MAX_BODY_BYTES:
        raise ApiError(413, f"the request body is over {MAX_BODY_BYTES >> 20} MB", code="body_too_large")
    raw = await request.body()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad(f"the request body is not valid JSON ({exc})") from exc


def _emitter(events: asyncio.Queue) -> Callable[[Any], None]:
    """``emit`` for the worker thread: hands events to this request's queue on the event loop."""
    loop = asyncio.get_running_loop()

    def emit(event: Any) -> None:
        try:
            loop.call_soon_threadsafe(events.put_nowait, event)
        except RuntimeError:  # "Event loop is closed": the server stopped, nobody listens any more
            return  # (the worker must still record the turn, so this is no error for it)

    return emit


def _side(request: Request) -> bool:
    kind = request.headers.get("x-turn-type", "main").strip().lower()
    if kind not in ("main", "side"):
        raise bad(f"X-Turn-Type must be 'main' or 'side' (got {kind!r})", "X-Turn-Type")
    return kind == "side"


def _session(request: Request) -> int | None:
    value = request.headers.get("x-session-id")
    if value is None or not value.strip():
        return None
    if not value.strip().isdigit():
        raise bad(f"X-Session-Id must be a session number from a reply's X-Session-Id (got {value!r})", "X-Session-Id")
    return int(value)


def _extension(done: Finished) -> dict[str, Any]:
    return {"session_id": done.session_id, "turn_id": done.turn_id, "status": done.status}


async def _until_finished(events: asyncio.Queue, request: Request, job: Job) -> Finished | Failed:
    """The end of a non-streamed reply; a client that leaves meanwhile cancels it."""
    listener = asyncio.create_task(_on_disconnect(request.receive, job.cancel.set))
    try:
        while True:
            event = await events.get()
            if isinstance(event, Finished | Failed):
                return event
    except asyncio.CancelledError:
        job.cancel.set()
        raise
    finally:
        listener.cancel()


async def _on_disconnect(receive, then: Callable[[], None]) -> None:
    """Wait for the client to go away (the request body was read already), then call ``then``."""
    while (await receive())["type"] != "http.disconnect":
        pass
    then()


def _data(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n\n"


async def _sse(events: asyncio.Queue, head: Head, include_usage: bool) -> AsyncIterator[bytes]:
    yield _data(head.chunk({"role": "assistant", "content": ""}))
    while True:
        event = await events.get()
        if isinstance(event, Text):
            delta = {}
            if event.reasoning:
                delta["reasoning_content"] = event.reasoning
            if event.content:
                delta["content"] = event.content
            yield _data(head.chunk(delta))
        elif isinstance(event, Finished):
            calls = event.message.get("tool_calls")
            if calls:
                yield _data(head.chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]}))
            last = head.chunk({}, event.finish_reason)
            last["clawdesk"] = _extension(event)
            yield _data(last)
            if include_usage:
                yield _data(head.usage_chunk(event.usage))
            break
        elif isinstance(event, Failed):
            yield _data(event.error.body())
            break
        elif not isinstance(event, Started):
            raise TypeError(f"unexpected worker event {event!r}")
    yield b"data: [DONE]\n\n"


class EventStream:
    """A server-sent-event response that notices a client leaving at once, not at its next write.

    Starlette's StreamingResponse (ASGI spec 2.4) only learns of a disconnect when a write fails; a
    reply that sends nothing for a while (thinking held back, a long ``<tool_call>`` block) would run
    on. Here a listener waits for ``http.disconnect`` beside the writes and calls ``on_close``.
    """

    def __init__(self, body: AsyncIterator[bytes], *, headers: dict[str, str], on_close: Callable[[], None]):
        self.body = body
        self.headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()),
        ]
        self.on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        listener = asyncio.create_task(_on_disconnect(receive, self.on_close))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.headers})
            async for chunk in self.body:
                if listener.done():
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if not listener.done():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client is gone (uvicorn raises on a write to a closed connection): on_close below
        finally:
            listener.cancel()
            self.on_close()  # a finished job ignores it; a running one stops at its next token
            await self.body.aclose()
