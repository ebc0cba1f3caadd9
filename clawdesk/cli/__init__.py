"""Command line: ``clawdesk [chat|ask|sessions|learning|pull|paths|serve|...]``.

``main()`` is the only place that builds the config; commands receive it and open the store through
:func:`clawdesk.cli.common.opened_store`. One module per command group registers its commands on the
parser: :mod:`~clawdesk.cli.chat` (chat, ask, sessions), :mod:`~clawdesk.cli.learning` (judge, train,
adapters, export, export-data, learning), :mod:`~clawdesk.cli.data` (forget, backup, restore),
:mod:`~clawdesk.cli.prefs` (prefs), :mod:`~clawdesk.cli.evaluate` (eval), :mod:`~clawdesk.cli.doctor`,
:mod:`~clawdesk.cli.tools`, :mod:`~clawdesk.cli.serve` and :mod:`~clawdesk.cli.models` (pull, paths). Every
:class:`~clawdesk.errors.ClawDeskError` becomes one ``clawdesk: error: …`` line and a non-zero exit
code — no tracebacks for anything a person can cause.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from clawdesk import __version__
from clawdesk.cli import chat, data, doctor, evaluate, learning, models, prefs, serve, tools
from clawdesk.cli.args import Parser
from clawdesk.cli.common import Command, add_global
from clawdesk.config import default_home, load_config
from clawdesk.errors import ClawDeskError


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="clawdesk",
        description="A local personal agent that learns from being used. Run without a command to chat.",
    )
    parser.add_argument("--version", action="version", version=f"clawdesk {__version__}")
    add_global(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, func: Command, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        add_global(p, suppress=True)  # global flags work before or after the command
        p.set_defaults(func=func)
        return p

    # In the order `clawdesk --help` lists them.
    chat.add_commands(add)  # chat, ask, sessions
    learning.add_commands(add)  # judge, train, adapters, export, export-data
    data.add_commands(add)  # forget, backup, restore
    prefs.add_commands(add)  # prefs list|add|rm|clear
    evaluate.add_commands(add)  # eval
    doctor.add_commands(add)  # doctor
    tools.add_commands(add)  # tools, tools call
    serve.add_commands(add)  # serve
    learning.add_switch(add)  # learning on|off|status
    models.add_commands(add)  # pull, paths
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args.func = chat.cmd_chat
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
