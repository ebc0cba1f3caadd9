"""Conversation commands: ``chat`` (the TUI, the default), ``ask`` (one turn headless) and ``sessions``.

``ask`` streams the reply to stdout and its notes (``[session 3 · turn 12]``, tool outcomes) to
stderr; its tool flags and tool report live in :mod:`clawdesk.cli.agent`, ``ask --rate`` in
:mod:`clawdesk.cli.learning`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from clawdesk.cli import agent
from clawdesk.cli.args import count
from clawdesk.cli.common import AddCommand, opened_store
from clawdesk.cli.learning import rate_last
from clawdesk.config import Config
from clawdesk.errors import InputError, NotFoundError


def add_commands(add: AddCommand) -> None:
    add("chat", cmd_chat, "open the chat (the default)")
    p = add("ask", cmd_ask, "one turn without the TUI, streamed to stdout and recorded")
    p.add_argument("text", nargs="?", help="the message; '-' reads it from standard input")
    p.add_argument("-c", "--continue", dest="cont", action="store_true", help="continue the latest session")
    p.add_argument("--session", type=count, metavar="ID", help="continue session ID")
    p.add_argument("--no-think", action="store_true", help="turn Qwen3 thinking off for this turn")
    p.add_argument("--incognito", action="store_true", help="start an incognito session (never learned from)")
    p.add_argument(
        "--rate", choices=["+1", "-1"], help="thumbs up/down for the last turn (of --session, else the latest)"
    )
    agent.add_flags(p)  # --yes, --allow, --workspace: tool consent and workspace
    add("sessions", cmd_sessions, "list chat sessions")


def cmd_chat(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.runtime import load_engine
    from clawdesk.tools.registry import build_registry
    from clawdesk.ui.app import ClawDeskApp

    with opened_store(config) as store:
        engine = load_engine(config, store, args.model)
        # Built even for a model that cannot call tools: the status bar then says what would enable them.
        registry = build_registry(config) if config.tools.enabled else None
        try:
            ClawDeskApp(config, engine, store, learning=True, registry=registry).run()
        finally:
            if registry is not None:
                registry.close()  # stops the MCP servers the chat started
            engine.close()
    return 0


def cmd_ask(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.agent import AgentService
    from clawdesk.chat import clean_message
    from clawdesk.runtime import load_engine
    from clawdesk.tools.consent import Consent

    if args.rate is not None:
        if args.text is not None:
            raise InputError("--rate rates the last turn; give it without a message")
        return rate_last(args, config)
    if args.text is None:
        raise InputError("give a message: clawdesk ask TEXT (or '-' to read standard input)")
    try:
        text = sys.stdin.read() if args.text == "-" else args.text
    except UnicodeDecodeError as exc:
        raise InputError(f"standard input is not UTF-8 text ({exc.reason} at byte {exc.start}); re-encode it.") from exc
    text = clean_message(text, config.chat.max_message_chars)  # fail fast, before loading a model
    workspace, allow = agent.check_flags(args, config)
    with opened_store(config) as store:
        if args.session is not None:
            session = store.get_session(args.session)
        elif args.cont:
            session = store.latest_session()
            if session is None:
                raise NotFoundError("there is no session to continue yet; run `clawdesk ask` without -c first")
        else:
            session = None
        engine = load_engine(config, store, args.model)
        registry = None
        try:
            if config.tools.enabled and engine.supports_tools:
                from clawdesk.tools.registry import build_registry

                registry = build_registry(config, workspace=workspace)
            elif config.tools.enabled:
                print(f"[{agent.TOOLS_NEED_NOTE}]", file=sys.stderr)
            service = AgentService(engine, config.chat, config.tools, registry, memory=config.memory)
            if session is None:
                session = service.new_session(store, incognito=args.incognito)
            if engine.identity.note:
                print(f"[{engine.identity.note}]", file=sys.stderr)
            from clawdesk.reload import AdapterSwitch

            problem = AdapterSwitch(engine, store).sync()  # serve the chosen adapter version
            if problem:
                print(f"[{problem}]", file=sys.stderr)
            cancel = threading.Event()
            activity = agent.ToolActivity()  # the reply to stdout without <tool_call> blocks, tool outcomes to stderr

            # Ctrl-C stops the reply between tokens, between steps and inside a running tool; what ran is recorded.
            previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
            try:
                result = service.run_turn(
                    store,
                    session.id,
                    text,
                    thinking=False if args.no_think else None,
                    cancel=cancel,
                    on_event=activity,
                    consent=Consent(allow=allow, yes=args.yes),
                )
            finally:
                signal.signal(signal.SIGINT, previous)
            activity.finish()
            if result.dropped_turns:
                print(f"[{result.dropped_turns} earlier exchange(s) left out to fit the context]", file=sys.stderr)
            if result.reply.cut == "repeat":
                print("[reply cut: it kept repeating itself (chat.repeat_stop)]", file=sys.stderr)
            elif result.status != "finished":
                print(f"[reply {result.status}]", file=sys.stderr)
            if result.stopped == "max_steps":
                print(f"[stopped after tools.max_steps = {config.tools.max_steps} model calls]", file=sys.stderr)
            print(f"[session {session.id} · turn {result.turn_id}]", file=sys.stderr)
        finally:
            if registry is not None:
                registry.close()  # MCP server processes
            engine.close()
    return 0


def cmd_sessions(args: argparse.Namespace, config: Config) -> int:
    with opened_store(config) as store:
        sessions = store.list_sessions()
    if not sessions:
        print("No sessions yet. Start one with `clawdesk` or `clawdesk ask TEXT`.")
        return 0
    print(f"{'ID':>4}  {'UPDATED':16}  {'TURNS':>5}  FLAGS      TITLE")
    for s in sessions:
        flags = ",".join(f for f, on in (("incognito", s.incognito), ("think", s.thinking)) if on) or "-"
        print(f"{s.id:>4}  {s.updated_at[:16].replace('T', ' '):16}  {s.n_turns:>5}  {flags:<10} {s.title}")
    return 0
