"""End to end on the zoo networks: plan -> split -> verify for 2, 3 and 4 shards.

Each network is planned once (``planner.plan``, shards 2, 3 and 4), then split by each
configuration; every stage must pass the full ONNX checker, hold exactly the weights its
nodes read, and the chained stages must match the whole model within 1e-4 on onnxruntime.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import onnx
import onnx_ir as ir
import pytest

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._proto.files import save
from onnx_ir_multidevice._split import split
from onnx_ir_multidevice.omny._schema import OmnyMetadata
from onnx_ir_multidevice.planner.planning import plan
from onnx_ir_multidevice.runtime.verification import verify
from onnx_ir_multidevice.testing import zoo

SHARDS = (2, 3, 4)


@dataclasses.dataclass
class Planned:
    model: ir.Model
    metadata: OmnyMetadata
    proto: bytes


# name -> (builder, relaxed cuts). The GPT has a causal mask built from an activation's shape
# and an LM head tied to the token embedding; its embedding (4100 x 64 floats) is over the
# 1 MiB "large constant" limit, so the mask crosses stages as side activations.
NETWORKS: dict[str, tuple[Callable[[], ir.Model], bool]] = {
    "resnet": (lambda: zoo.resnet(depth_blocks=4), False),
    "bert": (lambda: zoo.bert(layers=4), False),
    "gpt": (lambda: zoo.gpt(layers=4, vocab=4100), True),
    "vit": (lambda: zoo.vit(layers=4), False),
    "control_flow": (zoo.control_flow, True),  # only 2 strict cuts: 4 stages need relaxed
}

_CACHE: dict[str, Planned] = {}


def _planned(name: str) -> Planned:
    if name not in _CACHE:
        build, relaxed = NETWORKS[name]
        model = build()
        metadata = plan(model, shards=list(SHARDS), relaxed=relaxed)
        _CACHE[name] = Planned(model, metadata, ir.to_proto(model).SerializeToString())
    return _CACHE[name]


def _initializers_read(graph: ir.Graph) -> set[str]:
    """Names of main-graph initializers read by the nodes of ``graph`` and their bodies."""
    names = set(graph.initializers)
    read: set[str] = set()
    for node in ir.traversal.RecursiveGraphIterator(graph):
        for value in node.inputs:
            if value is not None and value.name in names and value.graph is graph:
                read.add(value.name)
    return read


@pytest.mark.parametrize("shards", SHARDS)
@pytest.mark.parametrize("network", list(NETWORKS))
def test_plan_split_verify(network: str, shards: int):
    planned = _planned(network)
    model = planned.model
    stages = split(model, shards, metadata=planned.metadata)
    assert len(stages) == shards
    for stage in stages:
        onnx.checker.check_model(ir.to_proto(stage), full_check=True)
        # Each stage holds exactly the weights its nodes read (tied ones included).
        assert set(stage.graph.initializers) == _initializers_read(stage.graph)
        names = [v.name for v in stage.graph.inputs]
        assert len(names) == len(set(names))
    report = verify(model, shards, metadata=planned.metadata, dims={"batch": 2})
    assert report.ok, str(report)
    for output in report.outputs:
        assert output.max_abs_diff <= 1e-4
    assert ir.to_proto(model).SerializeToString() == planned.proto  # input untouched


@pytest.mark.parametrize("shards", SHARDS)
def test_gpt_tied_embedding_in_first_and_last_stage(shards: int):
    planned = _planned("gpt")
    stages = split(planned.model, shards, metadata=planned.metadata)
    wte = planned.model.graph.initializers["wte.weight"].const_value
    assert "wte.weight" in stages[0].graph.initializers
    assert "wte.weight" in stages[-1].graph.initializers
    assert stages[-1].graph.initializers["wte.weight"].const_value is wte  # shared, not copied
    assert "lm_head.tied_weight" in [n.name for n in stages[-1].graph]
    # The causal mask is computed once and sent on, not recomputed from the embeddings.
    holders = [i for i, s in enumerate(stages) if "causal.future" in [n.name for n in s.graph]]
    assert len(holders) == 1


@pytest.mark.parametrize("shards", SHARDS)
def test_control_flow_nodes_stay_whole(shards: int):
    planned = _planned("control_flow")
    stages = split(planned.model, shards, metadata=planned.metadata)
    originals = {n.op_type: n for n in planned.model.graph if n.op_type in ("If", "Loop")}
    for op_type, original in originals.items():
        copies = [n for s in stages for n in s.graph if n.op_type == op_type]
        assert len(copies) == 1
        for key, attr in original.attributes.items():
            body = copies[0].attributes[key].as_graph()
            assert [n.name for n in body] == [n.name for n in attr.as_graph()]


@pytest.mark.parametrize("network", ["bert", "control_flow"])
def test_annotation_split_equals_omny_split(network: str):
    from onnx_ir_multidevice.passes.api import annotate

    planned = _planned(network)
    model = ir.from_proto(onnx.ModelProto.FromString(planned.proto))
    omny.write(model, planned.metadata)
    expected = {n: split(model, n) for n in SHARDS}
    annotate(model, relaxed_cuts=NETWORKS[network][1])
    for key in ("omnynet_metadata", "omnynet_version"):
        del model.metadata_props[key]
    for n in SHARDS:
        got = split(model, n)  # from the IR v11 pipeline stages alone
        assert [[x.name for x in s.graph] for s in got] == [
            [x.name for x in s.graph] for s in expected[n]
        ]
        assert all(not s.device_configurations for s in got)


def test_cli_end_to_end(tmp_path, capsys):
    planned = _planned("vit")
    model = ir.from_proto(onnx.ModelProto.FromString(planned.proto))
    omny.write(model, planned.metadata)
    path = tmp_path / "vit.omny"
    save(model, path)
    for n in SHARDS:
        outdir = tmp_path / f"split{n}"
        assert main(["split", str(path), str(outdir), "--shards", str(n), "--json"]) == 0
        manifest = json.loads(capsys.readouterr().out)["result"]
        assert manifest["num_stages"] == n
        for entry in manifest["stages"]:
            onnx.checker.check_model(str(outdir / entry["file"]), full_check=True)
    assert main(["verify", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)["result"]
    assert [r["shards"] for r in document["results"]] == list(SHARDS)
    assert all(r["ok"] for r in document["results"])
