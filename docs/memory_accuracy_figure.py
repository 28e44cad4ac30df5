"""Draw and tabulate the memory model's predictions against onnxruntime's measured memory.

``python docs/memory_accuracy_figure.py [OUT.png]`` reads the committed measurements
(``docs/_static/memory_accuracy.json``, written by ``benchmarks/memory_accuracy.py``) and
writes the scatter plot shown on the *How accurate is the memory model* page (default
``docs/_static/memory_accuracy.png``). The page calls :func:`load`, :func:`table` and
:func:`draw` the same way at every docs build.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STATIC = Path(__file__).resolve().parent / "_static"
DATA = STATIC / "memory_accuracy.json"
DEFAULT_OUT = STATIC / "memory_accuracy.png"
MIB = 1 << 20
LOW, HIGH, UNDER = 0.8, 1.2, 0.9
"""The goal: predicted/measured within [0.8, 1.2], and never below 0.9 (a stage that would
not fit)."""


def load(path: str | Path = DATA) -> dict:
    """The measurement document (see ``benchmarks/memory_accuracy.py``)."""
    return json.loads(Path(path).read_text())


def ratio(row: dict, key: str = "measured_bytes") -> float:
    """Predicted / measured for one stage."""
    return row["predicted_bytes"] / row[key]


def summary(document: dict) -> str:
    """One paragraph: how many stages meet the goal, arena on and off."""
    rows = document["rows"]
    complete = [r for r in rows if not r["unknown"]]
    lines = []
    for key, label in (("measured_bytes", "arena on"), ("measured_no_arena_bytes", "arena off")):
        for name, subset in (("every size known", complete), ("all stages", rows)):
            ratios = [ratio(r, key) for r in subset]
            within = sum(LOW <= q <= HIGH for q in ratios)
            under = sum(q < UNDER for q in ratios)
            lines.append(
                f"{label:9}, {name:16}: {len(subset):3} stages, {within:3} within +-20 %, "
                f"{under:2} under-predicted by more than 10 %; ratio "
                f"{min(ratios):.2f} .. {max(ratios):.2f}"
            )
    return "\n".join(lines)


def table(document: dict) -> str:
    """Per model: stages measured, largest stage, and the worst ratios (arena on)."""
    by_model: dict[str, list[dict]] = defaultdict(list)
    for row in document["rows"]:
        by_model[row["model"]].append(row)
    head = (
        f"{'model':28} {'stages':>6} {'largest MiB':>11} {'predicted':>9} "
        f"{'low':>5} {'high':>5}  note"
    )
    lines = [head, "-" * len(head)]
    for name, rows in by_model.items():
        ratios = [ratio(r) for r in rows]
        largest = max(rows, key=lambda r: r["measured_bytes"])
        unknown = sum(1 for r in rows if r["unknown"])
        note = f"{unknown} stage(s) with unknown sizes (lower bounds)" if unknown else ""
        lines.append(
            f"{name:28} {len(rows):6} {largest['measured_bytes'] / MIB:11.1f} "
            f"{largest['predicted_bytes'] / MIB:9.1f} {min(ratios):5.2f} {max(ratios):5.2f}  {note}"
        )
    return "\n".join(lines)


def misses(document: dict) -> str:
    """The stages outside the goal (arena on), one line per model: how many, their ratios."""
    by_model: dict[str, list[dict]] = defaultdict(list)
    for row in document["rows"]:
        q = ratio(row)
        if not (LOW <= q <= HIGH and q >= UNDER):
            by_model[row["model"]].append(row)
    lines = []
    for name, rows in by_model.items():
        ratios = [ratio(r) for r in rows]
        unknown = sum(1 for r in rows if r["unknown"])
        worst = max(rows, key=lambda r: abs(ratio(r) - 1))
        lines.append(
            f"{name:28} {len(rows):2} stage(s), ratio {min(ratios):.2f} .. {max(ratios):.2f}"
            f"{f', {unknown} with unknown sizes' if unknown else ''}; worst: "
            f"{worst['shards']} shards{' relaxed' if worst['relaxed'] else ''} stage "
            f"{worst['stage']}, predicted {worst['predicted_bytes'] / MIB:.1f} MiB, measured "
            f"{worst['measured_bytes'] / MIB:.1f} MiB"
        )
    return "\n".join(lines) or "none"


def skipped(document: dict) -> str:
    """Models and shard counts not measured, grouped by reason."""
    reasons: dict[str, list[str]] = defaultdict(list)
    for entry in document["skipped"]:
        reason = entry["reason"].split(";")[0][:90]
        reasons[f"{entry['step']}: {reason}"].append(f"{entry['model']}/{entry['shards']}")
    lines = []
    for reason, where in sorted(reasons.items(), key=lambda item: -len(item[1])):
        models = sorted({w.split("/")[0] for w in where})
        lines.append(f"{len(where):3} plan(s) of {len(models)} model(s), {reason}")
    return "\n".join(lines) or "none"


def draw(document: dict, path: str | Path = DEFAULT_OUT) -> Path:
    """Predicted against measured memory per stage (log-log), with the goal band; a PNG."""
    rows = document["rows"]
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    groups = (
        ("every size known", [r for r in rows if not r["unknown"]], "#4c72b0", "o"),
        ("unknown sizes (lower bound)", [r for r in rows if r["unknown"]], "#dd8452", "^"),
    )
    for label, subset, color, marker in groups:
        if subset:
            ax.scatter(
                [r["measured_bytes"] / MIB for r in subset],
                [r["predicted_bytes"] / MIB for r in subset],
                s=16,
                c=color,
                marker=marker,
                label=f"{label} ({len(subset)})",
                alpha=0.75,
            )
    low = min(r["measured_bytes"] for r in rows) / MIB * 0.8
    high = max(r["measured_bytes"] for r in rows) / MIB * 1.25
    line = [low, high]
    ax.plot(line, line, color="black", linewidth=0.8, label="predicted = measured")
    ax.fill_between(line, [v * LOW for v in line], [v * HIGH for v in line], color="#55a868",
                    alpha=0.15, label="within +-20 %")  # fmt: skip
    ax.plot(line, [v * UNDER for v in line], color="#c44e52", linewidth=0.8, linestyle="--",
            label="10 % under")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured peak resident memory (MiB, onnxruntime CPU, arena on)")
    ax.set_ylabel("predicted (StageMemory.resident_bytes, MiB)")
    ax.set_title(f"{len(rows)} stages: corpus, generated models, 1.1B Llama")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(draw(load(), sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT))
