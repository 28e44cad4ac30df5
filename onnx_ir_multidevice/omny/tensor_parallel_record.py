"""The tensor-parallel plan of a model, recorded beside the ``.omny`` metadata.

The ``.omny`` v1 JSON has no place for tensor parallelism (the reference reader refuses any
key the specification does not list), so the tensor-parallel degree of each pipeline stage is
recorded in a ``metadata_props`` entry of this package, :data:`TENSOR_PARALLEL_KEY`, whose
value is canonical JSON (keys sorted, compact)::

    {"configurations": [{"dims": {"seq": 128},
                         "name": "omny/2-shards",
                         "num_shards": 2,
                         "stages": [{"degree": 2, "devices": [0, 1], "stage": 0},
                                    {"degree": 2, "devices": [2, 3], "stage": 1}]}],
     "format": 1}

* ``name`` is the IR v11 configuration name of a ``.omny`` configuration (``omny/<n>-shards``,
  see :func:`~onnx_ir_multidevice.binding.naming.configuration_names`) and ``num_shards`` its
  pipeline stage count.
* ``stages`` lists the stages and the devices (indices into the IR v11 configuration's
  devices) that share each one. A stage absent from the list runs alone (degree 1) on the
  lowest device index that no listed stage and no earlier absent stage uses
  (:meth:`TensorParallelConfiguration.devices_of`); with no stage listed, stage ``k`` runs on
  device ``k``, the pipeline-only convention.
* ``dims`` are the planning dims the regions were found at
  (:func:`~onnx_ir_multidevice.analysis.tensor_parallel.find_regions` is deterministic for a
  model, a degree and dims, so the record needs no node list).

The IR v11 annotations :func:`~onnx_ir_multidevice.annotate` writes from the entry are the
other half of the record. :func:`parse_tensor_parallel` is strict: a malformed entry raises
:class:`~onnx_ir_multidevice.OmnyFormatError` naming the JSON path of the offending element.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "TENSOR_PARALLEL_FORMAT",
    "TENSOR_PARALLEL_KEY",
    "TensorParallelConfiguration",
    "TensorParallelRecord",
    "TensorParallelStage",
    "parse_tensor_parallel",
    "read_tensor_parallel",
    "write_tensor_parallel",
]

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyFormatError
from onnx_ir_multidevice._util import require_model
from onnx_ir_multidevice.omny.planning_dims import _checked as _checked_dims

TENSOR_PARALLEL_KEY = "onnx_ir_multidevice.tensor_parallel"
"""The ``metadata_props`` key of the tensor-parallel record."""

TENSOR_PARALLEL_FORMAT = 1
"""The record's format number (its ``format`` key)."""

_PATH = f"metadata_props[{TENSOR_PARALLEL_KEY}]"


@dataclasses.dataclass(frozen=True)
class TensorParallelStage:
    """One pipeline stage shared by ``degree`` devices."""

    stage: int
    """The pipeline stage, ``0 <= stage < num_shards``."""

    degree: int
    """How many devices share the stage (``1``: no tensor parallelism)."""

    devices: tuple[int, ...]
    """The device indices (into the IR v11 configuration's devices), ``degree`` of them,
    distinct; device ``devices[k]`` holds shard ``k``."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object."""
        return {"degree": self.degree, "devices": list(self.devices), "stage": self.stage}


