"""Chat time to first token while the app's background learning works ÷ while it does not (bench section "chat").

Not a section itself (no ``sec_`` prefix): :mod:`sec_chat` calls :func:`ttft_under_load`. The load is
the app's own: the real :class:`~clawdesk.judge.service.JudgeLoop` on a backlog of unjudged turns,
sharing the engine and the chat's gate as :class:`~clawdesk.loop.LearningLoop` wires it (idle rounds: paused with
the learning switch), and the real trainer process the app launches (``python -m
clawdesk.learn.trainer`` on ready samples; idle rounds: SIGSTOP, and the thread budget cleared as when
it ends). TTFT is timed from ``AgentService.run_turn`` to the first streamed text, in a new chat each time.
"""

from __future__ import annotations

import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

SHA = "bench"  # the engine's sha256 in the bench: samples must carry it to be trained on
TTFT_MESSAGES = [  # about the same length in tokens
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "How many legs does a spider have?",
    "Give me a word that rhymes with cat.",
]
BACKLOG_REPLIES = [  # (user, reply, next user message): what the judge reads
    ("What is 2+2?", "2+2 is 4.", "Thanks! And 3+3?"),
    ("Name a colour.", "Blue is a colour, often linked with calm and the sky above us.", "Too long, one word please."),
    ("Say hi.", "Hello! How can I help you today?", "Great, tell me a joke."),
    ("What is the capital of Spain?", "The capital of Spain is Lisbon.", "No, that's wrong. It is Madrid."),
]


def _ttft(service, store, text: str) -> float:
    """ms from asking the chat service for a turn (in a new chat) to its first streamed text."""
    session = service.new_session(store)
    first: list[float] = []

    def on_delta(_delta) -> None:
        if not first:
            first.append(time.monotonic())

    start = time.monotonic()
    service.run_turn(store, session.id, text, on_delta=on_delta)
    if not first:
        raise RuntimeError(f"the chat streamed no text for {text!r}")
    return (first[0] - start) * 1000


def _add_turns(engine, store, n: int, *, judged: bool) -> None:
    """``n`` turns in one chat, in one transaction; unjudged ones wait for the judge (all but the last are ready)."""
    from clawdesk.store import NewTurn, now_iso
    from clawdesk.store.judgments import Judgment, save_judgment

    session = store.create_session(system_prompt="You are a helpful assistant.")
    eos = engine.llm.token_eos()
    with store.transaction():
        for i in range(n):
            user, reply, _ = BACKLOG_REPLIES[i % len(BACKLOG_REPLIES)]
            if i and not judged:
                user = BACKLOG_REPLIES[(i - 1) % len(BACKLOG_REPLIES)][2]  # the judge reads it as the answer
            prompt = engine.build_prompt(session.system_prompt, [], user, thinking=False, reply_room=64).token_ids
            at = now_iso()
            tid = store.add_turn(
                session.id,
                NewTurn(
                    user_content=user, reply_content=reply, reply_thinking="", status="finished", thinking=False,
                    model_name="smollm2-135m", model_path=str(engine.identity.path), model_sha256=SHA,
                    prompt_ids=prompt, reply_ids=[*engine.tokenize(reply), eos], started_at=at, finished_at=at,
                ),
            )  # fmt: skip
            if judged:
                save_judgment(
                    store,
                    Judgment(
                        turn_id=tid, next_turn_id=tid, prompt_version="bench", judge_model_name="bench",
                        judge_model_sha256="bench", score_outputs=[], votes=[1], reward=1 - 2 * (i % 2),
                        hint_outputs=[], hint=None, enhanced_user=None, enhanced_prompt_ids=None, seconds=0.0,
                    ),
                )  # fmt: skip


def ttft_under_load(engine, tmp: Path, quick: bool, log: Callable[[str], None]) -> dict[str, dict]:
    from clawdesk.agent import AgentService
    from clawdesk.config import ChatConfig, Config
    from clawdesk.runtime import open_store

    rounds = 4 if quick else 12
    # A short reply: only the first token is timed (the rest of the turn is recorded as the app does).
    config = Config(home=tmp / "chat", chat=ChatConfig(temperature=0.0, max_reply_tokens=4))
    store = open_store(config)
    try:
        service = AgentService(engine, config.chat)
        results = _ttft_judging(engine, service, store, config, 20 if quick else 40, rounds, log)
        results.update(_ttft_training(engine, service, store, tmp / "train", rounds, quick, log))
    finally:
        store.close()
    return results


def _interleaved(
    rounds: int,
    service,
    store,
    setup: dict[str, Callable[[], bool]],
) -> tuple[dict[str, list[float]], bool]:
    """TTFT rounds of each kind in ``setup`` (kind -> prepare; False: that load is gone, stop), the order
    rotating every round so drift hits all kinds. Every measurement sends a message of its own (same
    length, different early tokens): a repeated prompt would be served from the KV cache."""
    out: dict[str, list[float]] = {kind: [] for kind in setup}
    kinds = list(setup)
    for r in range(rounds):
        for j in range(len(kinds)):
            kind = kinds[(r + j) % len(kinds)]
            if not setup[kind]():
                return out, False
            k = r * len(kinds) + j
            out[kind].append(_ttft(service, store, f"Question {k + 10}: {TTFT_MESSAGES[r % len(TTFT_MESSAGES)]}"))
    return out, True


