"""train.opd_copy_ngram: reply tokens that write the hint's words back get no OPD advantage.

The pure rule on token lists, then the learner on the tiny random Qwen3 GGUF: a reply made only of
the teacher prompt's added tokens trains exactly as with w_opd = 0, and a reply that copies nothing
trains exactly as with the option off.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from clawdesk.config import TrainConfig
from clawdesk.learn.copy_mask import copied_positions
from clawdesk.learn.samples import Sample
from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf
from tests.learn.test_levers_learner import _assert_same, _capture_grads, _learner

PROMPT = [11, 12, 13, 14, 15]
HINTED = [*PROMPT, 90, 91, 92, 93]  # the teacher's prompt: the student's plus the hint's tokens


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_qwen3_gguf(tmp_path_factory.mktemp("tiny") / "tiny-qwen3.gguf")


def test_only_runs_that_the_teacher_prompt_adds_are_copied():
    assert copied_positions([90, 91, 92, 93], HINTED, PROMPT, 2) == [True] * 4  # the hint written back
    assert copied_positions([1, 90, 91, 2], HINTED, PROMPT, 2) == [False, True, True, False]
    assert copied_positions([1, 90, 91, 2], HINTED, PROMPT, 3) == [False] * 4  # a run shorter than n
    assert copied_positions([12, 13, 14], HINTED, PROMPT, 2) == [False] * 3  # the student has these
    assert copied_positions([90, 91], PROMPT, PROMPT, 2) == [False, False]  # teacher = student: nothing added
    with pytest.raises(ValueError):
        copied_positions([1], HINTED, PROMPT, 0)


def test_the_option_is_validated():
    assert TrainConfig(opd_copy_ngram=4).opd_copy_ngram == 4
    for bad in (1, 17, -1):
        with pytest.raises(ValueError, match="opd_copy_ngram"):
            TrainConfig(opd_copy_ngram=bad)


def _grads(gguf, samples: list[Sample], **cfg) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)  # the same fresh LoRA every time
    learner = _learner(gguf, **cfg)
    captured: dict[str, torch.Tensor] = {}
    _capture_grads(learner, captured)
    learner.step(samples, *learner.score(samples), stop=lambda: False)
    return captured


def _sample(reply: list[int], reward: float) -> Sample:
    return Sample(turn_id=1, prompt_ids=PROMPT, reply_ids=reply, reward=reward, hint="h", teacher_prompt_ids=HINTED)


def test_a_reply_that_copies_the_hint_gets_no_opd_advantage(tiny_gguf):
    copying = [_sample([90, 91, 92, 93], 1.0), _sample([91, 92, 93, 90, 91], -1.0)]
    masked = _grads(tiny_gguf, copying, opd_copy_ngram=2)
    _assert_same(masked, _grads(tiny_gguf, copying, w_opd=0.0))  # every token copied: the OPD term is gone
    with pytest.raises(AssertionError):  # and the OPD term was not zero to begin with
        _assert_same(masked, _grads(tiny_gguf, copying))
    own = [dataclasses.replace(s, reply_ids=[20, 21, 22, 23]) for s in copying]  # copies nothing
    _assert_same(_grads(tiny_gguf, own, opd_copy_ngram=2), _grads(tiny_gguf, own))
