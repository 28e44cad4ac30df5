"""Draw the memory of every stage of every planned configuration against device capacity.

``python docs/planning_figure.py [OUT.png]`` plans the docs' example model and writes the
picture shown on the *Planning* page (default ``docs/_static/planning_memory.png``). The
page's own example calls :func:`draw` the same way, so the picture is regenerated whenever the
docs are built; ``tests/test_plan.py`` runs it too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from onnx_ir_multidevice.planner import MIB, PlanResult, plan_model  # noqa: E402
from onnx_ir_multidevice.testing import zoo  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "_static" / "planning_memory.png"


def example() -> PlanResult:
    """The docs' example: a GPT-style model (tied embedding) on 40 MiB devices."""
    model = zoo.gpt(layers=8, hidden=256, seq=256, vocab=8000)
    return plan_model(model, shards=[2, 3, 4], devices=["40MiB"] * 4, relaxed=True)


def draw(result: PlanResult, path: str | Path = DEFAULT_OUT) -> Path:
    """Stacked bars (weights, activations, buffers, headroom) per stage, one panel per
    configuration, with each device's capacity as a red line; saved as a PNG at ``path``."""
    panels = len(result.partitions)
    fig, axes = plt.subplots(1, panels, figsize=(3.4 * panels, 3.4), sharey=True, squeeze=False)
    for ax, found, caps in zip(axes[0], result.partitions, result.capacities, strict=True):
        stages = list(range(found.num_stages))
        parts = [
            ("weights", [m.weights_bytes / MIB for m in found.memory], "#4c72b0", None),
            ("activations", [m.activations_bytes / MIB for m in found.memory], "#dd8452", None),
            ("buffers", [m.io_bytes / MIB for m in found.memory], "#55a868", None),
            (
                "headroom",
                [(m.required_bytes - m.total_bytes) / MIB for m in found.memory],
                "white",
                "///",
            ),
        ]
        bottom = [0.0] * len(stages)
        for label, heights, color, hatch in parts:
            ax.bar(stages, heights, bottom=bottom, color=color, hatch=hatch,
                   edgecolor="grey", label=label)  # fmt: skip
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        if caps is not None:
            for k, cap in enumerate(caps):
                ax.hlines(cap / MIB, k - 0.45, k + 0.45, colors="red", linewidth=2,
                          label="device" if k == 0 else None)  # fmt: skip
        ax.set_title(f"{found.num_stages} shards")
        ax.set_xticks(stages)
        ax.set_xlabel("stage (device)")
    axes[0][0].set_ylabel("MiB")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.suptitle(f"{result.metadata.model.name}: memory per stage")
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(draw(example(), sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT))