def _judge_rounds(engine, service, store, config, judge, rounds: int, *, cold: bool):
    """TTFT with ``judge`` paused (idle) vs working through the backlog (busy) in the app's JudgeLoop;
    ``cold`` adds idle rounds with the chat's KV cache dropped. (ttfts, complete, threads, votes)."""
    from clawdesk.judge.service import JudgeLoop
    from clawdesk.store.judgments import backlog

    votes: list[float] = []
    loop = JudgeLoop(
        judge,
        config.db_path,
        max_age_hours=config.judge.pending_max_age_hours,
        on_event=lambda ev: votes.append(time.monotonic()) if ev.kind == "vote" else None,
    )
    loop.set_learning(False)
    worker = threading.Thread(target=loop.run, name="bench-judge", daemon=True)
    worker.start()
    rng = random.Random(0)
    threads: dict[str, list[int]] = {"idle": [], "busy": []}

    def idle() -> bool:
        loop.set_learning(False)  # the app's learning switch: the vote in progress stops at its next token
        with judge.engine.lock:  # the judge is out of its native call
            pass
        time.sleep(0.1)
        threads["idle"].append(engine.threads.wanted() or 0)
        return True

    def idle_cold() -> bool:
        # Idle, but with the chat's KV cache dropped as judging drops it: how much of "busy" is the lost cache.
        idle()
        engine.reset_cache()
        return True

    def busy() -> bool:
        if backlog(store)[0] == 0:
            return False
        loop.set_learning(True)
        time.sleep(rng.uniform(0.2, 0.6))  # the chat arrives at a random point of a judgment
        threads["busy"].append(engine.threads.wanted() or 0)
        return backlog(store)[0] > 0

    kinds = {"idle": idle, "busy": busy, **({"idle_cold": idle_cold} if cold else {})}
    try:
        ttfts, complete = _interleaved(rounds, service, store, kinds)
    finally:
        loop.close()
        worker.join(timeout=60)
    return ttfts, complete, threads, len(votes)


