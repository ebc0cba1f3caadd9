"""Writing eval results: ``result.json`` + ``curve.png`` per run, ``compare.{json,md,png}`` for ``--compare``.

The JSON keys are a contract (see ``clawdesk eval --help`` and ``docs/learning.md``). Plots use
matplotlib's Agg backend, so no display is needed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clawdesk.errors import InputError


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
    for r in runs:
        xs, ys = zip(*r["scores"], strict=True)
        ax.plot(xs, ys, marker="o", label=f"{r['method']} ({r['judge']})")
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
        f"train every {first['train_every']}, batch {first['batch_size']}, seed {first['seed']}"
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
