"""The ``mlf`` format: TVM Model Library Format (version 7), one module per pipeline stage.

What is written is a *description* of the plan that TVM's readers accept, not a compiled TVM
artifact: no generated code, no Relay, no executor configuration. Each stage becomes one
module ``<model>_stage<k>`` of the archive with

* ``metadata.json`` in the shape TVM v0.10 to v0.18 wrote (version 7, a ``modules`` map):
  ``memory.functions.main[0]`` holds the stage's device, workspace, constants and I/O sizes and
  its inputs and outputs; ``operator_functions`` is an empty list (there are no operator
  functions); ``target`` names the stage's device kind; ``executors`` is ``["none"]`` (no
  executor configuration is written); ``style`` is ``full-model``. A key of this package,
  ``onnx_ir_multidevice``, which TVM's readers ignore, records where each number comes from;
* ``parameters/<module>.params``: the stage's initializers in TVM's parameter format (the
  NDArray list that ``tvm.runtime.save_param_dict`` writes and ``load_param_dict`` reads).

The numbers (see ``docs/exporting.md``): ``constants_size_bytes`` is the planner's weights
figure of the stage (its initializers, plus tensors held by ``Constant`` nodes and bodies);
``workspace_size_bytes`` is the planner's peak of live activations at the planning dims, an
upper bound of what TVM's memory planner would need; ``io_size_bytes`` is the sum of the stage
model's input and output sizes at the planning dims. All are integers
(:func:`~onnx_ir_multidevice.graph.dtypes.tensor_nbytes`).

The tar archive is laid out as TVM's exporter lays it out (``tar.add(folder, arcname=".")``):
members ``.``, ``./metadata.json``, ``./parameters``, ``./parameters/<module>.params``, owned
by root, in name order. With a fixed ``export_datetime`` two exports are byte-identical.
"""

from __future__ import annotations

__all__ = ["MLF_VERSION", "TvmMlfExporter", "params_bytes"]

import datetime
import io
import json
import os
import re
import struct
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx_ir as ir

from onnx_ir_multidevice._errors import ExportError, ExportUsageError
from onnx_ir_multidevice._proto.atomic import (
    check_output_directory,
    check_output_file,
    staged_directory,
    staged_file,
)
from onnx_ir_multidevice.exporters._options import parse_dims, parse_flag
from onnx_ir_multidevice.exporters._stages import ExportStages, export_stages, measure_memory
from onnx_ir_multidevice.exporters.protocol import ExportResult
from onnx_ir_multidevice.graph.dtypes import dtype_name, tensor_nbytes
from onnx_ir_multidevice.omny import read as read_omny
from onnx_ir_multidevice.omny._schema import parse_configuration
from onnx_ir_multidevice.runtime.devices import Device, parse_device

MLF_VERSION = 7
"""The Model Library Format version written (the last one, TVM v0.10 to v0.18)."""

_DATETIME_FORMAT = "%Y-%m-%d %H:%M:%SZ"
"""``export_datetime`` as TVM writes it (the seed document's ``%Y-%M-%d`` is a typo)."""

_PARAMS_MAGIC = 0xF7E58D4F05049CB7
"""``kTVMNDArrayListMagic``: the first u64 of a ``.params`` file."""

_NDARRAY_MAGIC = 0xDD5E40F096B4A13F
"""``kTVMNDArrayMagic``: the first u64 of each array."""

_KDL_CPU = 1
"""``kDLCPU``: the device every saved array is stored for."""

_D = ir.DataType
# ONNX data type -> (DLDataType code, bits, TVM's name). The codes and bits are those that
# apache-tvm 0.27 (DLPack 1.1) writes with ``save_param_dict`` and reads back with
# ``load_param_dict``: ``bool`` is ``kDLBool`` (6) of 8 bits, the float8 types have DLPack's codes
# (10 and 12). TVM v0.18's spellings (``uint1`` for bool, 6 and 7 for float8) are misread by 0.27:
# it sizes a 1-bit element as packed bits, so a large bool weight overflows its buffer. Data is
# one element per ((bits + 7) // 8) bytes, as ONNX stores these types too.
_TVM_DTYPES: dict[ir.DataType, tuple[int, int, str]] = {
    _D.INT8: (0, 8, "int8"),
    _D.INT16: (0, 16, "int16"),
    _D.INT32: (0, 32, "int32"),
    _D.INT64: (0, 64, "int64"),
    _D.UINT8: (1, 8, "uint8"),
    _D.UINT16: (1, 16, "uint16"),
    _D.UINT32: (1, 32, "uint32"),
    _D.UINT64: (1, 64, "uint64"),
    _D.BOOL: (6, 8, "bool"),
    _D.FLOAT16: (2, 16, "float16"),
    _D.FLOAT: (2, 32, "float32"),
    _D.DOUBLE: (2, 64, "float64"),
    _D.BFLOAT16: (4, 16, "bfloat16"),
    _D.FLOAT8E4M3FN: (10, 8, "e4m3_float8"),
    _D.FLOAT8E5M2: (12, 8, "e5m2_float8"),
}

