"""The older judge methods, kept as baselines for the shipped channel judge (``docs/learning.md`` §1).

``judge.method = "logprob"`` (v2, :mod:`clawdesk.judge.baselines.fewshot`: the most likely answer
word after few-shot examples) and ``"sampled"`` (v1, :mod:`clawdesk.judge.baselines.sampled`:
sampled chat answers, :mod:`~clawdesk.judge.baselines.prompts` and
:mod:`~clawdesk.judge.baselines.grammar`) are what ``clawdesk eval --judge-set --judge-method``
compares the default with. Both are :class:`~clawdesk.judge.vote.VoteMethod` s: the judge loads
this package only when ``judge.method`` names one of them (:func:`clawdesk.judge.runner.method_for`).
Tool steps are always judged by the channel judge.
"""

from __future__ import annotations

from clawdesk.config import JudgeConfig
from clawdesk.judge.vote import VoteMethod


def baseline(config: JudgeConfig) -> VoteMethod:
    """The baseline vote method ``config.method`` names (``logprob`` or ``sampled``)."""
    if config.method == "logprob":
        from clawdesk.judge.baselines.fewshot import LogprobMethod

        return LogprobMethod(calibrate=config.calibrate)
    if config.method == "sampled":
        from clawdesk.judge.baselines.sampled import SampledMethod

        return SampledMethod(config)
    raise ValueError(f"judge.method {config.method!r} is not a baseline (logprob, sampled)")
