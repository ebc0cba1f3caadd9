"""``clawdesk serve``: parse the flags, confirm a non-loopback address, build everything, run uvicorn.

:func:`add_commands` registers the subcommand (with the global flags, as every command); :func:`cmd_serve`
is the command; the server itself is :mod:`clawdesk.serve`.
The learning loop is the headless one of :mod:`clawdesk.loop` (``runtime.build_learning_loop``), run
in this process unless ``--no-learn``; then turns are recorded for ``clawdesk judge`` / ``train`` later.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

from clawdesk.cli.common import AddCommand
from clawdesk.config import Config
from clawdesk.errors import InputError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def add_commands(add: AddCommand) -> None:
    p = add("serve", cmd_serve, "serve the model as a local OpenAI-compatible API that records, judges and trains")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}: this machine)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web page origin allowed to call the API from a browser, e.g. http://localhost:3000 (repeatable)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another host name clients use in the URL, e.g. host.docker.internal (repeatable)",
    )
    p.add_argument("--yes", action="store_true", help="do not ask before listening on a non-loopback address")
    p.add_argument("--no-learn", action="store_true", help="record turns but run no learning loop in this process")


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 1 to 65535 (got {text!r})")
    return int(text)


def confirm_host(host: str, *, yes: bool) -> bool:
    """Whether listening on ``host`` is allowed: loopback always; otherwise --yes or a typed 'yes'."""
    from clawdesk.serve.security import is_loopback

    if is_loopback(host) or yes:
        return True
    warning = (
        f"clawdesk serve --host {host}: other machines on the network can reach this server. Anyone with the "
        "API token can use your model, and what they send is recorded and learned from."
    )
    if not sys.stdin.isatty():
        raise InputError(f"{warning} Pass --yes to confirm, or leave --host at {DEFAULT_HOST}.")
    print(warning, file=sys.stderr)
    return input("Type 'yes' to listen there: ").strip().lower() == "yes"


def check_port(host: str, port: int) -> None:
    """Raise InputError when ``host:port`` cannot be listened on (taken, or not this machine's address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise InputError(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}). Another program (or another "
                "`clawdesk serve`) may be using the port: pick another with --port."
            ) from exc


def cmd_serve(args: argparse.Namespace, config: Config) -> int:
    if not confirm_host(args.host, yes=args.yes):
        print("not started", file=sys.stderr)
        return 1
    from clawdesk.engine.gate import ChatGate
    from clawdesk.runtime import build_learning_loop, load_engine, open_store
    from clawdesk.serve.app import build_app, make_server
    from clawdesk.serve.security import allowed_hosts, is_loopback, load_or_create_token
    from clawdesk.serve.worker import EngineWorker, serving_label

    check_port(args.host, args.port)  # before the model loads: a taken port is said at once
    store = open_store(config)
    engine = loop = worker = None
    try:
        token, token_path = load_or_create_token(config.home)
        engine = load_engine(config, store, getattr(args, "model", None))
        gate = ChatGate()
        loop = None if args.no_learn else build_learning_loop(config, store, engine, gate=gate, auto_train=True)
        worker = EngineWorker(engine, config, gate=gate, loop=loop)
        worker.start()
        if loop is not None:
            loop.subscribe(_print_learning_event)
            loop.start()
        app = build_app(
            worker,
            token=token,
            hosts=allowed_hosts(args.host, args.port),
            origins=args.allow_origin,
            loop=loop,
            extra_hosts=[f"{name}:{args.port}" for name in args.allow_host],
        )
        server = make_server(app, args.host, args.port)
        where = "this machine only" if is_loopback(args.host) else "THE NETWORK (not loopback)"
        host = f"[{args.host}]" if ":" in args.host else args.host
        lines = [
            f"ClawDesk serving {engine.identity.name} ({serving_label(engine, loop)}) at http://{host}:{args.port}/v1",
            f"  reachable from: {where}",
            f"  API token: {token_path}  (send it as 'Authorization: Bearer <token>')",
            f"  learning: {_learning_line(store, loop, args.no_learn)}",
        ]
        if engine.identity.note:
            lines.append(f"  [{engine.identity.note}]")
        print("\n".join(lines), file=sys.stderr, flush=True)
        try:
            server.run()
        except KeyboardInterrupt:
            # uvicorn shut down gracefully on Ctrl-C, then re-raised the signal: that is a normal stop.
            print("clawdesk serve: stopped", file=sys.stderr)
            return 0
        except SystemExit as exc:  # uvicorn exits when it cannot bind (the port was taken since the check)
            raise InputError(f"could not listen on {args.host}:{args.port}; pick another --port") from exc
    finally:
        if worker is not None:
            worker.close()
        if loop is not None:
            loop.close()
        if engine is not None:
            engine.close()
        store.close()
    return 0


# What a server console shows of the loop's events (by type name); judge votes and progress would flood it.
SHOWN_EVENTS = frozenset(
    {"TrainingStarted", "TrainingFinished", "TrainingFailed", "VersionRejected", "VersionServed", "SwapFailed",
     "ServingProblem", "LearningToggled"}
)  # fmt: skip


def _print_learning_event(event: Any) -> None:
    if type(event).__name__ in SHOWN_EVENTS:
        print(f"[learning] {event}", file=sys.stderr, flush=True)


def _learning_line(store, loop, no_learn: bool) -> str:
    state = "ON" if store.learning_enabled else "OFF (`clawdesk learning on`)"
    if no_learn:
        return f"{state}; no learning loop here (--no-learn): turns are recorded for `clawdesk judge`/`train`"
    return f"{state}; judging and training in this process"
