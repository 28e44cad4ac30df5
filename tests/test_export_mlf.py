"""The ``mlf`` format: TVM Model Library Format v7 bundles, read back as TVM v0.18 reads them.

TVM's MLF readers are restated here from TVM v0.18's code (cited at each helper), and
``.params`` files are parsed with a restatement of ``LoadParams`` / ``NDArray::Load`` with the
type codes of apache-tvm 0.27. ``apache-tvm`` (in the ``test`` extra) reads every ``.params``
with ``tvm.runtime.load_param_dict`` itself; those tests skip where it is not installed.
"""

from __future__ import annotations

import io
import json
import os
import re
import struct
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnx_ir_multidevice import PlanningDimsError, _cli, export, load, omny, read_manifest
from onnx_ir_multidevice._errors import ExportError, OmnyIOError
from onnx_ir_multidevice._split import save_split
from onnx_ir_multidevice.examples import GPT_TINY
from onnx_ir_multidevice.exporters.tvm_mlf import params_bytes
from onnx_ir_multidevice.graph.dtypes import tensor_nbytes
from onnx_ir_multidevice.planner import plan_model
from onnx_ir_multidevice.testing import zoo

CORPUS = Path(__file__).parent / "corpus"
DIMS = {"batch": 1, "seq": 128}
DATE = "2024-05-01 12:00:00Z"


# ---------------------------------------------------------------------------------------------
# TVM v0.18's readers, restated


def load_params(data: bytes) -> dict[str, np.ndarray]:
    """``tvm::runtime::LoadParams`` + ``NDArray::Load`` (src/runtime/file_utils.cc, ndarray.h)."""
    stream = io.BytesIO(data)

    def read(fmt: str) -> tuple[Any, ...]:
        size = struct.calcsize(fmt)
        chunk = stream.read(size)
        assert len(chunk) == size, "Invalid parameters file format"
        return struct.unpack(fmt, chunk)

    header, reserved = read("<QQ")
    assert header == 0xF7E58D4F05049CB7 and reserved == 0
    (count,) = read("<Q")
    names = []
    for _ in range(count):
        (length,) = read("<Q")
        names.append(stream.read(length).decode("utf-8"))
    (size,) = read("<Q")
    assert size == len(names)
    # apache-tvm 0.27 (DLPack 1.1): bool is kDLBool (6) of 8 bits; a (1, 1) "uint1" array is
    # sized as packed bits there, so it is not accepted here either
    codes = {(0, 8): "i1", (0, 16): "i2", (0, 32): "i4", (0, 64): "i8", (1, 8): "u1",
             (1, 16): "u2", (1, 32): "u4", (1, 64): "u8", (6, 8): "?", (2, 16): "f2",
             (2, 32): "f4", (2, 64): "f8"}  # fmt: skip
    arrays = {}
    for name in names:
        magic, reserved = read("<QQ")
        assert magic == 0xDD5E40F096B4A13F and reserved == 0
        device_type, device_id, ndim = read("<iii")
        assert (device_type, device_id) == (1, 0)  # "can only save as CPU tensor"
        code, bits, lanes = read("<BBH")
        assert lanes == 1
        shape = read(f"<{ndim}q") if ndim else ()
        (nbytes,) = read("<q")
        elem_bytes = (bits + 7) // 8
        assert nbytes == int(np.prod(shape, dtype=np.int64)) * elem_bytes
        raw = stream.read(nbytes)
        assert len(raw) == nbytes
        arrays[name] = np.frombuffer(raw, dtype=np.dtype(codes[(code, bits)])).reshape(shape)
    assert stream.read() == b"", "trailing bytes"
    return arrays


def tar_metadata(path: Path) -> dict[str, Any]:
    """``tvm.micro.testing.utils.mlf_extract_workspace_size_bytes``'s way into the archive."""
    with tarfile.open(path, "r:*") as tar:
        assert "./metadata.json" in [info.name for info in tar.getmembers()]
        with tar.extractfile("./metadata.json") as f:  # type: ignore[union-attr]
            return json.load(f)


