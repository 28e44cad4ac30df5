"""Stage plans: which models a pipeline runs, which tensors each reads, and where it runs.

A :class:`StagePlan` is what every backend of :class:`~onnx_ir_multidevice.runtime.Pipeline`
executes. It is built from one of three sources:

* a planned model (``.omny`` metadata or pipeline annotations), split with
  :func:`onnx_ir_multidevice._split.build.split`;
* a directory written by ``omny split`` (``manifest.json`` plus ``stage_<i>.onnx``);
* a list of stage models whose input and output names chain.

Routing follows the split contract: stage ``i`` reads its inputs by name from the graph inputs
and the outputs of earlier stages; stage outputs keep the original tensor names. After stage
``i`` runs, every tensor that no later stage reads and that is not a graph output is dropped,
so requests carry only what is still needed.

This module also turns a device string (``"cpu"``, ``"cuda:1"``) into onnxruntime providers and
builds one :class:`StageRunner` (an onnxruntime session with its own options) per stage.
"""

from __future__ import annotations

__all__ = [
    "Device",
    "StageFailure",
    "StageModel",
    "StagePlan",
    "StageRunner",
    "TensorSpec",
    "failure_message",
    "load_plan",
    "parse_device",
]

import dataclasses
import json
import os
import pathlib
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyIOError, PipelineError
from onnx_ir_multidevice._proto.files import load as load_model
from onnx_ir_multidevice._split import MANIFEST_FORMAT, MANIFEST_VERSION, split

MANIFEST_NAME = "manifest.json"
"""File name of the manifest that ``omny split`` writes next to the stage models."""

_PROTO_LIMIT = 1_800_000_000
"""Serialized models larger than this are saved to a temporary directory with external data
instead of being handed to onnxruntime as bytes (protobuf's hard limit is 2 GiB)."""

# Device kind -> (onnxruntime provider name, whether it takes a device_id option).
_PROVIDERS: dict[str, tuple[str, bool]] = {
    "cpu": ("CPUExecutionProvider", False),
    "cuda": ("CUDAExecutionProvider", True),
    "tensorrt": ("TensorrtExecutionProvider", True),
    "rocm": ("ROCMExecutionProvider", True),
    "migraphx": ("MIGraphXExecutionProvider", True),
    "dml": ("DmlExecutionProvider", True),
    "openvino": ("OpenVINOExecutionProvider", False),
    "coreml": ("CoreMLExecutionProvider", False),
    "qnn": ("QNNExecutionProvider", False),
}
_GPU_KINDS = frozenset({"cuda", "tensorrt", "rocm", "migraphx", "dml"})
_KIND_OF_PROVIDER = {name: kind for kind, (name, _) in _PROVIDERS.items()}


# ---------------------------------------------------------------------------------------------
# Devices


@dataclasses.dataclass(frozen=True)
class Device:
    """Where one stage runs: an onnxruntime execution provider and a device index."""

    kind: str
    """Short provider name: ``"cpu"``, ``"cuda"``, ``"tensorrt"``, ``"rocm"``, ``"dml"``..."""

    index: int | None = None
    """Device index handed to the provider as ``device_id`` (``None``: the provider default)."""

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    @property
    def provider(self) -> str:
        """The onnxruntime execution provider name, e.g. ``"CUDAExecutionProvider"``."""
        return _PROVIDERS[self.kind][0]

    @property
    def is_gpu(self) -> bool:
        """Whether the device is a GPU (Ray requests ``num_gpus=1`` for its actor)."""
        return self.kind in _GPU_KINDS

    def ort_providers(self, *, index: int | None = None) -> list[str | tuple[str, dict[str, str]]]:
        """The ``providers`` argument of :class:`onnxruntime.InferenceSession` for this device.

        Args:
            index: Device index to use instead of :attr:`index` (a Ray actor sees only the
                GPU Ray assigned to it, as index 0).

        Returns:
            The provider, with its ``device_id`` option where it takes one, followed by the
            CPU provider for the operators the accelerator does not implement.
        """
        name, takes_id = _PROVIDERS[self.kind]
        if self.kind == "cpu":
            return [name]
        device_id = self.index if index is None else index
        options = {"device_id": str(device_id)} if takes_id and device_id is not None else {}
        return [(name, options), "CPUExecutionProvider"]


