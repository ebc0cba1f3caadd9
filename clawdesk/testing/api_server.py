"""``clawdesk serve`` in this process on a free loopback port, for tests and the bench.

The same objects the CLI builds (worker, guarded app, uvicorn server) around an engine the caller
already loaded; uvicorn runs on a thread and is stopped (and the worker closed) on exit.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from clawdesk.config import Config
from clawdesk.engine import Engine
from clawdesk.engine.gate import ChatGate
from clawdesk.store.db import ensure_dir

HOST = "127.0.0.1"
START_TIMEOUT_S = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class RunningServer:
    base_url: str  # http://127.0.0.1:PORT/v1
    port: int
    token: str
    worker: object

    def client(self, **kwargs):
        import openai

        kwargs.setdefault("api_key", self.token)
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 60.0)
        return openai.OpenAI(base_url=self.base_url, **kwargs)


@contextlib.contextmanager
def running_server(
    engine: Engine, config: Config, *, loop=None, origins: Iterable[str] = (), gate: ChatGate | None = None
) -> Iterator[RunningServer]:
    from clawdesk.serve.app import build_app, make_server
    from clawdesk.serve.security import allowed_hosts, load_or_create_token
    from clawdesk.serve.worker import EngineWorker

    ensure_dir(config.home)
    token, _ = load_or_create_token(config.home)
    worker = EngineWorker(engine, config, gate=gate or ChatGate(), loop=loop)
    worker.start()
    port = free_port()
    app = build_app(worker, token=token, hosts=allowed_hosts(HOST, port), origins=origins, loop=loop)
    server = make_server(app, HOST, port)
    thread = threading.Thread(target=server.run, name="clawdesk-test-uvicorn", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the test server did not start on {HOST}:{port}")
            time.sleep(0.02)
        yield RunningServer(f"http://{HOST}:{port}/v1", port, token, worker)
    finally:
        server.should_exit = True
        thread.join(10)
        worker.close()
