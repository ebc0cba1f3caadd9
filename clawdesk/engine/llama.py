"""The one owner of the llama.cpp model, its context and its LoRA adapter (held in :mod:`clawdesk.engine.lora`).

Every native call goes through :class:`Engine` under ``self.lock`` (an RLock), so the chat,
the judge and adapter swaps never touch the context at the same time. Generation is a plain
loop over llama-cpp-python's token generator; cancellation (``cancel`` event or ``stop_when``
callback) is polled between prompt chunks and between tokens, never inside a native call.
How many CPU threads the context uses is decided by :mod:`clawdesk.engine.threads` and applied between
those same native calls. Side work on the context (the judge: calls with ``use_adapter=False``)
does not cost the chat its cached prompt: :mod:`clawdesk.engine.kv_keep` saves and restores it.
"""

from __future__ import annotations

import codecs
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from clawdesk.engine.kv_keep import ChatKVKeeper
from clawdesk.engine.logprobs import continuation_sums
from clawdesk.engine.lora import LoraSlot
from clawdesk.engine.preempt import Preemption
from clawdesk.engine.prompt import (
    Exchange,
    Prompt,
    build_messages,
    fit_prompt,
    gguf_chat_template,
    in_thinking,
    split_thinking,
)
from clawdesk.engine.repeats import repeat_period
from clawdesk.engine.reply import Delta, ModelIdentity, Reply, SamplingParams
from clawdesk.engine.stops import StopCut
from clawdesk.engine.threads import ThreadBudget, all_threads
from clawdesk.errors import EngineClosed, InputError, ModelError
from clawdesk.gguf.files import check_gguf
from clawdesk.models import ResolvedModel

PROMPT_CHUNK = 128  # tokens evaluated between cancellation checks while reading a prompt


class Engine:
    """Owns one ``llama_cpp.Llama``: prompts, streaming generation, adapters."""

    def __init__(self, llm, identity: ModelIdentity, *, seed: int = 1234, threads: ThreadBudget | None = None):
        self._llm = llm
        self._n_ctx = llm.n_ctx()  # fixed for the context's life; read without the lock
        # Without a budget from load() the caller chose the Llama's threads: keep them (fixed).
        self.threads = threads or ThreadBudget(fixed=llm.n_threads)
        self._base_seed = seed
        self._calls = 0
        self._grammars: dict[str, object] = {}
        self.identity = identity
        self.lock = threading.RLock()
        self.template, self._add_bos = gguf_chat_template(llm, llm.metadata, identity.path)
        self._lora = LoraSlot(llm)  # the served adapter (engine/lora.py)
        self.adapter_version: int | None = None
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
        threads = ThreadBudget.for_app(n_threads)
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
        """Free the model and context. Any later call raises :class:`EngineClosed` instead of reaching
        freed native memory (a judge thread still finishing its vote as the app ends: it segfaulted)."""
        with self.lock:
            if self._llm is None:
                return
            self._kv.drop()
            self._free_adapter()
            self._llm.close()
            self._llm = None

    @property
    def closed(self) -> bool:
        return self._llm is None

    @property
    def llm(self):
        """The ``llama_cpp.Llama``; read it only while holding :attr:`lock` (close takes the lock)."""
        llm = self._llm
        if llm is None:
            raise EngineClosed()
        return llm

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    def context_threads(self) -> tuple[int, int]:
        """(generation, batch) thread counts as llama.cpp's context has them now."""
        import llama_cpp

        with self.lock:
            ctx = self.llm._ctx.ctx
            return llama_cpp.llama_n_threads(ctx), llama_cpp.llama_n_threads_batch(ctx)

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
        """Render and tokenize, dropping the oldest exchanges until the prompt fits (:func:`fit_prompt`).

        ``tools`` (``ToolSpec.schema()`` dicts) are rendered by the template; ``steps`` are the agent
        loop's messages after ``user`` (tool calls and results), never dropped.
        """

        def render(exchanges: list[Exchange]) -> tuple[str, list[int]]:
            text = self.render(build_messages(system, exchanges, user, steps), thinking=thinking, tools=tools)
            return text, self.tokenize(text)

        return fit_prompt(render, history, self.n_ctx, reply_room, thinking=thinking and self.supports_thinking)

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
        ``max_tokens``/context end ("length"), once it loops ("length", ``cut="repeat"``:
        :mod:`clawdesk.engine.repeats`), when cancelled ("cancelled"), or before a ``params.stop`` string
        it wrote (ids and text cut on a token boundary: :mod:`clawdesk.engine.stops`). ``seed`` fixes
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
            status, first_at, cut = "finished", None, StopCut(params.stop)
            cut_by = ""
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
                preempted, shown = self._preempt.preemptions, raw  # shown: what on_delta has handed out
                try:
                    for tok in self._preempt.tokens(gen):
                        if first_at is None:
                            first_at = time.monotonic()
                        reply_ids.append(int(tok))
                        if llama_cpp.llama_vocab_is_eog(vocab, tok):
                            break
                        piece, hit = cut.add(decoder.decode(self.llm.detokenize([tok], special=True)))
                        shown += piece
                        if on_delta is not None and piece:
                            on_delta(Delta(text=piece, thinking=in_thinking(shown), n_tokens=len(reply_ids)))
                        if hit:  # written, not served: the ids and text end before the stop string
                            del reply_ids[len(resume_ids) + (cut.kept or 0) :]
                            break
                        if repeat_period(reply_ids, params.repeat_stop):  # a loop: what follows would only repeat it
                            status, cut_by = "length", "repeat"
                            break
                        if len(reply_ids) - len(resume_ids) >= limit:
                            status = "length"
                            break
                        if stopped():
                            status = "cancelled"
                            break
                        self.threads.apply(self.llm)  # the trainer may have started or stopped meanwhile
                    else:  # llm.generate never ends by itself: a chat call stopped it inside llama_decode
                        if self._preempt.preemptions != preempted:
                            status = "cancelled"
                finally:
                    gen.close()
                rest = cut.flush()  # a tail held back because it might have become a stop string
                if on_delta is not None and rest:
                    on_delta(Delta(text=rest, thinking=in_thinking(shown + rest), n_tokens=len(reply_ids)))
                raw += cut.text
            finished = time.monotonic()
            raw += decoder.decode(b"", final=True) if cut.kept is None else ""
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
                cut=cut_by,
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
        as one batch with the logits of every position (:mod:`clawdesk.engine.logprobs`). The cache
        is left at the prompt's end. ``side`` as
        in :meth:`generate` (default ``not use_adapter``: the judge's calls keep the chat's cache).
        """
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
            return continuation_sums(self.llm, continuations, self._preempt.stopped_by_us)

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
        self._lora.apply(use_adapter)  # switching the adapter on or off drops the cache
        if not side:
            self._kv.restore_for_chat(self.llm, ids, self._adapter_key())
        self._kv.chat_owned = not side

    def _adapter_key(self) -> tuple:
        """What the KV computed now depends on besides the tokens: which adapter is set, if any."""
        return (True, self.adapter_version, self._lora.path) if self._lora.applied else (False,)

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
            self.threads.apply(self.llm)
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
        self._lora.check(path, self.identity.arch)  # in Python, before llama.cpp's parser sees the file
        with self.lock:
            if self.closed:  # before the slot touches the freed context
                raise EngineClosed()
            self._lora.swap(path)
            self._kv.drop()  # computed under the previous adapter
            self.adapter_version = version

    def clear_adapter(self) -> None:
        with self.lock:
            self._free_adapter()

    def _free_adapter(self) -> None:
        self._kv.drop()
        if self._lora.free():
            self.adapter_version = None
