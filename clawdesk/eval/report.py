"""Writing eval results: ``result.json`` + ``curve.png`` per run, ``compare.{json,md,png}`` for ``--compare``,
and the mean and spread over seeds for ``--seeds N`` (:func:`aggregate_seeds`).

The JSON keys are a contract (see ``clawdesk eval --help`` and ``docs/learning.md``). Plots use
matplotlib's Agg backend, so no display is needed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clawdesk.errors import InputError
from clawdesk.eval.scenarios import interactions_to_target


def write_json(path: Path, data: Any) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)  # a crash never leaves half a result file
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}; choose another --out") from exc


def _plot(path: Path, runs: list[dict[str, Any]], title: str) -> None:
    """Held-out score per run; below it, when the runs carry one, the neutral-text perplexity ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_ppl = [r for r in runs if r.get("ppl_curve")]
    if with_ppl:
        fig, (ax, low) = plt.subplots(2, 1, figsize=(6.4, 5.6), dpi=100, sharex=True, height_ratios=(2, 1))
    else:
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    _bands(ax, (runs[0].get("phases") or []) if runs else [])
    for r in runs:
        xs, ys = zip(*r["scores"], strict=True)
        ax.plot(xs, ys, marker="o", label=f"{r['method']} ({r['judge']})")
        if r.get("scores_min"):
            (_, lo), (_, hi) = zip(*r["scores_min"], strict=True), zip(*r["scores_max"], strict=True)
            ax.fill_between(xs, lo, hi, alpha=0.2, label=f"{len(r['seeds'])} seeds: min–max")
    if runs:
        ax.axhline(runs[0]["with_hint_score"], color="grey", linestyle=":", label="with hint (teacher)")
    ax.axhline(0.8, color="grey", linestyle="--", linewidth=0.8)
    ax.set_ylabel("held-out score")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    if with_ppl:
        for r in runs:  # same colour order as above; a run without a curve keeps its colour slot
            xs, ys = zip(*(r.get("ppl_curve") or [[0, 1.0]]), strict=True)
            low.plot(xs, ys, marker=".")
        low.axhline(1.05, color="grey", linestyle="--", linewidth=0.8)
        low.set_ylabel("ppl ratio")
        low.grid(alpha=0.3)
        low.set_xlabel("interactions")
    else:
        ax.set_xlabel("interactions")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _bands(ax, phases: list[dict[str, Any]]) -> None:
    """Each phase of a scenario as a shaded band labelled with its personas (nothing for a one-phase run)."""
    if len(phases) < 2:
        return
    for k, ph in enumerate(phases):
        lo, hi = ph["start"], ph["start"] + ph["interactions"]
        ax.axvspan(lo, hi, color=("tab:blue", "tab:orange")[k % 2], alpha=0.08, linewidth=0)
        ax.text((lo + hi) / 2, 1.0, " + ".join(ph["personas"]), ha="center", va="top", fontsize=7)


def write_run(out_dir: Path, result: dict[str, Any]) -> None:
    write_json(out_dir / "result.json", result)
    _plot(out_dir / "curve.png", [result], f"{result['persona']} · {result['model']}")


