"""Persona files: a simulated user's requests, held-out prompts, checks and feedback (a TOML contract).

A persona says what one simulated person wants, in terms a program can check::

    name = "no-lists"
    description = "..."
    prompts = ["..."]          # training requests, cycled
    heldout = ["..."]          # never trained on; scored
    [[check]]                  # all must hold for a reply to satisfy the persona, which must also
                               # address its request (clawdesk.eval.topic)
    kind = "regex_absent"      # regex_absent | regex_present | max_words | min_words
    pattern = '...'            # regex kinds;   value = 60   for the word-count kinds
    [feedback]
    satisfied = ["..."]        # the user's next message after a satisfying reply (cycled)
    unsatisfied = ["..."]      # ... after one that is not
    hint = "..."               # the oracle's hint on unsatisfied turns

Every problem is a :class:`~clawdesk.errors.InputError` naming the file and the key.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawdesk.errors import InputError
from clawdesk.eval.topic import addresses

CHECK_KINDS = ("regex_absent", "regex_present", "max_words", "min_words")
_WORDS = re.compile(r"\S+")


def assets_dir() -> Path:
    """The project's ``assets/`` (next to the package in a source checkout, where ``pip install -e .`` runs it)."""
    return Path(__file__).resolve().parents[2] / "assets"


@dataclass(frozen=True)
class Check:
    kind: str
    pattern: str = ""
    value: int = 0

    def holds(self, reply: str) -> bool:
        if self.kind == "regex_absent":
            return re.search(self.pattern, reply) is None
        if self.kind == "regex_present":
            return re.search(self.pattern, reply) is not None
        n = len(_WORDS.findall(reply))
        return n <= self.value if self.kind == "max_words" else n >= self.value

    def describe(self) -> str:
        return f"{self.kind} {self.pattern!r}" if self.kind.startswith("regex") else f"{self.kind} {self.value}"


@dataclass(frozen=True)
class Persona:
    name: str
    description: str
    prompts: tuple[str, ...]
    heldout: tuple[str, ...]
    checks: tuple[Check, ...]
    satisfied: tuple[str, ...]
    unsatisfied: tuple[str, ...]
    hint: str
    path: Path

    def satisfies(self, reply: str, request: str) -> bool:
        """Whether ``reply`` to ``request`` addresses it and passes every check (an empty reply never does)."""
        return self.holds(reply) and addresses(request, reply)

    def holds(self, reply: str) -> bool:
        """Whether ``reply`` passes every check, whatever it answers (an empty reply never does)."""
        return bool(reply.strip()) and all(c.holds(reply) for c in self.checks)

    def feedback(self, satisfied: bool, i: int) -> str:
        """The simulated user's next message after interaction ``i``."""
        pool = self.satisfied if satisfied else self.unsatisfied
        return pool[i % len(pool)]


def shipped(kind: str) -> list[Path]:
    """The shipped files of a kind: ``assets/<kind>s/*.toml`` (kind: "persona" or "scenario")."""
    return sorted((assets_dir() / f"{kind}s").glob("*.toml"))


def shipped_personas() -> list[Path]:
    return shipped("persona")


def find_asset(spec: str, kind: str) -> Path:
    """A ``kind`` file's path, or the name of a shipped one (``assets/<kind>s/NAME.toml``)."""
    path = Path(spec).expanduser()
    if path.suffix == ".toml" or path.exists() or "/" in spec:
        if not path.is_file():
            raise InputError(f"{kind} file {path} does not exist")
        return path
    named = assets_dir() / f"{kind}s" / f"{spec}.toml"
    if named.is_file():
        return named
    names = ", ".join(p.stem for p in shipped(kind)) or "none found (run from a source checkout)"
    raise InputError(f"no {kind} named {spec!r}; shipped {kind}s: {names}. Or give a path to a .toml file.")


