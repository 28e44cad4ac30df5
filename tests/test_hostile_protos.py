"""Protos that onnx-ir cannot represent: typed errors, never a traceback or a silent loss.

Issue 10, items 6 (``onnx_ir.serde.SerdeError`` escaped ``load()``, ``check()`` and every
command for two nodes writing one tensor name and for some bit-flipped files) and 14
(``load()`` + ``save()`` dropped a duplicated ``metadata_props`` entry: onnx-ir keeps one value
per key). Like ``training_info`` and ``sparse_initializer``, which onnx-ir also drops, a
duplicated key is refused on load, naming the entry.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_io import _weights_model
from test_roundtrip import make_annotated_model

from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._errors import OmnyError, OmnyFormatError
from onnx_ir_multidevice._proto.convert import from_proto, roundtrip
from onnx_ir_multidevice._proto.files import load, save
from onnx_ir_multidevice.checker.core import check


def _two_writers() -> onnx.ModelProto:
    helper = onnx.helper
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="a"),
        helper.make_node("Neg", ["x"], ["y"], name="b"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _check_refuses_or_reports(path: Path) -> None:
    """``check`` gives a diagnostic error or raises a typed error, never anything else."""
    try:
        diagnostics = check(path)
    except OmnyError:
        return
    assert any(d.severity.value == "error" for d in diagnostics)


def test_two_nodes_writing_one_tensor_is_a_typed_error(tmp_path, capsys):
    proto = _two_writers()
    with pytest.raises(OmnyFormatError, match="'y'") as info:
        from_proto(proto)
    assert info.value.path == "graph"
    assert "node 'b'" in str(info.value)
    onnx.save(proto, tmp_path / "m.onnx")
    with pytest.raises(OmnyFormatError, match="'y'"):
        load(tmp_path / "m.onnx")
    _check_refuses_or_reports(tmp_path / "m.onnx")
    for command in (["inspect"], ["split", "--shards", "1"], ["annotate"]):
        args = [command[0], str(tmp_path / "m.onnx")]
        if command[0] != "inspect":
            args.append(str(tmp_path / "out"))
        assert main([*args, *command[1:]]) == 2
        err = capsys.readouterr().err
        assert err.startswith("omny: error: ") and "'y'" in err


@pytest.mark.parametrize("where", ["model", "graph", "node", "function", "value", "subgraph"])
def test_duplicated_metadata_props_key_is_refused(tmp_path, where):
    proto = ir.to_proto(make_annotated_model())
    identity = onnx.helper.make_node("Identity", ["a"], ["b"])
    function = onnx.helper.make_function("f", "F", ["a"], ["b"], [identity], [], [])
    proto.functions.append(function)
    targets = {
        "model": (proto, "metadata_props"),
        "graph": (proto.graph, "graph.metadata_props"),
        "node": (proto.graph.node[1], "graph.node[1].metadata_props"),
        "function": (proto.functions[-1], f"functions[{len(proto.functions) - 1}].metadata_props"),
        "value": (proto.graph.output[0], "graph.output[0].metadata_props"),
    }
    if where == "subgraph":
        body = onnx.helper.make_graph([], "body", [], [])
        body.metadata_props.add(key="k", value="1")
        body.metadata_props.add(key="k", value="2")
        proto.graph.node.append(
            onnx.helper.make_node("If", ["c"], [], name="if", then_branch=body, else_branch=body)
        )
        expected = f"graph.node[{len(proto.graph.node) - 1}].attribute[0].g.metadata_props[1]"
    else:
        message, field = targets[where]
        before = len(message.metadata_props)
        message.metadata_props.add(key="k", value="1")
        message.metadata_props.add(key="other", value="x")
        message.metadata_props.add(key="k", value="2")
        expected = f"{field}[{before + 2}]"
    with pytest.raises(OmnyFormatError, match="'k'") as info:
        roundtrip(proto)
    assert info.value.path == expected
    onnx.save(proto, tmp_path / "m.onnx")
    with pytest.raises(OmnyFormatError, match="twice"):
        load(tmp_path / "m.onnx")


def test_unique_metadata_props_round_trip_in_order(tmp_path):
    model = _weights_model()
    model.metadata_props.update({"z": "1", "a": "2"})
    save(model, tmp_path / "m.onnx")
    assert list(load(tmp_path / "m.onnx").metadata_props.items()) == [
        ("k", "v"),
        ("z", "1"),
        ("a", "2"),
    ]


_BASES: dict[str, bytes] = {}


def _base(name: str) -> bytes:
    if name not in _BASES:
        model = _weights_model() if name == "weights" else make_annotated_model()
        _BASES[name] = ir.to_proto(model).SerializeToString()
    return _BASES[name]


@settings(max_examples=150, deadline=None)
@given(
    base=st.sampled_from(["weights", "annotated"]),
    flips=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 7)), min_size=1, max_size=4
    ),
)
def test_bit_flipped_files_load_or_fail_with_a_typed_error(tmp_path_factory, base, flips):
    data = bytearray(_base(base))
    for position, bit in flips:
        data[int(position * len(data))] ^= 1 << bit
    path = tmp_path_factory.mktemp("flip") / "m.onnx"
    path.write_bytes(bytes(data))
    try:
        model = load(path)
    except OmnyError:
        model = None
    with contextlib.suppress(OmnyError):
        check(path)
    if model is not None:  # what loads, saves (or refuses with a typed error)
        with contextlib.suppress(OmnyError):
            save(model, path.with_name("out.onnx"))


def test_a_known_bit_flip_that_escaped_as_serde_error(tmp_path):
    """An element type no onnx-ir dtype has (65) in a subgraph output: SerdeError before."""
    proto = ir.to_proto(make_annotated_model())
    body = onnx.helper.make_graph(
        [], "body", [], [onnx.helper.make_tensor_value_info("c", 65, None)]
    )
    proto.graph.node.append(
        onnx.helper.make_node("If", ["c"], ["d"], name="if", then_branch=body, else_branch=body)
    )
    onnx.save(proto, tmp_path / "m.onnx")
    with pytest.raises(OmnyFormatError) as info:
        load(tmp_path / "m.onnx")
    assert "65" in str(info.value)
    _check_refuses_or_reports(tmp_path / "m.onnx")


def _with_bytes_in_a_name(proto: onnx.ModelProto) -> bytes:
    """``proto`` serialised with one node name turned into invalid UTF-8."""
    proto.graph.node[0].name = "nameXX"
    return proto.SerializeToString().replace(b"nameXX", b"name\xff\xfe")


def test_a_name_that_is_not_utf8_is_a_typed_error(tmp_path, capsys):
    """protobuf hands invalid UTF-8 over as bytes; ``omny plan`` then failed with TypeError."""
    (tmp_path / "m.onnx").write_bytes(_with_bytes_in_a_name(ir.to_proto(_weights_model())))
    with pytest.raises(OmnyFormatError, match="UTF-8") as info:
        load(tmp_path / "m.onnx")
    assert info.value.path == "graph.node[0]"
    assert main(["plan", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "p.omny")]) == 2
    assert "UTF-8" in capsys.readouterr().err


def test_an_attribute_without_type_is_a_typed_error(tmp_path):
    """An attribute whose type is UNDEFINED loaded, then failed ``omny split`` (SerdeError)."""
    proto = ir.to_proto(make_annotated_model())
    node = next(n for n in proto.graph.node if n.attribute)
    node.attribute[0].type = onnx.AttributeProto.UNDEFINED
    onnx.save(proto, tmp_path / "m.onnx")
    with pytest.raises(OmnyFormatError, match="UNDEFINED") as info:
        load(tmp_path / "m.onnx")
    assert info.value.path.endswith(".attribute[0].type")
