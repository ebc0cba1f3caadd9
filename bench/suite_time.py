"""The test suite's time, before and after a change: the whole suite, and the tests both trees have.

A suite that grew cannot be compared with the one it was by its total alone: the tests the change
added take time of their own. This reads two pytest JUnit XML reports (``pytest --junitxml=F``, one
per tree, run one after the other on the same machine) and prints the whole totals, the total of
the tests present in both (matched by test module name and test name, so a moved file still
matches) with its ratio after ÷ before, and the slowest tests only one of them has::

    git worktree add /tmp/before <commit>   # then, in each tree, with the same venv:
    PYTHONPATH=$PWD pytest -q -p no:cacheprovider --junitxml=/tmp/before.xml
    python bench/suite_time.py /tmp/before.xml /tmp/after.xml

Times are pytest's own per-test times (setup + call + teardown), so the sums are a little below the
wall time pytest prints.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def read_times(path: Path) -> dict[tuple[str, str], float]:
    """``{(test module, test name): seconds}`` of a JUnit XML report."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise SystemExit(f"suite_time: cannot read {path} as a pytest JUnit XML report ({exc})") from exc
    times: dict[tuple[str, str], float] = {}
    for case in root.iter("testcase"):
        module = (case.get("classname") or "").rsplit(".", 1)[-1]
        key = (module, case.get("name") or "")
        times[key] = times.get(key, 0.0) + float(case.get("time") or 0.0)
    return times


def compare(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> dict[str, float]:
    common = before.keys() & after.keys()
    b, a = sum(before[k] for k in common), sum(after[k] for k in common)
    return {
        "before_tests": len(before),
        "after_tests": len(after),
        "before_s": sum(before.values()),
        "after_s": sum(after.values()),
        "common_tests": len(common),
        "common_before_s": b,
        "common_after_s": a,
        "common_ratio": a / b if b else float("nan"),
        "new_tests": len(after.keys() - common),
        "new_s": sum(after[k] for k in after.keys() - common),
        "gone_tests": len(before.keys() - common),
        "gone_s": sum(before[k] for k in before.keys() - common),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="JUnit XML of the suite before the change")
    parser.add_argument("after", type=Path, help="JUnit XML of the suite after it")
    parser.add_argument("--slowest", type=int, default=10, help="new tests to list (default 10)")
    args = parser.parse_args(argv)
    before, after = read_times(args.before), read_times(args.after)
    r = compare(before, after)
    whole = f"{r['before_tests']} tests {r['before_s']:.0f} s -> {r['after_tests']} tests {r['after_s']:.0f} s"
    print(f"whole suite:   {whole}")
    print(
        f"in both:       {r['common_tests']} tests {r['common_before_s']:.0f} s -> {r['common_after_s']:.0f} s "
        f"(ratio {r['common_ratio']:.3f})"
    )
    only = f"{r['new_tests']} tests {r['new_s']:.0f} s; only before: {r['gone_tests']} tests {r['gone_s']:.0f} s"
    print(f"only after:    {only}")
    new = sorted(((after[k], k) for k in after.keys() - before.keys()), reverse=True)[: args.slowest]
    for seconds, (module, name) in new:
        print(f"  new {seconds:6.1f} s  {module}::{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
