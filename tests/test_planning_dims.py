"""The planning dims recorded beside the .omny metadata."""

from __future__ import annotations

import onnx_ir as ir
import pytest

from onnx_ir_multidevice import OmnyFormatError, load, omny, save
from onnx_ir_multidevice.omny import PLANNING_DIMS_KEY, read_planning_dims, write_planning_dims
from onnx_ir_multidevice.testing import zoo


def test_round_trip_through_a_file(tmp_path):
    model = zoo.bert(layers=1)
    model.metadata_props["first"] = "1"
    assert read_planning_dims(model) is None
    write_planning_dims(model, {"seq": 128, "batch": 2})
    model.metadata_props["last"] = "2"
    assert model.metadata_props[PLANNING_DIMS_KEY] == '{"batch":2,"seq":128}'
    save(model, tmp_path / "m.onnx")
    again = load(tmp_path / "m.onnx")
    assert read_planning_dims(again) == {"batch": 2, "seq": 128}
    write_planning_dims(again, {"seq": 64})  # replaced where it stands
    assert list(again.metadata_props) == ["first", PLANNING_DIMS_KEY, "last"]
    write_planning_dims(again, None)
    assert PLANNING_DIMS_KEY not in again.metadata_props
    assert omny.read(again) is None  # never inside the .omny JSON


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("nope", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"seq": 0}', "seq"),
        ('{"seq": -4}', "seq"),
        ('{"seq": 1.5}', "seq"),
        ('{"seq": true}', "seq"),
        ('{"": 3}', "non-empty"),
        ('{"seq": 2199023255553}', "seq"),
    ],
)
def test_malformed_entries_are_format_errors(text, where):
    model = ir.Model(ir.Graph([], [], nodes=[]), ir_version=10)
    model.metadata_props[PLANNING_DIMS_KEY] = text
    with pytest.raises(OmnyFormatError, match=where) as info:
        read_planning_dims(model)
    assert info.value.path.startswith(f"metadata_props[{PLANNING_DIMS_KEY}]")


def test_bad_values_are_refused_on_write():
    model = zoo.bert(layers=1)
    with pytest.raises(OmnyFormatError):
        write_planning_dims(model, {"seq": 0})
    with pytest.raises(TypeError, match=r"onnx_ir.Model"):
        write_planning_dims("model.onnx", {"seq": 1})  # type: ignore[arg-type]
