"""A write or edit beside the file the request named (clawdesk/judge/targets.py), read as an attacker would.

The rule on hand-built steps (exact paths), on the labelled sets (it fails no step that worked), and
through the real judge on the demo model: a judge whose stop event is set raises on its first model
call, so a verdict from it proves that the rule decided without the model.
"""

from __future__ import annotations

import threading

import pytest

from clawdesk.config import JudgeConfig
from clawdesk.eval.judge_set import load_cases, tool_calls
from clawdesk.eval.personas import assets_dir
from clawdesk.judge.runner import Judge, JudgeInterrupted
from clawdesk.judge.targets import Miss, find_misses, named_paths
from clawdesk.judge.tool_steps import EVIDENCE_VERSION, next_state
from clawdesk.store.steps import ToolCallRecord


def call(name: str, path: str, idx: int = 0, status: str = "ok", result: str = "done") -> ToolCallRecord:
    return ToolCallRecord(idx + 1, 0, idx, name, {"path": path, "content": "x"}, "", result, status, 0.0)


def test_named_paths_are_files_with_an_extension_not_versions_urls_or_addresses():
    request = (
        "Save it to notes/2025-06-12.md, bump to 1.4.0 (see https://example.com/docs/a.md or ops@example.com), "
        "fix ./src/app.py and v1.2.3-notes.md; not the Makefile. Then notes/2025-06-12.md again."
    )
    assert named_paths(request) == ["notes/2025-06-12.md", "src/app.py", "v1.2.3-notes.md"]
    assert named_paths("Fix the bug in the parser.") == []


@pytest.mark.parametrize(
    ("request_", "calls", "expected"),
    [
        # the same name, another directory than the one given
        ("Save it to notes/a.md.", [call("write_file", "a.md")], [Miss("write_file", "notes/a.md", "a.md")]),
        ("Fix src/app.js.", [call("edit_file", "dist/app.js")], [Miss("edit_file", "src/app.js", "dist/app.js")]),
        # an edited sibling in the named file's directory
        (
            "Change src/net/client.py.",
            [call("edit_file", "src/net/client_old.py")],
            [Miss("edit_file", "src/net/client.py", "src/net/client_old.py")],
        ),
        # another extension, or a typo, even for a bare name
        ("Save notes/a.md.", [call("write_file", "notes/a.txt")], [Miss("write_file", "notes/a.md", "notes/a.txt")]),
        (
            "Add to CONTRIBUTING.md.",
            [call("write_file", "CONTRIBUTNG.md")],
            [Miss("write_file", "CONTRIBUTING.md", "CONTRIBUTNG.md")],
        ),
    ],
)
def test_a_near_miss_of_a_named_file_is_found(request_, calls, expected):
    assert find_misses(request_, calls) == expected


@pytest.mark.parametrize(
    ("request_", "calls"),
    [
        ("Save it to notes/a.md.", [call("write_file", "notes/a.md")]),
        ("Fix ./src/app.py.", [call("edit_file", "src/app.py")]),
        ("Fix src/app.py.", [call("edit_file", "/home/me/ws/src/app.py")]),  # an absolute spelling of it
        ("Fix the bug in app.js.", [call("edit_file", "src/app.js")]),  # a bare name: the step finds where it is
        ("Add a test for utils.py.", [call("edit_file", "test_utils.py")]),  # a bare name's sibling may be right
        ("Summarize docs/notes.md.", [call("write_file", "docs/notes-summary.md")]),  # a derived new file
        (
            "Back up conf/app.toml, then edit it.",
            [call("write_file", "conf/app.toml.bak"), call("edit_file", "conf/app.toml", 1)],
        ),
        ("Write a README.", [call("write_file", "README.md")]),  # nothing named
        ("Save it to notes/a.md.", [call("read_file", "a.md")]),  # read, not written
        (
            "Save it to notes/a.md.",
            [call("write_file", "a.md", status="error", result="refused")],
        ),  # the status rules' case
    ],
)
def test_what_the_request_allows_is_no_miss(request_, calls):
    assert find_misses(request_, calls) == []


def test_the_labelled_sets_steps_that_worked_are_never_failed_by_it():
    """The tool sets (docs/learning.md): no step labelled worked trips the rule; the paths set was written
    after the rule, blind to it, to measure it (its numbers are the eval's, not asserted here)."""
    for name in ("judge-set-tools.jsonl", "judge-set-tools-holdout.jsonl", "judge-set-tools-paths.jsonl"):
        for case in load_cases(assets_dir() / name):
            if case["label"] == 1:
                assert find_misses(case["request"], tool_calls(case)) == [], case["id"]
    paths = load_cases(assets_dir() / "judge-set-tools-paths.jsonl")
    assert len(paths) >= 20 and {c["label"] for c in paths} == {1, -1}
    assert all(c["status"] == "ok" for case in paths for c in case["calls"])


def _stopped_judge(engine) -> Judge:
    stop = threading.Event()
    stop.set()  # any model call raises JudgeInterrupted
    return Judge(engine, JudgeConfig(), stop=stop)


def test_the_judge_fails_a_write_beside_the_named_file_without_the_model(engine):
    step = next_state((call("write_file", "2025-06-12.md", result="created 2025-06-12.md: 30 characters"),))
    verdict = _stopped_judge(engine).vote("Save these notes to notes/2025-06-12.md.", "<tool_call>…", step)
    assert verdict.prompt_version == EVIDENCE_VERSION and verdict.votes == [-1, -1, -1]
    assert "wrote 2025-06-12.md, the request named notes/2025-06-12.md" in verdict.score_outputs[0]
    assert verdict.hint == "Write the file the user named: notes/2025-06-12.md."


def test_a_steered_path_never_reaches_the_hint_and_a_right_one_goes_to_the_model(engine):
    """The written path is the model's argument (text read earlier may have steered it): the hint quotes only
    the user's path. A step that wrote the named file is the model's to judge."""
    steered = "../../home/me/.config/autostart/a.md"
    verdict = _stopped_judge(engine).vote("Save it to notes/a.md.", "…", next_state((call("write_file", steered),)))
    assert verdict.reward == -1 and verdict.hint == "Write the file the user named: notes/a.md."
    assert steered in verdict.score_outputs[0]  # the log says what was written
    with pytest.raises(JudgeInterrupted):
        _stopped_judge(engine).vote("Save it to notes/a.md.", "…", next_state((call("write_file", "notes/a.md"),)))
