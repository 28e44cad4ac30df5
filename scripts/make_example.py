"""Generate the bundled example ``onnx_ir_multidevice/examples/gpt_tiny.omny``.

The model is :func:`onnx_ir_multidevice.zoo.gpt` (4 layers, hidden 64, 4 heads, sequence 32,
vocabulary 512, tied embeddings, seed 0). Its ``.omny`` metadata has one cut point after each
of the first three layers (the residual sum ``layer.<i>.out``) and two shard configurations
(2 shards cut after layer 1; 4 shards cut after every layer).

Memory figures follow the package's conventions (MiB, rounded up, at the planning dims
batch = 1): a stage's memory is the bytes of the initializers its nodes read (a weight read by
two stages counts in both, e.g. the tied embedding) plus its input and output tensors (the
graph inputs or the incoming cut tensor, the outgoing cut tensor or the graph outputs).
Stages come from :func:`onnx_ir_multidevice.analysis.assign_stages`.

The output is deterministic: running this script again writes the same bytes. ``--check``
regenerates into memory and exits 1 if the committed file differs.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice import __version__, omny, zoo
from onnx_ir_multidevice._format import (
    CutPoint,
    ExportInfo,
    ModelInfo,
    OmnyMetadata,
    ShardConfiguration,
    Sharding,
    TensorInfo,
)
from onnx_ir_multidevice._roundtrip import to_proto
from onnx_ir_multidevice.analysis import assign_stages, graph_uses
from onnx_ir_multidevice.examples import GPT_TINY

GPT_ARGS = {"layers": 4, "hidden": 64, "heads": 4, "seq": 32, "vocab": 512, "seed": 0}
CUT_LAYERS = (0, 1, 2)
"""Cut after these layers: cut_1 after layer 0, ...; stage k runs layer k."""
CONFIGURATIONS = ((2, ("cut_2",)), (4, ("cut_1", "cut_2", "cut_3")))
PLANNING_DIMS = {"batch": 1}
EXPORTED_AT = "2026-01-06T12:00:00Z"
"""Fixed, so regenerating gives the same bytes."""
MIB = 1024 * 1024


def dtype_name(dtype: ir.DataType) -> str:
    """The ``.omny`` spelling of a dtype (``"float32"``, ``"int64"``)."""
    return np.dtype(dtype.numpy()).name


def spec_shape(value: ir.Value) -> tuple[int, ...]:
    """Shape with -1 for the symbolic (batch) dims, as the spec asks for dynamic dims."""
    assert value.shape is not None, value.name
    return tuple(d if isinstance(d, int) else -1 for d in value.shape)


def planning_bytes(value: ir.Value) -> int:
    """Bytes of a tensor at the planning dims."""
    assert value.shape is not None and value.dtype is not None, value.name
    dims = [d if isinstance(d, int) else PLANNING_DIMS[str(d.value)] for d in value.shape]
    return int(np.prod(dims, dtype=np.int64)) * value.dtype.itemsize


def mib(nbytes: int) -> int:
    """Bytes to MiB, rounded up (never under-report)."""
    return max(1, math.ceil(nbytes / MIB))


def stage_bytes(graph: ir.Graph, cuts: Sequence[ir.Value]) -> list[int]:
    """Memory of each stage in bytes: initializers read + input and output tensors."""
    stages = assign_stages(graph, cuts)
    uses = graph_uses(graph)
    num = len(cuts) + 1
    weights: list[set[ir.Value]] = [set() for _ in range(num)]
    for node, stage in stages.items():
        weights[stage].update(v for v in uses[node] if v.is_initializer())
    inputs = [list(graph.inputs), *[[c] for c in cuts]]
    outputs = [*[[c] for c in cuts], list(graph.outputs)]
    return [
        sum(v.const_value.nbytes for v in weights[k])  # type: ignore[union-attr]
        + sum(planning_bytes(v) for v in (*inputs[k], *outputs[k]))
        for k in range(num)
    ]


def build_metadata(model: ir.Model, file_bytes: int) -> OmnyMetadata:
    """The ``.omny`` metadata of the example (``file_bytes``: size of the saved file)."""
    graph = model.graph
    values = {v.name: v for node in graph for v in node.outputs}
    cut_values = [values[f"layer.{i}.out"] for i in CUT_LAYERS]
    per_stage = [mib(b) for b in stage_bytes(graph, cut_values)]
    cut_points = []
    cumulative = 0
    for j, value in enumerate(cut_values):
        cumulative += per_stage[j]
        producer = value.producer()
        assert producer is not None and producer.name is not None
        cut_points.append(
            CutPoint(
                id=f"cut_{j + 1}",
                after_node=producer.name,
                tensor_name=value.name,  # type: ignore[arg-type]
                shape=spec_shape(value),
                dtype=dtype_name(value.dtype),  # type: ignore[arg-type]
                cumulative_memory_mb=cumulative,
                shard_memory_mb=per_stage[j],
            )
        )
    by_id = {c.id: value for c, value in zip(cut_points, cut_values)}
    configurations = tuple(
        ShardConfiguration(
            num_shards=num_shards,
            memory_per_shard_mb=tuple(mib(b) for b in stage_bytes(graph, [by_id[i] for i in ids])),
            cut_point_ids=ids,
        )
        for num_shards, ids in CONFIGURATIONS
    )
    total_params = sum(v.const_value.size for v in graph.initializers.values())  # type: ignore[union-attr]
    weights = sum(v.const_value.nbytes for v in graph.initializers.values())  # type: ignore[union-attr]
    io = sum(planning_bytes(v) for v in (*graph.inputs, *graph.outputs))
    return OmnyMetadata(
        version="1.0",
        model=ModelInfo(
            name="gpt-tiny",
            architecture="decoder_transformer",
            total_params=total_params,
            total_size_mb=mib(file_bytes),
            inference_memory_mb=mib(weights + io),
        ),
        inputs=tuple(
            TensorInfo(v.name, spec_shape(v), dtype_name(v.dtype))  # type: ignore[arg-type]
            for v in graph.inputs
        ),
        outputs=tuple(
            TensorInfo(v.name, spec_shape(v), dtype_name(v.dtype))  # type: ignore[arg-type]
            for v in graph.outputs
        ),
        cut_points=tuple(cut_points),
        sharding=Sharding(
            min_vram_mb=1500,
            max_shard_size_mb=1200,
            min_shards=2,
            max_shards=4,
            allowed_shards=tuple(n for n, _ in CONFIGURATIONS),
            configurations=configurations,
        ),
        export_info=ExportInfo(
            exported_at=EXPORTED_AT,
            exporter_version=__version__,
            source_framework="onnx-ir-multidevice.zoo",
            source_version=__version__,
            onnx_opset=zoo.OPSET,
        ),
    )


def generate() -> bytes:
    """Build the example and return the bytes of the ``.omny`` file."""
    model = zoo.gpt(**GPT_ARGS)  # type: ignore[arg-type]
    model.doc_string = (
        "Bundled example of onnx-ir-multidevice: zoo.gpt("
        + ", ".join(f"{k}={v}" for k, v in GPT_ARGS.items())
        + "), generated by scripts/make_example.py"
    )
    # The file size enters the metadata; two passes settle it (it is rounded to MiB).
    size = len(to_proto(model).SerializeToString())
    for _ in range(3):
        omny.write(model, build_metadata(model, size), set_producer=True)
        data = to_proto(model).SerializeToString()
        if mib(len(data)) == mib(size):
            return data
        size = len(data)
    raise RuntimeError("the file size did not settle")


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or ``--check``) the bundled example."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=GPT_TINY, help="where to write")
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    data = generate()
    if args.check:
        same = args.output.is_file() and args.output.read_bytes() == data
        print(f"{args.output}: {'up to date' if same else 'DIFFERS from a fresh generation'}")
        return 0 if same else 1
    args.output.write_bytes(data)
    print(f"wrote {args.output} ({len(data):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
