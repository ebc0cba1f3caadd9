"""``clawdesk eval``: the simulated-user experiment (a persona or a scenario), the method comparison,
the hint probe, several seeds, and the judge set.

Registered on the parser by :func:`add_commands`. Every option defaults to what the app itself does
(method combined, the self-judge, the learning settings of ``config.toml``), so an eval without
options measures the app as shipped. Runs never touch the user's data dir: each one gets a fresh
one under ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from clawdesk.cli.args import count, positive_float, seed
from clawdesk.cli.common import AddCommand, opened_store
from clawdesk.config import Config, parse_train_option
from clawdesk.errors import ConfigError, InputError
from clawdesk.progress import ProgressBar

EPILOG = """\
result.json keys: persona, method, judge, model, interactions, train_every, batch_size, seed,
base_score, final_score, best_score, with_hint_score, scores ([interactions, score] pairs),
interactions_to_target (first score >= 0.8, or null), ppl_ratio, judge_agreement (self judge),
wall_s, train_s, config; scenario, phases (personas, start, interactions, base_score,
with_hint_score, scores, final_score, interactions_to_target from the phase start: first score
>= 0.8 or >= base_score + 0.3), retention (personas of an earlier phase still active: own score at
the end), max_ppl_ratio, kept_versions, rejected_versions; memory (on/off), memory_items (id, text,
status, created_at and learned_at in interactions), score_without_memory (held-out score at the end
with the items out of the prompt), sessions_to_effect (first interaction after which three served
replies in a row satisfied the persona). A --persona run is a one-phase scenario.
--seeds N: one run per seed in DIR/seed-K/, and in DIR/result.json seeds, scores_mean, scores_min,
scores_max. See docs/learning.md for measured tables.
"""


def add_commands(add: AddCommand) -> None:
    p = add("eval", cmd_eval, "measure learning with a simulated user (persona), or measure the judge")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    what = p.add_mutually_exclusive_group()
    what.add_argument("--persona", metavar="FILE|NAME", help="a persona .toml, or a shipped persona's name")
    what.add_argument("--scenario", metavar="FILE|NAME", help="a scenario .toml (phases of personas), or a shipped one")
    p.add_argument("--method", choices=["off", "shuffled", "binary", "opd", "combined"], default="combined")
    p.add_argument("--judge", choices=["oracle", "self"], default="self", help="self = the app's judge (default)")
    p.add_argument("--judge-method", choices=["channel", "logprob", "sampled"], help="override judge.method")
    p.add_argument(
        "--interactions", type=count, metavar="N", help="with --persona (default 64); scenarios set their own"
    )
    p.add_argument("--train-every", type=count, metavar="K", help="judge and train every K interactions (default B)")
    p.add_argument(
        "--batch-size", type=count, metavar="B", help="samples per optimizer step (default train.batch_size)"
    )
    p.add_argument("--epochs", type=count, metavar="E", help="optimizer passes per batch (default train.epochs)")
    p.add_argument("--lr", type=positive_float, help="LoRA learning rate (default train.lr)")
    p.add_argument(
        "--train-option", action="append", default=[], metavar="KEY=VALUE",
        help="any [train] setting for this run, as in config.toml (repeatable), e.g. advantage=baseline",
    )  # fmt: skip
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=seed, default=0)
    seeds.add_argument("--seeds", type=count, metavar="N", help="run seeds 0..N-1; result.json gets mean, min, max")
    p.add_argument("--max-reply-tokens", type=count, default=160, metavar="T", help="reply cap in the eval")
    p.add_argument(
        "--memory",
        choices=["on", "off"],
        help="the preference memory in the simulated chats (default: [memory] enabled in config.toml)",
    )
    p.add_argument("--out", type=Path, metavar="DIR", help="where result.json, curve.png (and compare.*) go")
    p.add_argument("--compare", action="store_true", help="run off/shuffled/binary/opd/combined with one seed")
    p.add_argument("--probe", action="store_true", help="print the base and with-hint scores only (a minute)")
    p.add_argument(
        "--judge-set",
        nargs="?",
        const="",
        metavar="FILE",
        help="measure the judge on a labelled set (default: the shipped turn, tool-step and standing sets)",
    )


def _config_for(args: argparse.Namespace, config: Config) -> Config:
    train, judge = config.train, config.judge
    # Checked here, before any model loads, against the same ranges as config.toml; the message names the flag.
    for key in ("epochs", "lr", "batch_size"):
        if getattr(args, key) is not None:
            try:
                train = dataclasses.replace(train, **{key: getattr(args, key)})
            except ValueError as exc:
                raise ConfigError(f"--{key.replace('_', '-')}: {exc}") from exc
    for option in args.train_option:
        try:
            key, value = parse_train_option(option)
            train = dataclasses.replace(train, **{key: value})
        except ValueError as exc:
            raise ConfigError(f"--train-option {option}: {exc}") from exc
    if args.judge_method:
        judge = dataclasses.replace(judge, method=args.judge_method)  # argparse choices = JudgeConfig's
    memory = config.memory
    if getattr(args, "memory", None) is not None:
        memory = dataclasses.replace(memory, enabled=args.memory == "on")
    return dataclasses.replace(config, train=train, judge=judge, memory=memory)


def cmd_eval(args: argparse.Namespace, config: Config) -> int:
    config = _config_for(args, config)
    if args.judge_set is not None:
        return _judge_set(args, config)
    scenario = _scenario(args)
    if args.probe:
        return _probe(args, config, scenario)
    if args.out is None:
        raise InputError("say where results go: --out DIR")
    from clawdesk.eval.experiment import METHODS, EvalOptions, Experiment
    from clawdesk.eval.report import write_compare, write_run, write_seeds

    batch = args.batch_size or config.train.batch_size
    methods = METHODS if args.compare else (args.method,)
    seeds = range(args.seeds) if args.seeds else (args.seed,)
    results = []
    for method in methods:
        out = args.out / method if args.compare else args.out
        runs = []
        for s in seeds:
            opts = EvalOptions(
                method=method, judge=args.judge, train_every=args.train_every or batch, batch_size=batch, seed=s,
                max_reply_tokens=args.max_reply_tokens,
            )  # fmt: skip
            run_out = out / f"seed-{s}" if args.seeds else out
            print(f"eval {scenario.name}: method {method}, judge {opts.effective_judge} → {run_out}", file=sys.stderr)
            result = Experiment(config, scenario, opts, run_out, args.model, on_event=_Printer()).run()
            write_run(run_out, result)
            runs.append(result)
            print(_summary(result))
        if args.seeds:
            summary = write_seeds(out, runs)
            print(_summary(summary | {"seed": "mean"}) + f" (seeds {summary['seeds']} → {out / 'result.json'})")
            runs = [summary]
        results.extend(runs)
    if args.compare:
        print(write_compare(args.out, results))
        print(f"wrote {args.out / 'compare.md'}, compare.json, compare.png")
    return 0


def _scenario(args: argparse.Namespace):
    """The run's scenario: a shipped or given scenario file, or one persona as a one-phase scenario."""
    from clawdesk.eval.personas import load_persona
    from clawdesk.eval.scenarios import Scenario, load_scenario

    if args.scenario:
        if args.interactions is not None:
            raise InputError("--interactions is for --persona; a scenario's phases set their own interactions")
        return load_scenario(args.scenario)
    if not args.persona:
        raise InputError(
            "say which persona or scenario: clawdesk eval --persona NAME|FILE or --scenario NAME|FILE "
            "(or --judge-set to measure the judge)"
        )
    return Scenario.single(load_persona(args.persona), args.interactions or 64)


