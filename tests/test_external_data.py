"""External data: hostile references, data outside the folder, and the data record.

Issue 10, items 4 (a data file that is not the one the model was saved with), 5 (faulty
references gave tracebacks and ``check`` saw nothing), 7 (``omny split`` kept a reference to
``/etc/passwd``) and 8 (``save`` wrote outside the model's folder). Every case is a real file
on disk, read by :func:`load`, :func:`check` and the command line.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from test_io import _arrays, _weights_model
from test_split import _annotate

from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._errors import ExternalDataError, OmnyError, OmnyIOError
from onnx_ir_multidevice._proto.files import DATA_RECORD_KEY, load, save
from onnx_ir_multidevice._split import save_split, split
from onnx_ir_multidevice.checker.core import check
from onnx_ir_multidevice.testing import zoo

Mutation = Callable[[onnx.TensorProto, dict[str, onnx.StringStringEntryProto], Path], None]


def _saved(folder: Path) -> Path:
    """``folder/m.onnx`` with every weight in ``folder/m.data`` (written by onnx-ir)."""
    folder.mkdir(parents=True, exist_ok=True)
    ir.save(_weights_model(), folder / "m.onnx", external_data="m.data", size_threshold_bytes=0)
    return folder / "m.onnx"


def _mutated(tmp_path: Path, mutate: Mutation) -> Path:
    """A copy of the model in ``tmp_path/case`` whose first initializer ``W1`` is mutated."""
    path = _saved(tmp_path / "case")
    proto = onnx.load(path, load_external_data=False)
    tensor = proto.graph.initializer[0]
    assert tensor.name == "W1"
    mutate(tensor, {e.key: e for e in tensor.external_data}, path.parent)
    onnx.save(proto, path)
    return path


def _set(key: str, value: str) -> Mutation:
    def mutate(tensor, entries, folder):
        if key in entries:
            entries[key].value = value
        else:
            tensor.external_data.add(key=key, value=value)

    return mutate


def _secret(folder: Path) -> Path:
    secret = folder.parent / "secret.bin"
    secret.write_bytes(bytes(range(256)) * 64)
    return secret


def _absolute(tensor, entries, folder):
    entries["location"].value = str(_secret(folder))


def _dotdot(tensor, entries, folder):
    _secret(folder)
    entries["location"].value = "../secret.bin"


def _inner_dotdot(tensor, entries, folder):
    _secret(folder)
    (folder / "sub").mkdir()
    entries["location"].value = "sub/../../secret.bin"


def _symlink(tensor, entries, folder):
    (folder / "link.bin").symlink_to(_secret(folder))
    entries["location"].value = "link.bin"


def _hardlink(tensor, entries, folder):
    os.link(_secret(folder), folder / "hard.bin")
    entries["location"].value = "hard.bin"


def _proc(tensor, entries, folder):
    entries["location"].value = "/proc/self/environ"


def _directory(tensor, entries, folder):
    (folder / "adir").mkdir()
    entries["location"].value = "adir"


def _no_location(tensor, entries, folder):
    entries["location"].value = ""


FAULTS: dict[str, tuple[Mutation, str]] = {
    "absolute": (_absolute, "absolute"),
    "dotdot": (_dotdot, "outside the model's folder"),
    "inner-dotdot": (_inner_dotdot, "outside the model's folder"),
    "symlink": (_symlink, "outside the model's folder"),
    "hardlink": (_hardlink, "hard link"),
    "proc": (_proc, "absolute"),
    "directory": (_directory, "not a regular file"),
    "missing": (_set("location", "nope.bin"), "does not exist"),
    "no-location": (_no_location, "no location"),
    "offset-past-end": (_set("offset", str(10**9)), "past the end"),
    "offset-negative": (_set("offset", "-8"), "offset"),
    "offset-not-a-number": (_set("offset", "abc"), "offset"),
    "length-not-a-number": (_set("length", "x1"), "length"),
    "length-wrong": (_set("length", "12"), "length 12"),
    "length-past-end": (_set("length", str(10**9)), "length"),
}


@pytest.mark.parametrize("case", sorted(FAULTS))
def test_faulty_reference_is_a_typed_error_naming_tensor_and_location(tmp_path, case):
    mutate, reason = FAULTS[case]
    path = _mutated(tmp_path, mutate)
    with pytest.raises(ExternalDataError) as info:
        load(path)
    error = info.value
    assert isinstance(error, OmnyIOError) and not isinstance(error, ValueError)
    assert reason in str(error)
    assert "'W1'" in str(error) and str(path) in str(error)
    (problem,) = error.problems
    assert problem.tensor == "W1" and problem.code == "OMNY108"
    assert problem.where == "graph.initializer[0]"


@pytest.mark.parametrize("case", sorted(FAULTS))
def test_faulty_reference_check_diagnostic_and_cli_exit_codes(tmp_path, case, capsys):
    path = _mutated(tmp_path, FAULTS[case][0])
    found = [d for d in check(path) if d.code == "OMNY108"]
    assert len(found) == 1 and found[0].location == "value:W1"
    assert "'W1'" in found[0].message
    assert main(["check", str(path)]) == 2  # the model cannot be read safely
    out = capsys.readouterr().out
    assert "error OMNY108 at value:W1" in out
    for command in (["inspect", str(path)], ["split", str(path), str(tmp_path / "s")]):
        assert main([*command, "--shards", "2"] if command[0] == "split" else command) == 2
        err = capsys.readouterr().err
        assert err.startswith("omny: error: ") and "Traceback" not in err
        assert "'W1'" in err and err.count("\n") <= 3


def test_every_problem_is_reported_at_once(tmp_path):
    path = _saved(tmp_path / "m")
    proto = onnx.load(path, load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../elsewhere.bin"
    onnx.save(proto, path)
    with pytest.raises(ExternalDataError) as info:
        load(path)
    assert [p.tensor for p in info.value.problems] == ["W1", "b", "W2"]
    assert {d.location for d in check(path) if d.code == "OMNY108"} == {
        "value:W1",
        "value:b",
        "value:W2",
    }


def test_valid_references_inside_the_folder_are_accepted(tmp_path):
    """Subfolders and an in-folder symlink are inside the folder: accepted."""
    folder = tmp_path / "ok"
    folder.mkdir()
    model = _weights_model()
    save(model, folder / "m.onnx", external_data="sub/w.bin", size_threshold_bytes=0)
    (folder / "alias.bin").symlink_to(folder / "sub" / "w.bin")
    proto = onnx.load(folder / "m.onnx", load_external_data=False)
    for entry in proto.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "alias.bin"
    del proto.metadata_props[:]  # the record names sub/w.bin only
    onnx.save(proto, folder / "m.onnx")
    for name, array in _arrays(load(folder / "m.onnx")).items():
        np.testing.assert_array_equal(array, _arrays(model)[name])
    assert not [d for d in check(folder / "m.onnx") if d.code in ("OMNY108", "OMNY109")]


# ---------------------------------------------------------------------------------------------
# Constants and functions (item 7)


def _constant_model(location: str, folder: Path, *, in_function: bool = False) -> Path:
    """A model whose ``Constant`` value lives in external data at ``location``."""
    value = np.arange(300, dtype=np.float32)
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([300]))
    const = ir.Node(
        "", "Constant", [], attributes=[ir.AttrTensor("value", ir.tensor(value, name="c"))],
        outputs=[ir.Value(name="c")], name="const",
    )  # fmt: skip
    add = ir.Node("", "Add", [x, const.outputs[0]], outputs=[ir.Value(name="y")], name="add")
    add.outputs[0].type, add.outputs[0].shape = x.type, ir.Shape([300])
    graph = ir.Graph([x], add.outputs, nodes=[const, add], opset_imports={"": 18}, name="g")
    proto = ir.to_proto(ir.Model(graph, ir_version=10))
    folder.mkdir(parents=True, exist_ok=True)
    onnx.external_data_helper.convert_model_to_external_data(
        proto, location="const.bin", size_threshold=0, convert_attribute=True
    )
    onnx.save(proto, folder / "m.onnx")  # writes const.bin
    proto = onnx.load(folder / "m.onnx", load_external_data=False)
    for entry in proto.graph.node[0].attribute[0].t.external_data:
        if entry.key == "location":
            entry.value = location
    onnx.save(proto, folder / "m.onnx")
    return folder / "m.onnx"


@pytest.mark.parametrize("location", ["/etc/passwd", "../../../../../../etc/passwd"])
def test_constant_referencing_a_file_outside_is_refused(tmp_path, location, capsys):
    path = _constant_model(location, tmp_path / "m")
    with pytest.raises(ExternalDataError, match="'c'") as info:
        load(path)
    assert info.value.problems[0].where == "graph.node[0].attribute[0].t"
    assert main(["split", str(path), str(tmp_path / "split"), "--shards", "1"]) == 2
    assert "etc/passwd" in capsys.readouterr().err
    assert not (tmp_path / "split").exists()
    assert [d.code for d in check(path) if d.code == "OMNY108"] == ["OMNY108"]


def test_split_stages_are_self_contained(tmp_path, capsys):
    """A Constant read from the model's folder is embedded in its stage file."""
    path = _constant_model("const.bin", tmp_path / "m")
    assert main(["split", str(path), str(tmp_path / "split"), "--shards", "1"]) == 0
    shutil.rmtree(tmp_path / "m")
    stage = onnx.load(tmp_path / "split" / "stage_0.onnx", load_external_data=False)
    for node in stage.graph.node:
        for attribute in node.attribute:
            assert attribute.t.data_location != onnx.TensorProto.EXTERNAL
    loaded = load(tmp_path / "split" / "stage_0.onnx")
    constant = loaded.graph.node(0).attributes["value"].value
    np.testing.assert_array_equal(constant.numpy(), np.arange(300, dtype=np.float32))


