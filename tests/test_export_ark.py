"""The ``ark`` format: per-rank ARK model files, checked against ARK's own rules, restated.

ARK builds from source only (CUDA/ROCm), so its checks are restated here from its code:
``model_json.cpp`` (the verifier of model files), ``ModelTensor``'s constructor and
``ModelBuffer::deserialize``, ``ModelOp::deserialize`` (registered op types, ``Args``), and the
Send/Recv constructors and the executor's tag exchange (``ops_communication.cpp``,
``executor.cpp``), for the current layout (``main``); the seed document's hierarchy for the
``seed`` layout.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir
import pytest
from test_check import plan as check_plan

from onnx_ir_multidevice import (
    PlanningDimsError,
    SplitManifest,
    _cli,
    export,
    load,
    omny,
    save,
    save_split,
)
from onnx_ir_multidevice._errors import ExportError, OmnyIOError
from onnx_ir_multidevice.analysis import TensorClass, classify_values
from onnx_ir_multidevice.examples import GPT_TINY
from onnx_ir_multidevice.exporters.ark import TRANSLATED_OPS
from onnx_ir_multidevice.planner import plan_model
from onnx_ir_multidevice.testing import zoo

CORPUS = Path(__file__).parent / "corpus"

# ark/model/model_op.cpp, ModelOpT::from_name
ARK_OP_TYPES = {
    "Add", "Cast", "Copy", "Div", "Embedding", "Exp", "Gelu", "Matmul", "Mul", "Noop", "Recv",
    "ReduceMax", "ReduceMean", "ReduceSum", "Relu", "Reshape", "Rope", "Rsqrt", "ScalarAdd",
    "ScalarAssign", "ScalarMul", "Send", "SendDone", "Sigmoid", "Sqrt", "Sub", "Tensor",
    "Transpose", "SendPacket", "RecvPacket", "RecvReduceSendPacket", "RecvReduceSend",
    "DeviceSync",
}  # fmt: skip
# ark/include/ark/data_type.hpp
ARK_DATA_TYPES = {"FP32", "FP16", "BF16", "INT32", "UINT32", "INT8", "UINT8", "BYTE"}
# ark/model/model_op_arg.cpp, ModelOpArg::deserialize
ARK_ARG_TYPES = {"TENSOR", "OFFSET", "DIMS", "INT", "UINT32", "INT64", "UINT64", "BOOL", "FLOAT"}


# ---------------------------------------------------------------------------------------------
# ARK's verifier, restated


def _require(what: str, json_: dict[str, Any], fields: list[str], arrays: list[str]) -> None:
    """``verify_format_json``: every field present, the array fields arrays."""
    for field in fields:
        assert field in json_, f"{what}: {field} not found. Given: {json_}"
    for field in arrays:
        assert isinstance(json_[field], list), f"{what}: {field} is not an array"


def verify_buffer(buffer: dict[str, Any]) -> None:
    _require("BufferJson", buffer, ["Id", "Rank", "SendTags", "RecvTags"], ["SendTags", "RecvTags"])
    for tag in (*buffer["SendTags"], *buffer["RecvTags"]):  # TagInfo: (remote rank, tag)
        assert isinstance(tag, list) and len(tag) == 2 and all(type(x) is int for x in tag)


def verify_tensor(tensor: dict[str, Any], layout: str) -> None:
    padded = "PaddedShape" if layout == "main" else "Pads"
    fields = ["Id", "DataType", "Shape", "Strides", "Offsets", padded, "Buffer"]
    _require("TensorJson", tensor, fields, ["Shape", "Strides", "Offsets", padded])
    verify_buffer(tensor["Buffer"])
    assert tensor["DataType"] in ARK_DATA_TYPES  # DataType::from_name
    shape, strides, offsets = tensor["Shape"], tensor["Strides"], tensor["Offsets"]
    # ModelTensor's constructor
    assert 1 <= len(shape) <= 4, "Dims hold 1 to 4 dimensions"
    assert all(type(d) is int and d > 0 for d in shape), "only positive numbers"
    assert len(strides) == len(shape) and len(offsets) == len(shape)
    if layout == "main":
        padded_shape = tensor["PaddedShape"]
        assert len(padded_shape) == len(shape)
        assert all(s <= p for s, p in zip(shape, padded_shape, strict=True)), (
            "shape exceeds the padded shape"
        )
        assert all(o + p <= t for o, p, t in zip(offsets, padded_shape, strides, strict=True)), (
            "boundary"
        )
    else:  # the seed document: "Pads should be an array of ones"
        assert tensor["Pads"] == [1] * len(shape)
        assert all(o + s <= t for o, s, t in zip(offsets, shape, strides, strict=True))


def verify_op(op: dict[str, Any], layout: str) -> None:
    fields = ["Type", "Name", "IsVirtual", "ReadTensors", "WriteTensors", "ResultTensors", "Args"]
    _require("OpJson", op, fields, ["ReadTensors", "WriteTensors", "ResultTensors"])
    assert op["Type"] in ARK_OP_TYPES, f"Unknown model op type: {op['Type']}"
    assert isinstance(op["Name"], str) and isinstance(op["IsVirtual"], bool)
    for key in ("ReadTensors", "WriteTensors", "ResultTensors"):
        for tensor in op[key]:
            verify_tensor(tensor, layout)
    assert isinstance(op["Args"], dict)
    for arg in op["Args"].values():
        assert isinstance(arg, dict) and len(arg) == 1 and next(iter(arg)) in ARK_ARG_TYPES


def verify_model(document: dict[str, Any], layout: str) -> None:
    """``verify_format_model`` (main) or the seed document's hierarchy (seed)."""
    _require("ModelJson", document, ["Rank", "WorldSize", "Nodes"], ["Nodes"])
    op_key = "Op" if layout == "main" else "Ops"
    for node in document["Nodes"]:
        _require("NodeJson", node, ["Id", "ProducerNodeIds", "ConsumerNodeIds", op_key],
                 ["ProducerNodeIds", "ConsumerNodeIds"])  # fmt: skip
        if layout == "main":
            assert "Ops" not in node
            verify_op(node["Op"], layout)
        else:
            assert "Op" not in node and isinstance(node["Ops"], list) and node["Ops"]
            for op in node["Ops"]:
                verify_op(op, layout)


