"""Running the self-judge on a turn: m score votes and m hint votes on the base weights.

The judge shares the llama.cpp engine with the chat, so it yields: before every vote and between
every token it checks :class:`ChatGate`; while the chat is busy it stops, waits, and resumes the
same vote from the tokens it already had (the prompt prefix stays cached when the chat did not
evict it). The judge always runs with the adapter disabled (``use_adapter=False``), so the policy
never grades itself with what it learned.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from clawdesk.config import JudgeConfig
from clawdesk.engine import Engine, SamplingParams, history_from_turns
from clawdesk.engine.gate import ChatGate
from clawdesk.engine.prompt import build_messages
from clawdesk.judge import channel, fewshot
from clawdesk.judge.grammar import HINT_GRAMMAR, SCORE_GRAMMAR
from clawdesk.judge.parse import accept_hint, enhanced_user_message, hint_problem, majority, parse_score
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


@dataclass(frozen=True)
class Verdict:
    """What the judge made of one (request, reply, next state): votes, the accepted hint, raw outputs."""

    prompt_version: str
    score_outputs: list[str]
    votes: list[int | None]
    hint_outputs: list[str]
    hint: str | None
    note: str = ""  # why a proposed hint was rejected, if one was

    @property
    def reward(self) -> int:
        return majority(self.votes)


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
        self._calibration: dict[tuple[int, str], dict[str, float]] = {}

    def judge(
        self, store: Store, pending: PendingTurn, *, on_progress: Callable[[VoteProgress], None] | None = None
    ) -> Judgment:
        started = time.monotonic()
        turn = pending.turn
        verdict = self.judge_texts(
            turn.user_content, turn.reply_content, pending.next_state, pending.next_role,
            seed=turn.id, on_progress=lambda done, total, kind: on_progress and on_progress(
                VoteProgress(turn.id, kind, done, total)
            ),
        )  # fmt: skip
        enhanced_user, enhanced_ids, note = None, None, verdict.note
        if verdict.hint is not None:
            enhanced_user = enhanced_user_message(turn.user_content, verdict.hint)
            enhanced_ids, problem = teacher_prompt(store, self.policy, pending, enhanced_user)
            note = "; ".join(x for x in (note, problem) if x)
        ident = self.engine.identity
        return Judgment(
            turn_id=turn.id,
            next_turn_id=pending.next_turn_id,
            prompt_version=verdict.prompt_version,
            judge_model_name=ident.name,
            judge_model_sha256=ident.sha256,
            score_outputs=verdict.score_outputs,
            votes=verdict.votes,
            reward=majority(verdict.votes),
            hint_outputs=verdict.hint_outputs,
            hint=verdict.hint,
            enhanced_user=enhanced_user,
            enhanced_prompt_ids=enhanced_ids,
            seconds=time.monotonic() - started,
            note=note,
        )

    def judge_texts(
        self,
        request: str,
        reply: str,
        next_state: str,
        next_role: str = "user",
        *,
        seed: int = 0,
        on_progress: Callable[[int, int, str], None] | None = None,
    ) -> Verdict:
        """m score votes and m hint votes on one (request, reply, next state); no store needed.

        ``judge.method`` picks how a vote is cast: ``channel`` (v3: the framing that best explains
        the next state), ``logprob`` (v2 few-shot prompts, the most likely outcome word) or
        ``sampled`` (v1 chat prompts, a sampled answer). ``on_progress(done,
        total, kind)`` follows every vote.
        """
        m = self.config.votes
        texts = (request, reply, next_state)
        outputs: dict[str, list[str]] = {"score": [], "hint": []}
        votes: dict[str, list[int | None]] = {"score": [], "hint": []}

        def done(kind: str, vote: int | None, text: str) -> None:
            outputs[kind].append(text)
            votes[kind].append(vote)
            if on_progress is not None:
                on_progress(len(outputs["score"]) + len(outputs["hint"]), 2 * m, kind)

        if self.config.method == "channel":
            for i in range(m):
                self._channel_vote(texts, i, done)
        elif self.config.method == "logprob":
            for i in range(m):  # each vote answers both questions on one prompt (its prefix stays cached)
                self._logprob_vote(texts, next_role, i, done)
        else:
            for kind in ("score", "hint"):
                for i in range(m):
                    text = self._sampled_vote(kind, texts, next_role, seed * 1000 + (0 if kind == "score" else 500) + i)
                    done(kind, parse_score(text) if kind == "score" else None, text)
        hint, note = None, ""
        if self.config.method == "sampled":
            hint = accept_hint(outputs["hint"], reply=reply)
        elif majority(votes["hint"]) == 1:  # the majority says the next state tells how: its words are the hint
            hint = fewshot.hint_from_next_state(next_state)
            if (note := hint_problem(hint, reply=reply) or "") != "":
                hint = None
        version = {"channel": channel.VERSION, "logprob": fewshot.VERSION}.get(self.config.method, PROMPT_VERSION)
        return Verdict(version, outputs["score"], votes["score"], outputs["hint"], hint, note)

    def _channel_vote(self, texts: tuple[str, str, str], vote: int, done) -> None:
        """Vote ``vote`` of the v3 judge: which framing explains the next state best, then (unless
        satisfied) whether the framing "says how to fix it" explains it better than "says nothing"."""
        request, reply, next_state = texts
        frames = channel.load_frames()
        prefix, cont = channel.context(request, reply), channel.continuation(next_state)

        def best(sections: dict[str, int], prior: dict[str, float] | None = None) -> tuple[int, str]:
            found = {name: self._continuation(prefix + frames.framing(name, vote), cont) for name in sections}
            return channel.decide(found, sections, prior=prior)

        value, text = best(channel.SCORE_SECTIONS)
        done("score", value, f"{text} \\boxed{{{'+1' if value == 1 else '-1'}}}")
        if value == 1:  # a satisfied turn needs no correction: not asked, counts as "no"
            done("hint", 0, "channel not asked (satisfied)\nUseful: no")
            return
        says, text = best(channel.HINT_SECTIONS, {"says-how yes": channel.SAYS_HOW_MARGIN})
        done("hint", says, f"{text}\nUseful: {'yes' if says else 'no'}")

    def _continuation(self, prompt_text: str, continuation: str) -> float:
        """log p(continuation | prompt_text) on the base weights, yielding to the chat like every vote."""
        prompt = self.engine.tokenize_plain(prompt_text, bos=True)
        cont = self.engine.tokenize_plain(continuation)
        return self._score_ids(prompt, [cont])[0]

    def _logprob_vote(self, texts: tuple[str, str, str], role: str, vote: int, done) -> None:
        """Vote ``vote`` of the v2 judge: the likeliest verdict, then whether the next state says how."""
        text = fewshot.score_prompt(*texts, role, vote=vote)
        verdict, value, shown = self._most_likely(text, fewshot.SCORE_LABELS, (vote, ""))
        done("score", value, fewshot.score_text(shown, value))
        hint_text = fewshot.hint_prompt(text, verdict)
        label, value, shown = self._most_likely(hint_text, fewshot.HINT_LABELS, (vote, verdict))
        done("hint", value, fewshot.hint_text(shown, label))

    def _most_likely(self, text: str, labels: dict[str, int], calib_key: tuple[int, str]) -> tuple[str, int, str]:
        found = self._logprobs(text, labels)
        if self.config.calibrate:
            prior = self._calibration.get(calib_key)
            if prior is None:  # once per vote order and question: the prefix is cached, only the query is new
                vote, verdict = calib_key
                blank = fewshot.score_prompt(*fewshot.CONTENT_FREE, "user", vote=vote)
                prior = self._logprobs(fewshot.hint_prompt(blank, verdict) if verdict else blank, labels)
                self._calibration[calib_key] = prior
            found = {k: v - prior[k] for k, v in found.items()}
        return fewshot.pick(labels, found)

    def _logprobs(self, text: str, labels: dict[str, int]) -> dict[str, float]:
        conts = [self.engine.tokenize_plain(" " + label) for label in labels]
        prompt = self.engine.tokenize_plain(text, bos=True)
        room = self.engine.n_ctx - max(len(c) for c in conts)
        prompt = prompt[-room:]  # a prompt over the window loses its oldest examples, never the query
        return dict(zip(labels, self._score_ids(prompt, conts), strict=True))

    def _computing(self) -> contextlib.AbstractContextManager[None]:
        """Marks the served engine's threads busy while a judge on *another* engine computes.

        On the served engine itself nothing is marked: the engine lock already keeps the judge and
        the chat from computing at once (see :class:`~clawdesk.engine.llama.ThreadBudget`). Only
        the native call is covered, not the wait for the chat, so a waiting judge costs no cores.
        """
        if self.engine is self.policy:
            return contextlib.nullcontext()
        return self.policy.threads.busy_while("judge")

    def _score_ids(self, prompt: list[int], conts: list[list[int]]) -> list[float]:
        while True:
            self.gate.wait_idle(self.stop)
            if self.stop.is_set():
                raise JudgeInterrupted
            with self._computing():
                found = self.engine.continuation_logprobs(
                    prompt,
                    conts,
                    stop_when=lambda: self.gate.busy or self.stop.is_set(),
                    prompt_chunk=JUDGE_PROMPT_CHUNK,
                )
            if found is not None:  # None: paused for the chat; the cached prefix makes the retry cheap
                return found

    def _sampled_vote(self, kind: str, texts: tuple[str, str, str], role: str, seed: int) -> str:
        build = score_messages if kind == "score" else hint_messages
        grammar = (SCORE_GRAMMAR if kind == "score" else HINT_GRAMMAR) if self.config.constrained else None
        return self._vote(self._fit(build, texts, role), seed=seed, grammar=grammar)

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
            with self._computing():
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


def teacher_prompt(
    store: Store, policy: Engine, pending: PendingTurn, enhanced_user: str
) -> tuple[list[int] | None, str]:
    """s_t with the hint appended to the last user message, rendered like the served prompt.

    The original prompt is rebuilt first and must reproduce the served token ids exactly;
    otherwise (system prompt edited, other model) the turn keeps its reward but gets no OPD.
    ``policy`` is the served engine (its template and tokenizer), even when another GGUF judges.
    """
    turn = pending.turn
    if turn.model_sha256 != policy.identity.sha256:
        return None, "served by another model file; no OPD prompt"
    session = store.get_session(turn.session_id)
    earlier = [t for t in store.list_turns(turn.session_id) if t.seq < turn.seq][turn.dropped_turns :]
    history = history_from_turns(earlier)
    served_ids, _ = store.turn_tokens(turn.id)

    def render(user: str) -> list[int]:
        messages = build_messages(session.system_prompt, history, user)
        return policy.tokenize(policy.render(messages, thinking=turn.thinking))

    if render(turn.user_content) != served_ids:
        return None, "served prompt could not be rebuilt exactly; no OPD prompt"
    return render(enhanced_user), ""


def _clip(text: str, limit: int) -> str:
    """Keep the head and tail of an over-long text: the judge needs its gist, not all of it."""
    if len(text) <= limit:
        return text
    half = max(1, (limit - 7) // 2)
    return f"{text[:half]} […] {text[-half:]}"
