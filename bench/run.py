"""The benchmark suite runner: finds the ``bench/sec_*.py`` sections, runs them, prints and saves the results.

A *section* is a module ``bench/sec_<name>.py`` with ``measure(quick: bool, log) -> dict[str, dict]``;
each result is ``{"value": number | None, "unit": str, "goal": str, "raw": {...}}`` (``goal`` like
``">= 0.95"``, ``""`` when there is none; an optional ``"what"`` line describes it). Every section
measures its ratios against a baseline taken in the same run, so the numbers compare like with like
on whatever machine runs them; nothing here is a pass/fail test (the exit code is 0 when goals are
missed, 1 when a section crashed, 2 on bad flags).

    python bench/run.py [--quick] [--full] [--only chat,swap] [--skip scale] --json OUT.json [--docs]

Sections in :data:`ON_REQUEST` (the 4B-shaped model: minutes and GBs) run only when named in
``--only`` or with ``--full``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import re
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parent
ORDER = ("chat", "swap", "scale", "train", "model4b")  # print/run order; other sections follow by name
ON_REQUEST = frozenset({"model4b"})
GOAL_RE = re.compile(r"^\s*(<=|>=|<|>|==)\s*(-?[0-9.]+(?:e-?[0-9]+)?)\s*$")


class UsageError(Exception):
    """A bad command line: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the usage block and exit itself
        raise UsageError(message)


# -- sections ------------------------------------------------------------------------------------


def discover(bench_dir: Path = BENCH_DIR) -> dict[str, Path]:
    """Section name → file, in :data:`ORDER` first, then alphabetically."""
    found = {p.stem.removeprefix("sec_"): p for p in sorted(bench_dir.glob("sec_*.py"))}
    rank = {name: i for i, name in enumerate(ORDER)}
    return dict(sorted(found.items(), key=lambda kv: (rank.get(kv[0], len(ORDER)), kv[0])))


def select(available: Sequence[str], only: Sequence[str], skip: Sequence[str], full: bool) -> list[str]:
    """The sections to run: ``only`` (just those), else all but :data:`ON_REQUEST` unless ``full``; minus ``skip``."""
    unknown = sorted({*only, *skip} - set(available))
    if unknown:
        raise UsageError(f"unknown section(s) {', '.join(unknown)}; available: {', '.join(available) or 'none'}")
    if only:
        chosen = [name for name in available if name in only]
    else:
        chosen = [name for name in available if full or name not in ON_REQUEST]
    return [name for name in chosen if name not in skip]