def _summary(r: dict) -> str:
    curve = ", ".join(f"{int(n)}→{s:.2f}" for n, s in r["scores"])
    text = (
        f"{r['persona']} [{r['method']}, {r['judge']} judge, seed {r['seed']}]: base {r['base_score']:.2f} → final "
        f"{r['final_score']:.2f} (with hint {r['with_hint_score']:.2f}); highest ppl ratio "
        f"{r['max_ppl_ratio']:.3f}; {r['wall_s']:.0f} s. Curve: {curve}"
    )
    if r.get("memory") and "items_learned" in r:  # the mean over seeds: per-seed lists
        text += (
            f"\n  memory: items learned per seed {r['items_learned']}; without it {r['score_without_memory']:.2f} "
            f"(mean); sessions to effect per seed {r['sessions_to_effect']}"
        )
    elif r.get("memory"):
        text += (
            f"\n  memory: {len(r['memory_items'])} item(s), {sum(m['status'] == 'learned' for m in r['memory_items'])} "
            f"learned; without it {r['score_without_memory']:.2f}; sessions to effect {r['sessions_to_effect']}"
        )
    if len(r["phases"]) > 1:
        for k, ph in enumerate(r["phases"], 1):
            text += (
                f"\n  phase {k} ({' + '.join(ph['personas'])}, from {ph['start']}): base {ph['base_score']:.2f} → "
                f"{ph['final_score']:.2f}, to target {ph['interactions_to_target']}"
            )
        text += "\n  retention: " + (", ".join(f"{n} {s:.2f}" for n, s in r["retention"].items()) or "none")
    return text


