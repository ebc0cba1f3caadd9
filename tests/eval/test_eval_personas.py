"""Persona files: the TOML contract, its error messages, each check kind, and the shipped personas."""

from __future__ import annotations

import pytest

from clawdesk.errors import InputError
from clawdesk.eval.personas import Check, find_persona, load_persona, shipped_personas

GOOD = """
name = "no-lists"
description = "Dislikes lists."
prompts = ["How do I make tea?", "Explain what a CPU does."]
heldout = ["How do I boil an egg?"]
[[check]]
kind = "regex_absent"
pattern = '(?m)^\\s*([-*•]|\\d+[.)])\\s'
[[check]]
kind = "max_words"
value = 12
[feedback]
satisfied = ["Thanks.", "Great."]
unsatisfied = ["No lists please."]
hint = "Answer in plain prose."
"""


def write(tmp_path, text: str, name: str = "p.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_valid_persona_loads_and_checks_replies(tmp_path):
    p = load_persona(write(tmp_path, GOOD))
    assert p.name == "no-lists" and len(p.prompts) == 2 and p.heldout == ("How do I boil an egg?",)
    egg = p.heldout[0]
    assert p.satisfies("Boil water, then steep the tea for three minutes.", egg)
    assert not p.satisfies("- boil water\n- steep", egg)  # a list
    assert not p.holds(" ".join(["word"] * 13))  # too long
    assert not p.holds("   ")  # an empty reply never satisfies
    # Every check holds, but the reply shares no content word with the request: it answers nothing.
    assert p.holds("Keep it short, please.") and not p.satisfies("Keep it short, please.", egg)
    assert p.feedback(True, 0) == "Thanks." and p.feedback(True, 3) == "Great."  # cycled
    assert p.feedback(False, 5) == "No lists please."


@pytest.mark.parametrize(
    ("check", "reply", "holds"),
    [
        (Check("regex_absent", pattern=r"\*\*"), "plain text", True),
        (Check("regex_absent", pattern=r"\*\*"), "a **bold** word", False),
        (Check("regex_present", pattern=r"(?i)\bgreat\b"), "Great work on the intro.", True),
        (Check("regex_present", pattern=r"(?i)\bgreat\b"), "Good work.", False),
        (Check("max_words", value=3), "one two three", True),
        (Check("max_words", value=3), "one two three four", False),
        (Check("min_words", value=3), "one two three", True),
        (Check("min_words", value=3), "one two", False),
    ],
)
def test_each_check_kind(check, reply, holds):
    assert check.holds(reply) is holds


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda s: s.replace('name = "no-lists"', "name = 3"), "name"),
        (
            lambda s: s.replace('prompts = ["How do I make tea?", "Explain what a CPU does."]', "prompts = []"),
            "prompts",
        ),
        (lambda s: s.replace('heldout = ["How do I boil an egg?"]', 'heldout = ["How do I make tea?"]'), "heldout"),
        (lambda s: s.replace('kind = "max_words"', 'kind = "max_chars"'), "check[1].kind"),
        (lambda s: s.replace("value = 12", "value = 0"), "check[1].value"),
        (lambda s: s.replace("value = 12", 'value = 12\npattern = "x"'), "check[1].pattern"),
        (lambda s: s.replace("pattern = '(?m)", "pattern = '(?m)(["), "check[0].pattern"),
        (lambda s: s.replace('hint = "Answer in plain prose."', "hint = 1"), "feedback.hint"),
        (
            lambda s: s.replace('unsatisfied = ["No lists please."]', 'unsatisfied = ["ok", 2]'),
            "feedback.unsatisfied[1]",
        ),
        (lambda s: s.replace("[feedback]", "[feedback]\ntone = 'warm'"), "feedback.tone"),
        (lambda s: "colour = 'red'\n" + s, "colour"),
        (lambda s: s.split("[[check]]")[0] + "[feedback]" + s.split("[feedback]")[1], "check"),
    ],
)
def test_invalid_personas_name_the_file_and_key(tmp_path, edit, key):
    path = write(tmp_path, edit(GOOD))
    with pytest.raises(InputError) as err:
        load_persona(path)
    assert str(path) in str(err.value) and f": {key}:" in str(err.value)


def test_bad_toml_and_missing_files_are_input_errors(tmp_path):
    bad = write(tmp_path, "name = [unclosed")
    with pytest.raises(InputError, match="not valid TOML"):
        load_persona(bad)
    with pytest.raises(InputError, match="does not exist"):
        load_persona(tmp_path / "missing.toml")
    with pytest.raises(InputError, match=r"shipped personas: .*student"):
        load_persona("no-such-persona")


def test_shipped_personas_meet_the_contract():
    paths = shipped_personas()
    names = {p.stem for p in paths}
    assert {"student", "teacher"} <= names and len(paths) >= 4  # the paper's two, and ≥ 4 in all
    for path in paths:
        p = load_persona(path.stem)
        assert find_persona(path.stem) == path and p.name == path.stem
        assert len(p.prompts) >= 20 and len(p.heldout) >= 16, path
