"""GBNF grammars that make every v1 (sampled baseline) judge vote parseable (``judge.constrained``).

The score grammar allows one short line of reasoning, then forces ``\\boxed{+1|0|-1}``; the hint
grammar forces ``Useful: no`` or ``Useful: yes`` followed by a ``[HINT_START] … [HINT_END]``
block of 11–240 characters. The choice between the alternatives is still the model's: the
grammar only removes the formats :mod:`clawdesk.judge.parse` could not read. Both outputs parse
with the same parser as free-form votes.
"""

SCORE_GRAMMAR = r"""
root   ::= reason? "\\boxed{" score "}"
reason ::= [^\\\n<\[]{1,100} "\n"
score  ::= "+1" | "0" | "-1"
"""

HINT_GRAMMAR = r"""
root ::= "Useful: " ( "no" | "yes\n[HINT_START] " hint " [HINT_END]" )
hint ::= [^\[\]\n<\\]{11,240}
"""
