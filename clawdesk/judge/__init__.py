"""Judge stage: votes on a reply from its next state, hindsight hints and teacher prompts.

One interface (:mod:`clawdesk.judge.vote`, :meth:`clawdesk.judge.runner.Judge.vote`) judges turns
and tool steps; the shipped method is :mod:`clawdesk.judge.channel`; the older methods are
baselines (:mod:`clawdesk.judge.baselines`) loaded only when ``judge.method`` names one.
"""
