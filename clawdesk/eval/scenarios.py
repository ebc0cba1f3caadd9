"""Scenario files: preferences that arrive, change and stack over one run (a TOML contract), and the phase logic.

A scenario is a sequence of phases; each phase names the personas active in it and how many
interactions it lasts::

    name = "add-no-lists"
    description = "Wants brevity first; later also dislikes lists."
    [[phase]]
    personas = ["brief"]              # shipped persona names, or paths relative to this file
    interactions = 48
    [[phase]]
    personas = ["brief", "no-lists"]  # both active: a reply satisfies only if every check holds
    interactions = 48

What a phase means for the simulated user (:class:`Phase`): its training prompts interleave the
active personas' prompts; a reply satisfies it only when it addresses its request
(:mod:`clawdesk.eval.topic`) and every active persona's checks hold; otherwise the user says the
reply answered nothing, or answers with the unsatisfied message and hint of the *first* persona
whose check failed (one complaint at a time, as a person would make it). Its held-out set is the
active personas' held-out prompts, each reply judged by all active checks.

A ``--persona`` run is a one-phase scenario (:meth:`Scenario.single`): one code path for both.
The pure result logic (reaching the target, retention) lives here too, so it is tested on
hand-built data. Every file problem is an :class:`~clawdesk.errors.InputError` naming the file and key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawdesk.errors import InputError
from clawdesk.eval.personas import Persona, find_asset, load_persona, read_toml, shipped
from clawdesk.eval.topic import OFF_TOPIC_HINT, addresses, off_topic_message

TARGET = 0.8  # a phase reaches its target at a held-out score ≥ this ...
GAIN = 0.3  # ... or ≥ its base score + this (a persona the model never shows may not reach 0.8 soon)
_EPS = 1e-9  # 0.25 + 0.3 is 0.55000000000000004 in floating point; a score of 0.55 reaches it


@dataclass(frozen=True)
class Reaction:
    """The simulated user's answer to one served reply: the next message, and the oracle's hint."""

    satisfied: bool
    message: str
    hint: str | None  # the hint of the first persona whose check failed; None when satisfied


@dataclass(frozen=True)
class Phase:
    personas: tuple[Persona, ...]
    interactions: int

    def __post_init__(self) -> None:
        if not self.personas:
            raise ValueError("a phase needs at least one persona")
        if self.interactions < 1:
            raise ValueError(f"a phase needs at least 1 interaction, got {self.interactions}")

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.personas]

    def prompt(self, k: int) -> str:
        """The phase's ``k``-th training prompt: the active personas take turns, each cycling its own prompts."""
        n = len(self.personas)
        persona = self.personas[k % n]
        return persona.prompts[(k // n) % len(persona.prompts)]

    def first_failing(self, reply: str) -> Persona | None:
        """The first active persona whose checks ``reply`` fails (None: every check holds)."""
        return next((p for p in self.personas if not p.holds(reply)), None)

    def satisfies(self, reply: str, request: str) -> bool:
        return addresses(request, reply) and self.first_failing(reply) is None

    def react(self, request: str, reply: str, i: int) -> Reaction:
        """The user's next message after ``reply`` to ``request`` (``i`` = interactions since the run started,
        cycles the pools). A reply that answers nothing is called out before any persona's check."""
        if not addresses(request, reply):
            return Reaction(False, off_topic_message(i), OFF_TOPIC_HINT)
        failing = self.first_failing(reply)
        if failing is None:
            return Reaction(True, self.personas[0].feedback(True, i), None)
        return Reaction(False, failing.feedback(False, i), failing.hint)

    # The scoring target (what :class:`~clawdesk.eval.scoring.Scorer` needs): held-out prompts, the checks, a hint.
    @property
    def heldout(self) -> tuple[str, ...]:
        return tuple(prompt for p in self.personas for prompt in p.heldout)

    @property
    def hint(self) -> str:
        """Every active persona's hint: what the teacher is told when all of them must hold (the with-hint ceiling)."""
        return " ".join(p.hint for p in self.personas)

    def own_scores(self, replies: list[str]) -> dict[str, float]:
        """Each active persona's own held-out score, from the replies to :attr:`heldout` (in its order)."""
        if len(replies) != len(self.heldout):
            raise ValueError(f"{len(replies)} replies for {len(self.heldout)} held-out prompts")
        scores, at = {}, 0
        for p in self.personas:
            mine = replies[at : at + len(p.heldout)]
            scores[p.name] = sum(p.satisfies(r, q) for r, q in zip(mine, p.heldout, strict=True)) / len(mine)
            at += len(mine)
        return scores


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    phases: tuple[Phase, ...]
    path: Path | None = None  # None for a one-persona run

    def __post_init__(self) -> None:
        if not self.phases:
            raise ValueError("a scenario needs at least one phase")

    @classmethod
    def single(cls, persona: Persona, interactions: int) -> Scenario:
        """A ``--persona`` run: one phase, one persona."""
        return cls(persona.name, persona.description, (Phase((persona,), interactions),))

    @property
    def total(self) -> int:
        return sum(p.interactions for p in self.phases)

    def starts(self) -> list[int]:
        """Interactions before each phase."""
        out, at = [], 0
        for p in self.phases:
            out.append(at)
            at += p.interactions
        return out

    def retained(self) -> list[str]:
        """Personas of an earlier phase that are still active in the last one: whose retention is reported."""
        earlier = {n for p in self.phases[:-1] for n in p.names}
        return [n for n in self.phases[-1].names if n in earlier]


def interactions_to_target(scores: list[list[float]], start: int, base: float | None) -> int | None:
    """Interactions from ``start`` to the first score ≥ TARGET (or ≥ base + GAIN when ``base`` is given); None if never.

    ``scores`` are ``[interactions since run start, score]`` pairs: a phase's, its base point first.
    """
    for n, s in scores:
        if s >= TARGET - _EPS or (base is not None and s >= base + GAIN - _EPS):
            return int(n) - start
    return None


def retention(scenario: Scenario, replies: list[str]) -> dict[str, float]:
    """Each persona of an earlier phase still active at the end: its own held-out score, from the
    last phase's held-out ``replies`` (see :meth:`Phase.own_scores`)."""
    own = scenario.phases[-1].own_scores(replies)
    return {name: own[name] for name in scenario.retained()}


def shipped_scenarios() -> list[Path]:
    return shipped("scenario")


def find_scenario(spec: str) -> Path:
    """A scenario file path, or the name of a shipped scenario (``assets/scenarios/NAME.toml``)."""
    return find_asset(spec, "scenario")


def load_scenario(spec: str | Path) -> Scenario:
    path = find_scenario(str(spec))
    return parse_scenario(read_toml(path, "scenario"), path)


def parse_scenario(raw: dict[str, Any], path: Path) -> Scenario:
    def fail(key: str, why: str) -> InputError:
        return InputError(f"{path}: {key}: {why}")

    known = {"name", "description", "phase"}
    if unknown := sorted(set(raw) - known):
        raise fail(unknown[0], f"unknown key; known keys: {', '.join(sorted(known))}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise fail("name", "must be a non-empty string")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise fail("description", "must be a string")
    raw_phases = raw.get("phase")
    if not isinstance(raw_phases, list) or not raw_phases:
        raise fail("phase", "at least one [[phase]] table is needed")
    phases = tuple(_parse_phase(p, f"phase[{i}]", path, fail) for i, p in enumerate(raw_phases))
    return Scenario(name=name, description=description, phases=phases, path=path)


def _parse_phase(raw: Any, label: str, path: Path, fail) -> Phase:
    if not isinstance(raw, dict):
        raise fail(label, "must be a table")
    if unknown := sorted(set(raw) - {"personas", "interactions"}):
        raise fail(f"{label}.{unknown[0]}", "unknown key; known keys: interactions, personas")
    specs = raw.get("personas")
    if not isinstance(specs, list) or not specs:
        raise fail(f"{label}.personas", "must be a non-empty list of persona names or paths")
    personas = []
    for k, spec in enumerate(specs):
        key = f"{label}.personas[{k}]"
        if not isinstance(spec, str) or not spec.strip():
            raise fail(key, "must be a persona name or a path to a persona .toml")
        try:
            persona = load_persona(_persona_spec(spec, path))
        except InputError as exc:
            raise fail(key, str(exc)) from exc
        if persona.name in (p.name for p in personas):
            raise fail(key, f"persona {persona.name!r} is listed twice in this phase")
        personas.append(persona)
    interactions = raw.get("interactions")
    if not isinstance(interactions, int) or isinstance(interactions, bool) or interactions < 1:
        raise fail(f"{label}.interactions", f"must be a whole number ≥ 1, got {interactions!r}")
    return Phase(tuple(personas), interactions)


def _persona_spec(spec: str, scenario_path: Path) -> str | Path:
    """A path-like spec is relative to the scenario file; a bare name is a shipped persona."""
    if spec.endswith(".toml") or "/" in spec:
        path = Path(spec).expanduser()
        return path if path.is_absolute() else scenario_path.parent / path
    return spec