def _on_path(folder: Path) -> None:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def load_section(name: str, path: Path) -> ModuleType:
    # The sections import each other's helpers by plain module name (bench/ is not a package).
    _on_path(path.parent)
    spec = importlib.util.spec_from_file_location(f"bench_sec_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "measure", None)):
        raise TypeError(f"{path} has no measure(quick, log) function")
    return module


# -- results -------------------------------------------------------------------------------------


def goal_met(value: float | None, goal: str) -> bool | None:
    """Whether ``value`` meets ``goal`` (">= 0.95", "<= 50"); None when there is no goal or no value."""
    match = GOAL_RE.match(goal or "")
    if match is None or value is None:
        return None
    op, bound = match.group(1), float(match.group(2))
    return {"<=": value <= bound, ">=": value >= bound, "<": value < bound, ">": value > bound, "==": value == bound}[
        op
    ]


def check_result(section: str, key: str, result: object) -> dict:
    """One section's result, validated and normalised (a section bug must not pass as a measurement)."""
    if not isinstance(result, dict) or not {"value", "unit", "goal", "raw"} <= set(result):
        raise TypeError(f"section {section}: result {key!r} must be a dict with value, unit, goal and raw")
    value = result["value"]
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise TypeError(f"section {section}: {key}.value must be a number or None, got {value!r}")
    value = None if value is None else float(value)
    out = dict(result)
    out.update(value=value, section=section, met=goal_met(value, str(result["goal"])))
    return out


def machine() -> dict:
    """What the numbers were measured on."""
    from importlib import metadata

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass  # not Linux: platform.processor() is the best there is
    try:
        import psutil

        ram_gb = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        ram_gb = None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "ram_gb": ram_gb,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": version("torch"),
        "llama_cpp_python": version("llama_cpp_python"),
        "transformers": version("transformers"),
        "peft": version("peft"),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def run_sections(
    names: Sequence[str], paths: dict[str, Path], *, quick: bool, out: Callable[[str], None] = print
) -> tuple[dict[str, dict], dict[str, str], dict[str, float]]:
    """Run each section in this process; (results by key, errors by section, seconds by section)."""
    results: dict[str, dict] = {}
    errors: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for name in names:
        start = time.monotonic()

        def log(message: str, _name: str = name, _start: float = start) -> None:
            out(f"  [{_name} {time.monotonic() - _start:6.1f}s] {message}")

        out(f"== {name} ({'quick' if quick else 'full'})")
        try:
            got = load_section(name, paths[name]).measure(quick, log)
            if not isinstance(got, dict):
                raise TypeError(f"section {name}: measure() returned {type(got).__name__}, not a dict")
            for key, result in got.items():
                if key in results:
                    raise ValueError(f"section {name}: key {key!r} is already reported by {results[key]['section']}")
                results[key] = check_result(name, key, result)
        except Exception as exc:  # one broken section must not lose the others' measurements: reported below
            errors[name] = f"{type(exc).__name__}: {exc}"
            out(f"  [{name}] FAILED: {errors[name]}")
            out("".join(traceback.format_exception(exc)).rstrip())
        seconds[name] = round(time.monotonic() - start, 1)
    return results, errors, seconds


def format_value(value: float | None) -> str:
    if value is None:
        return "–"
    if value == 0 or 0.01 <= abs(value) < 10_000:
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return f"{value:.3g}"


def table(results: dict[str, dict]) -> str:
    rows = [("key", "value", "unit", "goal", "")]
    for key, r in results.items():
        verdict = {True: "met", False: "MISSED", None: ""}[r["met"]]
        rows.append((key, format_value(r["value"]), r["unit"], r["goal"], verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


# -- command line --------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="python bench/run.py", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and tokens (about 3 minutes on 2 cores)")
    parser.add_argument("--full", action="store_true", help=f"also the on-request sections ({', '.join(ON_REQUEST)})")
    parser.add_argument("--only", default="", help="comma-separated sections to run (and nothing else)")
    parser.add_argument("--skip", default="", help="comma-separated sections to leave out")
    parser.add_argument("--json", type=Path, required=True, help="where to write the results")
    parser.add_argument("--docs", action="store_true", help="regenerate docs/benchmarks.md's results and the chart")
    args = parser.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    args.skip = [s.strip() for s in args.skip.split(",") if s.strip()]
    if args.json.is_dir():
        raise UsageError(f"--json {args.json} is a directory; give a file name")
    return args


def main(argv: Sequence[str] | None = None, *, bench_dir: Path = BENCH_DIR, docs_dir: Path | None = None) -> int:
    try:
        args = parse_args(argv)
        paths = discover(bench_dir)
        names = select(list(paths), args.only, args.skip, args.full)
        if not names:
            raise UsageError("no section left to run (check --only/--skip)")
    except UsageError as err:
        print(f"bench/run.py: error: {err}", file=sys.stderr)
        return 2
    command = "python bench/run.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"sections: {', '.join(names)}{' (quick)' if args.quick else ''}", flush=True)
    started = time.monotonic()
    results, errors, seconds = run_sections(names, paths, quick=args.quick, out=lambda s: print(s, flush=True))
    data = {
        "command": command.strip(),
        "quick": args.quick,
        "sections": names,
        "seconds": {**seconds, "total": round(time.monotonic() - started, 1)},
        "machine": machine(),
        "results": results,
        "errors": errors,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=2, default=float) + "\n")
    print()
    print(table(results))
    for name, message in errors.items():
        print(f"section {name} failed: {message}")
    print(f"\nwrote {args.json} ({data['seconds']['total']:.0f} s)")
    if args.docs:
        _on_path(BENCH_DIR)
        import report

        md, png = report.write_docs(data, docs_dir or BENCH_DIR.parent / "docs")
        print(f"wrote {md} and {png}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
