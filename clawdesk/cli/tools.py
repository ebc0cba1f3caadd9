"""``clawdesk tools``: list the agent's tools (policy, source, MCP servers' state) and ``tools call`` one by hand.

``tools call NAME 'JSON-ARGS'`` goes through :meth:`clawdesk.tools.registry.Registry.run`, the same
path as the agent's calls: same workspace and jail, same policy, consent, caps and timeouts. Consent
is headless: ``--yes`` or ``--allow TOOL[,TOOL]``, else a tool whose policy is ``ask`` is denied
and not run. The result goes to stdout and a status line to stderr; the exit code is 0 for ``ok``,
1 for ``error`` or ``timeout``, 3 for ``denied`` (2 stays argparse's and config errors').
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from clawdesk.cli.common import AddCommand, add_global, workspace_path
from clawdesk.config import Config
from clawdesk.errors import InputError

EXIT_CODES = {"ok": 0, "error": 1, "timeout": 1, "denied": 3}
DESCRIPTION_CHARS = 70


def add_commands(add: AddCommand) -> None:
    p = add("tools", cmd_tools, "list the agent's tools with their policy and source, or run one call")
    p.add_argument("--workspace", metavar="DIR", help="the directory file tools work in (default: tools.workspace)")
    sub = p.add_subparsers(dest="tools_command", metavar="ACTION")
    c = sub.add_parser(
        "call",
        help="run one tool call exactly as the agent would",
        description="Run one tool call exactly as the agent would (workspace, policy, consent, caps, timeouts).",
    )
    add_global(c, suppress=True)
    c.add_argument("name", metavar="NAME", help="the tool, e.g. read_file or server.tool")
    c.add_argument("arguments", nargs="?", default="{}", metavar="JSON-ARGS", help="""e.g. '{"path": "notes.txt"}'""")
    c.add_argument("--yes", action="store_true", help="consent to the call if its policy is ask (never stays never)")
    c.add_argument(
        "--allow", action="append", default=[], metavar="TOOL[,TOOL]", help="consent for these tools (repeatable)"
    )
    c.add_argument("--workspace", metavar="DIR", default=argparse.SUPPRESS, help="the directory file tools work in")


def cmd_tools(args: argparse.Namespace, config: Config) -> int:
    workspace = workspace_path(args.workspace, config)
    if args.tools_command == "call":
        return _call(args, config, workspace)
    return _list(config, workspace)


def _list(config: Config, workspace: Path | None) -> int:
    from clawdesk.tools.registry import build_registry

    registry = build_registry(config, workspace=workspace)
    try:
        specs = registry.all_specs()
        states = [s for s in registry.states() if s.name != "builtin"]
    finally:
        registry.close()
    if not config.tools.enabled:
        print(f"tools are OFF (tools.enabled = false in {config.config_path}); the chat offers none of these")
    print(f"workspace: {workspace or config.workspace_dir}")
    width = max(len(s.name) for s in specs) if specs else 4
    print(f"{'TOOL':<{width}}  {'POLICY':<6}  {'SET BY':<7}  {'SOURCE':<12}  DESCRIPTION")
    for spec in specs:
        set_by = "config" if spec.name in config.tools.policy else "default"
        text = spec.description if len(spec.description) <= DESCRIPTION_CHARS else spec.description[:69] + "…"
        print(f"{spec.name:<{width}}  {registry.policy(spec):<6}  {set_by:<7}  {spec.source:<12}  {text}")
    for s in states:
        print(f"MCP server {s.name}: {s.state}" + (f" ({s.detail})" if s.detail else ""))
    return 0


def _call(args: argparse.Namespace, config: Config, workspace: Path | None) -> int:
    from clawdesk.tools.consent import Consent
    from clawdesk.tools.registry import build_registry
    from clawdesk.tools.types import ToolCall

    if not config.tools.enabled:
        raise InputError(f"tools are turned off (tools.enabled = false in {config.config_path}); turn them on first")
    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"JSON-ARGS is not valid JSON ({exc.msg} at character {exc.pos}); give an object, "
            """e.g. '{"path": "notes.txt"}' (or '{}' for none)"""
        ) from None
    if not isinstance(arguments, dict):
        raise InputError("""JSON-ARGS must be a JSON object, e.g. '{"path": "notes.txt"}' (or '{}' for none)""")
    allow = {name.strip() for item in args.allow for name in item.split(",") if name.strip()}
    registry = build_registry(config, workspace=workspace)
    try:
        unknown = sorted(allow - {s.name for s in registry.all_specs()})
        if unknown:
            raise InputError(f"--allow names no tool called {', '.join(unknown)}; `clawdesk tools` lists them")
        call = ToolCall(args.name, arguments, raw=args.arguments)
        result = registry.run(call, Consent(allow=allow, yes=args.yes))
    finally:
        registry.close()
    print(result.content)
    print(f"[{result.name}: {result.status} · {result.duration_s:.2f} s]", file=sys.stderr)
    return EXIT_CODES[result.status]