def workspace_size_bytes(metadata: dict[str, Any]) -> int:
    """``mlf_extract_workspace_size_bytes`` (python/tvm/micro/testing/utils.py, v0.18), and the
    Arduino template's ``_template_model_header``: every module must be ``full-model``; the
    workspace is the sum of ``memory.functions.main[0].workspace_size_bytes``."""
    names = list(metadata["modules"])
    assert all(metadata["modules"][n]["style"] == "full-model" for n in names), (
        "when generating AOT, expect only full-model Model Library Format"
    )
    return sum(
        metadata["modules"][n]["memory"]["functions"]["main"][0]["workspace_size_bytes"]
        for n in names
    )


def tvmc_import_package(folder: Path) -> dict[str, Any]:
    """``TVMCPackage.import_package`` (python/tvm/driver/tvmc/model.py, v0.18), MLF branch, on an
    extracted archive; the STM32 emitter asserts the same one-module rule."""
    metadata = json.loads((folder / "metadata.json").read_text())
    names = list(metadata["modules"])
    assert len(names) == 1, "Multiple modules in MLF is not supported."
    module = metadata["modules"][names[0]]
    has_graph_executor = "graph" in module["executors"]
    params = folder / "parameters" / f"{names[0]}.params"
    assert params.is_file()
    assert len(module["executors"]) == 1, "only one executor type is supported"
    return {
        "module": names[0],
        "graph": has_graph_executor,
        "executor_type": module["executors"][0],
        "params": params,
    }


def check_v7_shape(metadata: dict[str, Any]) -> None:
    """The document ``_export_graph_model_library_format`` (v0.18) writes."""
    assert metadata["version"] == 7
    assert set(metadata) == {"version", "modules"}
    for name, module in metadata["modules"].items():
        assert module["model_name"] == name
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", module["export_datetime"])
        assert isinstance(module["target"], list) and module["target"]
        assert all(isinstance(t, str) for t in module["target"])
        assert isinstance(module["executors"], list) and module["executors"]
        assert "graph" not in module["executors"] and "aot" not in module["executors"]
        assert module["style"] == "full-model"
        functions = module["memory"]["functions"]
        assert isinstance(functions["operator_functions"], list)
        assert "sids" not in module["memory"]  # graph executor only
        (main,) = functions["main"]
        for key in ("device", "workspace_size_bytes", "constants_size_bytes", "io_size_bytes"):
            assert type(main[key]) is int and main[key] >= 0, key
        io_total = 0
        for tensors in (main["inputs"], main["outputs"]):
            for entry in tensors.values():
                assert set(entry) == {"size", "dtype"} and type(entry["size"]) is int
                io_total += entry["size"]
        assert main["io_size_bytes"] == io_total


