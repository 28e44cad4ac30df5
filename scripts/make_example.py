"""Generate the bundled examples in ``onnx_ir_multidevice/examples/``.

``bert_tiny.omny`` (the default example, run by ``omny demo``) is
:func:`onnx_ir_multidevice.testing.zoo.bert` (6 layers, hidden 96, 4 heads, sequence 32, vocabulary
512, seed 0) planned by :func:`onnx_ir_multidevice.planner.planning` for 2, 3 and 4 shards with
strict cuts (only the cut tensor crosses each cut), so ``omny check`` passes it with no error.
Everything in its metadata is what ``plan()`` computes, except ``export_info``, whose
timestamp and versions are fixed so that the bytes do not depend on the day or the installed
onnx.

``gpt_tiny.omny`` is :func:`onnx_ir_multidevice.testing.zoo.gpt` (4 layers, hidden 64, 4 heads,
sequence 32, vocabulary 512, tied embeddings, seed 0) with hand-placed *relaxed* cuts: one cut
point after each of the first three layers (the residual sum ``layer.<i>.out``) and two shard
configurations (2 shards cut after layer 1; 4 shards cut after every layer). The causal mask
and the shape vectors of this GPT cross every layer boundary besides the cut tensor, so it
checks clean only with ``omny check --relaxed``; the documentation uses it to show relaxed
cuts. Its memory figures follow the package's conventions (MiB, rounded up, at the planning
dims batch = 1): a stage's memory is the bytes of the initializers its nodes read (a weight read
by two stages counts in both, e.g. the tied embedding) plus its input and output tensors (the
graph inputs or the incoming cut tensor, the outgoing cut tensor or the graph outputs).
Stages come from :func:`onnx_ir_multidevice.analysis.assign_stages`.

The output is deterministic: running this script again writes the same bytes. ``--check``
regenerates into memory and exits 1 if a committed file differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice import __version__, omny
from onnx_ir_multidevice._proto.convert import to_proto
from onnx_ir_multidevice.analysis import assign_stages, graph_uses
from onnx_ir_multidevice.examples import BERT_TINY, GPT_TINY
from onnx_ir_multidevice.graph.dtypes import dtype_name
from onnx_ir_multidevice.omny._schema import (
    CutPoint,
    ExportInfo,
    ModelInfo,
    OmnyMetadata,
    ShardConfiguration,
    Sharding,
    TensorInfo,
)
from onnx_ir_multidevice.planner import plan
from onnx_ir_multidevice.testing import zoo

BERT_ARGS = {"layers": 6, "hidden": 96, "heads": 4, "seq": 32, "vocab": 512, "seed": 0}
BERT_SHARDS = (2, 3, 4)
"""Shard counts the bundled BERT is planned for."""
GPT_ARGS = {"layers": 4, "hidden": 64, "heads": 4, "seq": 32, "vocab": 512, "seed": 0}
CUT_LAYERS = (0, 1, 2)
"""Cut after these layers: cut_1 after layer 0, ...; stage k runs layer k."""
CONFIGURATIONS = ((2, ("cut_2",)), (4, ("cut_1", "cut_2", "cut_3")))
PLANNING_DIMS = {"batch": 1}
EXPORTED_AT = "2026-01-06T12:00:00Z"
"""Fixed, so regenerating gives the same bytes."""
MIB = 1024 * 1024


def spec_shape(value: ir.Value) -> tuple[int, ...]:
    """Shape with -1 for the symbolic (batch) dims, as the spec asks for dynamic dims."""
    assert value.shape is not None, value.name
    return tuple(d if isinstance(d, int) else -1 for d in value.shape)


def planning_bytes(value: ir.Value) -> int:
    """Bytes of a tensor at the planning dims."""
    assert value.shape is not None, value.name
    assert value.dtype is not None, value.name
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
        assert producer is not None
        assert producer.name is not None
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
    by_id = {c.id: value for c, value in zip(cut_points, cut_values, strict=True)}
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
        export_info=_export_info(),
    )


def _doc_string(builder: str, args: dict[str, int]) -> str:
    call = ", ".join(f"{k}={v}" for k, v in args.items())
    return (
        f"Bundled example of onnx-ir-multidevice: zoo.{builder}({call}), "
        "generated by scripts/make_example.py"
    )


def _export_info() -> ExportInfo:
    """Fixed export information: the same bytes on every machine and every day."""
    return ExportInfo(
        exported_at=EXPORTED_AT,
        exporter_version=__version__,
        source_framework="onnx-ir-multidevice.zoo",
        source_version=__version__,
        onnx_opset=zoo.OPSET,
    )


def generate_bert() -> bytes:
    """Build ``bert_tiny.omny``: the BERT planned by ``plan()`` with strict cuts."""
    model = zoo.bert(**BERT_ARGS)  # type: ignore[arg-type]
    model.doc_string = _doc_string("bert", BERT_ARGS)
    metadata = plan(model, shards=list(BERT_SHARDS), name="bert-tiny")
    metadata = dataclasses.replace(metadata, export_info=_export_info())
    omny.write(model, metadata, set_producer=True)
    return to_proto(model).SerializeToString()


def generate_gpt() -> bytes:
    """Build ``gpt_tiny.omny``: the GPT with hand-placed relaxed cuts."""
    model = zoo.gpt(**GPT_ARGS)  # type: ignore[arg-type]
    model.doc_string = _doc_string("gpt", GPT_ARGS)
    # The file size enters the metadata; two passes settle it (it is rounded to MiB).
    size = len(to_proto(model).SerializeToString())
    for _ in range(3):
        omny.write(model, build_metadata(model, size), set_producer=True)
        data = to_proto(model).SerializeToString()
        if mib(len(data)) == mib(size):
            return data
        size = len(data)
    raise RuntimeError("the file size did not settle")


GENERATORS: dict[str, tuple[Path, Callable[[], bytes]]] = {
    BERT_TINY.name: (BERT_TINY, generate_bert),
    GPT_TINY.name: (GPT_TINY, generate_gpt),
}
"""Bundled example file name -> (its path, the function that builds its bytes)."""


def generate(name: str = BERT_TINY.name) -> bytes:
    """Build the bundled example ``name`` and return the bytes of its ``.omny`` file."""
    return GENERATORS[name][1]()


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or ``--check``) the bundled examples."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--example",
        choices=sorted(GENERATORS),
        action="append",
        help="only this example (repeatable; default: all)",
    )
    parser.add_argument(
        "--outdir", type=Path, default=None, help="write there (default: the examples folder)"
    )
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    status = 0
    for name in args.example or sorted(GENERATORS):
        path, build = GENERATORS[name]
        if args.outdir is not None:
            path = args.outdir / name
        data = build()
        if args.check:
            same = path.is_file() and path.read_bytes() == data
            print(f"{path}: {'up to date' if same else 'DIFFERS from a fresh generation'}")
            status = status if same else 1
            continue
        path.write_bytes(data)
        print(f"wrote {path} ({len(data):,} bytes)")
    return status


if __name__ == "__main__":
    sys.exit(main())