def parse_device(spec: str | Device) -> Device:
    """Parse a device string: ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a provider name.

    Args:
        spec: ``kind`` or ``kind:index`` with ``kind`` one of ``cpu``, ``cuda``, ``tensorrt``,
            ``rocm``, ``migraphx``, ``dml``, ``openvino``, ``coreml``, ``qnn`` (case-insensitive),
            or a full onnxruntime provider name such as ``"CUDAExecutionProvider"``.

    Returns:
        The device.

    Raises:
        ValueError: The string names no known provider or has a bad index.
    """
    if isinstance(spec, Device):
        return spec
    text = str(spec).strip()
    kind_text, sep, index_text = text.partition(":")
    kind = _KIND_OF_PROVIDER.get(kind_text, kind_text.lower())
    if kind not in _PROVIDERS:
        known = ", ".join(sorted(_PROVIDERS))
        raise ValueError(f"unknown device {spec!r}: expected one of {known}, optionally ':<index>'")
    if not sep:
        return Device(kind)
    if not index_text.isdigit():
        raise ValueError(f"bad device index in {spec!r}: expected a non-negative integer")
    if kind == "cpu" and int(index_text) != 0:
        raise ValueError(f"device {spec!r}: the CPU provider has no device index other than 0")
    return Device(kind, int(index_text) if kind != "cpu" else None)


# ---------------------------------------------------------------------------------------------
# Plans


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """Name, shape and element type of a graph input, as the stage model declares it."""

    name: str
    """Tensor name."""

    shape: tuple[int | str | None, ...] | None
    """Dimensions: an ``int``, a symbolic name, or ``None`` when unnamed; ``None`` if unknown."""

    dtype: np.dtype | None
    """numpy element type (``None`` when the model does not say)."""


@dataclasses.dataclass(frozen=True)
class StageModel:
    """One stage: its model and the names of the tensors it reads and writes."""

    index: int
    """0-based stage index; stage ``k`` runs on device ``k`` of the pipeline."""

    source: bytes | str
    """The serialized ``ModelProto`` or the path of the ``.onnx`` file (external data next
    to it is found by onnxruntime)."""

    inputs: tuple[str, ...]
    """Names the stage reads (graph inputs or outputs of earlier stages)."""

    outputs: tuple[str, ...]
    """Names the stage produces, in the order of its graph outputs."""

    def __repr__(self) -> str:
        src = f"<{len(self.source)} bytes>" if isinstance(self.source, bytes) else self.source
        return (
            f"StageModel(index={self.index}, source={src}, inputs={self.inputs}, "
            f"outputs={self.outputs})"
        )


@dataclasses.dataclass(frozen=True)
class StagePlan:
    """The stages of a pipeline and how tensors flow between them.

    Build one with :func:`load_plan`; the constructor only checks that the names chain.
    """

    stages: tuple[StageModel, ...]
    """The stages in pipeline order."""

    graph_inputs: tuple[str, ...]
    """Names a request must provide."""

    graph_outputs: tuple[str, ...]
    """Names a request returns, in order."""

    input_specs: Mapping[str, TensorSpec] = dataclasses.field(default_factory=dict)
    """Declared shape and type of each graph input (from the first stage that reads it)."""

    keep_after: tuple[frozenset[str], ...] = dataclasses.field(init=False)
    """``keep_after[i]``: the names still needed once stage ``i`` has run (read by a later
    stage, or a graph output); everything else is dropped from the request."""

    def __post_init__(self) -> None:
        if not self.stages:
            raise PipelineError("a pipeline needs at least one stage")
        available = set(self.graph_inputs)
        for stage in self.stages:
            missing = [name for name in stage.inputs if name not in available]
            if missing:
                raise PipelineError(
                    f"stage {stage.index} reads {missing} which neither a graph input nor an "
                    "earlier stage provides; the stage models do not chain (check the order of "
                    "the stages and their input names)",
                    stage=stage.index,
                )
            available.update(stage.outputs)
        missing_out = [name for name in self.graph_outputs if name not in available]
        if missing_out:
            raise PipelineError(
                f"graph outputs {missing_out} are produced by no stage and are no graph input"
            )
        needed_after: list[set[str]] = []
        needed = set(self.graph_outputs)
        for stage in reversed(self.stages):
            needed_after.append(set(needed))
            needed.update(stage.inputs)
        needed_after.reverse()
        keep: list[frozenset[str]] = []
        available = set(self.graph_inputs)
        for stage, later in zip(self.stages, needed_after):
            available.update(stage.outputs)
            keep.append(frozenset(available & later))
        object.__setattr__(self, "keep_after", tuple(keep))

    @property
    def num_stages(self) -> int:
        """Number of stages."""
        return len(self.stages)


