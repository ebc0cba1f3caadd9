"""What a client sees of a reply while it streams, and once it has ended.

The engine streams raw text: a leading ``<think>`` block, the answer, and (when tools were offered)
``<tool_call>`` blocks. OpenAI clients expect the thinking apart (``reasoning_content``, as vLLM and
llama-server send it), the calls as structured ``tool_calls`` at the end, and no ``stop`` string in
the text. :class:`ReplyView` turns the growing raw text into the two visible strings, holding back a
tail that may still become a marker (``</thi``, ``<tool_c``, the start of a stop string), so what was
sent is always a prefix of the final text and nothing has to be taken back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from clawdesk.engine.prompt import THINK_CLOSE, THINK_OPEN
from clawdesk.engine.stops import held_tail

CALL_OPEN = "<tool_call>"


def hold_back(text: str, marker: str) -> str:
    """``text`` without a tail that is a proper prefix of ``marker`` (it may still become the marker)."""
    return text[: len(text) - held_tail(text, (marker,))]


@dataclass(frozen=True)
class Visible:
    reasoning: str
    content: str
    stopped: bool = False  # a stop string appeared in the content (it is cut off)


def visible(raw: str, *, tools: bool, stops: Sequence[str], started_in_thinking: bool, final: bool) -> Visible:
    """The reasoning and content of ``raw`` a client may see now (``final``: the reply has ended)."""
    reasoning = ""
    body = raw.lstrip()
    if body.startswith(THINK_OPEN) or started_in_thinking:
        if body.startswith(THINK_OPEN):
            body = body[len(THINK_OPEN) :]
        thought, closed, rest = body.partition(THINK_CLOSE)
        thought = thought.lstrip()
        if not closed:
            # Trailing whitespace waits for the next text: the thought may end here (it is stripped).
            return Visible(thought.rstrip() if final else hold_back(thought, THINK_CLOSE).rstrip(), "")
        reasoning, content = thought.rstrip(), rest.lstrip()
    elif not final and THINK_OPEN.startswith(body):
        return Visible("", "")  # "<thi" may become "<think>"
    else:
        content = body
    if tools:
        cut = content.find(CALL_OPEN)
        if cut >= 0:
            content = content[:cut]
        elif not final:
            content = hold_back(content, CALL_OPEN)
    stopped = False
    for stop in stops:
        at = content.find(stop)
        if at >= 0:
            content, stopped = content[:at], True
    if not final and not stopped:
        for stop in stops:
            content = hold_back(content, stop)
    return Visible(reasoning, content.rstrip(), stopped)  # trailing whitespace waits, as the thought's


class ReplyView:
    """Feeds raw pieces in, gives back the new visible text (reasoning, content) since the last call."""

    def __init__(self, *, tools: bool, stops: Sequence[str] = (), started_in_thinking: bool = False):
        self.tools = tools
        self.stops = tuple(s for s in stops if s)
        self.started_in_thinking = started_in_thinking
        self.raw = ""
        self.sent_reasoning = ""
        self.sent_content = ""
        self.stopped = False

    def feed(self, piece: str) -> tuple[str, str]:
        self.raw += piece
        return self._advance(final=False)

    def finish(self) -> tuple[str, str]:
        return self._advance(final=True)

    def _advance(self, *, final: bool) -> tuple[str, str]:
        now = visible(
            self.raw, tools=self.tools, stops=self.stops, started_in_thinking=self.started_in_thinking, final=final
        )
        self.stopped = self.stopped or now.stopped
        return self._delta("sent_reasoning", now.reasoning), self._delta("sent_content", now.content)

    def _delta(self, attr: str, text: str) -> str:
        sent = getattr(self, attr)
        # What was sent is a prefix of what is visible now (markers are held back until they are
        # certain); a final strip may only shorten the view, which sends nothing more.
        if not text.startswith(sent):
            return ""
        setattr(self, attr, text)
        return text[len(sent) :]