# Device kind (``--providers``) -> (DLDevice type, TVM target kind).
_TVM_DEVICES: dict[str, tuple[int, str]] = {
    "cpu": (1, "llvm"),
    "cuda": (2, "cuda"),
    "tensorrt": (2, "cuda"),
    "rocm": (10, "rocm"),
    "migraphx": (10, "rocm"),
}

_EXECUTORS = ["none"]
"""No executor configuration is written: the bundle claims neither ``graph`` nor ``aot``."""

_NOTE = (
    "a memory summary and parameter bundle made by onnx-ir-multidevice from a pipeline plan: "
    "no TVM code, Relay or executor configuration; not buildable by TVM"
)


# ---------------------------------------------------------------------------------------------
# Options


def _export_datetime(value: Any) -> datetime.datetime:
    """The ``export_datetime`` option, in UTC, whole seconds.

    Accepts a :class:`datetime.datetime` (naive means UTC), TVM's ``2024-05-01 12:00:00Z`` or an
    ISO 8601 string. Default: ``SOURCE_DATE_EPOCH`` when set (reproducible builds), else now.
    """
    if value is None:
        epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
        if epoch.isdigit():
            moment = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)
        else:
            moment = datetime.datetime.now(datetime.timezone.utc)
    elif isinstance(value, datetime.datetime):
        moment = value
    else:
        text = str(value).strip()
        try:
            moment = datetime.datetime.strptime(text, _DATETIME_FORMAT)
        except ValueError:
            try:
                moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                raise ExportError(
                    f"option export_datetime: expected a date such as '2024-05-01 12:00:00Z' "
                    f"or '2024-05-01T12:00:00+00:00', got {value!r}"
                ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    moment = moment.astimezone(datetime.timezone.utc).replace(microsecond=0)
    if moment.year < 1970:
        raise ExportError(f"option export_datetime: {moment} is before 1970 (tar cannot hold it)")
    return moment


def _devices(value: Any, num_stages: int) -> list[Device]:
    """The ``providers`` option: one device for every stage, or one per stage."""
    if value is None:
        return [Device("cpu")] * num_stages
    specs = value if isinstance(value, (list, tuple)) else str(value).split(",")
    try:
        devices = [parse_device(spec.strip() if isinstance(spec, str) else spec) for spec in specs]
    except ValueError as error:
        raise ExportUsageError(f"option providers: {error}") from None
    if len(devices) == 1:
        devices = devices * num_stages
    if len(devices) != num_stages:
        raise ExportUsageError(
            f"option providers: {len(devices)} devices for {num_stages} stages; give one for "
            "every stage (e.g. cpu,cuda:0) or one for all"
        )
    for device in devices:
        if device.kind not in _TVM_DEVICES:
            raise ExportUsageError(
                f"option providers: {device} has no TVM device type here; use one of "
                f"{', '.join(_TVM_DEVICES)}"
            )
    return devices


# ---------------------------------------------------------------------------------------------
# The .params format


def _tvm_dtype(value: ir.Value) -> tuple[int, int, str]:
    dtype = value.const_value.dtype if value.const_value is not None else value.dtype
    found = _TVM_DTYPES.get(dtype) if dtype is not None else None
    if found is None:
        raise ExportError(
            f"initializer {value.name!r} is of type {dtype_name(dtype)}, which TVM's parameter "
            f"format cannot hold (it holds {', '.join(dtype_name(d) for d in _TVM_DTYPES)})"
        )
    return found


def _params_pieces(initializers: Sequence[ir.Value]) -> tuple[list[bytes | ir.Value], int]:
    """The ``.params`` file as byte strings and tensors (read when written), and its size."""
    pieces: list[bytes | ir.Value] = []
    names = [value.name or "" for value in initializers]
    head = [struct.pack("<QQQ", _PARAMS_MAGIC, 0, len(names))]
    for name in names:
        encoded = name.encode("utf-8")
        head.append(struct.pack("<Q", len(encoded)) + encoded)
    head.append(struct.pack("<Q", len(initializers)))
    pieces.append(b"".join(head))
    size = sum(map(len, head))
    for value in initializers:
        tensor = value.const_value
        if tensor is None:
            raise ExportError(f"initializer {value.name!r} has no data to write")
        code, bits, _ = _tvm_dtype(value)
        shape = list(tensor.shape.numpy())
        numel = 1
        for dim in shape:
            numel *= dim
        nbytes = numel * ((bits + 7) // 8)
        header = struct.pack(
            f"<QQiiiBBH{len(shape)}qq",
            _NDARRAY_MAGIC, 0, _KDL_CPU, 0, len(shape), code, bits, 1, *shape, nbytes,
        )  # fmt: skip
        pieces.append(header)
        pieces.append(value)
        size += len(header) + nbytes
    return pieces, size


def _tensor_bytes(value: ir.Value) -> bytes:
    tensor = value.const_value
    assert tensor is not None
    data = tensor.tobytes()
    _, bits, _ = _tvm_dtype(value)
    numel = 1
    for dim in tensor.shape.numpy():
        numel *= dim
    if len(data) != numel * ((bits + 7) // 8):
        raise ExportError(
            f"initializer {value.name!r}: {len(data)} bytes of data for {numel} elements of "
            f"{dtype_name(tensor.dtype)}"
        )
    return data


class _PiecesReader(io.RawIOBase):
    """A read-only stream over byte strings and tensors, each tensor read when reached."""

    def __init__(self, pieces: Sequence[bytes | ir.Value]) -> None:
        self._pieces: Iterator[bytes | ir.Value] = iter(pieces)
        self._buffer = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._buffer:
            piece = next(self._pieces, None)
            if piece is None:
                return 0
            self._buffer = memoryview(piece if isinstance(piece, bytes) else _tensor_bytes(piece))
        count = min(len(target), len(self._buffer))
        target[:count] = self._buffer[:count]
        self._buffer = self._buffer[count:]
        return count


def params_bytes(initializers: Sequence[ir.Value]) -> bytes:
    """Return the ``.params`` file of ``initializers`` (values with tensors), in TVM's format.

    Layout (little-endian): u64 ``0xF7E58D4F05049CB7``, u64 0, the names (u64 count, then u64
    length and UTF-8 bytes each), u64 count of arrays, then each array: u64
    ``0xDD5E40F096B4A13F``, u64 0, DLDevice (i32 1 = CPU, i32 0), i32 ndim, DLDataType (u8
    code, u8 bits, u16 lanes = 1), i64 shape[ndim], i64 byte count, the data (row-major, one
    element per ``(bits + 7) // 8`` bytes).

    Raises:
        ExportError: A tensor's type has no TVM counterpart that the format holds (strings,
            complex and sub-byte types), or a value has no tensor.
    """
    pieces, _ = _params_pieces(initializers)
    return io.BufferedReader(_PiecesReader(pieces)).read()


# ---------------------------------------------------------------------------------------------
# metadata.json


def _module_base(model: ir.Model, given: Any) -> str:
    """The model part of the module names, made a C identifier (TVM prefixes symbols with it).

    ``given``, else the ``.omny`` model name, else the graph name, else ``model``.
    """
    name = None if given is None else str(given)
    if not name:
        metadata = read_omny(model)  # readable: the split read it already
        if metadata is not None and metadata.model.name:
            name = metadata.model.name
    name = name or model.graph.name or "model"
    base = re.sub(r"[^0-9A-Za-z_]", "_", name).strip("_") or "model"
    return f"m_{base}" if base[0].isdigit() else base


def _tensor_entry(stages: ExportStages, name: str) -> dict[str, Any]:
    dtype = stages.dtype(name)
    tvm = _TVM_DTYPES.get(dtype)
    return {"size": stages.nbytes(name), "dtype": tvm[2] if tvm else dtype_name(dtype)}


def _module_metadata(
    stages: ExportStages,
    k: int,
    module: str,
    device: Device,
    moment: datetime.datetime,
    configuration: int | str | None,
) -> tuple[dict[str, Any], list[ir.Value]]:
    """The ``modules[<module>]`` entry of stage ``k`` and the initializers for its ``.params``."""
    stage = stages.stages[k]
    entry = stages.manifest.stages[k]
    memory = stages.memory[k]  # type: ignore[index]  # export_mlf measured it (measure_memory)
    initializers = list(stage.graph.initializers.values())
    params = {v.name for v in initializers}
    # split names every stage input and output (SplitError otherwise)
    inputs = {
        v.name: _tensor_entry(stages, v.name)  # type: ignore[arg-type]  # named by split
        for v in stage.graph.inputs
        if v.name not in params
    }
    outputs = {v.name: _tensor_entry(stages, v.name) for v in stage.graph.outputs}  # type: ignore[arg-type]  # named by split
    io_size = sum(e["size"] for e in inputs.values()) + sum(e["size"] for e in outputs.values())
    _, params_size = _params_pieces(initializers)
    params_data = sum(
        tensor_nbytes(t.shape.numpy(), t.dtype) or 0
        for t in (v.const_value for v in initializers)
        if t is not None  # _params_pieces refused an initializer without data
    )
    device_type, target = _TVM_DEVICES[device.kind]
    extra: dict[str, Any] = {
        "note": _NOTE,
        "stage": k,
        "num_stages": stages.num_stages,
        "configuration": configuration,
        "device": str(device),
        "planning_dims": dict(sorted(stages.dims.items())),
        "shard_memory_mb": (
            None
            if stages.configuration_mb is None or k >= len(stages.configuration_mb)
            else stages.configuration_mb[k]
        ),
        "workspace_size_bytes": "upper bound: the planner's peak of live activations at the "
        "planning dims (received and sent activations included)",
        "constants_size_bytes": "the planner's weights figure: initializers (in the .params "
        "file) plus tensors held by Constant nodes and control-flow bodies",
        "io_size_bytes": "the stage model's inputs and outputs at the planning dims",
        "planner": {
            "weights_bytes": memory.weights_bytes,
            "activations_bytes": memory.activations_bytes,
            "io_bytes": memory.io_bytes,
            "total_bytes": memory.total_bytes,
        },
        "params_data_bytes": params_data,
        "params_file_bytes": params_size,
        "inputs_from": {item.name: item.source for item in entry.inputs},
        "outputs_to": {item.name: list(item.to) for item in entry.outputs},
    }
    document = {
        "model_name": module,
        "export_datetime": moment.strftime(_DATETIME_FORMAT),
        "memory": {
            "functions": {
                "main": [
                    {
                        "device": device_type,
                        "workspace_size_bytes": memory.activations_bytes,
                        "constants_size_bytes": memory.weights_bytes,
                        "io_size_bytes": io_size,
                        "inputs": inputs,
                        "outputs": outputs,
                    }
                ],
                "operator_functions": [],
            }
        },
        "target": [target],
        "executors": list(_EXECUTORS),
        "style": "full-model",
        "onnx_ir_multidevice": extra,
    }
    return document, initializers


def _metadata_bytes(modules: Mapping[str, dict[str, Any]]) -> bytes:
    """``metadata.json`` as TVM writes it: ``json.dump(indent=2, sort_keys=True)``."""
    document = {"version": MLF_VERSION, "modules": dict(modules)}
    return json.dumps(document, indent=2, sort_keys=True).encode("utf-8")


# ---------------------------------------------------------------------------------------------
# The tar archive


def _member(name: str, mtime: int, size: int = 0, *, directory: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if directory:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    else:
        info.size = size
        info.mode = 0o644
    return info


def _write_tar(
    path: Path,
    modules: Mapping[str, dict[str, Any]],
    params: Mapping[str, Sequence[ir.Value]],
    mtime: int,
) -> None:
    """Write one archive holding ``modules``, members in TVM's order (``.``, then by name)."""
    metadata = _metadata_bytes(modules)
    with (
        open(path, "wb") as file,
        tarfile.open(fileobj=file, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        tar.addfile(_member(".", mtime, directory=True))
        tar.addfile(_member("./metadata.json", mtime, len(metadata)), io.BytesIO(metadata))
        tar.addfile(_member("./parameters", mtime, directory=True))
        for module in sorted(params):
            pieces, size = _params_pieces(params[module])
            tar.addfile(
                _member(f"./parameters/{module}.params", mtime, size),
                io.BufferedReader(_PiecesReader(pieces)),
            )


class TvmMlfExporter:
    """Exports a plan as TVM Model Library Format v7 (format ``mlf``): one module per stage.

    A description of the plan for TVM's tooling, not a compiled artifact (see the module
    docstring). Options: ``providers`` (the device of each stage, ``cpu,cuda:0``; default
    ``cpu``), ``per_stage`` (one archive per stage in the directory ``destination``, since
    tvmc and the STM32 emitter accept one module per archive), ``export_datetime`` (a fixed
    date makes the output reproducible byte for byte; default ``SOURCE_DATE_EPOCH`` or now),
    ``dims`` (planning dims the plan did not record, ``seq=128``), ``configuration`` and
    ``name`` (the model part of the module names).
    """

    name = "mlf"
    description = (
        "TVM Model Library Format v7 .tar: one module per stage with its memory summary and "
        "parameters (a description: no TVM code)"
    )
    option_help: Mapping[str, str] = {
        "providers": "the device of each stage, comma-separated (cpu, cuda:0, rocm...; one for "
        "all or one per stage; default cpu)",
        "per_stage": "true: write one .tar per stage into the directory OUT (tvmc and the STM32 "
        "emitter read one module per archive)",
        "export_datetime": "the export date written (e.g. '2024-05-01 12:00:00Z'): fixed, the "
        "output is byte-identical (default: SOURCE_DATE_EPOCH, else now)",
        "dims": "planning dims the plan did not record, NAME=N[,NAME=N] (e.g. seq=128)",
        "configuration": "the .omny configuration index or IR v11 configuration name (default: "
        "the one with --shards shards)",
        "name": "the model part of the module names <name>_stage<k> (default: the .omny model "
        "name, else the graph name)",
    }

    def export(
        self,
        model: ir.Model,
        destination: Path,
        *,
        shards: int | None,
        options: Mapping[str, Any],
        force: bool,
    ) -> ExportResult:
        """Write the archive (or, with ``per_stage``, the directory of archives)."""
        if shards is None:
            raise ExportUsageError(
                "the mlf format needs the number of stages: pass shards=N",
                cli_message="the mlf format needs the number of stages: pass --shards N",
            )
        per_stage = parse_flag(options.get("per_stage", False), "per_stage")
        moment = _export_datetime(options.get("export_datetime"))
        configuration = parse_configuration(options.get("configuration"))
        dims = parse_dims(options.get("dims"))
        if not per_stage and destination.suffix != ".tar":  # `out/` is not a file name
            where = "a directory" if destination.is_dir() else "not a .tar file name"
            raise ExportUsageError(
                f"{destination}: {where}; the mlf format writes one .tar archive: name it "
                f"(e.g. {destination / 'model.tar'}), or pass per_stage=True for a directory "
                "of .tar files, one per stage",
                cli_message=f"{destination}: {where}; the mlf format writes one .tar archive: "
                f"name it (e.g. {destination / 'model.tar'}), or pass --per-stage for a "
                "directory of .tar files, one per stage",
            )
        if per_stage and destination.suffix == ".tar":
            raise ExportUsageError(
                f"{destination}: with per_stage, OUT is a directory that receives one .tar per "
                f"stage; pass a directory name such as {destination.with_suffix('')}",
                cli_message=f"{destination}: with --per-stage, OUT is a directory that receives "
                f"one .tar per stage; pass a directory name such as "
                f"{destination.with_suffix('')}",
            )
        holds = "with per_stage the output is a directory of .tar files"
        if per_stage:
            check_output_directory(destination, force, holds=holds)
        else:
            check_output_file(destination, force)
        stages = export_stages(model, shards, configuration=configuration, dims=dims)
        for stage in stages.stages:  # refuse a type TVM cannot hold before measuring anything
            for value in stage.graph.initializers.values():
                _tvm_dtype(value)
        stages = measure_memory(stages)
        devices = _devices(options.get("providers"), stages.num_stages)
        base = _module_base(model, options.get("name"))
        modules: dict[str, dict[str, Any]] = {}
        params: dict[str, list[ir.Value]] = {}
        for k in range(stages.num_stages):
            module = f"{base}_stage{k}"
            modules[module], params[module] = _module_metadata(
                stages, k, module, devices[k], moment, configuration
            )
        mtime = int(moment.timestamp())
        if per_stage:
            files = []
            with staged_directory(destination, force, holds=holds) as folder:
                for module in modules:
                    _write_tar(
                        folder / f"{module}.tar",
                        {module: modules[module]},
                        {module: params[module]},
                        mtime,
                    )
                    files.append(destination / f"{module}.tar")
        else:
            with staged_file(destination, force) as temporary:
                _write_tar(temporary, modules, params, mtime)
            files = [destination]
        summary = [
            {
                "module": module,
                "stage": k,
                **{
                    key: document["memory"]["functions"]["main"][0][key]
                    for key in ("workspace_size_bytes", "constants_size_bytes", "io_size_bytes")
                },
                "params": len(params[module]),
            }
            for k, (module, document) in enumerate(modules.items())
        ]
        return ExportResult(
            format=self.name,
            destination=destination,
            files=tuple(files),
            manifest=stages.manifest,
            details={
                "version": MLF_VERSION,
                "export_datetime": moment.strftime(_DATETIME_FORMAT),
                "per_stage": per_stage,
                "planning_dims": dict(sorted(stages.dims.items())),
                "modules": summary,
            },
        )
