"""The trainer process's progress protocol (clawdesk/learn/protocol.py): what one side prints the other reads.

The real process's lines are decoded in test_trainer.py; here every message kind round-trips, the
wire format stays the one earlier apps and the bench read, and a line that is not one is skipped.
"""

from __future__ import annotations

import json

import pytest

from clawdesk.learn.protocol import TrainerFailed, TrainerStarted, TrainProgress, decode, encode

MESSAGES = [
    TrainerStarted(True),
    TrainerStarted(False),
    TrainProgress("loading", 0, 1, "loading the base model"),
    TrainProgress("step", 1, 2, "step 1/2: loss 0.1", {"loss": 0.1, "reward_mean": -0.5}),
    TrainProgress("done", 2, 2, "finished: v1, v2", {"versions": 2.0}),
    TrainerFailed("Out of memory on cpu while a training step.", "TrainError"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips_on_one_line(message):
    line = encode(message)
    assert line.endswith("\n") and line.count("\n") == 1
    assert decode(line) == message


def test_the_wire_format_is_unchanged():
    assert json.loads(encode(TrainerStarted(True))) == {"phase": "starting", "pausable": True}
    assert json.loads(encode(TrainerFailed("boom", "TrainError"))) == {
        "phase": "error", "error": "boom", "kind": "TrainError"
    }  # fmt: skip
    assert json.loads(encode(TrainProgress("step", 1, 1, "m", {"loss": 1.0}))) == {
        "phase": "step", "step": 1, "steps": 1, "message": "m", "metrics": {"loss": 1.0}
    }  # fmt: skip


@pytest.mark.parametrize("line", ["", "Loading checkpoint shards: 100%", "[1, 2]", '{"no": "phase"}', "null\n"])
def test_a_line_that_is_not_a_message_is_skipped(line):
    assert decode(line) is None


def test_a_short_line_takes_the_defaults():
    assert decode('{"phase": "done"}') == TrainProgress("done", 0, 0, "")
    assert decode('{"phase": "step", "step": "x", "metrics": [1]}') == TrainProgress("step", 0, 0, "")
    assert decode('{"phase": "error"}') == TrainerFailed("", "")