def _dtype_of_elem_type(elem_type: int) -> np.dtype | None:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return None


def _specs_of_proto_graph(graph: onnx.GraphProto) -> dict[str, TensorSpec]:
    specs = {}
    for value in graph.input:
        tensor_type = value.type.tensor_type
        shape: tuple[int | str | None, ...] | None = None
        if tensor_type.HasField("shape"):
            shape = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tensor_type.shape.dim
            )
        specs[value.name] = TensorSpec(
            value.name, shape, _dtype_of_elem_type(tensor_type.elem_type)
        )
    return specs


def _io_of_proto(proto: onnx.ModelProto) -> tuple[tuple[str, ...], tuple[str, ...]]:
    initializers = {t.name for t in proto.graph.initializer}
    inputs = tuple(v.name for v in proto.graph.input if v.name not in initializers)
    return inputs, tuple(v.name for v in proto.graph.output)


def _serialize(model: ir.Model) -> bytes | str:
    """Serialize an IR model for onnxruntime: bytes, or a temporary file if over 2 GiB."""
    proto = ir.to_proto(model)
    if proto.ByteSize() < _PROTO_LIMIT:
        return proto.SerializeToString()
    folder = tempfile.mkdtemp(prefix="omny-stage-")
    path = os.path.join(folder, "stage.onnx")
    ir.save(model, path, external_data="stage.onnx.data")
    return path


def _stage_from_ir(index: int, model: ir.Model) -> tuple[StageModel, dict[str, TensorSpec]]:
    graph = model.graph
    initializers = graph.initializers
    inputs = tuple(v.name for v in graph.inputs if v.name not in initializers)
    outputs = tuple(v.name for v in graph.outputs)
    specs = {}
    for value in graph.inputs:
        shape = None
        if value.shape is not None:
            shape = tuple(
                d if isinstance(d, int) else d.value for d in value.shape.dims
            )  # SymbolicDim.value is the name or None
        dtype = None
        if value.dtype is not None:
            try:
                dtype = np.dtype(value.dtype.numpy())
            except TypeError:
                dtype = None
        specs[value.name] = TensorSpec(value.name, shape, dtype)
    return StageModel(index, _serialize(model), inputs, outputs), specs


def _stage_from_path(index: int, path: str | os.PathLike) -> tuple[StageModel, dict]:
    path = os.fspath(path)
    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception as exc:  # onnx raises OSError, DecodeError or its own errors
        raise OmnyIOError(f"cannot read stage model {path}: {exc}") from exc
    inputs, outputs = _io_of_proto(proto)
    return StageModel(index, path, inputs, outputs), _specs_of_proto_graph(proto.graph)


def _stage_from_any(index: int, model: Any) -> tuple[StageModel, dict[str, TensorSpec]]:
    if isinstance(model, ir.Model):
        return _stage_from_ir(index, model)
    if isinstance(model, onnx.ModelProto):
        inputs, outputs = _io_of_proto(model)
        source: bytes | str = model.SerializeToString()
        if model.ByteSize() >= _PROTO_LIMIT:
            return _stage_from_ir(index, ir.from_proto(model))
        return StageModel(index, source, inputs, outputs), _specs_of_proto_graph(model.graph)
    if isinstance(model, (str, os.PathLike)):
        return _stage_from_path(index, model)
    raise TypeError(
        f"stage {index}: expected an onnx_ir.Model, an onnx.ModelProto or a path, "
        f"got {type(model).__name__}"
    )


