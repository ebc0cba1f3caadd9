"""The results part of ``docs/benchmarks.md`` and its chart ``docs/benchmarks.png``, from a ``bench/run.py`` JSON.

Only the text between ``<!-- results:start -->`` and ``<!-- results:end -->`` is rewritten; the prose
around it is the team's. Without the file (or its markers) a skeleton with both is written first.

    python bench/report.py RESULTS.json [--docs-dir docs]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

START, END = "<!-- results:start -->", "<!-- results:end -->"
PNG_NAME = "benchmarks.png"

SKELETON = f"""# Benchmarks

How fast ClawDesk is on the machine people have, measured against what they would use instead:
bare llama-cpp-python on the same GGUF, a plain PEFT SFT step on the same tokens, reloading the
model instead of hot-swapping an adapter. Every ratio is measured side by side in one run of
`bench/run.py` (baseline and ClawDesk interleaved, so a busy machine slows both), so ratios travel
between machines better than the absolute numbers beside them.

## How to run

```bash
python bench/run.py --quick --json /tmp/bench.json   # a few minutes on 2 cores: fewer rounds, the 1k scale point
python bench/run.py --json bench.json --docs         # the full suite; rewrites the results below and the chart
python bench/run.py --only chat,swap --json out.json # some sections (--skip leaves some out)
python bench/run.py --only model4b --json 4b.json    # the Qwen3-4B-shaped model: only when asked (or --full)
python bench/report.py bench.json                    # this page's results and chart from a saved run
```

The exit code is 0 when goals are missed (the suite measures; CI runs no thresholds), 1 when a
section crashed, 2 on bad flags.

## Results

{START}
*Not measured yet: run `python bench/run.py --json bench.json --docs`.*
{END}
"""

# What each key of issue #8 measures, for keys whose section gives no "what" line.
WHAT = {
    "decode_ratio": "engine decode tok/s ÷ bare llama-cpp-python at its best thread count",
    "ttft_overhead_ms": "engine time to first token minus bare llama-cpp-python's",
    "tui_decode_ratio": "reply streamed through the Textual app ÷ the engine alone, tok/s",
    "ttft_busy_ratio": "chat time to first token while the judge works through a backlog ÷ idle",
    "ttft_training_ratio": "chat time to first token while a trainer process runs ÷ idle",
    "swap_speedup": "full model reload ÷ adapter hot-swap",
    "swap_ms": "adapter hot-swap time",
    "train_vs_sft": "training step tok/s ÷ a plain PEFT SFT step on the same tokens and LoRA",
    "train_peak_rss_mb": "peak RSS of a training step",
    "record_ms": "time to record one turn",
}


def fmt(value: float | None) -> str:
    if value is None:
        return "–"
    if value != 0 and (abs(value) < 0.01 or abs(value) >= 100_000):
        return f"{value:.3g}"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"


def results_markdown(data: dict, png_name: str = PNG_NAME) -> str:
    m = data.get("machine", {})
    lines = [
        f"Measured {m.get('date', '?')} with `{data.get('command', 'python bench/run.py')}`"
        + (" (quick: fewer rounds, noisier)" if data.get("quick") else "")
        + ".",
        "",
        "| key | value | goal | met | what it measures |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key, r in data.get("results", {}).items():
        met = {True: "yes", False: "**no**", None: ""}[r.get("met")]
        value = fmt(r.get("value")) + (f" {r['unit']}" if r.get("unit") and r.get("value") is not None else "")
        what = (r.get("what") or WHAT.get(key, "")).replace("|", "\\|")
        lines.append(f"| `{key}` | {value} | {r.get('goal') or ''} | {met} | {what} |")
    for name, message in data.get("errors", {}).items():
        lines.append(f"\nSection `{name}` failed: `{message}`")
    lines += ["", f"![ratios against their goals; scale timings]({png_name})", "", "Machine:", ""]
    lines += ["| | |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in m.items()]
    seconds = data.get("seconds", {})
    if seconds:
        lines += ["", "Seconds per section: " + ", ".join(f"{k} {v:g}" for k, v in seconds.items()) + "."]
    return "\n".join(lines)


def update_markdown(text: str, block: str) -> str:
    """``text`` with everything between the markers replaced by ``block`` (markers appended if missing)."""
    if START not in text or END not in text or text.index(START) > text.index(END):
        text = text.rstrip("\n") + f"\n\n## Results\n\n{START}\n{END}\n"
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{block}\n{END}{tail}"


def _points(table: object) -> tuple[list[int], list[float]] | None:
    """A ``{"1000": ms, "10000": ms, ...}`` dict as sorted (n, value) lists; None for anything else."""
    if not isinstance(table, dict) or len(table) < 2:
        return None
    try:
        points = sorted((int(n), float(v)) for n, v in table.items() if v is not None)
    except (TypeError, ValueError):
        return None
    return ([n for n, _ in points], [v for _, v in points]) if len(points) >= 2 else None


def _scale_series(data: dict) -> dict[str, tuple[list[int], list[float]]]:
    """Time-vs-turns lines from the scale section: every dict in a result's raw keyed by turn counts,
    directly (``{"by_size": {"1000": ms, ...}}``: named after the result) or one level down
    (``{"median_ms": {"record": {"1000": ms, ...}, ...}}``: named after the inner key); no duplicates."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    for key, r in data.get("results", {}).items():
        if r.get("section") != "scale":
            continue
        for value in (r.get("raw") or {}).values():
            if (points := _points(value)) is not None:
                found = {key: points}
            elif isinstance(value, dict):
                found = {name: p for name, inner in value.items() if (p := _points(inner)) is not None}
            else:
                continue
            for name, points in found.items():
                if points not in series.values() and name not in series:
                    series[name] = points
    return series