def compare_table(results: list[dict[str, Any]]) -> str:
    """A Markdown table, one row per method."""
    head = (
        "| method | judge | base | final | best | with hint | to ≥ 0.8 | ppl ratio | train s | wall s |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for r in results:
        target = r["interactions_to_target"]
        rows.append(
            f"| {r['method']} | {r['judge']} | {r['base_score']:.2f} | {r['final_score']:.2f} | "
            f"{r['best_score']:.2f} | {r['with_hint_score']:.2f} | {target if target is not None else '—'} | "
            f"{r['ppl_ratio']:.3f} | {r['train_s']:.0f} | {r['wall_s']:.0f} |"
        )
    return "\n".join([head, *rows])


def write_compare(out_dir: Path, results: list[dict[str, Any]]) -> str:
    first = results[0]
    title = (
        f"{first['persona']} · {first['model']} · {first['interactions']} interactions, "
        f"train every {first['train_every']}, batch {first['batch_size']}, "
        + (f"seeds {first['seeds']}" if "seeds" in first else f"seed {first['seed']}")
    )
    table = compare_table(results)
    write_json(out_dir / "compare.json", {"title": title, "runs": results})
    curves = " · ".join(f"{r['method']}: " + ", ".join(f"{int(n)}→{s:.2f}" for n, s in r["scores"]) for r in results)
    text = f"# {title}\n\n{table}\n\nCurves (interactions→score): {curves}\n"
    try:
        (out_dir / "compare.md").write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {out_dir / 'compare.md'}: {exc.strerror}") from exc
    _plot(out_dir / "compare.png", results, title)
    return table


def _aligned(runs: list[list[list[float]]]) -> list[tuple[float, list[float]]]:
    """One phase's points of every seed on one grid: ``[(x, [score of each seed])]``.

    Seeds score at the same points unless something only some of them did adds one (with the memory
    on, the held-out set is scored again after every interaction that changed the items). The held-out
    score is a step function of the interactions: it changes only where a point was scored. So the
    grid is every x any seed scored at (as many points at an x as the seed with most there), and a
    seed without a point there contributes its latest score before it.
    """
    grid: list[tuple[float, int]] = []
    for x in sorted({x for points in runs for x, _ in points}):
        count = max(sum(1 for px, _ in points if px == x) for points in runs)
        grid.extend((x, k) for k in range(count))
    out = []
    for x, k in grid:
        column = []
        for points in runs:
            here = [s for px, s in points if px == x]
            before = [s for px, s in points if px < x]
            if not here and not before:
                raise ValueError(f"a seed's run has no score at or before interaction {x}; they cannot be averaged")
            column.append(here[min(k, len(here) - 1)] if here else before[-1])
        out.append((x, column))
    return out


def aggregate_seeds(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One result per seed (same scenario, method and schedule) → the mean and the spread per point.

    Points are matched phase by phase on the union of the seeds' points (:func:`_aligned`): without
    the memory every seed scores at the same points (after every training round, even one that made no
    version); with it a seed also scores after each change of its items. The dict keeps the first
    seed's descriptive keys and adds ``seeds``, ``scores_mean``, ``scores_min``, ``scores_max``, per
    phase the mean base and final score and each seed's interactions to target, the mean retention per
    persona, the highest perplexity ratio of any seed, and per seed the memory's and judge's keys.
    """
    if any(len(r["phases"]) != len(results[0]["phases"]) for r in results):
        raise ValueError("the seeds' runs have different phases; they cannot be averaged")
    grid = [
        point
        for k in range(len(results[0]["phases"]))
        for point in _aligned([r["phases"][k]["scores"] for r in results])
    ]

    def column(how) -> list[list[float]]:
        return [[x, how(v)] for x, v in grid]

    mean = column(lambda v: sum(v) / len(v))
    first = results[0]
    keep = ("persona", "scenario", "method", "judge", "model", "interactions", "train_every", "batch_size", "config")
    phases = []
    for k, ph in enumerate(first["phases"]):
        runs = [r["phases"][k] for r in results]
        phases.append(
            {
                "personas": ph["personas"], "start": ph["start"], "interactions": ph["interactions"],
                "base_score": sum(p["base_score"] for p in runs) / len(runs),
                "final_score": sum(p["final_score"] for p in runs) / len(runs),
                "final_score_min": min(p["final_score"] for p in runs),
                "final_score_max": max(p["final_score"] for p in runs),
                "interactions_to_target": [p["interactions_to_target"] for p in runs],
                "judge_agreement": [p.get("judge_agreement") for p in runs],
            }
        )  # fmt: skip
    per_seed = {
        "sessions_to_effect": [r.get("sessions_to_effect") for r in results],
        "score_without_memory_per_seed": [r.get("score_without_memory") for r in results],
        "items_learned": [sum(i["status"] == "learned" for i in r.get("memory_items", [])) for r in results],
        "kept_versions": [r.get("kept_versions") for r in results],
        "rejected_versions": [r.get("rejected_versions") for r in results],
        "judge_agreement": [r.get("judge_agreement") for r in results],
    }
    without = [s for s in per_seed["score_without_memory_per_seed"] if s is not None]
    return (
        {k: first[k] for k in keep if k in first}
        | {
            "seeds": [r["seed"] for r in results],
            "scores": mean,  # so the plot and the summary read it like one run's curve
            "scores_mean": mean,
            "scores_min": column(min),
            "scores_max": column(max),
            "base_score": mean[0][1],
            "final_score": mean[-1][1],
            "best_score": max(v for _, v in mean),
            "interactions_to_target": interactions_to_target(mean, 0, None),  # of the mean curve
            "ppl_ratio": sum(r["ppl_ratio"] for r in results) / len(results),
            "train_s": sum(r["train_s"] for r in results),
            "with_hint_score": first["with_hint_score"],
            "phases": phases,
            "retention": {n: sum(r["retention"][n] for r in results) / len(results) for n in first["retention"]},
            "max_ppl_ratio": max(r["max_ppl_ratio"] for r in results),
            "ppl_curve": None,
            "wall_s": sum(r["wall_s"] for r in results),
            "memory": first.get("memory"),
            "score_without_memory": sum(without) / len(without) if without else None,
        }
        | per_seed
    )


def write_seeds(out_dir: Path, results: list[dict[str, Any]]) -> dict[str, Any]:
    summary = aggregate_seeds(results)
    write_json(out_dir / "result.json", summary)
    _plot(out_dir / "curve.png", [summary], f"{summary['persona']} · {summary['model']} · seeds {summary['seeds']}")
    return summary