def _plan_from_stages(
    stages: Sequence[tuple[StageModel, dict[str, TensorSpec]]],
    graph_outputs: Sequence[str] | None,
    graph_inputs: Sequence[str] | None = None,
) -> StagePlan:
    producer = {name: stage.index for stage, _ in reversed(stages) for name in stage.outputs}
    produced: set[str] = set()
    inputs: list[str] = []
    specs: dict[str, TensorSpec] = {}
    for stage, stage_specs in stages:
        late = [n for n in stage.inputs if producer.get(n, -1) >= stage.index]
        if late:
            raise PipelineError(
                f"stage {stage.index} reads {late}, which stage {producer[late[0]]} produces "
                "(not an earlier one); give the stages in pipeline order",
                stage=stage.index,
            )
        for name in stage.inputs:
            if name not in produced and name not in specs:
                inputs.append(name)
                specs[name] = stage_specs.get(name, TensorSpec(name, None, None))
        produced.update(stage.outputs)
    if graph_inputs is not None:
        specs = {n: specs.get(n, TensorSpec(n, None, None)) for n in graph_inputs}
        inputs = list(graph_inputs)
    if graph_outputs is None:
        # Without the original model: the last stage's outputs, plus any earlier output that
        # no later stage reads (a list of stages carries no other record of the graph outputs).
        read_later: set[str] = set(stages[-1][0].inputs)
        extra: list[str] = []
        for stage, _ in reversed(stages[:-1]):
            extra[:0] = [n for n in stage.outputs if n not in read_later]
            read_later.update(stage.inputs)
        graph_outputs = [*extra, *stages[-1][0].outputs]
    return StagePlan(
        tuple(stage for stage, _ in stages), tuple(inputs), tuple(graph_outputs), specs
    )


def _plan_from_directory(folder: pathlib.Path, outputs: Sequence[str] | None) -> StagePlan:
    manifest_path = folder / MANIFEST_NAME
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise OmnyIOError(
            f"{folder}: is a directory without {MANIFEST_NAME}; pass a directory written by "
            "`omny split`, or a model file"
        ) from exc
    except OSError as exc:
        raise OmnyIOError(
            f"cannot read {manifest_path}: {exc}; expected a directory written by `omny split`"
        ) from exc
    except ValueError as exc:
        raise PipelineError(f"{manifest_path}: not valid JSON: {exc}") from exc

    def bad(path: str, reason: str) -> PipelineError:
        return PipelineError(f"{manifest_path}: {path}: {reason}")

    if not isinstance(manifest, dict):
        raise bad("(document)", "expected a JSON object")
    if manifest.get("format") != MANIFEST_FORMAT:
        raise bad("format", f"expected {MANIFEST_FORMAT!r}, got {manifest.get('format')!r}")
    if manifest.get("version") != MANIFEST_VERSION:
        raise bad(
            "version",
            f"this reader knows version {MANIFEST_VERSION}, got {manifest.get('version')!r}",
        )
    entries = manifest.get("stages")
    if not isinstance(entries, list) or not entries:
        raise bad("stages", "expected a non-empty list")

    def names(key: str) -> list[str] | None:
        value = manifest.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise bad(key, "expected a list")
        result = []
        for i, item in enumerate(value):
            name = item.get("name") if isinstance(item, dict) else item
            if not isinstance(name, str):
                raise bad(f"{key}[{i}]", "expected a tensor name")
            result.append(name)
        return result

    stages = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise bad(f"stages[{i}]", "expected an object")
        if entry.get("index", i) != i:
            raise bad(f"stages[{i}].index", f"expected {i} (stages are listed in order)")
        file = entry.get("file")
        if not isinstance(file, str):
            raise bad(f"stages[{i}].file", "expected the stage model's file name")
        path = folder / file
        if not path.is_file():
            raise OmnyIOError(f"{manifest_path}: stages[{i}].file: {path} does not exist")
        stages.append(_stage_from_path(i, path))
    declared = manifest.get("num_stages", len(stages))
    if declared != len(stages):
        raise bad("num_stages", f"says {declared} but {len(stages)} stages are listed")
    graph_outputs = outputs if outputs is not None else names("graph_outputs")
    return _plan_from_stages(stages, graph_outputs, names("graph_inputs"))