def write_chart(data: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    ratios = [
        (key, r)
        for key, r in data.get("results", {}).items()
        if r.get("unit") == "x" and r.get("goal") and r.get("value") is not None and r["value"] > 0
    ]
    scale = _scale_series(data)
    fig, axes = plt.subplots(1, 2 if scale else 1, figsize=(12 if scale else 7, max(3.0, 0.5 * len(ratios) + 1.5)))
    axes = list(axes) if scale else [axes]
    ax = axes[0]
    if ratios:
        names = [f"{k} ({r['goal'].strip()})" for k, r in ratios][::-1]
        values = [r["value"] for _, r in ratios][::-1]
        colors = [{True: "tab:green", False: "tab:red"}.get(r.get("met"), "tab:gray") for _, r in ratios][::-1]
        ax.barh(names, values, color=colors)
        for i, (_, r) in enumerate(ratios[::-1]):
            bound = float(r["goal"].lstrip("<>= "))
            ax.plot([bound, bound], [i - 0.4, i + 0.4], color="black", linewidth=2)
            ax.text(values[i], i, f" {fmt(values[i])}", va="center", fontsize=8)
        bounds = [float(r["goal"].lstrip("<>= ")) for _, r in ratios]
        lo, hi = min([*values, *bounds, 0.5]), max([*values, *bounds, 2.0])  # every goal tick on the axis
        ax.set_xscale("log")
        ax.set_xlim(lo / 1.5, hi * 1.5)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # "3×10⁰" labels overlapped
    ax.set_title("ratios (bar) vs goal (black tick); green met, red missed")
    ax.set_xlabel("× (log scale)")
    if scale:
        ax2 = axes[1]
        for key, (ns, vs) in scale.items():
            ax2.plot(ns, vs, marker="o", label=key)
        ax2.set_xscale("log")
        if all(v > 0 for _, vs in scale.values() for v in vs):
            ax2.set_yscale("log")
        ax2.set_xlabel("recorded turns (log scale)")
        ax2.set_ylabel("ms")
        ax2.set_title("scale: time vs recorded turns")
        ax2.legend(fontsize=8)
    m = data.get("machine", {})
    fig.suptitle(f"ClawDesk benchmarks · {m.get('cpu', '?')}, {m.get('usable_cores', '?')} cores", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_docs(data: dict, docs_dir: Path) -> tuple[Path, Path]:
    """Rewrite the results block of ``docs_dir/benchmarks.md`` (created if missing) and the chart."""
    md = docs_dir / "benchmarks.md"
    text = md.read_text(encoding="utf-8") if md.exists() else SKELETON
    png = write_chart(data, docs_dir / PNG_NAME)
    docs_dir.mkdir(parents=True, exist_ok=True)
    md.write_text(update_markdown(text, results_markdown(data, png.name)), encoding="utf-8")
    return md, png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/report.py", description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a JSON written by bench/run.py --json")
    parser.add_argument("--docs-dir", type=Path, default=Path(__file__).resolve().parent.parent / "docs")
    args = parser.parse_args(argv)
    try:
        data = json.loads(args.results.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"bench/report.py: error: cannot read {args.results}: {exc}", file=sys.stderr)
        return 2
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        print(f"bench/report.py: error: {args.results} is not a bench/run.py result (no 'results')", file=sys.stderr)
        return 2
    md, png = write_docs(data, args.docs_dir)
    print(f"wrote {md} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