@dataclasses.dataclass(frozen=True)
class TensorParallelConfiguration:
    """The tensor-parallel degree of each stage of one ``.omny`` configuration."""

    name: str
    """The IR v11 configuration name (``omny/<n>-shards``)."""

    num_shards: int
    """The configuration's pipeline stage count."""

    stages: tuple[TensorParallelStage, ...]
    """The stages listed, by stage number (an absent stage runs on one device)."""

    dims: tuple[tuple[str, int], ...] = ()
    """The planning dims the regions were found at, sorted by name."""

    @classmethod
    def contiguous(
        cls,
        name: str,
        degrees: Sequence[int],
        dims: Mapping[str, int] | None = None,
    ) -> TensorParallelConfiguration:
        """A configuration whose stage ``s`` has degree ``degrees[s]``, on contiguous devices.

        Stage 0 takes devices ``0 .. degrees[0] - 1``, stage 1 the next ``degrees[1]``... Every
        stage is listed (degree 1 ones too), so the devices are explicit.
        """
        stages = []
        start = 0
        for stage, degree in enumerate(degrees):
            stages.append(TensorParallelStage(stage, degree, tuple(range(start, start + degree))))
            start += degree
        checked = _checked_dims(dims or {}, "dims")
        return cls(name, len(degrees), tuple(stages), tuple(sorted(checked.items())))

    @property
    def dims_dict(self) -> dict[str, int]:
        """:attr:`dims` as a dictionary."""
        return dict(self.dims)

    def stage(self, stage: int) -> TensorParallelStage:
        """The entry of ``stage``, an implied degree-1 one when it is not listed."""
        for entry in self.stages:
            if entry.stage == stage:
                return entry
        return TensorParallelStage(stage, 1, self.devices_of(stage))

    def degree_of(self, stage: int) -> int:
        """The tensor-parallel degree of ``stage`` (``1`` when not listed)."""
        return next((e.degree for e in self.stages if e.stage == stage), 1)

    def devices_of(self, stage: int) -> tuple[int, ...]:
        """The devices of ``stage``; an absent stage gets the lowest free index (see above)."""
        listed = {e.stage: e.devices for e in self.stages}
        if stage in listed:
            return listed[stage]
        used = {d for devices in listed.values() for d in devices}
        device = -1
        for s in range(stage + 1):
            if s in listed:
                continue
            device += 1
            while device in used:
                device += 1
        return (device,)

    @property
    def num_devices(self) -> int:
        """How many devices the configuration uses: its largest device index plus one."""
        return 1 + max(d for s in range(self.num_shards) for d in self.devices_of(s))

    @property
    def parallel(self) -> bool:
        """Whether a stage has a degree above 1."""
        return any(e.degree > 1 for e in self.stages)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object."""
        return {
            "dims": dict(self.dims),
            "name": self.name,
            "num_shards": self.num_shards,
            "stages": [e.to_dict() for e in sorted(self.stages, key=lambda e: e.stage)],
        }


@dataclasses.dataclass(frozen=True)
class TensorParallelRecord:
    """The tensor-parallel plan of a model: one entry per ``.omny`` configuration planned so."""

    configurations: tuple[TensorParallelConfiguration, ...]
    """The configurations (names distinct)."""

    format: int = TENSOR_PARALLEL_FORMAT
    """The format number."""

    def configuration(self, name: str) -> TensorParallelConfiguration | None:
        """The configuration named ``name``, or ``None``."""
        return next((c for c in self.configurations if c.name == name), None)

    def to_json(self) -> str:
        """The canonical JSON text (keys sorted, compact): equal records give equal bytes."""
        return json.dumps(
            {"configurations": [c.to_dict() for c in self.configurations], "format": self.format},
            separators=(",", ":"),
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> TensorParallelRecord:
        """Parse and validate the entry's text; see :func:`parse_tensor_parallel`."""
        return parse_tensor_parallel(text)