def read_toml(path: Path, kind: str) -> dict[str, Any]:
    """The parsed TOML of a ``kind`` file; unreadable or invalid files are an InputError naming it."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} is not valid TOML ({exc})") from exc
    except OSError as exc:
        raise InputError(f"cannot read {kind} file {path}: {exc.strerror}") from exc


def find_persona(spec: str) -> Path:
    """A persona file path, or the name of a shipped persona (``assets/personas/NAME.toml``)."""
    return find_asset(spec, "persona")


def load_persona(spec: str | Path) -> Persona:
    path = find_persona(str(spec))
    return parse_persona(read_toml(path, "persona"), path)


def parse_persona(raw: dict[str, Any], path: Path) -> Persona:
    def fail(key: str, why: str) -> InputError:
        return InputError(f"{path}: {key}: {why}")

    known = {"name", "description", "prompts", "heldout", "check", "feedback"}
    if unknown := sorted(set(raw) - known):
        raise fail(unknown[0], f"unknown key; known keys: {', '.join(sorted(known))}")

    def text(table: dict[str, Any], key: str, label: str, *, required: bool = True) -> str:
        value = table.get(key, "" if not required else None)
        if not isinstance(value, str) or (required and not value.strip()):
            raise fail(label, "must be a non-empty string")
        return value

    def texts(table: dict[str, Any], key: str, label: str) -> tuple[str, ...]:
        value = table.get(key)
        if not isinstance(value, list) or not value:
            raise fail(label, "must be a non-empty list of strings")
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                raise fail(f"{label}[{i}]", "must be a non-empty string")
        return tuple(value)

    prompts, heldout = texts(raw, "prompts", "prompts"), texts(raw, "heldout", "heldout")
    if overlap := sorted(set(prompts) & set(heldout)):
        raise fail("heldout", f"{overlap[0]!r} is also a training prompt; held-out prompts are never trained on")
    raw_checks = raw.get("check")
    if not isinstance(raw_checks, list) or not raw_checks:
        raise fail("check", "at least one [[check]] table is needed")
    checks = tuple(_parse_check(c, f"check[{i}]", fail) for i, c in enumerate(raw_checks))
    feedback = raw.get("feedback")
    if not isinstance(feedback, dict):
        raise fail("feedback", "a [feedback] table with satisfied, unsatisfied and hint is needed")
    if unknown := sorted(set(feedback) - {"satisfied", "unsatisfied", "hint"}):
        raise fail(f"feedback.{unknown[0]}", "unknown key; known keys: satisfied, unsatisfied, hint")
    return Persona(
        name=text(raw, "name", "name"),
        description=text(raw, "description", "description", required=False),
        prompts=prompts,
        heldout=heldout,
        checks=checks,
        satisfied=texts(feedback, "satisfied", "feedback.satisfied"),
        unsatisfied=texts(feedback, "unsatisfied", "feedback.unsatisfied"),
        hint=text(feedback, "hint", "feedback.hint"),
        path=path,
    )


def _parse_check(raw: Any, label: str, fail) -> Check:
    if not isinstance(raw, dict):
        raise fail(label, "must be a table")
    kind = raw.get("kind")
    if kind not in CHECK_KINDS:
        raise fail(f"{label}.kind", f"must be one of {', '.join(CHECK_KINDS)}, got {kind!r}")
    if kind.startswith("regex"):
        if unknown := sorted(set(raw) - {"kind", "pattern"}):
            raise fail(f"{label}.{unknown[0]}", "unknown key for a regex check (it takes pattern)")
        pattern = raw.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise fail(f"{label}.pattern", "must be a non-empty regular expression")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise fail(f"{label}.pattern", f"is not a valid regular expression ({exc})") from exc
        return Check(kind, pattern=pattern)
    if unknown := sorted(set(raw) - {"kind", "value"}):
        raise fail(f"{label}.{unknown[0]}", "unknown key for a word-count check (it takes value)")
    value = raw.get("value")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise fail(f"{label}.value", f"must be a whole number ≥ 1, got {value!r}")
    return Check(kind, value=value)