# ---------------------------------------------------------------------------------------------
# save (item 8)


@pytest.mark.parametrize("name", ["../x.data", "sub/../../x.data", "./../x.data"])
def test_save_refuses_a_data_file_outside_the_folder(tmp_path, name):
    target = tmp_path / "t"
    target.mkdir()
    with pytest.raises(OmnyIOError, match="outside") as info:
        save(_weights_model(), target / "m.onnx", external_data=name, size_threshold_bytes=0)
    assert name in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]
    assert list(target.iterdir()) == []


def test_save_of_a_model_with_a_broken_external_tensor_is_a_typed_error(tmp_path):
    path = _saved(tmp_path / "m")
    model = load(path)
    os.remove(path.parent / "m.data")  # gone after loading
    (tmp_path / "out").mkdir()
    with pytest.raises(OmnyIOError, match="W1"):
        save(model, tmp_path / "out" / "m.onnx")
    assert list((tmp_path / "out").iterdir()) == []
    tensor = ir.ExternalTensor(
        "../../etc/passwd", 0, 16, ir.DataType.FLOAT, shape=ir.Shape([4]), name="w",
        base_dir=str(tmp_path),
    )  # fmt: skip
    model.graph.initializers["W1"].const_value = tensor
    with pytest.raises(OmnyError, match=r"'W1' at '../../etc/passwd'") as info:
        save(model, tmp_path / "out" / "m.onnx", external_data=False)
    assert not isinstance(info.value, ValueError) or isinstance(info.value, OmnyError)
    assert list((tmp_path / "out").iterdir()) == []


