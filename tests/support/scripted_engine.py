"""A scripted stand-in for :class:`clawdesk.engine.Engine`, faked only at the model boundary.

UI tests need replies whose timing they control (Esc mid-reply, key presses while a reply is being
written) and a ``<think>`` block on demand; the bundled SmolLM2 gives neither. ``ScriptedEngine``
keeps the real prompt path (``Engine.build_prompt`` with a real Jinja chat template, context
trimming included) and replaces only what llama.cpp does: tokenizing and sampling. Replies come
from a script, one word-piece per token, with an optional per-token delay and an optional *hold*
(stop after N tokens until the test calls :meth:`ScriptedEngine.release` or the reply is
cancelled), so timing tests need no sleeps.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clawdesk.engine import Delta, Engine, Exchange, ModelIdentity, Prompt, Reply, SamplingParams
from clawdesk.engine.llama import PROMPT_CHUNK
from clawdesk.engine.preempt import Preemption
from clawdesk.engine.prompt import ChatTemplate, in_thinking, split_thinking
from clawdesk.engine.repeats import repeat_period
from clawdesk.engine.stops import StopCut

# ChatML with Qwen3's switch: thinking off pre-fills an empty think block, as Qwen3's template does.
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)
PLAIN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

EOS = "<|im_end|>"
EOS_ID = 2
# Special tags are single tokens; otherwise a token is a word with its leading whitespace.
_PIECE = re.compile(r"</?think>|<\|[a-z_]+\|>|\s*[^\s<]+|\s+(?=<)|\s*<|\s+")


def pieces(text: str) -> list[str]:
    """Split ``text`` into the scripted engine's tokens (they join back to ``text``)."""
    return _PIECE.findall(text)


