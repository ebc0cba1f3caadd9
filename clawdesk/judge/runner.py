"""Running the self-judge on a turn: m score votes and m hint votes on the base weights.

The judge shares the llama.cpp engine with the chat, so it yields: before every vote and between
every token it checks :class:`ChatGate`; while the chat is busy it stops, waits, and resumes the
same vote from the tokens it already had (the prompt prefix stays cached when the chat did not
evict it). The judge always runs with the adapter disabled (``use_adapter=False``), so the policy
never grades itself with what it learned.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from clawdesk.config import JudgeConfig
from clawdesk.engine import Engine, SamplingParams, history_from_turns
from clawdesk.engine.gate import ChatGate
from clawdesk.engine.prompt import build_messages
from clawdesk.judge.grammar import HINT_GRAMMAR, SCORE_GRAMMAR
from clawdesk.judge.parse import accept_hint, enhanced_user_message, majority, parse_score
from clawdesk.judge.prompts import PROMPT_VERSION, hint_messages, score_messages
from clawdesk.store import Store
from clawdesk.store.judgments import Judgment, PendingTurn

JUDGE_PROMPT_CHUNK = 16  # small chunks: a waiting chat reply is held up by at most one chunk


class JudgeInterrupted(Exception):
    """Judging was stopped (learning turned off or the app is closing); nothing was saved."""


@dataclass(frozen=True)
class VoteProgress:
    turn_id: int
    kind: str  # 'score' | 'hint'
    done: int  # votes finished for this turn (score and hint together)
    total: int


class Judge:
    """Judges turns with ``engine`` (base weights). ``policy`` renders the teacher prompt.

    ``policy`` is the served engine: the enhanced prompt must use the served model's template and
    tokenizer even when a different GGUF judges (``judge.model``).
    """

    def __init__(
        self,
        engine: Engine,
        config: JudgeConfig,
        *,
        policy: Engine | None = None,
        gate: ChatGate | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.engine = engine
        self.policy = policy or engine
        self.config = config
        self.gate = gate or ChatGate()
        self.stop = stop or threading.Event()

    def judge(
        self, store: Store, pending: PendingTurn, *, on_progress: Callable[[VoteProgress], None] | None = None
    ) -> Judgment:
        started = time.monotonic()
        turn = pending.turn
        texts = (turn.user_content, turn.reply_content, pending.next_state)
        m = self.config.votes
        grammars = {"score": SCORE_GRAMMAR, "hint": HINT_GRAMMAR} if self.config.constrained else {}
        score_outputs: list[str] = []
        hint_outputs: list[str] = []
        for kind, build, outputs in (("score", score_messages, score_outputs), ("hint", hint_messages, hint_outputs)):
            ids = self._fit(build, texts, pending.next_role)
            for i in range(m):
                seed = turn.id * 1000 + (0 if kind == "score" else 500) + i
                outputs.append(self._vote(ids, seed=seed, grammar=grammars.get(kind)))
                if on_progress is not None:
                    on_progress(VoteProgress(turn.id, kind, len(score_outputs) + len(hint_outputs), 2 * m))
        votes = [parse_score(o) for o in score_outputs]
        hint = accept_hint(hint_outputs)
        enhanced_user, enhanced_ids, note = None, None, ""
        if hint is not None:
            enhanced_user = enhanced_user_message(turn.user_content, hint)
            enhanced_ids, note = self._teacher_prompt(store, pending, enhanced_user)
        ident = self.engine.identity
        return Judgment(
            turn_id=turn.id,
            next_turn_id=pending.next_turn_id,
            prompt_version=PROMPT_VERSION,
            judge_model_name=ident.name,
            judge_model_sha256=ident.sha256,
            score_outputs=score_outputs,
            votes=votes,
            reward=majority(votes),
            hint_outputs=hint_outputs,
            hint=hint,
            enhanced_user=enhanced_user,
            enhanced_prompt_ids=enhanced_ids,
            seconds=time.monotonic() - started,
            note=note,
        )

    def _fit(self, build, texts: tuple[str, str, str], role: str) -> list[int]:
        """Render a judge prompt, clipping the quoted texts until it fits the context window."""
        room = self.engine.n_ctx - self.config.max_tokens
        limit = max(200, room - 512)  # characters per quoted text; ~3 chars per token, 3 texts
        while True:
            clipped = [_clip(t, limit) for t in texts]
            ids = self.engine.tokenize(self.engine.render(build(*clipped, role), thinking=False))
            if len(ids) <= room or limit <= 50:
                return ids[: max(1, room)]
            limit //= 2

    def _vote(self, ids: list[int], *, seed: int, grammar: str | None = None) -> str:
        cfg = self.config
        so_far: list[int] = []
        while True:
            self.gate.wait_idle(self.stop)
            if self.stop.is_set():
                raise JudgeInterrupted
            params = SamplingParams(temperature=cfg.temperature, top_p=0.95, max_tokens=cfg.max_tokens - len(so_far))
            reply = self.engine.generate(
                ids,
                params,
                stop_when=lambda: self.gate.busy or self.stop.is_set(),
                use_adapter=False,
                resume_ids=so_far,
                seed=seed + 7919 * len(so_far),  # a resumed vote continues with a fresh stream
                prompt_chunk=JUDGE_PROMPT_CHUNK,
                grammar=grammar,
            )
            if reply.status != "cancelled":
                return reply.raw_text
            # Paused for the chat. Free text resumes where it stopped; a grammar-constrained
            # vote restarts, since the grammar's state cannot be restored mid-way (votes are short).
            so_far = [] if grammar else reply.reply_ids
            if len(so_far) >= cfg.max_tokens:
                return reply.raw_text

    def _teacher_prompt(self, store: Store, pending: PendingTurn, enhanced_user: str) -> tuple[list[int] | None, str]:
        """s_t with the hint appended to the last user message, rendered like the served prompt.

        The original prompt is rebuilt first and must reproduce the served token ids exactly;
        otherwise (system prompt edited, other model) the turn keeps its reward but gets no OPD.
        """
        turn = pending.turn
        if turn.model_sha256 != self.policy.identity.sha256:
            return None, "served by another model file; no OPD prompt"
        session = store.get_session(turn.session_id)
        earlier = [t for t in store.list_turns(turn.session_id) if t.seq < turn.seq][turn.dropped_turns :]
        history = history_from_turns(earlier)
        served_ids, _ = store.turn_tokens(turn.id)

        def render(user: str) -> list[int]:
            messages = build_messages(session.system_prompt, history, user)
            return self.policy.tokenize(self.policy.render(messages, thinking=turn.thinking))

        if render(turn.user_content) != served_ids:
            return None, "served prompt could not be rebuilt exactly; no OPD prompt"
        return render(enhanced_user), ""


def _clip(text: str, limit: int) -> str:
    """Keep the head and tail of an over-long text: the judge needs its gist, not all of it."""
    if len(text) <= limit:
        return text
    half = max(1, (limit - 7) // 2)
    return f"{text[:half]} […] {text[-half:]}"
