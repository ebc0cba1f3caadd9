"""The v1 judge (a baseline, ``judge.method = "sampled"``): sampled chat answers to the v1 prompts.

A score vote is a sampled answer to the score prompt (:mod:`clawdesk.judge.baselines.prompts`)
ending in ``\\boxed{+1|0|-1}``, a hint vote a sampled answer to the hint prompt; with
``judge.constrained`` both are grammar-constrained (:mod:`clawdesk.judge.baselines.grammar`) so
they always parse. The accepted hint is the longest acceptable one among the hint votes
(:func:`clawdesk.judge.parse.accept_hint`).

A sampled vote yields to the chat between tokens: free text resumes from the tokens it already
had (with a fresh random stream), a grammar-constrained vote restarts, since the grammar's state
cannot be restored mid-way (votes are short).
"""

from __future__ import annotations

from clawdesk.config import JudgeConfig
from clawdesk.engine import SamplingParams
from clawdesk.judge.baselines.grammar import HINT_GRAMMAR, SCORE_GRAMMAR
from clawdesk.judge.baselines.prompts import PROMPT_VERSION, hint_messages, score_messages
from clawdesk.judge.parse import accept_hint, parse_score
from clawdesk.judge.vote import JUDGE_PROMPT_CHUNK, Ballot, NextState, Scorer


class SampledMethod:
    """The v1 vote method: m sampled score answers, then m sampled hint answers."""

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config

    def cast(
        self, judge: Scorer, request: str, reply: str, next_state: NextState, ballot: Ballot, *, seed: int = 0
    ) -> tuple[str, str | None]:
        texts = (request, reply, next_state.text)
        for kind in ("score", "hint"):
            build = score_messages if kind == "score" else hint_messages
            grammar = (SCORE_GRAMMAR if kind == "score" else HINT_GRAMMAR) if self.config.constrained else None
            for i in range(ballot.m):
                ids = fit(judge, build, texts, next_state.role)
                text = sample(judge, ids, seed=seed * 1000 + (0 if kind == "score" else 500) + i, grammar=grammar)
                ballot.cast(kind, parse_score(text) if kind == "score" else None, text)
        return PROMPT_VERSION, accept_hint(ballot.outputs["hint"], reply=reply)


def fit(judge: Scorer, build, texts: tuple[str, str, str], role: str) -> list[int]:
    """Render a judge prompt, clipping the quoted texts until it fits the context window."""
    engine = judge.engine
    room = engine.n_ctx - judge.config.max_tokens
    limit = max(200, room - 512)  # characters per quoted text; ~3 chars per token, 3 texts
    while True:
        clipped = [clip(t, limit) for t in texts]
        ids = engine.tokenize(engine.render(build(*clipped, role), thinking=False))
        if len(ids) <= room or limit <= 50:
            return ids[: max(1, room)]
        limit //= 2


def sample(judge: Scorer, ids: list[int], *, seed: int, grammar: str | None = None) -> str:
    """One sampled vote on ``ids`` (base weights), paused while the chat is busy and resumed after."""
    cfg = judge.config
    so_far: list[int] = []

    def generate(stop_when) -> str | None:
        nonlocal so_far
        params = SamplingParams(temperature=cfg.temperature, top_p=0.95, max_tokens=cfg.max_tokens - len(so_far))
        reply = judge.engine.generate(
            ids,
            params,
            stop_when=stop_when,
            use_adapter=False,
            resume_ids=so_far,
            seed=seed + 7919 * len(so_far),  # a resumed vote continues with a fresh stream
            prompt_chunk=JUDGE_PROMPT_CHUNK,
            grammar=grammar,
        )
        if reply.status != "cancelled":
            return reply.raw_text
        so_far = [] if grammar else reply.reply_ids  # paused for the chat (see the module docstring)
        return reply.raw_text if len(so_far) >= cfg.max_tokens else None

    return judge.yielding(generate)


def clip(text: str, limit: int) -> str:
    """Keep the head and tail of an over-long text: the judge needs its gist, not all of it."""
    if len(text) <= limit:
        return text
    half = max(1, (limit - 7) // 2)
    return f"{text[:half]} […] {text[-half:]}"