# ---------------------------------------------------------------------------------------------
# Communication: Send/Recv as ARK builds them, tags as its executor pairs them


def ops(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [op for node in document["Nodes"] for op in (node.get("Ops") or [node["Op"]])]


def buffers(document: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Every buffer of a file by id; the same id must always be the same buffer."""
    found: dict[int, dict[str, Any]] = {}
    for op in ops(document):
        for key in ("ReadTensors", "WriteTensors", "ResultTensors"):
            for tensor in op[key]:
                buffer = tensor["Buffer"]
                assert found.setdefault(buffer["Id"], buffer) == buffer
    return found


def check_communication(files: list[dict[str, Any]], names: list[dict[str, str]]) -> set:
    """The Send/SendDone/Recv ops and tag pairing; return the (source, destination, tensor) set."""
    world = len(files)
    sends: set[tuple[int, int, str]] = set()
    recvs: set[tuple[int, int, str]] = set()
    senders: dict[tuple[int, int, int], int] = {}  # (rank, remote, tag) -> local sending buffer
    for rank, (document, tensor_names) in enumerate(zip(files, names, strict=True)):
        assert document["Rank"] == rank and document["WorldSize"] == world
        by_id = buffers(document)
        all_ops = ops(document)
        send_results = {}
        for op in all_ops:
            if op["Type"] == "Send":  # ModelOpSend: read the local input, write the remote proxy
                (source,), (proxy,), (result,) = op["ReadTensors"], op["WriteTensors"], op[
                    "ResultTensors"
                ]  # fmt: skip
                remote = proxy["Buffer"]["Rank"]
                assert source["Buffer"]["Rank"] == -1 and 0 <= remote < world and remote != rank
                ((minus_one, tag),) = proxy["Buffer"]["RecvTags"]
                assert minus_one == -1 and [remote, tag] in source["Buffer"]["SendTags"]
                assert result["Buffer"]["Id"] == proxy["Buffer"]["Id"]
                key = (rank, remote, tag)
                assert senders.setdefault(key, source["Buffer"]["Id"]) == source["Buffer"]["Id"]
                send_results[result["Id"]] = op
                sends.add((rank, remote, tensor_names[str(source["Id"])]))
            elif op["Type"] == "Recv":  # ModelOpRecv: read the remote proxy, write the local
                (proxy,), (target,), (result,) = op["ReadTensors"], op["WriteTensors"], op[
                    "ResultTensors"
                ]  # fmt: skip
                remote = proxy["Buffer"]["Rank"]
                ((minus_one, tag),) = proxy["Buffer"]["SendTags"]
                assert minus_one == -1 and target["Buffer"]["Rank"] == -1
                assert [remote, tag] in target["Buffer"]["RecvTags"]
                assert result["Buffer"]["Id"] == target["Buffer"]["Id"]
                recvs.add((remote, rank, tensor_names[str(target["Id"])]))
        done = [op["ReadTensors"][0]["Id"] for op in all_ops if op["Type"] == "SendDone"]
        assert sorted(done) == sorted(send_results), "one SendDone per Send, on its result"
        # a local buffer's tags are unique to it (executor: tag -> offset per remote rank)
        for direction in ("SendTags", "RecvTags"):
            owner: dict[tuple[int, int], int] = {}
            for buffer in by_id.values():
                if buffer["Rank"] == -1:
                    for remote, tag in buffer[direction]:
                        assert owner.setdefault((remote, tag), buffer["Id"]) == buffer["Id"]
        # proxies: one per (remote rank, tag), as the executor maps them
        proxies: dict[tuple[str, int, int], int] = {}
        for buffer in by_id.values():
            if buffer["Rank"] != -1:
                for direction in ("SendTags", "RecvTags"):
                    for _, tag in buffer[direction]:
                        key = (direction, buffer["Rank"], tag)
                        assert proxies.setdefault(key, buffer["Id"]) == buffer["Id"]
    # every SendTag has its RecvTag on the other rank, and the other way round
    send_tags = set()
    recv_tags = set()
    for rank, document in enumerate(files):
        for buffer in buffers(document).values():
            if buffer["Rank"] == -1:
                send_tags.update((rank, remote, tag) for remote, tag in buffer["SendTags"])
                recv_tags.update((remote, rank, tag) for remote, tag in buffer["RecvTags"])
    assert send_tags == recv_tags
    # no tag serves two sending buffers
    tags = collections.Counter(tag for _, _, tag in senders)
    assert all(count == 1 for count in tags.values())
    assert sends == recvs
    return sends


def read_export(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    index = json.loads((folder / "index.json").read_text())
    files = [json.loads((folder / name).read_text()) for name in index["files"]]
    return index, files


def split_transfers(manifest: SplitManifest) -> set[tuple[int, int, str]]:
    return {
        (item.source, entry.index, item.name)
        for entry in manifest.stages
        for item in entry.inputs
        if isinstance(item.source, int)
    }


# ---------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def gpt() -> ir.Model:
    return load(GPT_TINY)


@pytest.fixture(scope="module")
def bert() -> ir.Model:
    model = load(CORPUS / "bert_dynamo.onnx")
    dims = {"batch": 1, "seq": 128}
    omny.write(model, plan_model(model, shards=[2, 3], dims=dims, relaxed=True).metadata)
    omny.write_planning_dims(model, dims)
    return model


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = _cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------------
# The verifier, the communication, the transfer set


@pytest.mark.parametrize("layout", ["main", "seed"])
@pytest.mark.parametrize(("which", "shards"), [("gpt", 2), ("gpt", 4), ("bert", 2), ("bert", 3)])
def test_rank_files_pass_the_verifier_and_send_what_split_sends(
    request, tmp_path, layout, which, shards
):
    model = request.getfixturevalue(which)
    out = tmp_path / "ark"
    result = export(model, out, "ark", shards=shards, layout=layout)
    index, files = read_export(out)
    assert index["world_size"] == shards and index["layout"] == layout
    assert index["files"] == [f"rank_{k}.json" for k in range(shards)]
    assert sorted(p.name for p in out.iterdir()) == sorted([*index["files"], "index.json"])
    assert [p.name for p in result.files] == [*index["files"], "index.json"]
    for document in files:
        verify_model(document, layout)
    names = [index["tensors"][name] for name in index["files"]]
    sent = check_communication(files, names)
    split = split_transfers(save_split(model, tmp_path / "split", shards))
    assert sent == split
    assert {(t["source"], t["destination"], t["tensor"]) for t in index["transfers"]} == split
    assert len({t["tag"] for t in index["transfers"]}) == len(index["transfers"])
    # graph inputs are forwarded and replicable values recomputed: never transferred
    classes = classify_values(model.graph)
    by_name = {v.name: v for node in model.graph for v in node.outputs}
    graph_inputs = {v.name for v in model.graph.inputs}
    for _, _, name in sent:
        assert name not in graph_inputs
        assert classes[by_name[name]] is TensorClass.ACTIVATION
    # the skeleton says it is one: names and index
    assert index["ops"] == "skeleton" and index["executable"] is False
    assert "not executable" in index["note"].lower()
    virtual = [op for document in files for op in ops(document) if op["Type"] == "Tensor"]
    assert any(op["Name"].startswith("skeleton:stage_") for op in virtual)
    assert all(op["IsVirtual"] for op in virtual)


def test_int64_and_bool_side_tensors_of_a_relaxed_plan_are_byte_views(gpt, tmp_path):
    # gpt_tiny's cuts are relaxed: the causal mask (bool, sliced from the attn.bias buffer)
    # crosses every cut; the shape vectors are proven shape reads, recomputed by each stage
    index, _files = read_export(export(gpt, tmp_path / "a", "ark", shards=4).destination)
    by_tensor = {t["tensor"]: t for t in index["transfers"] if t["destination"] == 1}
    assert set(by_tensor) == {"causal.future", "layer.0.out"}
    mask = by_tensor["causal.future"]
    assert (mask["onnx_dtype"], mask["shape"], mask["ark_dtype"], mask["ark_shape"]) == (
        "bool",
        [32, 32],
        "BYTE",
        [32, 32],
    )
    assert mask["byte_view"] and mask["bytes"] == 32 * 32
    hidden = by_tensor["layer.0.out"]
    assert (hidden["ark_dtype"], hidden["ark_shape"], hidden["byte_view"]) == (
        "FP32",
        [1, 32, 64],
        False,
    )
    assert hidden["bytes"] == 32 * 64 * 4
    assert set(index["byte_views"]) == {"input_ids", "causal.future"}
    # the byte views travel: rank 0 sends the mask to ranks 1, 2 and 3, one tag each
    masks = [t for t in index["transfers"] if t["tensor"] == "causal.future"]
    assert [(t["source"], t["destination"]) for t in masks] == [(0, 1), (0, 2), (0, 3)]
    with pytest.raises(ExportError, match=r"strict_dtypes: 2 tensor\(s\).*causal.future \(bool\)"):
        export(gpt, tmp_path / "b", "ark", shards=4, strict_dtypes=True)
    assert not (tmp_path / "b").exists()
    # an int64 side activation (the ArgMax of the first stage, read by the second)
    index, _files = read_export(
        export(_int64_side_model(), tmp_path / "c", "ark", shards=2).destination
    )
    by_tensor = {t["tensor"]: t for t in index["transfers"]}
    assert set(by_tensor) == {"top", "b"}
    top = by_tensor["top"]
    assert (top["onnx_dtype"], top["shape"], top["ark_dtype"], top["ark_shape"]) == (
        "int64",
        [1, 1],
        "BYTE",
        [1, 8],
    )
    assert top["byte_view"] and top["bytes"] == 8
    assert not by_tensor["b"]["byte_view"]
    assert set(index["byte_views"]) == {"top"}


def _int64_side_model() -> ir.Model:
    """a = x @ w; top = ArgMax(a) (int64); c = (a @ w) @ w; y = c[top]: cut at b = a @ w.

    The cut is relaxed: ``top`` (an activation: the ArgMax of a MatMul) crosses it too.
    """
    f32 = ir.TensorType(ir.DataType.FLOAT)
    i64 = ir.TensorType(ir.DataType.INT64)
    x = ir.Value(name="x", type=f32, shape=ir.Shape(["batch", 8]))
    w = ir.Value(name="w", const_value=ir.tensor(np.eye(8, dtype=np.float32)))

    def op(op_type, inputs, name, dtype, shape, **attributes):
        out = ir.Value(name=name, type=dtype, shape=ir.Shape(shape))
        return ir.node(op_type, inputs, attributes, name=name, outputs=[out])

    a = op("MatMul", [x, w], "a", f32, ["batch", 8])
    top = op("ArgMax", [a.outputs[0]], "top", i64, ["batch", 1], axis=1, keepdims=1)
    b = op("MatMul", [a.outputs[0], w], "b", f32, ["batch", 8])
    c = op("MatMul", [b.outputs[0], w], "c", f32, ["batch", 8])
    y = op("GatherElements", [c.outputs[0], top.outputs[0]], "y", f32, ["batch", 1], axis=1)
    graph = ir.Graph([x], [y.outputs[0]], nodes=[a, top, b, c, y], initializers=[w],
                     opset_imports={"": 18}, name="g")  # fmt: skip
    model = ir.Model(graph, ir_version=10)
    check_plan(model, [["b"]])
    return model


def _chain_model(shape: list[int | str]) -> ir.Model:
    """x @ w -> Relu -> Sigmoid, planned for 2 stages (the MatMul makes them activations)."""
    f32 = ir.TensorType(ir.DataType.FLOAT)
    x = ir.Value(name="x", type=f32, shape=ir.Shape(shape))
    w = ir.Value(name="w", const_value=ir.tensor(np.eye(shape[-1], dtype=np.float32)))
    nodes = []
    for name, op in (("a", "MatMul"), ("b", "Relu"), ("y", "Sigmoid")):
        inputs = [x, w] if not nodes else [nodes[-1].outputs[0]]
        out = ir.Value(name=name, type=f32, shape=ir.Shape(shape))
        nodes.append(ir.node(op, inputs, name=name, outputs=[out]))
    graph = ir.Graph([x], [nodes[-1].outputs[0]], nodes=nodes, initializers=[w],
                     opset_imports={"": 18}, name="g")  # fmt: skip
    model = ir.Model(graph, ir_version=10)
    omny.write(model, plan_model(model, shards=[2]).metadata)
    return model


def _scalar_cut_model() -> ir.Model:
    """x @ w -> ReduceSum (a scalar) -> times a large weight: the scalar is the cut."""
    f32 = ir.TensorType(ir.DataType.FLOAT)
    x = ir.Value(name="x", type=f32, shape=ir.Shape(["batch", 4]))
    w = ir.Value(name="w", const_value=ir.tensor(np.ones((4, 4), dtype=np.float32)))
    big = ir.Value(name="big", const_value=ir.tensor(np.ones((4096,), dtype=np.float32)))
    h = ir.node("MatMul", [x, w], name="h",
                outputs=[ir.Value(name="h", type=f32, shape=ir.Shape(["batch", 4]))])  # fmt: skip
    total = ir.node("ReduceSum", [h.outputs[0]], {"keepdims": 0}, name="total",
                    outputs=[ir.Value(name="total", type=f32, shape=ir.Shape([]))])  # fmt: skip
    y = ir.node("Mul", [total.outputs[0], big], name="y",
                outputs=[ir.Value(name="y", type=f32, shape=ir.Shape([4096]))])  # fmt: skip
    graph = ir.Graph([x], [y.outputs[0]], nodes=[h, total, y], initializers=[w, big],
                     opset_imports={"": 18}, name="g")  # fmt: skip
    model = ir.Model(graph, ir_version=10)
    omny.write(model, plan_model(model, shards=[2]).metadata)
    return model


def test_more_than_four_dims_merge_leading_ones_and_a_scalar_is_one(tmp_path):
    model = _chain_model(["batch", 2, 3, 4, 5])
    index, files = read_export(export(model, tmp_path / "a", "ark", shards=2).destination)
    (transfer,) = index["transfers"]
    assert transfer["shape"] == [1, 2, 3, 4, 5] and transfer["ark_shape"] == [2, 3, 4, 5]
    assert transfer["merged_dims"] and not transfer["byte_view"]
    for document in files:
        verify_model(document, "main")
    with pytest.raises(ExportError, match="on a 5-D tensor"):
        export(model, tmp_path / "b", "ark", shards=2, ops="translate")
    scalar = _scalar_cut_model()
    index, files = read_export(export(scalar, tmp_path / "c", "ark", shards=2).destination)
    (transfer,) = index["transfers"]
    assert (transfer["tensor"], transfer["shape"], transfer["ark_shape"]) == ("total", [], [1])
    for document in files:
        verify_model(document, "main")


# ---------------------------------------------------------------------------------------------
# translate


def test_translate_writes_an_mlp_completely(tmp_path):
    model = zoo.mlp(layers=4)
    omny.write(model, plan_model(model, shards=[3]).metadata)
    out = tmp_path / "mlp"
    result = export(model, out, "ark", shards=3, ops="translate")
    assert result.details["ops"] == "translate"
    index, files = read_export(out)
    assert index["executable"] is True
    for document in files:
        verify_model(document, "main")
    names = [index["tensors"][name] for name in index["files"]]
    check_communication(files, names)
    from onnx_ir_multidevice import split

    for document, stage in zip(files, split(model, 3), strict=True):
        computed = [op for op in ops(document) if not op["IsVirtual"] and op["Type"] not in
                    ("Send", "SendDone", "Recv")]  # fmt: skip
        assert [op["Type"] for op in computed] == [TRANSLATED_OPS[n.op_type] for n in stage.graph]
        assert not any(op["Name"].startswith("skeleton:") for op in ops(document))
        weights = {op["Name"] for op in ops(document) if op["Name"].startswith("weight:")}
        assert weights == {f"weight:{name}" for name in stage.graph.initializers}
        matmuls = [op for op in computed if op["Type"] == "Matmul"]
        assert all(op["Args"] == {"TransposeInput": {"BOOL": False},
                                  "TransposeOther": {"BOOL": False}} for op in matmuls)  # fmt: skip


def test_translate_refuses_a_transformer_listing_the_ops(bert, tmp_path, capsys):
    with pytest.raises(ExportError, match=r"ops=translate: \d+ of the \d+ nodes") as caught:
        export(bert, tmp_path / "b", "ark", shards=2, ops="translate")
    message = str(caught.value)
    for op in ("Softmax x", "LayerNormalization x", "Gather x", "Erf x"):
        assert op in message
    assert "ops=skeleton" in message
    assert not (tmp_path / "b").exists()
    code, _, err = _run(capsys, "export", "ark", str(GPT_TINY), str(tmp_path / "g"), "--shards",
                        "2", "--ops", "translate")  # fmt: skip
    assert code == 1 and "Softmax x4" in err and "Reshape x16" in err


# ---------------------------------------------------------------------------------------------
# Deterministic, atomic, command line


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_two_exports_are_byte_identical(gpt, tmp_path):
    for layout in ("main", "seed"):
        a = export(gpt, tmp_path / f"a{layout}", "ark", shards=4, layout=layout).destination
        b = export(load(GPT_TINY), tmp_path / f"b{layout}", "ark", shards=4, layout=layout)
        assert _tree(a) == _tree(b.destination)
    assert _tree(tmp_path / "amain") != _tree(tmp_path / "aseed")


def test_an_existing_directory_is_kept_unless_force(gpt, tmp_path):
    out = tmp_path / "ark"
    out.mkdir()
    (out / "keep").write_text("x")
    with pytest.raises(OmnyIOError, match="not empty"):
        export(gpt, out, "ark", shards=2)
    with pytest.raises(ExportError, match="strict_dtypes"):
        export(gpt, out, "ark", shards=2, strict_dtypes=True, force=True)
    assert _tree(out) == {"keep": b"x"}
    export(gpt, out, "ark", shards=2, force=True)
    assert sorted(_tree(out)) == ["index.json", "rank_0.json", "rank_1.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ark"]  # no temporary left


def test_command_line(tmp_path, capsys):
    out = tmp_path / "a"
    code, stdout, err = _run(capsys, "export", "ark", str(GPT_TINY), str(out), "--shards", "2",
                             "--layout", "seed", "--json")  # fmt: skip
    assert code == 0, err
    document = json.loads(stdout)["result"]
    assert document["format"] == "ark" and document["details"]["layout"] == "seed"
    assert document["details"]["world_size"] == 2
    _index, files = read_export(out)
    assert "Ops" in files[0]["Nodes"][0]
    code, _, err = _run(capsys, "export", "ark", str(GPT_TINY), str(tmp_path / "b"), "--shards",
                        "2", "--strict-dtypes")  # fmt: skip
    assert code == 1 and "strict_dtypes" in err
    code, _, err = _run(capsys, "export", "ark", str(GPT_TINY), str(tmp_path / "b"), "--shards",
                        "2", "--layout", "other")  # fmt: skip
    assert code == 2 and "invalid choice" in err
    code, _, err = _run(capsys, "export", "ark", str(GPT_TINY), str(tmp_path / "b"), "--shards",
                        "2", "--export-datetime", "2024-01-01 00:00:00Z")  # fmt: skip
    assert code == 2 and "has no option export_datetime" in err
    assert not (tmp_path / "b").exists()


def test_layouts_differ_only_where_ark_changed(gpt, tmp_path):
    _, main = read_export(export(gpt, tmp_path / "m", "ark", shards=2).destination)
    _, seed = read_export(export(gpt, tmp_path / "s", "ark", shards=2, layout="seed").destination)

    for a, b in zip(main, seed, strict=True):
        first_main = a["Nodes"][0]["Op"]["ResultTensors"][0]
        first_seed = b["Nodes"][0]["Ops"][0]["ResultTensors"][0]
        assert first_main["PaddedShape"] == first_main["Shape"]
        assert first_seed["Pads"] == [1] * len(first_seed["Shape"])
        assert len(a["Nodes"]) == len(b["Nodes"])
        assert [n["Op"] for n in a["Nodes"]] != [n["Ops"][0] for n in b["Nodes"]]
        for node_a, node_b in zip(a["Nodes"], b["Nodes"], strict=True):
            op_a, (op_b,) = node_a["Op"], node_b["Ops"]
            assert {k: v for k, v in op_a.items() if not k.endswith("Tensors")} == {
                k: v for k, v in op_b.items() if not k.endswith("Tensors")
            }
            for key in ("ReadTensors", "WriteTensors", "ResultTensors"):
                for t_a, t_b in zip(op_a[key], op_b[key], strict=True):
                    assert t_a.pop("PaddedShape") == t_a["Shape"]
                    assert t_b.pop("Pads") == [1] * len(t_b["Shape"])
                    assert t_a == t_b


def test_an_unknown_dim_is_refused_naming_it(tmp_path, capsys):
    model = load(CORPUS / "bert_dynamo.onnx")
    omny.write(model, plan_model(model, shards=[2], dims={"seq": 128}).metadata)
    omny.write_planning_dims(model, None)  # as a file planned elsewhere: no dims recorded
    with pytest.raises(PlanningDimsError, match="--dim seq=N") as caught:
        export(model, tmp_path / "a", "ark", shards=2)
    assert caught.value.dims == ("seq",)
    index, _ = read_export(
        export(model, tmp_path / "b", "ark", shards=2, dims="seq=64").destination
    )
    assert index["planning_dims"] == {"batch": 1, "seq": 64}
    hidden = [t for t in index["transfers"] if t["ark_dtype"] == "FP32"]
    assert hidden and all(t["shape"][:2] == [1, 64] for t in hidden)
    file = tmp_path / "bert.omny"
    save(model, file)
    code, _, err = _run(capsys, "export", "ark", str(file), str(tmp_path / "c"), "--shards", "2")
    assert code == 2 and "'seq'" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()