def _int(value: object, path: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise OmnyFormatError(path, f"expected an integer >= {low}, got {value!r}")
    return value


def _object(value: object, path: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise OmnyFormatError(path, f"expected a JSON object, got {type(value).__name__}")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise OmnyFormatError(f"{path}.{unknown[0]}", f"unknown key; the keys are {list(keys)}")
    missing = [k for k in keys if k not in value and k != "dims"]
    if missing:
        raise OmnyFormatError(f"{path}.{missing[0]}", "missing")
    return value


def _stage(value: object, path: str, num_shards: int) -> TensorParallelStage:
    data = _object(value, path, ("degree", "devices", "stage"))
    stage = _int(data["stage"], f"{path}.stage", 0)
    if stage >= num_shards:
        raise OmnyFormatError(
            f"{path}.stage", f"stage {stage} is beyond the configuration's {num_shards} stages"
        )
    degree = _int(data["degree"], f"{path}.degree", 1)
    devices = data["devices"]
    if not isinstance(devices, list):
        raise OmnyFormatError(f"{path}.devices", "expected a list of device indices")
    checked = tuple(_int(d, f"{path}.devices[{i}]", 0) for i, d in enumerate(devices))
    if len(checked) != degree:
        raise OmnyFormatError(
            f"{path}.devices", f"{len(checked)} devices for degree {degree}; give one per shard"
        )
    if len(set(checked)) != len(checked):
        raise OmnyFormatError(f"{path}.devices", f"devices {list(checked)} are not distinct")
    return TensorParallelStage(stage, degree, checked)


def _configuration(value: object, path: str) -> TensorParallelConfiguration:
    data = _object(value, path, ("dims", "name", "num_shards", "stages"))
    name = data["name"]
    if not isinstance(name, str) or not name:
        raise OmnyFormatError(f"{path}.name", f"expected a non-empty string, got {name!r}")
    num_shards = _int(data["num_shards"], f"{path}.num_shards", 1)
    raw_stages = data["stages"]
    if not isinstance(raw_stages, list):
        raise OmnyFormatError(f"{path}.stages", "expected a list")
    stages = [_stage(s, f"{path}.stages[{i}]", num_shards) for i, s in enumerate(raw_stages)]
    owner: dict[int, int] = {}
    seen: set[int] = set()
    for i, entry in enumerate(stages):
        if entry.stage in seen:
            raise OmnyFormatError(f"{path}.stages[{i}].stage", f"stage {entry.stage} listed twice")
        seen.add(entry.stage)
        for device in entry.devices:
            if device in owner:
                raise OmnyFormatError(
                    f"{path}.stages[{i}].devices",
                    f"device {device} is also a device of stage {owner[device]}",
                )
            owner[device] = entry.stage
    dims = data.get("dims", {})
    if not isinstance(dims, dict):
        raise OmnyFormatError(f"{path}.dims", "expected a JSON object of positive integers")
    checked_dims = _checked_dims(dims, f"{path}.dims")
    return TensorParallelConfiguration(
        name,
        num_shards,
        tuple(sorted(stages, key=lambda e: e.stage)),
        tuple(sorted(checked_dims.items())),
    )


def parse_tensor_parallel(text: str) -> TensorParallelRecord:
    """Parse and validate the entry's text.

    Checked: the format is 1; every configuration has a distinct non-empty name, ``num_shards
    >= 1``, stages within ``[0, num_shards)`` listed once, each with ``degree >= 1`` and that
    many distinct device indices ``>= 0``, no device shared by two stages, and dims that are
    positive integers.

    Raises:
        OmnyFormatError: The text is malformed; ``path`` is the JSON path of the offending
            element, below ``metadata_props[onnx_ir_multidevice.tensor_parallel]``.
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise OmnyFormatError(_PATH, f"not JSON ({error})") from error  # callers add advice
    data = _object(value, _PATH, ("configurations", "format"))
    if data["format"] != TENSOR_PARALLEL_FORMAT or isinstance(data["format"], bool):
        raise OmnyFormatError(
            f"{_PATH}.format",
            f"format {data['format']!r} is not understood (this version reads "
            f"{TENSOR_PARALLEL_FORMAT})",
        )
    raw = data["configurations"]
    if not isinstance(raw, list):
        raise OmnyFormatError(f"{_PATH}.configurations", "expected a list")
    configurations = []
    names: set[str] = set()
    for i, item in enumerate(raw):
        configuration = _configuration(item, f"{_PATH}.configurations[{i}]")
        if configuration.name in names:
            raise OmnyFormatError(
                f"{_PATH}.configurations[{i}].name",
                f"configuration {configuration.name!r} listed twice",
            )
        names.add(configuration.name)
        configurations.append(configuration)
    return TensorParallelRecord(tuple(configurations))


def read_tensor_parallel(model: ir.Model) -> TensorParallelRecord | None:
    """Return the tensor-parallel record of ``model``, or ``None`` when it has none.

    Raises:
        OmnyFormatError: The entry exists but is malformed (see :func:`parse_tensor_parallel`).
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
    """
    require_model(model, "read_tensor_parallel")
    text = model.metadata_props.get(TENSOR_PARALLEL_KEY)
    return None if text is None else parse_tensor_parallel(text)


def write_tensor_parallel(model: ir.Model, record: TensorParallelRecord | None) -> bool:
    """Record ``record`` in ``model.metadata_props`` (in place); ``None`` removes the entry.

    A record without configurations removes it too. The text is validated by parsing it back,
    so an invalid record is never written.

    Returns:
        Whether the entry changed.

    Raises:
        OmnyFormatError: The record is invalid (the path names the element).
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
    """
    require_model(model, "write_tensor_parallel")
    before = model.metadata_props.get(TENSOR_PARALLEL_KEY)
    if record is None or not record.configurations:
        model.metadata_props.pop(TENSOR_PARALLEL_KEY, None)
        return before is not None
    text = record.to_json()
    parse_tensor_parallel(text)
    model.metadata_props[TENSOR_PARALLEL_KEY] = text
    return before != text
