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
    TOLERANCES,
    arithmetic_family,
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


@pytest.mark.parametrize("module", TWINS)
def test_twin_exports_have_the_same_boundaries(module):
    # Raw cut counts differ where one exporter writes more tensors between two heavy ops
    # (mobilenetv2: 49 dynamo, 70 TorchScript = 49 + 21 explicit `Pad` nodes of TF-style
    # padding); the boundaries, counted in heavy ops before the cut, must not.
    dynamo = ir.load(CORPUS / f"{module}_dynamo.onnx").graph
    torchscript = ir.load(CORPUS / f"{module}_torchscript.onnx").graph
    expected = compute_boundaries(dynamo)
    assert len(expected) >= 4, expected  # every export has cuts inside its network
    # Every twin, gpt2 included: TorchScript GPT-2 reads the sequence length from `Shape` of
    # the token embedding (an activation) and builds from it the causal mask and a shape
    # vector every layer reads; the shape layer proves that read equal to input_ids' dims, so
    # it is replicable (analysis/shape_reads.py) and the split recomputes it from input_ids.
    assert compute_boundaries(torchscript) == expected