# ---------------------------------------------------------------------------------------------
# The data record (item 4: a data file that is not the model's)


def _generation(seed: int, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save(_weights_model(seed), folder / "m.onnx", external_data=True, size_threshold_bytes=0)
    return folder / "m.onnx"


def test_save_records_the_data_file_and_load_hides_the_record(tmp_path):
    path = _generation(0, tmp_path / "a")
    props = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
    assert DATA_RECORD_KEY in props and "m.onnx.data" in props[DATA_RECORD_KEY]
    model = load(path)
    assert DATA_RECORD_KEY not in model.metadata_props
    save(model, tmp_path / "a" / "embedded.onnx", external_data=False)
    embedded = onnx.load(tmp_path / "a" / "embedded.onnx")
    assert DATA_RECORD_KEY not in {p.key for p in embedded.metadata_props}


@pytest.mark.parametrize("how", ["other-weights", "truncated", "appended"])
def test_a_data_file_that_is_not_the_models_is_detected(tmp_path, how, capsys):
    path = _generation(0, tmp_path / "a")
    data = path.parent / "m.onnx.data"
    if how == "other-weights":  # the same size, other bytes: a crash of the old save()
        shutil.copyfile(_generation(1, tmp_path / "b").parent / "m.onnx.data", data)
    elif how == "truncated":
        data.write_bytes(data.read_bytes()[:-4])
    else:
        with open(data, "ab") as file:
            file.write(b"\0" * 4)
    with pytest.raises(ExternalDataError, match=r"m.onnx.data") as info:
        load(path)
    assert "OMNY109" in {p.code for p in info.value.problems}
    assert "OMNY109" in {d.code for d in check(path)}
    assert main(["inspect", str(path)]) == 2
    assert "m.onnx.data" in capsys.readouterr().err


def test_saving_in_place_alternates_data_names_and_keeps_the_model_valid(tmp_path):
    """The new data never overwrites the file the old model reads: it gets a fresh name, the
    model is committed, then the old data file is removed and the in-memory tensors that read
    it lazily read the same bytes from the new file."""
    path = _generation(0, tmp_path / "a")
    expected = _arrays(_weights_model(0))
    model = load(path)  # lazy: nothing read yet
    names = []
    for _ in range(3):
        save(model, path, external_data=True)  # written again (automatic: kept in place)
        files = sorted(p.name for p in path.parent.iterdir())
        assert len(files) == 2 and "m.onnx" in files  # the model and one data file
        names.append(next(f for f in files if f != "m.onnx"))
        weight = model.graph.initializers["W1"].const_value
        assert isinstance(weight, ir.ExternalTensor)  # still lazy, not copied into memory
        assert weight.path == str(path.parent / names[-1])
        for name, array in _arrays(model).items():
            np.testing.assert_array_equal(array, expected[name])
        for name, array in _arrays(load(path)).items():
            np.testing.assert_array_equal(array, expected[name])
    assert names[0] != names[1] and names[1] != names[2]
    assert "m.onnx.data" in names


def test_a_record_read_by_onnx_ir_does_not_travel(tmp_path):
    """``onnx_ir.load`` keeps our record in metadata_props: split and save must not copy it."""
    model = zoo.gpt(layers=2)
    _annotate(model, ["layer.0.out"])
    save(model, tmp_path / "m.onnx", external_data=True)
    raw = ir.load(tmp_path / "m.onnx")
    assert DATA_RECORD_KEY in raw.metadata_props
    for stage in split(raw, 2):
        assert DATA_RECORD_KEY not in stage.metadata_props
    save_split(raw, tmp_path / "split", 2)
    for stage_file in sorted((tmp_path / "split").glob("stage_*.onnx")):
        load(stage_file)  # no stale record: loads
    save(raw, tmp_path / "copy.onnx", external_data=True)
    load(tmp_path / "copy.onnx")  # a fresh record that matches
    save(raw, tmp_path / "embedded.onnx", external_data=False)
    embedded = onnx.load(tmp_path / "embedded.onnx")
    assert DATA_RECORD_KEY not in {p.key for p in embedded.metadata_props}


def test_saving_embedded_over_an_external_model_removes_its_old_data(tmp_path):
    path = _generation(0, tmp_path / "a")
    model = load(path)
    save(model, path, external_data=False)
    assert sorted(p.name for p in path.parent.iterdir()) == ["m.onnx"]
    weight = model.graph.initializers["W1"].const_value
    assert not isinstance(weight, ir.ExternalTensor)  # its file is gone: now in memory
    for name, array in _arrays(model).items():
        np.testing.assert_array_equal(array, _arrays(_weights_model(0))[name])


def test_a_missing_data_file_is_said_once_naming_some_tensors(tmp_path):
    """Issue 18 item 27: one 1.7 KB line repeated "does not exist" for ten tensors."""
    from onnx_ir_multidevice._errors import ExternalDataError
    from onnx_ir_multidevice._proto.files import load, save

    path = tmp_path / "m.onnx"
    save(zoo.gpt(layers=2, hidden=64), path, external_data="m.data", size_threshold_bytes=0)
    (tmp_path / "m.data").unlink()
    with pytest.raises(ExternalDataError) as info:
        load(path)
    message = str(info.value)
    assert message.count("does not exist") == 1, message
    assert len(info.value.problems) > 10  # every tensor is still in the problems
    assert f"{len(info.value.problems)} tensors ('wte.weight', " in message
    assert len(message) < 400 + 2 * len(str(tmp_path)), message  # was 1.7 KB
