"""bench/suite_time.py: whole totals, the tests both reports have (a moved file still matches), exact sums."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bench import load_bench

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "suite_time.py"


@pytest.fixture(scope="module")
def suite_time():
    return load_bench("suite_time")


def _report(path: Path, cases: list[tuple[str, str, float]]) -> Path:
    rows = "".join(f'<testcase classname="{c}" name="{n}" time="{t}"/>' for c, n, t in cases)
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite>{rows}</testsuite></testsuites>', encoding="utf-8")
    return path


def test_common_tests_are_matched_by_module_and_name_across_a_move(suite_time, tmp_path):
    before = _report(
        tmp_path / "b.xml", [("tests.test_a", "t1", 10.0), ("tests.test_a", "t2", 4.0), ("tests.test_old", "x", 1.5)]
    )
    after = _report(
        tmp_path / "a.xml",
        [
            ("tests.sub.test_a", "t1", 7.0),
            ("tests.test_a", "t2", 5.0),
            ("tests.test_new", "n", 20.0),
            ("tests.test_new", "m", 0.5),
        ],
    )
    r = suite_time.compare(suite_time.read_times(before), suite_time.read_times(after))
    assert (r["before_tests"], r["after_tests"], r["common_tests"], r["new_tests"], r["gone_tests"]) == (3, 4, 2, 2, 1)
    assert (r["before_s"], r["after_s"]) == (15.5, 32.5)
    assert (r["common_before_s"], r["common_after_s"], r["common_ratio"]) == (14.0, 12.0, 12.0 / 14.0)
    assert (r["new_s"], r["gone_s"]) == (20.5, 1.5)


def test_the_command_prints_the_totals_and_the_slowest_new_tests(tmp_path):
    before = _report(tmp_path / "b.xml", [("tests.test_a", "t1", 10.0)])
    after = _report(tmp_path / "a.xml", [("tests.test_a", "t1", 9.0), ("tests.test_b", "slow", 30.0)])
    proc = subprocess.run([sys.executable, str(SCRIPT), str(before), str(after)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "in both:       1 tests 10 s -> 9 s (ratio 0.900)" in proc.stdout
    assert "new   30.0 s  test_b::slow" in proc.stdout


def test_a_file_that_is_not_a_report_gets_one_line(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text("not xml", encoding="utf-8")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(bad), str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0 and "cannot read" in proc.stderr and str(bad) in proc.stderr
    assert "Traceback" not in proc.stderr
