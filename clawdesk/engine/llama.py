"""The one owner of the llama.cpp model, its context and its LoRA adapters.

Every native call goes through :class:`Engine` under ``self.lock`` (an RLock), so the chat,
the judge and adapter swaps never touch the context at the same time. Generation is a plain
loop over llama-cpp-python's token generator; cancellation (``cancel`` event or ``stop_when``
callback) is polled between prompt chunks and between tokens, never inside a native call.
How many CPU threads the context uses is decided by :class:`ThreadBudget` and applied between
those same native calls. Side work on the context (the judge: calls with ``use_adapter=False``)
does not cost the chat its cached prompt: :mod:`clawdesk.engine.kv_keep` saves and restores it.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawdesk.engine.kv_keep import ChatKVKeeper
from clawdesk.engine.preempt import Preemption
from clawdesk.engine.prompt import Exchange, Prompt, build_messages, gguf_chat_template, in_thinking, split_thinking
from clawdesk.errors import AdapterError, InputError, ModelError
from clawdesk.models import ResolvedModel, check_gguf

PROMPT_CHUNK = 128  # tokens evaluated between cancellation checks while reading a prompt
MIN_REPLY_ROOM = 64  # a prompt must leave at least this many tokens of context for the reply


@dataclass(frozen=True)
class ModelIdentity:
    name: str
    path: Path
    sha256: str
    arch: str
    is_demo: bool = False
    note: str = ""


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7
    top_p: float = 0.9
    max_tokens: int = 1024
    top_k: int = 40
    min_p: float = 0.05


@dataclass(frozen=True)
class Delta:
    """A piece of streamed reply text."""

    text: str
    thinking: bool  # True while the model is still inside its <think> block
    n_tokens: int  # reply tokens so far


@dataclass
class Reply:
    """A finished (or cancelled, or length-capped) reply, with the exact served token ids."""

    prompt_ids: list[int]
    reply_ids: list[int]
    raw_text: str
    thinking: str
    content: str
    status: str  # 'finished' | 'cancelled' | 'length'
    latency_ms: float | None
    tokens_per_s: float | None
    started_at: float
    finished_at: float
    adapter_version: int | None = None
    extra: dict = field(default_factory=dict)
    prompt_evaluated: int = 0  # prompt tokens llama.cpp evaluated for this call (the rest came from the cache)


def all_threads() -> int:
    """Every core this process may run on (its CPU affinity: taskset and containers narrow it)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)  # no affinity API (macOS, Windows)


def default_threads() -> int:
    # Half the cores, the engine's share while the learner runs: on small machines the trainer
    # needs cores of its own, and llama.cpp's throughput collapses when its threads compete
    # with other busy threads (see FIELD-NOTES).
    return max(1, all_threads() // 2)


class ThreadBudget:
    """How many threads one engine's llama.cpp context may use now.

    "Busy" means other work computes on the CPU *at the same time as* this engine could: the
    trainer process while it runs and is not stopped (the app stops it while the chat generates,
    :mod:`clawdesk.learn.pause`, so a reply gets every core; in between, judge work on this engine
    drops to :func:`default_threads`), and a judge running on a *different* engine (``judge.model``) while
    it is inside a native call (the ChatGate stops it at its next token or prompt chunk once the
    chat starts, so that overlap is short, but during it both would fight for every core). A judge
    on this same engine is not "busy": it runs on this very context under ``Engine.lock``, so it
    and the chat never compute at once, and while it judges it is the only work, so it too gets
    every core. With nothing busy (always for ``clawdesk ask``) the engine uses every core.

    ``fixed`` (the user's ``model.n_threads``; 0 = automatic) is never changed. Flags are set from
    any thread without waiting for the engine lock; the engine applies them before its next
    native call (between prompt chunks and tokens).
    """

    def __init__(self, fixed: int = 0) -> None:
        self.fixed = fixed
        self._lock = threading.Lock()
        self._busy: dict[str, int] = {}  # reason -> how many holders (two judges may share a policy)

    def set_busy(self, reason: str, busy: bool) -> None:
        with self._lock:
            n = self._busy.get(reason, 0) + (1 if busy else -1)
            if n > 0:
                self._busy[reason] = n
            else:
                self._busy.pop(reason, None)

    @contextlib.contextmanager
    def busy_while(self, reason: str) -> Iterator[None]:
        self.set_busy(reason, True)
        try:
            yield
        finally:
            self.set_busy(reason, False)

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._busy)

    def wanted(self) -> int | None:
        """The thread count to use now; None when the user fixed it (leave the context as loaded)."""
        if self.fixed:
            return None
        return default_threads() if self.busy else all_threads()