def members(path: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return tar.getmembers()


def check_members(path: Path, modules: list[str]) -> None:
    """Members as ``tar.add(folder, arcname=".", filter=reset)`` writes them: root-owned,
    relative, in name order."""
    infos = members(path)
    assert [i.name for i in infos] == [
        ".",
        "./metadata.json",
        "./parameters",
        *(f"./parameters/{m}.params" for m in sorted(modules)),
    ]
    for info in infos:
        assert (info.uid, info.gid, info.uname, info.gname) == (0, 0, "root", "root")
        assert not info.name.startswith("/") and ".." not in info.name.split("/")
        assert info.isdir() == (info.name in (".", "./parameters"))


# ---------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def bert() -> tuple[ir.Model, Any]:
    """bert_dynamo (symbolic batch and seq) planned for 2 and 3 stages at seq=128."""
    model = load(CORPUS / "bert_dynamo.onnx")
    result = plan_model(model, shards=[2, 3], dims=DIMS)
    omny.write(model, result.metadata)
    omny.write_planning_dims(model, DIMS)
    return model, result


@pytest.fixture(scope="module")
def gpt() -> ir.Model:
    return load(GPT_TINY)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = _cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------------
# Layout and readers


@pytest.mark.parametrize("shards", [2, 3])
def test_bundle_passes_tvm_readers(bert, tmp_path, shards):
    model, _ = bert
    out = tmp_path / "bert.tar"
    result = export(model, out, "mlf", shards=shards, export_datetime=DATE, name="bert_dynamo")
    assert result.files == (out.absolute(),)
    modules = [f"bert_dynamo_stage{k}" for k in range(shards)]
    check_members(out, modules)
    metadata = tar_metadata(out)
    check_v7_shape(metadata)
    assert list(metadata["modules"]) == modules
    # metadata.json is what json.dump(indent=2, sort_keys=True) writes
    with tarfile.open(out) as tar:
        text = tar.extractfile("./metadata.json").read().decode()  # type: ignore[union-attr]
    assert text == json.dumps(metadata, indent=2, sort_keys=True)
    assert workspace_size_bytes(metadata) == sum(
        m["workspace_size_bytes"] for m in result.details["modules"]
    )
    for module in metadata["modules"].values():
        assert module["export_datetime"] == DATE
        assert (
            module["target"] == ["llvm"] and module["memory"]["functions"]["main"][0]["device"] == 1
        )
    # the whole archive holds several modules: tvmc's one-module rule refuses it
    with tarfile.open(out) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    with pytest.raises(AssertionError, match="Multiple modules"):
        tvmc_import_package(tmp_path / "x")


def test_per_stage_writes_one_module_per_archive(bert, tmp_path):
    model, _ = bert
    out = tmp_path / "bundles"
    result = export(
        model, out, "mlf", shards=3, per_stage=True, export_datetime=DATE, name="bert_dynamo"
    )
    names = [f"bert_dynamo_stage{k}" for k in range(3)]
    assert [p.name for p in result.files] == [f"{n}.tar" for n in names]
    assert sorted(p.name for p in out.iterdir()) == [f"{n}.tar" for n in names]
    whole = tar_metadata(export(model, tmp_path / "all.tar", "mlf", shards=3,
                                export_datetime=DATE, name="bert_dynamo").destination)  # fmt: skip
    for name, path in zip(names, result.files, strict=True):
        check_members(path, [name])
        folder = tmp_path / name
        with tarfile.open(path) as tar:
            tar.extractall(folder, filter="data")
        package = tvmc_import_package(folder)
        assert package["module"] == name and not package["graph"]
        assert package["executor_type"] == "none"
        one = tar_metadata(path)
        check_v7_shape(one)
        assert one["modules"][name] == whole["modules"][name]
    with pytest.raises(ExportError, match="directory"):
        export(model, tmp_path / "x.tar", "mlf", shards=3, per_stage="true")


# ---------------------------------------------------------------------------------------------
# Numbers: the split's stage files and the planner's figures


def _concrete(value: ir.Value, dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else dims[d.value] for d in value.shape)


@pytest.mark.parametrize("shards", [2, 3])
def test_numbers_equal_the_split_files_and_the_planner(bert, tmp_path, shards):
    model, planned = bert
    found = next(p for p in planned.partitions if p.num_stages == shards)
    save_split(model, tmp_path / "split", shards)
    manifest = read_manifest(tmp_path / "split")
    out = tmp_path / "b.tar"
    export(model, out, "mlf", shards=shards, export_datetime=DATE, name="bert_dynamo")
    metadata = tar_metadata(out)
    with tarfile.open(out) as tar:
        params = {
            info.name: tar.extractfile(info).read()  # type: ignore[union-attr]
            for info in tar.getmembers()
            if info.isfile() and info.name.endswith(".params")
        }
    for k, (entry, memory) in enumerate(zip(manifest.stages, found.memory, strict=True)):
        name = f"bert_dynamo_stage{k}"
        stage = load(entry.path)  # the file `omny split` wrote
        main = metadata["modules"][name]["memory"]["functions"]["main"][0]
        initializers = stage.graph.initializers
        weights = sum(v.const_value.nbytes for v in initializers.values())
        assert main["constants_size_bytes"] == memory.weights_bytes == weights
        assert main["workspace_size_bytes"] == memory.activations_bytes
        sizes = {
            v.name: {
                "size": tensor_nbytes(_concrete(v, DIMS), v.dtype),
                "dtype": str(v.dtype.numpy()),
            }
            for v in (*stage.graph.inputs, *stage.graph.outputs)
        }
        assert sorted(main["inputs"]) == sorted(entry.input_names)  # sort_keys=True, as TVM
        assert sorted(main["outputs"]) == sorted(entry.output_names)
        assert {**main["inputs"], **main["outputs"]} == sizes
        assert main["io_size_bytes"] == sum(e["size"] for e in sizes.values())
        extra = metadata["modules"][name]["onnx_ir_multidevice"]
        (configuration,) = [
            c for c in omny.read(model).sharding.configurations if c.num_shards == shards
        ]
        assert extra["shard_memory_mb"] == configuration.memory_per_shard_mb[k]
        assert extra["planning_dims"] == DIMS
        # the .params file holds exactly the stage's initializers
        arrays = load_params(params[f"./parameters/{name}.params"])
        assert list(arrays) == list(initializers)
        for key, array in arrays.items():
            expected = initializers[key].const_value.numpy()
            assert array.dtype == expected.dtype and array.shape == expected.shape
            np.testing.assert_array_equal(array, expected)


def test_constants_count_constant_nodes_that_params_do_not_hold(gpt, tmp_path):
    # gpt_tiny builds small tensors with Constant nodes: the planner counts them as weights
    # (and so does constants_size_bytes); the .params file holds the initializers only.
    # hidden_shape = Shape(embeddings) is a proven shape read: a stage that needs it holds it
    # as its own bytes (int64 [3]), an upper bound of what the split's recomputation from the
    # graph input holds (a Constant of the static dims, named <read>/from_inputs/...).
    out = tmp_path / "g.tar"
    export(gpt, out, "mlf", shards=2, export_datetime=DATE)
    metadata = tar_metadata(out)
    from onnx_ir_multidevice import split

    reads = {
        n.outputs[0].name: n.outputs[0]
        for n in gpt.graph
        if n.op_type == "Shape" and n.inputs[0].producer() is not None
    }
    assert set(reads) == {"hidden_shape"}
    for k, stage in enumerate(split(gpt, 2)):
        module = metadata["modules"][f"gpt_tiny_stage{k}"]
        main = module["memory"]["functions"]["main"][0]
        params = sum(v.const_value.nbytes for v in stage.graph.initializers.values())
        constants = sum(
            n.attributes["value"].value.nbytes
            for n in stage.graph
            if n.op_type == "Constant" and "/from_inputs/" not in n.name
        )
        held = {v.name for n in stage.graph for v in n.outputs} & set(reads)
        assert held == {"hidden_shape"}  # stage 0 computes it, stage 1 recomputes it
        shape_reads = sum(tensor_nbytes(reads[n].shape, reads[n].dtype) or 0 for n in held)
        assert main["constants_size_bytes"] == params + constants + shape_reads
        assert module["onnx_ir_multidevice"]["params_data_bytes"] == params


# ---------------------------------------------------------------------------------------------
# Reproducible bytes, providers, refusals


def test_two_exports_with_a_fixed_date_are_byte_identical(gpt, tmp_path):
    a = export(gpt, tmp_path / "a.tar", "mlf", shards=4, export_datetime=DATE).destination
    b = export(gpt, tmp_path / "b.tar", "mlf", shards=4, export_datetime="2024-05-01T12:00:00Z")
    assert a.read_bytes() == b.destination.read_bytes()
    assert {i.mtime for i in members(a)} == {1714564800}
    c = export(gpt, tmp_path / "c.tar", "mlf", shards=4, export_datetime="2024-05-02 12:00:00Z")
    assert a.read_bytes() != c.destination.read_bytes()
    d = tmp_path / "d"
    e = tmp_path / "e"
    export(gpt, d, "mlf", shards=2, per_stage=True, export_datetime=DATE)
    export(gpt, e, "mlf", shards=2, per_stage=True, export_datetime=DATE)
    assert [p.read_bytes() for p in sorted(d.iterdir())] == [
        p.read_bytes() for p in sorted(e.iterdir())
    ]


def test_providers_set_each_stage_device_and_target(gpt, tmp_path):
    out = tmp_path / "g.tar"
    export(gpt, out, "mlf", shards=4, providers="cpu,cuda:0,cuda:1,rocm", export_datetime=DATE)
    modules = tar_metadata(out)["modules"]
    got = [
        (main["device"], m["target"], m["onnx_ir_multidevice"]["device"])
        for m in modules.values()
        for main in m["memory"]["functions"]["main"]
    ]
    assert got == [(1, ["llvm"], "cpu"), (2, ["cuda"], "cuda:0"), (2, ["cuda"], "cuda:1"),
                   (10, ["rocm"], "rocm")]  # fmt: skip
    with pytest.raises(ExportError, match="3 devices for 4 stages"):
        export(gpt, tmp_path / "x.tar", "mlf", shards=4, providers="cpu,cpu,cpu")
    with pytest.raises(ExportError, match="no TVM device type"):
        export(gpt, tmp_path / "x.tar", "mlf", shards=4, providers="coreml")
    with pytest.raises(ExportError, match="export_datetime"):
        export(gpt, tmp_path / "x.tar", "mlf", shards=4, export_datetime="yesterday")
    assert not (tmp_path / "x.tar").exists()


def test_an_existing_archive_is_kept_unless_force(gpt, tmp_path):
    out = tmp_path / "g.tar"
    out.write_bytes(b"old")
    with pytest.raises(OmnyIOError, match="exists"):
        export(gpt, out, "mlf", shards=2)
    assert out.read_bytes() == b"old"
    export(gpt, out, "mlf", shards=2, force=True)
    assert tar_metadata(out)["version"] == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.tar"]  # no temporary left
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0o600
    folder = export(gpt, tmp_path / "d", "mlf", shards=2, per_stage=True).destination
    assert folder.stat().st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0o700


def test_an_unknown_dim_is_refused_naming_it(tmp_path, capsys):
    model = load(CORPUS / "bert_dynamo.onnx")
    omny.write(model, plan_model(model, shards=[2], dims=DIMS).metadata)
    omny.write_planning_dims(model, None)  # as a file planned elsewhere: no dims recorded
    with pytest.raises(PlanningDimsError, match="--dim seq=N") as caught:
        export(model, tmp_path / "b.tar", "mlf", shards=2)
    assert caught.value.dims == ("seq",)
    # the dims the plan recorded are used; a --dim completes them; a contradiction is refused
    export(model, tmp_path / "b.tar", "mlf", shards=2, dims="seq=128")
    assert (
        tar_metadata(tmp_path / "b.tar")["modules"]["main_graph_stage0"]["onnx_ir_multidevice"][
            "planning_dims"
        ]
        == DIMS
    )
    omny.write_planning_dims(model, DIMS)
    with pytest.raises(PlanningDimsError, match="seq=64 \\(the plan says seq=128\\)"):
        export(model, tmp_path / "c.tar", "mlf", shards=2, dims={"seq": 64})
    file = tmp_path / "bert.omny"
    from onnx_ir_multidevice import save

    omny.write_planning_dims(model, None)
    save(model, file)
    code, _, err = _run(
        capsys, "export", "mlf", str(file), str(tmp_path / "d.tar"), "--shards", "2"
    )
    assert code == 2 and "'seq'" in err and "--dim seq=N" in err
    code, _out, err = _run(
        capsys, "export", "mlf", str(file), str(tmp_path / "d.tar"), "--shards", "2",
        "--dim", "seq=128", "--dim", "batch=1",
    )  # fmt: skip
    assert code == 0, err
    assert not (tmp_path / "c.tar").exists()


def test_a_string_initializer_is_refused(tmp_path, capsys):
    model = zoo.mlp(layers=2)
    omny.write(model, plan_model(model, shards=[2]).metadata)  # planned before the strings
    strings = ir.StringTensor(np.array([b"a", b"b"]), name="labels")
    labels = ir.Value(name="labels", const_value=strings)
    model.graph.register_initializer(labels)
    node = ir.node("Identity", [labels], outputs=[ir.Value(name="labels_out")], name="labels_id")
    node.outputs[0].dtype = ir.DataType.STRING
    node.outputs[0].shape = ir.Shape([2])
    model.graph.append(node)
    model.graph.outputs.append(node.outputs[0])
    with pytest.raises(ExportError, match="'labels' is of type string"):
        export(model, tmp_path / "m.tar", "mlf", shards=2)
    with pytest.raises(ExportError, match="string"):
        params_bytes([labels])
    # onnx-ir-multidevice's save sums initializer sizes and fails on strings: save with onnx
    onnx.save(ir.to_proto(model), tmp_path / "m.omny")
    code, _, err = _run(capsys, "export", "mlf", str(tmp_path / "m.omny"), str(tmp_path / "m.tar"),
                        "--shards", "2")  # fmt: skip
    assert code == 1 and "string" in err
    assert not (tmp_path / "m.tar").exists()


def test_params_hold_every_dtype_tvm_has(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.standard_normal((2, 3)).astype(np.float32),
        "f16": rng.standard_normal((4,)).astype(np.float16),
        "f64": np.array(2.5),  # a scalar: ndim 0
        "i8": np.array([[-1, 2]], dtype=np.int8),
        "i64": np.arange(5, dtype=np.int64),
        "u16": np.array([1, 65535], dtype=np.uint16),
        "b": np.array([True, False, True]),
    }
    values = [ir.Value(name=n, const_value=ir.tensor(a)) for n, a in arrays.items()]
    read = load_params(params_bytes(values))
    assert list(read) == list(arrays)
    for name, array in arrays.items():
        assert read[name].dtype == array.dtype
        np.testing.assert_array_equal(read[name], array)
    int4 = ir.Value(name="q", const_value=ir.Tensor(np.array([1, 2], dtype=np.int8),
                                                     dtype=ir.DataType.INT4))  # fmt: skip
    with pytest.raises(ExportError, match="int4, which TVM's parameter format cannot hold"):
        params_bytes([int4])


def test_command_line_forms(tmp_path, capsys):
    model = str(GPT_TINY)
    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    code, _, err = _run(capsys, "export", "mlf", model, str(a), "--shards", "2",
                        "--export-datetime", DATE)  # fmt: skip
    assert code == 0, err
    code, _, err = _run(capsys, "export", "--format", "mlf", model, str(b), "--shards", "2",
                        "--option", f"export_datetime={DATE}")  # fmt: skip
    assert code == 0, err
    assert a.read_bytes() == b.read_bytes()
    code, out, _ = _run(capsys, "export", "mlf", model, str(tmp_path / "d"), "--shards", "2",
                        "--per-stage", "--json", "--providers", "cuda:0")  # fmt: skip
    assert code == 0
    assert [Path(f).name for f in json.loads(out)["result"]["files"]] == [
        "gpt_tiny_stage0.tar", "gpt_tiny_stage1.tar"
    ]  # fmt: skip
    code, _, err = _run(capsys, "export", "mlf", model, str(tmp_path / "e.tar"), "--shards", "2",
                        "--layout", "seed")  # fmt: skip
    assert code == 2 and "has no option layout" in err
    code, _, err = _run(capsys, "export", "mlf", model, str(tmp_path / "e.tar"), "--shards", "2",
                        "--per-stage", "--option", "per_stage=false")  # fmt: skip
    assert code == 2 and "given twice" in err
    code, _, err = _run(capsys, "export", "mlf", model, str(tmp_path / "e.tar"), "--format", "ark")
    assert code == 2 and "given twice" in err
    code, _, err = _run(capsys, "export", "mlf", model)
    assert code == 2 and "OUT required" in err
    code, _, err = _run(capsys, "export", "mlf", model, str(tmp_path / "e.tar"), "--shards", "3")
    assert code == 1 and "No configuration for 3 shards" in err
    assert not (tmp_path / "e.tar").exists()


def test_bool_weights_are_written_as_apache_tvm_writes_them():
    """GPT-2's causal mask is a large bool weight; small bool arrays were misread by TVM 0.27."""
    mask = np.tril(np.ones((64, 64), dtype=bool))
    small = np.array([True, False, False])
    values = [ir.Value(name=n, const_value=ir.tensor(a)) for n, a in (("mask", mask), ("s", small))]
    data = params_bytes(values)
    # the DLDataType of the first array, after the names and the array header
    offset = 8 * 3 + (8 + 4) + (8 + 1) + 8 + 8 + 8 + 8 + 4
    assert struct.unpack_from("<BBH", data, offset) == (6, 8, 1)  # kDLBool, 8 bits, 1 lane
    read = load_params(data)
    np.testing.assert_array_equal(read["mask"], mask)
    np.testing.assert_array_equal(read["s"], small)


def test_apache_tvm_reads_bool_and_float8_weights():
    tvm = pytest.importorskip("tvm")
    import ml_dtypes

    arrays = {
        "causal_mask": np.tril(np.ones((1, 1, 128, 128), dtype=bool)),
        "b3": np.array([True, False, False]),
        "b5": np.array([False, True, True, False, True]),
        "e4m3": np.array([0.5, -2.0, 448.0], dtype=ml_dtypes.float8_e4m3fn),
        "e5m2": np.array([0.25, -3.0], dtype=ml_dtypes.float8_e5m2),
    }
    values = [ir.Value(name=n, const_value=ir.tensor(a)) for n, a in arrays.items()]
    data = params_bytes(values)
    params = tvm.runtime.load_param_dict(bytearray(data))
    for name, array in arrays.items():
        got = params[name].numpy()
        assert got.dtype == array.dtype, name
        np.testing.assert_array_equal(got, array)
    # the bytes are those apache-tvm itself writes for the same arrays
    assert data == bytes(
        tvm.runtime.save_param_dict({n: tvm.runtime.tensor(a) for n, a in arrays.items()})
    )


def test_apache_tvm_reads_every_params_file(bert, tmp_path):
    tvm = pytest.importorskip("tvm")
    model, _ = bert
    out = tmp_path / "bert.tar"
    export(model, out, "mlf", shards=3, name="bert_dynamo")
    from onnx_ir_multidevice import split

    stages = split(model, 3)
    with tarfile.open(out) as tar:
        for k, stage in enumerate(stages):
            data = tar.extractfile(f"./parameters/bert_dynamo_stage{k}.params").read()  # type: ignore[union-attr]
            params = tvm.runtime.load_param_dict(bytearray(data))
            initializers = stage.graph.initializers
            assert sorted(params) == sorted(initializers)
            for name, array in params.items():
                expected = initializers[name].const_value.numpy()
                np.testing.assert_array_equal(array.numpy(), expected)


def test_an_ir_v11_annotation_gives_the_same_modules_as_the_omny_plan(gpt, tmp_path):
    from onnx_ir_multidevice import annotate

    annotated = annotate(load(GPT_TINY), relaxed_cuts=True)
    for key in ("omnynet_metadata", "omnynet_version"):
        del annotated.metadata_props[key]  # the annotation alone
    by_plan = tar_metadata(export(gpt, tmp_path / "a.tar", "mlf", shards=4, name="g").destination)
    by_annotation = tar_metadata(
        export(annotated, tmp_path / "b.tar", "mlf", shards=4, name="g",
               configuration="omny/4-shards").destination
    )  # fmt: skip
    for name, module in by_plan["modules"].items():
        other = by_annotation["modules"][name]
        assert other["memory"] == module["memory"]
        assert module["onnx_ir_multidevice"]["shard_memory_mb"] == 1
        assert other["onnx_ir_multidevice"]["shard_memory_mb"] is None  # no .omny plan
