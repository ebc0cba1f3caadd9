"""Held-out scoring: the fraction of a persona's held-out prompts whose greedy reply passes its checks.

Replies are greedy (temperature 0) on a fresh cache each, so a score depends only on the weights
served, never on what was cached before (see the README's known limits). ``hint=True`` appends the
persona's hint to each prompt and serves the base weights: the teacher's ceiling, i.e. whether the
hint moves this model at all. With the memory on (``--memory on``) a score serves the prompts with
the preference items in the system prompt, as the chat would (``Scorer.memory``; the with-hint score
never does). Nothing here is recorded in the turn log. What is scored is a
:class:`Target`: one persona, or a scenario phase (its personas' held-out prompts, all their checks).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from clawdesk.engine import Engine, SamplingParams
from clawdesk.engine.prompt import build_messages
from clawdesk.errors import InputError
from clawdesk.eval.personas import assets_dir
from clawdesk.judge.parse import enhanced_user_message
from clawdesk.preferences import ECHO_STOPS, place_memory

NEUTRAL_SET = "neutral-set.jsonl"


class Target(Protocol):
    """What is scored: a :class:`~clawdesk.eval.personas.Persona` or a :class:`~clawdesk.eval.scenarios.Phase`."""

    @property
    def heldout(self) -> tuple[str, ...]: ...

    @property
    def hint(self) -> str: ...

    def satisfies(self, reply: str, request: str) -> bool: ...


@dataclass
class Scorer:
    engine: Engine
    persona: Target
    system_prompt: str
    max_tokens: int
    last_replies: list[str] = field(default_factory=list)  # of the latest score() call, for inspection
    # [memory hook] the preference memory's block, as a chat gets it now (clawdesk.eval.memory)
    memory: Callable[[], str] | None = None

    def reply(self, prompt: str, *, hint: bool = False) -> str:
        system, user = self.system_prompt, enhanced_user_message(prompt, self.persona.hint) if hint else prompt
        if self.memory is not None and not hint:
            system, user = place_memory(system, user, self.memory())
        built = self.engine.build_prompt(system, [], user, thinking=False, reply_room=self.max_tokens)
        self.engine.reset_cache()
        params = SamplingParams(temperature=0.0, max_tokens=self.max_tokens, stop=ECHO_STOPS)
        return self.engine.generate(built.token_ids, params, use_adapter=not hint).content

    def score(self, *, hint: bool = False) -> float:
        self.last_replies = [self.reply(p, hint=hint) for p in self.persona.heldout]
        pairs = zip(self.last_replies, self.persona.heldout, strict=True)
        return sum(self.persona.satisfies(r, q) for r, q in pairs) / len(self.last_replies)


def neutral_pairs(engine: Engine, system_prompt: str) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, reply ids) of the shipped neutral Q&A set, rendered as single chat turns."""
    path = assets_dir() / NEUTRAL_SET
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the neutral text set {path} ({exc}); run from a source checkout") from exc
    pairs = []
    for row in rows:
        text = engine.render(build_messages(system_prompt, [], row["prompt"]), thinking=False)
        pairs.append((engine.tokenize(text), engine.tokenize_plain(row["reply"])))
    return pairs