def _ttft_judging(engine, service, store, config, backlog_n: int, rounds: int, log) -> dict[str, dict]:
    from clawdesk.engine import Engine
    from clawdesk.judge.runner import Judge
    from clawdesk.models import DEMO_NAME, resolve_model
    from clawdesk.store.judgments import backlog

    _add_turns(engine, store, backlog_n + 1, judged=False)
    before = backlog(store)[0]
    # The app's wiring (LearningLoop): the judge shares the engine and yields through the chat's gate.
    judge = Judge(engine, config.judge, gate=service.gate)
    ttfts, complete, threads, votes = _judge_rounds(engine, service, store, config, judge, rounds, cold=True)
    log(
        f"judge: ttft idle {_fmt(ttfts['idle'])} ms, busy {_fmt(ttfts['busy'])} ms, "
        f"idle with the KV cache dropped {_fmt(ttfts['idle_cold'])} ms"
    )
    # For the record: the judge on a context of its own (judge.model set to the served GGUF: the weights
    # are mmapped once, the judge gets its own KV cache), as runtime.load_judge wires it.
    demo = resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True)
    own_engine = Engine.load(demo, sha256=SHA, n_ctx=engine.n_ctx)
    try:
        own = Judge(own_engine, config.judge, policy=engine, gate=service.gate)
        own_ttfts, _, own_threads, own_votes = _judge_rounds(
            engine, service, store, config, own, max(2, rounds // 2), cold=False
        )
    finally:
        own_engine.close()
    left = backlog(store)[0]
    log(
        f"judge on its own context: ttft idle {_fmt(own_ttfts['idle'])} ms, busy {_fmt(own_ttfts['busy'])} ms; "
        f"backlog {before} → {left}"
    )
    if not complete:
        log("judge: the backlog was judged before all busy rounds ran (a larger backlog gives more rounds)")
    return {
        "ttft_busy_ratio": {
            "value": _ratio(ttfts),
            "unit": "x",
            "goal": "<= 1.25",
            "what": "chat time to first token while the background judge works through a backlog ÷ idle",
            "raw": {
                "ttft_ms": ttfts,
                "ttft_ms_median": {k: statistics.median(v) for k, v in ttfts.items() if v},
                "engine_threads": threads,
                "backlog_before": before,
                "backlog_after": left,
                "judge_votes_during_run": votes,
                "judge_method": config.judge.method,
                "judge_own_context": {
                    "ratio": _ratio(own_ttfts),
                    "ttft_ms": own_ttfts,
                    "engine_threads": own_threads,
                    "judge_votes_during_run": own_votes,
                },
            },
        }
    }


def _ttft_training(engine, service, store, home: Path, rounds: int, quick: bool, log) -> dict[str, dict]:
    from clawdesk.config import Config
    from clawdesk.runtime import open_store

    batch, steps = (4, 3) if quick else (8, 4)
    tconfig = Config(home=home)
    tstore = open_store(tconfig)
    try:
        # The trainer's own DB: a SIGSTOPped trainer must not hold a write lock the chat waits on.
        _add_turns(engine, tstore, batch * steps + 2, judged=True)
    finally:
        tstore.close()
    ident = engine.identity
    cmd = [
        sys.executable,
        "-m",
        "clawdesk.learn.trainer",
        "--db",
        str(tconfig.db_path),
        "--adapters",
        str(tconfig.adapters_dir),
        "--base",
        str(ident.path),
        "--base-name",
        ident.name,
        "--base-sha",
        ident.sha256,
        "--steps",
        str(steps),
        "--config-home",
        str(home),
        "--batch-size",
        str(batch),
    ]  # fmt: skip  -- the command clawdesk.loop.trainer_process.trainer_command builds
    from clawdesk.learn.pause import TrainerPause

    phases: list[str] = []
    pausable: list[bool] = []
    with open(home / "trainer.log", "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
    reader = threading.Thread(target=_read_phases, args=(proc, phases, pausable), daemon=True)
    reader.start()
    threads: dict[str, list[int]] = {"idle": [], "busy": [], "busy_unpaused": []}
    # LearningLoop's wiring: the budget is "busy" while the process runs, and the chat's gate
    # stops the trainer while it generates (once the trainer said it may be stopped).
    pause = TrainerPause([engine.threads])
    unlisten = service.gate.on_computing(pause.chat_computing)
    pause.attach(proc)
    running = [True]
    try:
        # Quick: from the first progress line (torch imported, the base loading: CPU-bound already);
        # full: from scoring/step, where torch computes on its threads.
        wanted = {"loading", "scoring", "step"} if quick else {"scoring", "step"}
        deadline = time.monotonic() + 300
        while not wanted & set(phases) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        log(f"trainer: phases so far {phases}, pausable {bool(pausable)} (measuring from here)")

        # Idle rounds stop the process (no trainer CPU) and detach it, as if it had ended; busy rounds
        # run it as the app does; busy_unpaused rounds run it without the pause (the app before it).
        def set_running(on: bool, armed: bool = True) -> None:
            pause.detach()
            if proc.poll() is not None:
                return
            if running[0] != on:
                proc.send_signal(signal.SIGCONT if on else signal.SIGSTOP)
                running[0] = on
            if on:
                pause.attach(proc)
                if armed and pausable:
                    pause.arm()

        def idle() -> bool:
            set_running(False)
            time.sleep(0.1)
            threads["idle"].append(engine.threads.wanted() or 0)
            return True

        def busy(kind: str, armed: bool) -> Callable[[], bool]:
            def prepare() -> bool:
                if proc.poll() is not None:
                    return False
                set_running(True, armed)
                time.sleep(0.3)
                threads[kind].append(engine.threads.wanted() or 0)
                return proc.poll() is None

            return prepare

        setup = {"idle": idle, "busy": busy("busy", True), "busy_unpaused": busy("busy_unpaused", False)}
        ttfts, complete = _interleaved(rounds, service, store, setup)
    finally:
        pause.detach()
        unlisten()
        _stop(proc)
        reader.join(timeout=10)
    log(
        f"trainer: ttft idle {_fmt(ttfts['idle'])} ms, busy {_fmt(ttfts['busy'])} ms, without the pause "
        f"{_fmt(ttfts['busy_unpaused'])} ms; {pause.pauses} pauses; phases {phases}"
    )
    if not complete:
        log("trainer: the process ended before all busy rounds")
    return {
        "ttft_training_ratio": {
            "value": _ratio(ttfts),
            "unit": "x",
            "goal": "<= 1.5",
            "what": "chat time to first token while a trainer process runs ÷ idle",
            "raw": {
                "ttft_ms": ttfts,
                "ratio_without_pause": _ratio(ttfts, "busy_unpaused"),
                "pauses": pause.pauses,
                "pausable": bool(pausable),
                "engine_threads": threads,
                "trainer_phases": phases,
                "batch_size": batch,
            },
        }
    }


def _read_phases(proc: subprocess.Popen, phases: list[str], pausable: list[bool] | None = None) -> None:
    from clawdesk.learn.protocol import TrainerFailed, TrainerStarted, decode

    assert proc.stdout is not None
    for line in proc.stdout:
        message = decode(line)  # the app's own reader of the trainer's lines (None: a stray print)
        if message is None:
            continue
        if isinstance(message, TrainerStarted):
            if pausable is not None and message.pausable:
                pausable.append(True)
            phase = "starting"
        else:
            phase = "error" if isinstance(message, TrainerFailed) else message.phase
        if not phases or phases[-1] != phase:
            phases.append(phase)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()  # the trainer stops at its next micro-batch
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ratio(ttfts: dict[str, list[float]], busy: str = "busy") -> float | None:
    if not ttfts["idle"] or not ttfts.get(busy):
        return None
    return statistics.median(ttfts[busy]) / statistics.median(ttfts["idle"])


def _fmt(values: list[float]) -> str:
    return "/".join(f"{v:.0f}" for v in values) or "–"
