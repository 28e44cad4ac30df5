"""``manifest.json`` of a split directory: how the stage files chain (built and parsed here)."""

from __future__ import annotations

__all__ = ["MANIFEST_FORMAT", "MANIFEST_VERSION", "build_manifest"]

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnx_ir_multidevice._errors import SplitError

MANIFEST_FORMAT = "onnx-ir-multidevice/split"
"""Value of the ``format`` key of ``manifest.json``."""

MANIFEST_VERSION = 1
"""Value of the ``version`` key of ``manifest.json``."""


# ---------------------------------------------------------------------------------------------
# Manifest and writing to a directory


def _stage_file(index: int) -> str:
    return f"stage_{index}.onnx"


def build_manifest(
    model: ir.Model, stages: Sequence[ir.Model], *, files: Sequence[str] | None = None
) -> dict[str, Any]:
    """Describe how ``stages`` (from :func:`split`) chain together, as ``manifest.json``.

    Args:
        model: The model that was split (for its graph inputs and outputs).
        stages: The stage models.
        files: File name of each stage, relative to the manifest; defaults to
            ``stage_<i>.onnx``.

    Returns:
        The manifest as a JSON-ready dict (schema in ``docs/splitting.md``).

    Raises:
        SplitError: A stage reads a name that is neither a graph input nor an output of an
            earlier stage.
    """
    graph_inputs = [v.name for v in model.graph.inputs]
    graph_outputs = [v.name for v in model.graph.outputs]
    produced_by: dict[str, int | str] = dict.fromkeys(graph_inputs, "input")
    consumers: dict[tuple[int, str], list[int | str]] = {}
    entries = []
    for i, stage in enumerate(stages):
        inputs = []
        for value in stage.graph.inputs:
            source = produced_by.get(value.name)  # type: ignore[arg-type]
            if source is None:
                raise SplitError(
                    f"Stage {i} reads {value.name!r}, which is neither a graph input nor an "
                    "output of an earlier stage."
                )
            if isinstance(source, int):
                consumers[(source, value.name)].append(i)  # type: ignore[index]
            inputs.append({"name": value.name, "from": source})
        outputs = []
        for value in stage.graph.outputs:
            name = value.name
            assert name is not None
            if name not in produced_by:
                produced_by[name] = i
            targets: list[int | str] = []
            consumers[(i, name)] = targets
            outputs.append({"name": name, "to": targets})
        entries.append(
            {
                "index": i,
                "file": files[i] if files is not None else _stage_file(i),
                "inputs": inputs,
                "outputs": outputs,
            }
        )
    output_names = set(graph_outputs)
    for entry in entries:
        for output in entry["outputs"]:
            if output["name"] in output_names and produced_by.get(output["name"]) == entry["index"]:
                output["to"].append("output")
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "num_stages": len(stages),
        "graph_inputs": graph_inputs,
        "graph_outputs": graph_outputs,
        "stages": entries,
    }