class Engine:
    """Owns one ``llama_cpp.Llama``: prompts, streaming generation, adapters."""

    def __init__(self, llm, identity: ModelIdentity, *, seed: int = 1234, threads: ThreadBudget | None = None):
        self.llm = llm
        # Without a budget from load() the caller chose the Llama's threads: keep them (fixed).
        self.threads = threads or ThreadBudget(fixed=llm.n_threads)
        self._base_seed = seed
        self._calls = 0
        self._grammars: dict[str, object] = {}
        self.identity = identity
        self.lock = threading.RLock()
        self.template, self._add_bos = gguf_chat_template(llm, llm.metadata, identity.path)
        self._adapter = None  # llama_adapter_lora_p of the served adapter
        self._adapter_path: Path | None = None
        self.adapter_version: int | None = None
        self._adapter_applied = False  # whether the context currently has the adapter set
        self._kv = ChatKVKeeper()  # the chat's KV prefix, kept while the judge uses the context
        self._preempt = Preemption(llm)  # a chat call stops the judge's native call (engine/preempt.py)
        self._evaluated = 0  # prompt tokens the last call evaluated

    # -- loading --------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        model: ResolvedModel,
        *,
        sha256: str,
        n_ctx: int = 8192,
        n_threads: int = 0,
        n_gpu_layers: int = -1,
        seed: int = 1234,
    ) -> Engine:
        import llama_cpp

        check_gguf(model.path)
        threads = ThreadBudget(fixed=n_threads)
        # Automatic: start idle (every core, for prompts and tokens alike); see ThreadBudget.
        first = n_threads or all_threads()
        try:
            llm = llama_cpp.Llama(
                model_path=str(model.path),
                n_ctx=n_ctx,
                n_threads=first,
                n_threads_batch=None if n_threads else first,
                n_gpu_layers=n_gpu_layers if llama_cpp.llama_supports_gpu_offload() else 0,
                seed=seed,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(
                f"llama.cpp could not load {model.path} ({exc}). The file may be truncated or "
                "corrupted, or its architecture unsupported by this llama.cpp build. Re-download it "
                "(`clawdesk pull`) or choose another file with --model."
            ) from exc
        arch = str(llm.metadata.get("general.architecture", "unknown"))
        identity = ModelIdentity(
            name=model.name, path=model.path, sha256=sha256, arch=arch, is_demo=model.is_demo, note=model.note
        )
        return cls(llm, identity, seed=seed, threads=threads)

    def close(self) -> None:
        with self.lock:
            self._kv.drop()
            self._free_adapter()
            self.llm.close()

    @property
    def n_ctx(self) -> int:
        return self.llm.n_ctx()

    def context_threads(self) -> tuple[int, int]:
        """(generation, batch) thread counts as llama.cpp's context has them now."""
        import llama_cpp

        with self.lock:
            ctx = self.llm._ctx.ctx
            return llama_cpp.llama_n_threads(ctx), llama_cpp.llama_n_threads_batch(ctx)

    def _apply_threads(self) -> None:
        """Give the context the budget's thread count; call under ``self.lock`` before native work."""
        n = self.threads.wanted()
        llm = self.llm
        if n is None or (llm.n_threads == n and llm.n_threads_batch == n):
            return
        llm._ctx.set_n_threads(n, n)  # takes effect at the next llama_decode
        # Keep llama-cpp-python's own record in step (its pickled state and repr read these).
        llm.n_threads = llm.n_threads_batch = n
        llm.context_params.n_threads = llm.context_params.n_threads_batch = n

    @property
    def supports_thinking(self) -> bool:
        return self.template.supports_thinking

    @property
    def supports_tools(self) -> bool:
        """Whether this model's chat template renders tools (Qwen3 does; the bundled demo model does not)."""
        return self.template.supports_tools

    # -- prompts --------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        with self.lock:
            return self.llm.tokenize(text.encode("utf-8"), add_bos=self._add_bos, special=True)

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of served ids, control tokens written out, without the BOS that :meth:`tokenize` adds back.

        ``tokenize(detokenize(ids)) == ids`` for a prompt this engine rendered and tokenized (the
        judge's teacher prompt for a tool step relies on it, and checks it).
        """
        ids = list(ids)
        with self.lock:
            if self._add_bos and ids and ids[0] == self.llm.token_bos():
                ids = ids[1:]
            return self.llm.detokenize(ids, special=True).decode("utf-8", errors="replace")

    def tokenize_plain(self, text: str, *, bos: bool = False) -> list[int]:
        """Tokens of plain text: special-token markup in it stays text (the judge's few-shot prompts quote users)."""
        with self.lock:
            ids = self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        bos_id = self.llm.token_bos()
        return [bos_id, *ids] if bos and self._add_bos and bos_id >= 0 else ids

    def render(
        self, messages: list[dict[str, Any]], *, thinking: bool, tools: Sequence[dict[str, Any]] | None = None
    ) -> str:
        return self.template.render(messages, thinking=thinking and self.supports_thinking, tools=tools)

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
        """Render and tokenize, dropping the oldest exchanges until the prompt fits.

        ``reply_room`` tokens are kept free for the reply (at least :data:`MIN_REPLY_ROOM`). ``tools``
        (``ToolSpec.schema()`` dicts) are rendered by the template; ``steps`` are the agent loop's
        messages after ``user`` (tool calls and results), never dropped.
        """
        budget = self.n_ctx - max(MIN_REPLY_ROOM, min(reply_room, self.n_ctx // 4))
        history = list(history)
        dropped = 0
        while True:
            text = self.render(build_messages(system, history, user, steps), thinking=thinking, tools=tools)
            ids = self.tokenize(text)
            if len(ids) <= budget:
                return Prompt(
                    text=text, token_ids=ids, thinking=thinking and self.supports_thinking, dropped_turns=dropped
                )
            if not history:
                raise InputError(
                    f"this message is too long for the model: the prompt needs {len(ids)} tokens but the "
                    f"context window holds {self.n_ctx} (with room kept for the reply). Shorten the message, "
                    "or raise model.n_ctx in config.toml."
                )
            # Drop in halves when far over budget, one exchange at a time when close.
            over = len(ids) - budget
            step = 1 if over < len(ids) // 4 else max(1, len(history) // 2)
            history = history[step:]
            dropped += step

    # -- generation -----------------------------------------------------------------------

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
        """Serve one reply to ``prompt_ids`` (already rendered and tokenized).

        ``resume_ids`` continues an interrupted reply (the judge's pause/resume). Stops at an
        end-of-generation token (kept in ``reply_ids``: it was sampled and is trained on), at
        ``max_tokens``/context end ("length"), or when cancelled ("cancelled"). ``seed`` fixes
        the sampling stream (the judge's votes); by default each call gets the next seed of a
        per-engine sequence, so repeated prompts can differ yet a fresh engine is reproducible.
        ``grammar`` (GBNF) constrains the output, e.g. so a judge vote always ends in a score.
        ``side`` (default: ``not use_adapter``, i.e. the judge) marks work that must not cost the
        chat its cached prompt: the chat's KV prefix is saved before it and restored for the next
        chat call (:mod:`clawdesk.engine.kv_keep`).
        """

        def stopped() -> bool:
            return bool((cancel is not None and cancel.is_set()) or (stop_when is not None and stop_when()))

        side = not use_adapter if side is None else side
        with self._holding(side, interruptible=stop_when is not None):
            started = time.monotonic()
            ids = list(prompt_ids) + list(resume_ids)
            self._prepare_cache(ids, use_adapter, side)
            self._calls += 1
            self.llm.set_seed(seed if seed is not None else self._base_seed + self._calls)
            reply_ids = list(resume_ids)
            room = self.n_ctx - len(ids)
            limit = min(params.max_tokens, room)
            if limit <= 0:
                raise InputError(f"no context left for a reply ({len(ids)} of {self.n_ctx} tokens used)")
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            raw = "".join(decoder.decode(self.llm.detokenize([t], special=True)) for t in reply_ids)
            status = "finished"
            first_at: float | None = None
            if not self._eval_prompt(ids, stopped, prompt_chunk):
                status = "cancelled"
            else:
                import llama_cpp

                vocab = self.llm._model.vocab
                gen = self.llm.generate(
                    ids,
                    top_k=params.top_k,
                    top_p=params.top_p,
                    min_p=params.min_p,
                    temp=params.temperature,
                    grammar=self._grammar(grammar) if grammar else None,
                )
                preempted = self._preempt.preemptions
                try:
                    for tok in self._until_preempted(gen):
                        if first_at is None:
                            first_at = time.monotonic()
                        reply_ids.append(int(tok))
                        if llama_cpp.llama_vocab_is_eog(vocab, tok):
                            break
                        piece = decoder.decode(self.llm.detokenize([tok], special=True))
                        raw += piece
                        if on_delta is not None and piece:
                            on_delta(Delta(text=piece, thinking=in_thinking(raw), n_tokens=len(reply_ids)))
                        if len(reply_ids) - len(resume_ids) >= limit:
                            status = "length"
                            break
                        if stopped():
                            status = "cancelled"
                            break
                        self._apply_threads()  # the trainer may have started or stopped meanwhile
                    else:  # llm.generate never ends by itself: a chat call stopped it inside llama_decode
                        if self._preempt.preemptions != preempted:
                            status = "cancelled"
                finally:
                    gen.close()
            finished = time.monotonic()
            raw += decoder.decode(b"", final=True)
            thinking, content = split_thinking(raw)
            n_new = len(reply_ids) - len(resume_ids)
            gen_time = finished - first_at if first_at is not None else 0.0
            return Reply(
                prompt_ids=list(prompt_ids),
                reply_ids=reply_ids,
                raw_text=raw,
                thinking=thinking,
                content=content,
                status=status,
                latency_ms=(first_at - started) * 1000 if first_at is not None else None,
                tokens_per_s=(n_new - 1) / gen_time if n_new > 1 and gen_time > 0 else None,
                started_at=started,
                finished_at=finished,
                adapter_version=self.adapter_version if use_adapter else None,
                prompt_evaluated=self._evaluated,
            )

    def continuation_logprobs(
        self,
        prompt_ids: Sequence[int],
        continuations: Sequence[Sequence[int]],
        *,
        use_adapter: bool = False,
        stop_when: Callable[[], bool] | None = None,
        prompt_chunk: int = PROMPT_CHUNK,
        side: bool | None = None,
    ) -> list[float] | None:
        """log p(continuation | prompt) for each continuation (summed over its tokens); None if stopped.

        The prompt is evaluated once (its cached prefix reused); each continuation is then decoded
        as one batch that asks llama.cpp for the logits of every position (without ``logits_all``
        llama.cpp keeps only the last position's logits and llama-cpp-python keeps no copy, so they
        are read with ``llama_get_logits_ith``). The cache is left at the prompt's end. ``side`` as
        in :meth:`generate` (default ``not use_adapter``: the judge's calls keep the chat's cache).
        """
        import llama_cpp
        import numpy as np

        if not prompt_ids or any(not c for c in continuations):
            raise InputError("continuation_logprobs needs a prompt and non-empty continuations")
        side = not use_adapter if side is None else side
        with self._holding(side, interruptible=stop_when is not None):
            ids = list(prompt_ids)
            self._prepare_cache(ids, use_adapter, side)
            if len(ids) + max(len(c) for c in continuations) > self.n_ctx:
                raise InputError(f"the prompt ({len(ids)} tokens) leaves no room in the context ({self.n_ctx})")
            if not self._eval_prompt(ids, stop_when or (lambda: False), prompt_chunk):
                return None
            llm, base = self.llm, len(ids)
            n_vocab = llm.n_vocab()

            def logprobs_at(i: int) -> np.ndarray:
                ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, i)
                row = np.ctypeslib.as_array(ptr, shape=(n_vocab,)).astype(np.float64)  # (vocab,) a copy
                top = row.max()
                return row - (top + np.log(np.exp(row - top).sum()))

            first = logprobs_at(-1)
            out: list[float] = []
            for cont in continuations:
                total = float(first[cont[0]])
                fed = list(cont[:-1])  # position j predicts cont[j + 1]
                for start in range(0, len(fed), llm.n_batch):
                    chunk = fed[start : start + llm.n_batch]
                    llm._ctx.kv_cache_seq_rm(-1, base + start, -1)
                    llm._batch.set_batch(batch=chunk, n_past=base + start, logits_all=True)
                    try:
                        llm._ctx.decode(llm._batch)
                    except RuntimeError as exc:
                        if not self._preempt.stopped_by_us(exc):
                            raise
                        llm.n_tokens = base  # llama.cpp removed the aborted positions; the prompt stays
                        return None
                    targets = cont[start + 1 : start + 1 + len(chunk)]
                    total += sum(float(logprobs_at(j)[tok]) for j, tok in enumerate(targets))
                out.append(total)
            llm.n_tokens = base
            return out

    def reset_cache(self) -> None:
        """Forget the cached prompt prefix, so the next reply is computed as on a fresh context.

        Greedy replies can depend on what was cached before (see the README's known limits); the
        eval resets before each scored reply so that scores are reproducible.
        """
        with self.lock:
            self._kv.drop()
            self.llm.reset()

    @property
    def kept_chat_tokens(self) -> int:
        """Tokens of the chat prefix saved across side work now (0: none saved)."""
        return self._kv.saved_tokens

    @property
    def chat_cache_restores(self) -> int:
        """Chat calls so far that started from a saved chat prefix instead of re-evaluating it."""
        return self._kv.restores

    def _prepare_cache(self, ids: list[int], use_adapter: bool, side: bool | None) -> None:
        """Set the adapter for a call on ``ids``; save the chat's KV before side work, restore it after."""
        side = not use_adapter if side is None else side
        if side:
            self._kv.before_side(self.llm, ids, self._adapter_key())
        self._apply_adapter(use_adapter)  # switching the adapter on or off drops the cache
        if not side:
            self._kv.restore_for_chat(self.llm, ids, self._adapter_key())
        self._kv.chat_owned = not side

    def _adapter_key(self) -> tuple:
        """What the KV computed now depends on besides the tokens: which adapter is set, if any."""
        return (True, self.adapter_version, self._adapter_path) if self._adapter_applied else (False,)

    def _grammar(self, source: str):
        from llama_cpp import LlamaGrammar

        if source not in self._grammars:
            self._grammars[source] = LlamaGrammar.from_string(source, verbose=False)
        return self._grammars[source]

    def _eval_prompt(self, ids: list[int], stopped: Callable[[], bool], chunk: int) -> bool:
        """Evaluate the prompt in chunks, reusing the cached prefix. False if cancelled first."""
        llm = self.llm
        cached = llm._input_ids.tolist() if llm.n_tokens else []
        common = 0
        for a, b in zip(cached, ids, strict=False):
            if a != b:
                break
            common += 1
        # Always leave at least one token to evaluate so the logits belong to this prompt.
        common = min(common, len(ids) - 1)
        llm.n_tokens = common  # eval() drops the KV cache beyond n_tokens
        self._evaluated = 0
        for start in range(common, len(ids), chunk):
            if stopped():
                return False
            self._apply_threads()
            try:
                llm.eval(ids[start : start + chunk])
            except RuntimeError as exc:
                if not self._preempt.stopped_by_us(exc):
                    raise
                return False  # llama.cpp dropped the aborted chunk's KV; n_tokens still ends before it
            self._evaluated += len(ids[start : start + chunk])
        return True

    @contextlib.contextmanager
    def chat_turn(self) -> Iterator[None]:
        """Held by the chat for a whole turn, from "sent": interruptible side work (the judge) that
        holds the engine stops inside its native call now, so the chat's first lock (tokenizing its
        prompt) does not wait for it. The chat's own calls clear the request before they compute."""
        self._preempt.request()
        try:
            yield
        finally:
            self._preempt.clear()

    @contextlib.contextmanager
    def _holding(self, side: bool, *, interruptible: bool) -> Iterator[None]:
        """Hold the engine for one call. A chat call first asks interruptible side work that holds
        it (the judge: it passes ``stop_when``) to stop inside its native call (engine/preempt.py)."""
        if not side:
            self._preempt.request()
        with self.lock:
            outer = self._preempt.side_running
            if not side:
                self._preempt.clear()
            self._preempt.side_running = side and interruptible
            try:
                yield
            finally:
                self._preempt.side_running = outer

    def _until_preempted(self, gen: Iterator[int]) -> Iterator[int]:
        """``gen``'s tokens, ending quietly when a chat call aborted its ``llama_decode``."""
        try:
            yield from gen
        except RuntimeError as exc:
            if not self._preempt.stopped_by_us(exc):
                raise

    @property
    def preemptions(self) -> int:
        """Side calls a chat call stopped inside llama.cpp so far (for tests and the bench)."""
        return self._preempt.preemptions

    # -- adapters -------------------------------------------------------------------------

    def load_adapter(self, path: Path, version: int | None) -> None:
        """Hot-swap to the GGUF LoRA at ``path`` (no base-model reload). Waits for a running reply.

        All or nothing: when llama.cpp cannot read the file or refuses to apply it, AdapterError is
        raised and the adapter served before (or the base) is still what the next reply uses.
        """
        import llama_cpp

        from clawdesk.learn.adapter_files import BaseDims, check_gguf_lora

        # Checked in Python first (format, arch, shapes vs this base): llama.cpp's native parser
        # should only ever see an intact GGUF LoRA made for this model.
        check_gguf_lora(path, arch=self.identity.arch, dims=BaseDims.from_metadata(self.llm.metadata))
        with self.lock:
            adapter = llama_cpp.llama_adapter_lora_init(self.llm._model.model, str(path).encode("utf-8"))
            if not adapter:
                raise AdapterError(f"llama.cpp could not load the LoRA adapter {path}")
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(adapter)
            scales = (ctypes.c_float * 1)(1.0)
            if llama_cpp.llama_set_adapters_lora(self.llm._ctx.ctx, adapters, 1, scales) != 0:
                llama_cpp.llama_adapter_lora_free(adapter)
                # What the context holds after a refusal is unspecified: clear it, so the next
                # reply's _apply_adapter sets the previous adapter (still self._adapter) again.
                llama_cpp.llama_set_adapters_lora(self.llm._ctx.ctx, None, 0, None)
                self._adapter_applied = False
                self.llm.reset()
                raise AdapterError(f"llama.cpp refused to apply the LoRA adapter {path}")
            previous = self._adapter
            self._kv.drop()  # computed under the previous adapter
            self._adapter, self._adapter_path, self.adapter_version = adapter, path, version
            self._adapter_applied = True
            self.llm.reset()  # KV entries computed under the other weights must not be reused
            if previous is not None:
                llama_cpp.llama_adapter_lora_free(previous)  # no longer set on the context

    def clear_adapter(self) -> None:
        with self.lock:
            self._free_adapter()

    def _apply_adapter(self, want: bool) -> None:
        import llama_cpp

        want = want and self._adapter is not None
        if want == self._adapter_applied:
            return
        ctx = self.llm._ctx.ctx
        if want:
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(self._adapter)
            scales = (ctypes.c_float * 1)(1.0)
            if llama_cpp.llama_set_adapters_lora(ctx, adapters, 1, scales) != 0:
                raise AdapterError(f"llama.cpp refused the adapter {self._adapter_path}")
        else:
            llama_cpp.llama_set_adapters_lora(ctx, None, 0, None)
        self._adapter_applied = want
        # KV entries computed under the other weights must not be reused.
        self.llm.reset()

    def _free_adapter(self) -> None:
        import llama_cpp

        self._kv.drop()
        if self._adapter is None:
            return
        if self._adapter_applied:
            llama_cpp.llama_set_adapters_lora(self.llm._ctx.ctx, None, 0, None)
            self._adapter_applied = False
            self.llm.reset()
        llama_cpp.llama_adapter_lora_free(self._adapter)
        self._adapter, self._adapter_path, self.adapter_version = None, None, None


def history_from_turns(turns) -> list[Exchange]:
    """Earlier exchanges to replay: the answers shown (a cancelled partial answer counts too)."""
    return [Exchange(user=t.user_content, assistant=t.reply_content) for t in turns]