class _Printer:
    """Eval events → a progress bar per phase, and the trainer's step lines."""

    def __init__(self):
        self.bar = ProgressBar("interactions", unit="")
        self.phase = ""

    def __call__(self, event) -> None:
        if event.phase in ("train", "done") or (event.phase == "score" and event.message):
            self.bar.done()
            print(f"[{event.phase}] {event.message}", file=sys.stderr)
            self.phase = ""
            return
        if event.phase != self.phase:
            self.bar.done()
            self.bar.reset(event.phase)
            self.phase = event.phase
        self.bar(event.done, event.total)


def _probe(args: argparse.Namespace, config: Config, scenario) -> int:
    """Base and with-hint scores of each distinct phase (of the one persona, for --persona)."""
    from clawdesk.eval.scoring import Scorer
    from clawdesk.runtime import load_engine

    phases = list({tuple(ph.names): ph for ph in scenario.phases}.values())
    lines = []
    with opened_store(config) as store:
        engine = load_engine(config, store, args.model)
        try:
            for phase in phases:
                scorer = Scorer(engine, phase, config.chat.system_prompt, args.max_reply_tokens)
                base = scorer.score()
                base_replies = scorer.last_replies
                hinted = scorer.score(hint=True)
                lines.append(f"{' + '.join(phase.names)} on {engine.identity.name}: base {base:.2f}, with hint "
                             f"{hinted:.2f} ({len(phase.heldout)} held-out prompts; shipped personas need with hint "
                             "≥ base + 0.3)")  # fmt: skip
                for prompt, reply in zip(phase.heldout[:3], base_replies[:3], strict=False):
                    lines.append(f"  · {prompt}\n    {' '.join(reply.split())[:160]}")
        finally:
            engine.close()
    print("\n".join(lines))
    return 0


def _judge_set(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.eval.judge_set import SHIPPED_JUDGE_SETS, evaluate, format_report, load_cases
    from clawdesk.eval.personas import assets_dir
    from clawdesk.eval.report import write_json
    from clawdesk.runtime import load_engine, load_judge

    paths = [Path(args.judge_set)] if args.judge_set else [assets_dir() / name for name in SHIPPED_JUDGE_SETS]
    cases = [case for path in paths for case in load_cases(path)]
    if args.out is not None:  # before the judge runs for minutes, not after
        from clawdesk.store.db import ensure_dir

        ensure_dir(args.out, "output folder", "Choose another place with --out.")
    with opened_store(config) as store:
        engine = load_engine(config, store, args.model)
        judge = load_judge(config, store, engine)
        bar = ProgressBar("judge set", unit="cases")
        try:
            report = evaluate(judge, cases, on_case=bar)
        finally:
            bar.done()
            if judge.engine is not engine:
                judge.engine.close()
            engine.close()
    report["files"] = [str(p) for p in paths]
    print(format_report(report))
    if args.out is not None:
        write_json(args.out / "judge-set.json", report)
        print(f"wrote {args.out / 'judge-set.json'}")
    return 0