class ScriptedEngine(Engine):
    """Serves scripted replies through the real Engine prompt code.

    ``replies`` is a list used in order (the last one repeats) or a function of the user's message.
    ``token_delay`` seconds pass before each token; ``hold_after=N`` pauses after N tokens until
    :meth:`release` or cancellation (``held`` is set when the pause begins; a pause never lasts
    longer than ``hold_timeout`` so a broken test fails instead of hanging).
    """

    def __init__(
        self,
        replies: Sequence[str] | Callable[[str], str] = ("Hello! How can I help?",),
        *,
        thinking: bool = False,
        token_delay: float = 0.0,
        hold_after: int | None = None,
        hold_timeout: float = 20.0,
        n_ctx: int = 4096,
        tokens_per_s: float | None = None,
        name: str = "scripted-model",
        note: str = "",
        template: str | None = None,
    ):
        # The real __init__ reads the llama.cpp model; set the same attributes directly.
        self._llm = None  # no llama.cpp model (Engine.llm would raise EngineClosed: nothing here reads it)
        self.identity = ModelIdentity(
            name=name, path=Path(f"/scripted/{name}.gguf"), sha256="scripted", arch="scripted", note=note
        )
        self.lock = threading.RLock()
        self._preempt = Preemption(None)  # no llama.cpp context: chat_turn() is a no-op
        # ``template``: a real one (e.g. Qwen3's, which renders tools and tool results) instead of ChatML.
        source = template or (THINKING_TEMPLATE if thinking else PLAIN_TEMPLATE)
        self.template = ChatTemplate(source, bos_token="", eos_token=EOS)
        self._add_bos = False
        self.adapter_version: int | None = None  # generate() below never sets an adapter (no LoraSlot)
        self._replies = replies if callable(replies) else list(replies)
        self._n_ctx = n_ctx
        self.token_delay = token_delay
        self.hold_after = hold_after
        self.hold_timeout = hold_timeout
        self.fixed_tokens_per_s = tokens_per_s
        self.held = threading.Event()
        self._release = threading.Event()
        self._vocab: dict[str, int] = {EOS: EOS_ID}
        self._last_user = ""
        self.prompts: list[list[int]] = []  # prompt ids of every generate() call, in order

    # -- what llama.cpp would do ----------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    def close(self) -> None:
        self._release.set()

    def tokenize(self, text: str) -> list[int]:
        return [self._id(p) for p in pieces(text)]

    def detokenize(self, ids: Sequence[int]) -> str:
        text_of = {i: piece for piece, i in self._vocab.items()}
        return "".join(text_of[i] for i in ids if i != EOS_ID)

    def _id(self, piece: str) -> int:
        return self._vocab.setdefault(piece, len(self._vocab) + 10)

    def build_prompt(
        self,
        system: str,
        history: Sequence[Exchange],
        user: str,
        *,
        thinking: bool,
        reply_room: int,
        tools: Sequence[dict[str, Any]] | None = None,
        steps: Sequence[dict[str, Any]] = (),
    ) -> Prompt:
        self._last_user = user
        return super().build_prompt(
            system, history, user, thinking=thinking, reply_room=reply_room, tools=tools, steps=steps
        )

    def release(self) -> None:
        """Let a held reply continue."""
        self._release.set()

    def _next_reply(self) -> str:
        if callable(self._replies):
            return self._replies(self._last_user)
        return self._replies.pop(0) if len(self._replies) > 1 else self._replies[0]

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        cancel: threading.Event | None = None,
        stop_when: Callable[[], bool] | None = None,
        on_delta: Callable[[Delta], None] | None = None,
        use_adapter: bool = True,
        resume_ids: Sequence[int] = (),
        seed: int | None = None,
        prompt_chunk: int = PROMPT_CHUNK,
        grammar: str | None = None,
        side: bool | None = None,
    ) -> Reply:
        # seed, prompt_chunk, grammar and side shape llama.cpp's sampling and scheduling; the script
        # decides the tokens here, so they are accepted (same signature as the real engine) and unused.
        def stopped() -> bool:
            return bool((cancel is not None and cancel.is_set()) or (stop_when is not None and stop_when()))

        with self.lock:
            started = time.monotonic()
            self.prompts.append(list(prompt_ids))
            script = pieces(self._next_reply())
            limit = min(params.max_tokens, self.n_ctx - len(prompt_ids))
            raw, reply_ids, status, first_at, cut = "", [], "finished", None, StopCut(params.stop)
            cut_by = ""
            for i, piece in enumerate(script):
                if i == self.hold_after:
                    self._hold(stopped)
                if self.token_delay:
                    # Sleep on the cancel event so Esc is seen at once, as between real tokens.
                    (cancel or threading.Event()).wait(self.token_delay)
                if stopped():
                    status = "cancelled"
                    break
                first_at = first_at or time.monotonic()
                reply_ids.append(self._id(piece))
                shown, hit = cut.add(piece)  # the real engine's stop strings (clawdesk.engine.stops)
                raw += shown
                if on_delta is not None and shown:
                    on_delta(Delta(text=shown, thinking=in_thinking(raw), n_tokens=len(reply_ids)))
                if hit:
                    del reply_ids[cut.kept or 0 :]
                    break
                if repeat_period(reply_ids, params.repeat_stop):  # the real engine's loop stop (engine/repeats.py)
                    status, cut_by = "length", "repeat"
                    break
                if len(reply_ids) >= limit:
                    status = "length"
                    break
            else:
                reply_ids.append(EOS_ID)  # the real engine keeps the sampled end-of-generation token
            if rest := cut.flush():  # "" once a stop string was written
                raw += rest
                if on_delta is not None:
                    on_delta(Delta(text=rest, thinking=in_thinking(raw), n_tokens=len(reply_ids)))
            finished = time.monotonic()
            thinking, content = split_thinking(raw)
            gen_time = finished - first_at if first_at is not None else 0.0
            measured = (len(reply_ids) - 1) / gen_time if len(reply_ids) > 1 and gen_time > 0 else None
            return Reply(
                prompt_ids=list(prompt_ids),
                reply_ids=reply_ids,
                raw_text=raw,
                thinking=thinking,
                content=content,
                status=status,
                latency_ms=(first_at - started) * 1000 if first_at is not None else None,
                tokens_per_s=self.fixed_tokens_per_s if self.fixed_tokens_per_s is not None else measured,
                started_at=started,
                finished_at=finished,
                adapter_version=self.adapter_version if use_adapter else None,
                cut=cut_by,
            )

    def _hold(self, stopped: Callable[[], bool]) -> None:
        self.held.set()
        deadline = time.monotonic() + self.hold_timeout
        while not self._release.wait(0.01):
            if stopped() or time.monotonic() > deadline:
                return
