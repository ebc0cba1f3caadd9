"""The scripted engine of the UI tests and the real llama.cpp engine both satisfy ``ChatEngine``.

Signatures are compared parameter by parameter (name, kind, default, annotation as written) for every
member of the protocol, so a change to ``Engine.generate`` that the scripted engine does not follow
(or the reverse) fails here instead of letting UI tests pass calls the real engine would refuse.
"""

from __future__ import annotations

import inspect

from clawdesk.engine import Engine
from clawdesk.engine.protocol import ChatEngine
from tests.support.scripted_engine import ScriptedEngine

METHODS = ("tokenize", "build_prompt", "generate", "chat_turn", "close")
PROPERTIES = ("n_ctx", "supports_thinking", "supports_tools")


def _shape(fn) -> list[tuple]:
    sig = inspect.signature(fn)
    params = [(p.name, p.kind, repr(p.default), str(p.annotation)) for p in sig.parameters.values()]
    return [*params, ("return", str(sig.return_annotation))]


def divergences(cls: type) -> list[str]:
    """Where ``cls`` differs from :class:`ChatEngine` (empty when it matches)."""
    out = []
    for name in METHODS:
        want, got = _shape(getattr(ChatEngine, name)), _shape(getattr(cls, name))
        if name == "chat_turn":  # a @contextmanager's return is written Iterator[None]; compare the parameters
            want, got = want[:-1], got[:-1]
        if want != got:
            out.append(f"{cls.__name__}.{name}: {got} != {want}")
    for name in PROPERTIES:
        if not isinstance(inspect.getattr_static(cls, name), property):
            out.append(f"{cls.__name__}.{name} is not a property")
    return out


def test_the_protocol_lists_every_member_checked():
    members = {n for n in vars(ChatEngine) if not n.startswith("_")} | set(ChatEngine.__annotations__)
    assert members == {*METHODS, *PROPERTIES, "identity"}


def test_the_real_engine_matches_the_protocol():
    assert divergences(Engine) == []


def test_the_scripted_engine_matches_the_protocol_and_is_one():
    assert divergences(ScriptedEngine) == []
    assert isinstance(ScriptedEngine(), ChatEngine)


def test_a_diverging_signature_is_caught():
    class Drifted(ScriptedEngine):
        def generate(self, prompt_ids, params, *, cancel=None):  # lost keyword arguments
            return super().generate(prompt_ids, params, cancel=cancel)

    assert [d.split(":")[0] for d in divergences(Drifted)] == ["Drifted.generate"]


def test_the_real_engine_is_a_chat_engine(engine):
    assert isinstance(engine, ChatEngine)
