"""``clawdesk doctor``: prints the checks of :mod:`clawdesk.doctor`, one line each, and the fixes.

Exit 0 when nothing failed (warnings allowed), 1 otherwise; ``--json`` prints the same as one
JSON object for scripts.
"""

from __future__ import annotations

import argparse
import json

from clawdesk.cli.common import AddCommand
from clawdesk.config import Config


def add_commands(add: AddCommand) -> None:
    p = add("doctor", cmd_doctor, "check the installation and the data dir, and say how to fix what is wrong")
    p.add_argument("--json", action="store_true", help="print the checks as one JSON object")


def cmd_doctor(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.doctor import failed, run_checks

    checks = run_checks(config, args.model)
    bad = failed(checks)
    if args.json:
        print(json.dumps({"ok": not bad, "checks": [c.as_dict() for c in checks]}, indent=2))
        return 1 if bad else 0
    width = max(len(c.name) for c in checks)
    for c in checks:
        label = "FAIL" if c.status == "fail" else c.status
        print(f"{label:<5} {c.name:<{width}}  {c.detail}")
        if c.status == "fail" and c.fix:
            print(f"{'':<5} {'':<{width}}  fix: {c.fix}")
    n_fail, n_warn = sum(c.status == "fail" for c in checks), sum(c.status == "warn" for c in checks)
    print(f"\n{n_fail} failed, {n_warn} warnings, {len(checks) - n_fail - n_warn} ok")
    return 1 if bad else 0