def _plan_from_model(model: ir.Model, shards: int, outputs: Sequence[str] | None) -> StagePlan:
    graph_outputs = list(outputs) if outputs is not None else [v.name for v in model.graph.outputs]
    if shards == 1:
        stage_models = [model]
    else:
        stage_models = split(model, shards)
    if len(stage_models) != shards:
        raise PipelineError(f"split returned {len(stage_models)} stages for shards={shards}")
    stages = [_stage_from_any(i, m) for i, m in enumerate(stage_models)]
    graph_inputs = [v.name for v in model.graph.inputs if v.name not in model.graph.initializers]
    return _plan_from_stages(stages, graph_outputs, graph_inputs)


def load_plan(
    source: Any,
    shards: int | None = None,
    *,
    outputs: Sequence[str] | None = None,
) -> StagePlan:
    """Build the stage plan of a pipeline.

    Args:
        source: One of: a planned model (:class:`onnx_ir.Model`, :class:`onnx.ModelProto`, or
            the path of a ``.onnx`` / ``.omny`` file), split into ``shards`` stages with
            :func:`onnx_ir_multidevice._split.build.split` (``shards=1`` runs the whole model as one
            stage); a directory written by ``omny split``; a list of stage models (IR models,
            protos or paths) whose names chain; or a :class:`StagePlan`.
        shards: Number of stages. Required for a single model; for a directory or a list it
            is optional and must match when given.
        outputs: Names the pipeline returns. Default: the model's graph outputs (for a
            directory, the manifest's ``graph_outputs``; for a list, the last stage's outputs
            plus earlier outputs that no later stage reads).

    Returns:
        The plan.

    Raises:
        PipelineError: The stages do not chain, the manifest is malformed, or the number of
            stages differs from ``shards``.
        OmnyIOError: A file cannot be read.
    """
    if isinstance(source, StagePlan):
        plan = source
    elif isinstance(source, (list, tuple)):
        if not source:
            raise PipelineError("a pipeline needs at least one stage; the list is empty")
        stages = [_stage_from_any(i, m) for i, m in enumerate(source)]
        plan = _plan_from_stages(stages, outputs)
    elif isinstance(source, (str, os.PathLike)) and pathlib.Path(source).is_dir():
        plan = _plan_from_directory(pathlib.Path(source), outputs)
    else:
        if shards is None:
            raise PipelineError(
                "shards= is required to split a single model; pass shards=N (N >= 1), or a "
                "directory written by `omny split`, or a list of stage models"
            )
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise PipelineError(f"shards must be a positive integer, got {shards!r}")
        if isinstance(source, (str, os.PathLike)):
            if not os.path.exists(source):
                raise OmnyIOError(f"{os.fspath(source)}: no such model file or split directory")
            model = load_model(source)
        elif isinstance(source, onnx.ModelProto):
            model = ir.from_proto(source)
        elif isinstance(source, ir.Model):
            model = source
        else:
            raise TypeError(
                "Pipeline source must be an onnx_ir.Model, an onnx.ModelProto, a path, a split "
                f"directory or a list of stage models, got {type(source).__name__}"
            )
        return _plan_from_model(model, shards, outputs)
    if shards is not None and shards != plan.num_stages:
        raise PipelineError(f"shards={shards} but the source has {plan.num_stages} stages")
    return plan


# ---------------------------------------------------------------------------------------------
# Sessions


@dataclasses.dataclass
class StageFailure:
    """A request that failed in a stage; it travels to the caller in place of the outputs."""

    stage: int | None
    """0-based index of the stage that failed (``None`` when the backend lost the request)."""

    message: str
    """What went wrong, e.g. onnxruntime's error message."""

    cause: BaseException | None = None
    """The original exception, where it is at hand (in-process backends)."""


def failure_message(exc: BaseException) -> str:
    """One line saying why a stage failed: the exception type and its message.

    onnxruntime's messages can span several lines (``Got invalid dimensions for input: x
    for the following indices`` then one line per index); they are joined into one line.
    """
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def as_numpy(value: Any) -> Any:
    """A numpy array of ``value``: itself, or an :class:`onnxruntime.OrtValue` copied out."""
    return value if isinstance(value, np.ndarray) else value.numpy()


