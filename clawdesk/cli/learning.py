"""Learning commands: ``judge``, ``train``, ``adapters``, ``export``, ``export-data``, ``learning on|off``
(and ``ask --rate``).

Registered on the parser by :func:`add_commands` and :func:`add_switch`; like every command they
receive the config built by ``cli.main`` and raise :class:`~clawdesk.errors.ClawDeskError` for
anything a person can fix.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from clawdesk.cli.args import count
from clawdesk.cli.common import AddCommand, opened_store
from clawdesk.config import Config
from clawdesk.progress import ProgressBar


def add_commands(add: AddCommand) -> None:
    p = add("judge", cmd_judge, "judge all pending turns now (rewards and hints from your next messages)")
    p.add_argument("--limit", type=count, metavar="N", help="judge at most N turns and tool steps")
    p = add("train", cmd_train, "train the next adapter version(s) from judged turns, headless")
    p.add_argument("--steps", type=count, metavar="N", help="at most N optimizer steps (default: all full batches)")
    p.add_argument("--batch-size", type=count, metavar="B", help="samples per step (default train.batch_size)")
    p = add("adapters", cmd_adapters, "list adapter versions, or choose which one the chat serves")
    p.add_argument("action", nargs="?", choices=["list", "use", "rollback", "off"], default="list")
    p.add_argument("n", nargs="?", type=count, metavar="N", help="version number for `use`")
    p = add("export", cmd_export, "export an adapter version (PEFT folder, GGUF LoRA, or Ollama Modelfile)")
    p.add_argument("--format", choices=["peft", "gguf", "ollama"], default="peft")
    p.add_argument("--out", required=True, type=Path, metavar="DIR")
    p.add_argument("--version", type=count, metavar="N", help="default: the active version, else the newest ready")
    p = add("export-data", cmd_export_data, "export judged samples as TRL-ready JSONL")
    p.add_argument("--out", required=True, type=Path, metavar="FILE")


def add_switch(add: AddCommand) -> None:
    p = add("learning", cmd_learning, "turn learning on or off, or show its state")
    p.add_argument("state", nargs="?", choices=["on", "off", "status"], default="status")


def cmd_learning(args: argparse.Namespace, config: Config) -> int:
    with opened_store(config) as store:
        if args.state in ("on", "off"):
            store.set_learning(args.state == "on")
        print(f"learning: {'ON' if store.learning_enabled else 'OFF'}")
    return 0


def rate_last(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.store.judgments import last_turn_id, set_rating

    with opened_store(config) as store:
        turn_id = last_turn_id(store, args.session)
        set_rating(store, turn_id, int(args.rate))
        turn = store.get_turn(turn_id)
    print(f"rated turn {turn_id} (session {turn.session_id}) {args.rate}: this overrides the judge's score")
    return 0


def cmd_judge(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.judge.service import judge_pending
    from clawdesk.runtime import hint_classifier, load_engine, load_judge
    from clawdesk.store.judgments import backlog, pending_turns
    from clawdesk.store.step_judgments import step_backlog

    with opened_store(config) as store:
        if not store.learning_enabled:
            print("learning is OFF: nothing is judged. Turn it on with `clawdesk learning on`.")
            return 0
        # Turns first, then tool steps (judged from their tool results); --limit counts both.
        todo = len(pending_turns(store, limit=args.limit)) + step_backlog(store)
        todo = todo if args.limit is None else min(todo, args.limit)
        if todo == 0:
            _, waiting = backlog(store)
            print(f"Nothing to judge ({waiting} turn(s) wait for your next message).")
            return 0
        engine = load_engine(config, store, args.model)
        judge = load_judge(config, store, engine)
        bar = ProgressBar("judge", unit="votes")
        total = todo * 2 * config.judge.votes
        done = [0]

        def on_event(ev) -> None:
            if ev.kind == "vote":
                done[0] += 1
                bar(done[0], total)

        try:
            summary = judge_pending(
                store,
                judge,
                max_age_hours=config.judge.pending_max_age_hours,
                limit=args.limit,
                on_event=on_event,
                classify=hint_classifier(config, judge),  # standing hints become preferences, as in the chat
            )
        finally:
            bar.done()
            if judge.engine is not engine:
                judge.engine.close()
            engine.close()
        r = summary.rewards
        print(
            f"judged {summary.judged} turn(s): +1 ×{r[1]}, -1 ×{r[-1]}, 0 ×{r[0]}; hints accepted: {summary.hints}"
            + (f"; dropped {summary.dropped} stale" if summary.dropped else "")
            + (f"; noted {summary.preferences} preference(s) (`clawdesk prefs`)" if summary.preferences else "")
        )
        if summary.steps_judged:
            r = summary.step_rewards
            print(
                f"judged {summary.steps_judged} tool step(s) from their results: +1 ×{r[1]}, -1 ×{r[-1]}, 0 ×{r[0]}; "
                f"hints: {summary.step_hints}"
            )
    return 0


def cmd_train(args: argparse.Namespace, config: Config) -> int:
    import dataclasses

    from clawdesk.errors import ConfigError
    from clawdesk.learn.trainer import train
    from clawdesk.reload import select
    from clawdesk.runtime import model_sha256, resolve_served_model

    try:
        train_cfg = (
            config.train if args.batch_size is None else dataclasses.replace(config.train, batch_size=args.batch_size)
        )
    except ValueError as exc:  # the range lives in TrainConfig; say which flag broke it
        raise ConfigError(f"--batch-size: {exc}") from exc
    with opened_store(config) as store:
        if not store.learning_enabled:
            print("learning is OFF: nothing is trained. Turn it on with `clawdesk learning on`.")
            return 0
        model = resolve_served_model(config, args.model)
        sha = model_sha256(store, model.path)
    bar = ProgressBar("train", unit="steps")

    def on_progress(p) -> None:
        if p.phase == "step":
            bar(p.step, p.steps)
        elif p.message:
            bar.done()
            print(f"[{p.phase}] {p.message}")

    new = train(
        config.db_path, config.adapters_dir, model.path, model.name, sha, train_cfg,
        steps=args.steps, on_progress=on_progress, system_prompt=config.chat.system_prompt,
    )  # fmt: skip
    bar.done()
    with opened_store(config) as store:
        from clawdesk.learn.versions import get_version

        ready = [n for n in new if get_version(store, n).status == "ready"]
        for n in new:
            row = get_version(store, n)
            print(f"v{n}: {row.status}" + (f" ({row.note})" if row.note else ""))
        if ready:
            select(store, ready[-1], base_sha256=sha, base_name=model.name)
            print(f"the chat now serves v{ready[-1]} (`clawdesk adapters rollback` to undo)")
    return 0


def cmd_adapters(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.errors import InputError
    from clawdesk.learn.versions import list_versions
    from clawdesk.reload import active_version, previous_ready, select
    from clawdesk.runtime import model_sha256, resolve_served_model

    with opened_store(config) as store:
        model = resolve_served_model(config, args.model)
        sha = model_sha256(store, model.path)
        if args.action == "use":
            if args.n is None:
                raise InputError("say which version: clawdesk adapters use N")
            select(store, args.n, base_sha256=sha, base_name=model.name)
        elif args.action == "off":
            select(store, None, base_sha256=sha, base_name=model.name)
        elif args.action == "rollback":
            select(store, previous_ready(store, active_version(store), sha), base_sha256=sha, base_name=model.name)
        active = active_version(store)
        rows = list_versions(store)
        if not rows:
            print("No adapter versions yet. Chat with learning ON, then `clawdesk train` (or let the chat train).")
        for v in rows:
            mark = "*" if v.version == active else " "
            other = "" if v.base_sha256 == sha else f"  [base {v.base_name}, not served]"
            loss = v.metrics.get("loss")
            stats = f"loss {loss:.4f}" if isinstance(loss, float) else ""
            print(
                f"{mark} v{v.version:<3} {v.status:<8} {v.n_samples:>3} samples  {stats:<14} {v.created_at[:16]}{other}"
            )
            if v.status == "rejected" and v.note:
                print(f"         rejected: {v.note}")
        print(f"serving: {'v' + str(active) if active is not None else 'base model (no adapter)'}")
    return 0


def cmd_export(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.export import export_adapter
    from clawdesk.runtime import resolve_served_model

    with opened_store(config) as store:
        base = resolve_served_model(config, args.model).path if args.format == "ollama" else None
        out = export_adapter(store, args.format, args.out, n=args.version, base_gguf=base)
    print(f"exported ({args.format}) to {out}")
    return 0


def cmd_export_data(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.export import export_data

    with opened_store(config) as store:
        n = export_data(store, args.out)
    print(f"wrote {n} judged sample(s) to {args.out}")
    return 0
