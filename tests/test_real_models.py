"""The real-model matrix: every corpus model through the whole job, as a user brings it.

For each model of ``tests/corpus`` (real PyTorch exports by both exporters, Optimum exports,
quantized and fp16 models, models shipped in PyPI wheels: ``tests/corpus/README.md``):
plan with no flag at all -> check (0 errors) -> annotate -> check of the annotated model
(0 errors) -> split for every planned shard count -> verify within the tolerance of its
arithmetic -> a 2-stage pipeline serving requests from the split folder, each answer
compared with the whole model. Then again with the manifest's ``--dim`` values where the plan
warned that memory figures were lower bounds. Two models have no cut at all (one ``If`` node
computes everything); for them the planner's message must say why.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx_ir as ir
import pytest

from onnx_ir_multidevice.analysis import (
    DEFAULT_INDEX_TABLE_BYTES,
    DEFAULT_LARGE_CONSTANT_BYTES,
    HEAVY_OPS,
    INDEX_TABLE_DTYPES,
    TOLERANCES,
    TensorClass,
    arithmetic_family,
    classify_values,
    topological_order,
)
from onnx_ir_multidevice.testing.real_models import compute_boundaries, run_job

CORPUS = Path(__file__).parent / "corpus"
ENTRIES = json.loads((CORPUS / "manifest.json").read_text())
# Models whose whole computation is one node with a subgraph: nothing to cut between.
NO_CUT = {"gpt2_merged_optimum", "silero_vad"}


def _ids(entries):
    return [e["name"] for e in entries]


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids(ENTRIES))
def test_whole_job_with_no_flags(entry, tmp_path):
    path = CORPUS / entry["file"]
    before = path.read_bytes()
    report = run_job(path, tmp_path, name=entry["name"])
    assert path.read_bytes() == before  # the user's file is only read
    if entry["name"] in NO_CUT:
        assert report.no_cut is not None
        assert "cannot be split" in report.no_cut
        assert "If" in report.no_cut  # names the node that computes everything
        assert "shards:" not in report.no_cut  # said once, not once per shard count
        return
    assert report.no_cut is None, report.no_cut
    assert report.relaxed is False  # strict cuts plan every corpus model that has a cut
    assert report.family == entry["dtype_family"]
    assert report.shard_counts and report.shard_counts[0] == 2
    assert set(report.max_abs_diff) == set(report.shard_counts)
    assert report.pipeline_requests == 2
    # One line for the unbound dims at most (and one for values whose size no inference
    # tells, as If outputs of silero_vad_half); never a request to run shape inference.
    dim_lines = [w for w in report.plan_warnings if "sizes that depend on" in w]
    assert len(dim_lines) <= 1, report.plan_warnings
    assert len(report.plan_warnings) <= 2, report.plan_warnings
    for text in report.plan_warnings:
        assert "shape inference" not in text.lower()


WITH_DIMS = [e for e in ENTRIES if e.get("suggested_dims") and e["name"] not in NO_CUT]


@pytest.mark.parametrize("entry", WITH_DIMS, ids=_ids(WITH_DIMS))
def test_whole_job_at_the_suggested_dims(entry, tmp_path):
    dims = entry["suggested_dims"]
    report = run_job(
        CORPUS / entry["file"],
        tmp_path,
        dims=dims,
        name=entry["name"],
        requests=1,
        shard_counts=(2,),
    )
    assert report.no_cut is None
    assert report.max_abs_diff[2] is not None and report.pipeline_requests == 1
    # The bound dims are no longer named as unknown (a dim the manifest leaves out may be).
    for text in report.plan_warnings:
        for name in dims:
            assert f"{name} (input" not in text, text


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids(ENTRIES))
def test_arithmetic_family_matches_the_manifest(entry):
    # The manifest records how each model was made (exported in fp32, converted to fp16,
    # quantized); the tolerance verify picks must follow from the graph alone.
    assert arithmetic_family(ir.load(CORPUS / entry["file"])) == entry["dtype_family"]


def test_tolerances_by_family():
    assert TOLERANCES["fp32"] == (1e-4, 1e-4)
    assert TOLERANCES["fp16"] == TOLERANCES["int8"] == (1e-2, 1e-2)


# ---------------------------------------------------------------------------------------------
# Twin exports: one module, both torch exporters, the same places to cut

TWINS = sorted(
    e["name"].removesuffix("_dynamo")
    for e in ENTRIES
    if e["name"].endswith("_dynamo")
    and f"{e['name'][: -len('_dynamo')]}_torchscript" in _ids(ENTRIES)
)
"""Modules exported by both exporters. ``vit``'s TorchScript export also has the classifier
head (after the last layer, so every boundary before it is shared)."""

SHAPE_READ_ACROSS_LAYERS = {"gpt2"}
"""Twins whose TorchScript export reads an activation's shape in every layer.

TorchScript GPT-2 takes the sequence length from ``Shape`` of the token embedding (an
activation: it reads the embedding table) and builds from it the causal mask
(``Where_1_output_0``) and a shape vector (``Concat_4_output_0``) read by every layer, so no
boundary between two layers is strict there (the relaxed cuts carry them). Dynamo exports
read the sequence length from the input. Nothing else differs: with ``Shape`` reads treated
as known on every side, the boundaries agree (asserted below).
"""


def _shape_reads_known_everywhere(graph: ir.Graph) -> dict[ir.Value, TensorClass]:
    """The package's classes, except that ``Shape``/``Size`` of an activation (and what is
    computed cheaply from it alone) counts as replicable: a what-if, not a rule the split can
    honour (it would need the activation's shape on the other side)."""
    classes = dict(classify_values(graph))
    activation, replicable = TensorClass.ACTIVATION, TensorClass.REPLICABLE

    def large(value: ir.Value) -> bool:
        tensor = value.const_value
        if tensor is None:
            return False
        limit = (
            DEFAULT_INDEX_TABLE_BYTES
            if int(tensor.dtype) in INDEX_TABLE_DTYPES
            else DEFAULT_LARGE_CONSTANT_BYTES
        )
        return tensor.nbytes >= limit

    for node in topological_order(graph):
        if not node.outputs or classes[node.outputs[0]] is not activation:
            continue
        inputs = [v for v in node.inputs if v is not None]
        if node.op_type in ("Shape", "Size"):
            flip = True
        else:
            flip = (
                node.op_type not in HEAVY_OPS
                and not any(large(v) for v in inputs)
                and all(classes[v] is not activation for v in inputs)
            )
        if flip:
            classes.update(dict.fromkeys(node.outputs, replicable))
    return classes


@pytest.mark.parametrize("module", TWINS)
def test_twin_exports_have_the_same_boundaries(module):
    # Raw cut counts differ where one exporter writes more tensors between two heavy ops
    # (mobilenetv2: 49 dynamo, 70 TorchScript = 49 + 21 explicit `Pad` nodes of TF-style
    # padding); the boundaries, counted in heavy ops before the cut, must not.
    dynamo = ir.load(CORPUS / f"{module}_dynamo.onnx").graph
    torchscript = ir.load(CORPUS / f"{module}_torchscript.onnx").graph
    expected = compute_boundaries(dynamo)
    assert len(expected) >= 4, expected  # every export has cuts inside its network
    if module in SHAPE_READ_ACROSS_LAYERS:
        found = compute_boundaries(torchscript)
        assert set(found) < set(expected), (found, expected)
        what_if = _shape_reads_known_everywhere(torchscript)
        assert compute_boundaries(torchscript, classes=what_if) == expected
        return
    assert compute_boundaries(torchscript) == expected