class StageRunner:
    """One stage's onnxruntime session, with cancellation for :meth:`close`.

    Args:
        stage: The stage to run.
        device: Where to run it.
        threads: ``intra_op_num_threads`` of the session (``None``: onnxruntime's default).
        device_index: Device index to use instead of ``device.index`` (Ray actors).
        spinning: Whether onnxruntime's intra-op threads spin while waiting for work. Off by
            default: stages share the machine's cores, and spinning threads steal them from
            the other stages.

    Raises:
        PipelineError: The provider is not available in this onnxruntime build, failed to
            load, or the model's inputs differ from the stage's declared inputs.
    """

    def __init__(
        self,
        stage: StageModel,
        device: Device,
        threads: int | None = None,
        *,
        device_index: int | None = None,
        spinning: bool = False,
    ) -> None:
        import onnxruntime as ort  # noqa: PLC0415

        self.stage = stage
        self.device = device
        available = ort.get_available_providers()
        if device.provider not in available:
            raise PipelineError(
                f"device {device} needs onnxruntime's {device.provider}, which this onnxruntime "
                f"build does not have (available: {', '.join(available)}); install the matching "
                "onnxruntime package (e.g. onnxruntime-gpu for cuda) or choose another device",
                stage=stage.index,
            )
        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if spinning else "0"
        )
        try:
            self.session = ort.InferenceSession(
                stage.source, options, providers=device.ort_providers(index=device_index)
            )
        except Exception as exc:
            raise PipelineError(
                f"onnxruntime cannot load the stage model on {device}: {exc}", stage=stage.index
            ) from exc
        if device.provider not in self.session.get_providers():
            raise PipelineError(
                f"onnxruntime fell back from {device.provider} to "
                f"{self.session.get_providers()} (the provider failed to load; see the "
                "onnxruntime log); check the driver and libraries or choose another device",
                stage=stage.index,
            )
        session_inputs = {i.name for i in self.session.get_inputs()}
        undeclared = sorted(session_inputs - set(stage.inputs))
        if undeclared:
            raise PipelineError(
                f"the stage model reads {undeclared} which the plan does not route to it",
                stage=stage.index,
            )
        self._feeds = tuple(n for n in stage.inputs if n in session_inputs)
        self._run_options = ort.RunOptions
        self._ort_value = ort.OrtValue
        # OrtValues can carry every tensor but strings; other stages exchange numpy arrays.
        io_types = [v.type for v in (*self.session.get_inputs(), *self.session.get_outputs())]
        self._values_ok = all(t.startswith("tensor(") and t != "tensor(string)" for t in io_types)
        self._lock = threading.Lock()
        self._current: Any = None
        self._cancelled = False

    def run(self, env: Mapping[str, Any], *, ort_values: bool = False) -> dict[str, Any]:
        """Run the stage on the tensors of one request.

        Args:
            env: Every tensor available to the request (at least the stage's inputs), as numpy
                arrays or :class:`onnxruntime.OrtValue`.
            ort_values: Return :class:`onnxruntime.OrtValue` outputs (``run_with_ort_values``):
                they stay where onnxruntime put them (on the GPU for a CUDA stage) and pass to
                the next in-process stage without a copy. Numpy arrays are wrapped without a
                copy. Ignored (numpy outputs) for stages with string or non-tensor values.

        Returns:
            The stage's outputs by name.

        Raises:
            Exception: Whatever onnxruntime raises (bad shape, bad type...), or
            :class:`PipelineError` once :meth:`cancel` was called.
        """
        use_values = ort_values and self._values_ok
        if use_values:
            feed = {name: self._as_ort_value(env[name]) for name in self._feeds}
        else:
            feed = {name: as_numpy(env[name]) for name in self._feeds}
        run_options = self._run_options()
        with self._lock:
            if self._cancelled:
                raise PipelineError("the pipeline is closing", stage=self.stage.index)
            self._current = run_options
        try:
            if use_values:
                values = self.session.run_with_ort_values(
                    list(self.stage.outputs), feed, run_options
                )
            else:
                values = self.session.run(list(self.stage.outputs), feed, run_options)
        finally:
            with self._lock:
                self._current = None
        return dict(zip(self.stage.outputs, values))

    def _as_ort_value(self, value: Any) -> Any:
        if isinstance(value, self._ort_value):
            return value
        return self._ort_value.ortvalue_from_numpy(np.ascontiguousarray(value))

    def cancel(self) -> None:
        """Stop the run in progress (onnxruntime checks between operators) and any later one."""
        with self._lock:
            self._cancelled = True
            if self._current is not None:
                self._current.terminate = True
