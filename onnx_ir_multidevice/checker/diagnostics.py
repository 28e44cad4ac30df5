"""Diagnostics reported by the checker: stable codes, severities and locations.

A :class:`Diagnostic` is one finding of :func:`onnx_ir_multidevice.check`. Its
``code`` is stable across releases (tools may filter on it) and belongs to one family:

* ``OMNY1xx`` -- the ``.omny`` format: the spec's validation rules and cut-point
  requirements, checked against the graph; ``OMNY14x``, the v2 container a model was read
  from (header fields, manifest).
* ``OMNY2xx`` -- the IR v11 multi-device fields (``ModelConfiguration``,
  ``NodeDeviceConfiguration``, ``ShardingSpec``): everything onnx-ir's private
  ``_check_device_configurations`` checks, and more.
* ``OMNY3xx`` -- pipeline consistency: stages along edges, stage numbering, agreement with
  the ``.omny`` plan, and the tensors that cross each stage boundary.

:data:`CODES` lists every code with its default severity, whether it blocks
:func:`~onnx_ir_multidevice.annotate`, and a one-line title: adding a code is one row there,
its rule in the checker and its trigger test.

Locations are strings in one of these forms:

* ``node:<name>`` -- a node (``node:#<index>(<op_type>)`` for an unnamed main-graph node);
* ``value:<name>`` -- a value (tensor);
* ``configuration:<name>`` -- a :class:`~onnx_ir.ModelConfiguration`;
* ``metadata_props[<key>]`` -- an entry of the model's ``metadata_props``;
* a JSON path into the ``omnynet_metadata`` document, such as
  ``sharding.configurations[1].cut_point_ids[2]``;
* ``header.<field>``, ``manifest.<path>`` or ``file[<start>:<end>]`` -- in the ``.omny`` v2
  container the model was read from;
* ``model`` -- the model as a whole.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "CODES",
    "DEFAULT_MAX_PER_CODE",
    "UNREADABLE_CODES",
    "CodeInfo",
    "Diagnostic",
    "Severity",
    "configuration_location",
    "node_location",
    "value_location",
]

import dataclasses
import enum
from collections.abc import Iterable, Mapping

import onnx_ir as ir


class Severity(enum.Enum):
    """How serious a :class:`Diagnostic` is."""

    ERROR = "error"
    """The plan cannot run correctly: annotating, splitting or running it would fail or lie
    (a dangling or ambiguous reference, a backward edge, two activations across a strict
    cut, an overflow)."""

    WARNING = "warning"
    """It runs correctly here, but departs from the ``.omny`` spec (a dynamic non-batch dim
    at a cut) or is probably not what was meant (an idle device). ``strict=True`` makes
    warnings errors."""

    INFO = "info"
    """For information (the tensors crossing a boundary, a configuration not annotated)."""

    def __str__(self) -> str:
        return self.value


_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    """One finding of the checker.

    ``str(diagnostic)`` gives ``"error OMNY132 at <location>: <message>"``.
    """

    code: str
    """Stable code, ``OMNY`` followed by three digits (see :data:`CODES`)."""

    severity: Severity
    """Error, warning or info."""

    message: str
    """What is wrong and what to do about it, in one or two sentences."""

    location: str
    """Where: ``node:<name>``, ``value:<name>``, ``configuration:<name>``,
    ``metadata_props[<key>]``, a JSON path into the ``.omny`` document, or ``model``."""

    def __str__(self) -> str:
        return f"{self.severity.value} {self.code} at {self.location}: {self.message}"

    @property
    def is_error(self) -> bool:
        """Whether the severity is :attr:`Severity.ERROR`."""
        return self.severity is Severity.ERROR

    def to_dict(self) -> dict[str, str]:
        """Return the JSON form: ``{"code", "severity", "message", "location"}``."""
        return {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "location": self.location,
        }

    def sort_key(self) -> int:
        """Sort key that puts errors first, then warnings, then infos (use a stable sort)."""
        return _SEVERITY_ORDER[self.severity]


@dataclasses.dataclass(frozen=True)
class CodeInfo:
    """Description of one diagnostic code: one row of :data:`CODES`."""

    code: str
    """The code, e.g. ``OMNY132``."""

    severity: Severity
    """Default severity (a few codes are downgraded by checker options, as documented)."""

    title: str
    """One-line summary of the rule."""

    blocks_annotate: bool = True
    """Whether an error with this code stops :func:`~onnx_ir_multidevice.annotate` (with
    ``check=True``). False for the pipeline rules about an existing annotation, which
    ``annotate`` rewrites; true for the format, IR and plan rules."""


_Row = tuple[str, Severity, bool, str]
"""One row of :data:`CODES`: code, default severity, whether it blocks annotate, summary."""


def _codes(*rows: _Row) -> Mapping[str, CodeInfo]:
    table: dict[str, CodeInfo] = {}
    for row in rows:
        if len(row) != 4 or not isinstance(row[2], bool):
            raise TypeError(
                f"diagnostic code row {row!r}: expected (code, severity, blocks_annotate, "
                "summary), e.g. ('OMNY199', _E, True, 'What the rule says.')"
            )
        code, severity, blocks_annotate, title = row
        if code in table:
            raise ValueError(f"diagnostic code {code} is listed twice")
        table[code] = CodeInfo(code, severity, title, blocks_annotate)
    return table


_E, _W, _I = Severity.ERROR, Severity.WARNING, Severity.INFO

CODES: Mapping[str, CodeInfo] = _codes(
    # Columns: code, default severity, whether an error blocks annotate(), summary.
    # Adding a code: one row here, its rule in the checker, its trigger in tests/test_check.py
    # (docs/diagnostics.md, "Adding a diagnostic code").
    # --- .omny format and spec rules ---
    ("OMNY100", _I, True, "The model has no .omny metadata; only the IR checks ran."),
    ("OMNY101", _E, True, "The file is not a valid ONNX model."),
    ("OMNY102", _E, True, "omnynet_metadata is present but omnynet_version is missing."),
    ("OMNY103", _E, True, "omnynet_version is present but omnynet_metadata is missing."),
    ("OMNY104", _E, True, "omnynet_metadata is not valid JSON or does not follow the schema."),
    ("OMNY105", _W, True, "Unknown .omny format version."),
    ("OMNY106", _E, True, "load() refuses the model's content (fields onnx-ir drops...)."),
    ("OMNY107", _E, True, "omnynet_version and the JSON document's version disagree."),
    (
        "OMNY108",
        _E,
        True,
        "A tensor's external data is outside the folder, missing or out of range.",
    ),
    ("OMNY109", _E, True, "An external data file is not the one the model was saved with."),
    ("OMNY110", _E, True, "A cut point's after_node is not a node of the graph."),
    ("OMNY111", _E, True, "A cut point's tensor_name is not a value of the graph."),
    ("OMNY112", _E, True, "A cut point's tensor is not an output of its after_node."),
    ("OMNY113", _E, True, "A cut point's node has more than one output tensor."),
    ("OMNY114", _W, True, "A cut tensor's shape is not static (only the batch may be dynamic)."),
    ("OMNY115", _W, True, "A cut tensor's shape or dtype is neither stated nor inferable."),
    ("OMNY116", _E, True, "A cut point's shape or dtype disagrees with the graph."),
    ("OMNY117", _E, True, "A cut point is inside a control-flow body (If/Loop/Scan)."),
    ("OMNY118", _E, True, "Two cut points have the same id."),
    ("OMNY119", _E, True, "A cut point's node or tensor name is shared by several objects."),
    ("OMNY120", _W, True, "A memory estimate is not positive."),
    ("OMNY121", _W, True, "Memory estimates are inconsistent with each other."),
    ("OMNY122", _E, True, "A cut tensor's shape is larger than any device holds (1 PiB)."),
    (
        "OMNY123",
        _E,
        True,
        "A graph input or output's stated shape is larger than any device holds.",
    ),
    ("OMNY124", _E, True, "The model cannot take its planning dims (shapes contradict)."),
    ("OMNY130", _E, True, "No shard configuration is defined."),
    ("OMNY131", _E, True, "A configuration does not list num_shards - 1 cut points."),
    ("OMNY132", _E, True, "A configuration names a cut point id that is not defined."),
    ("OMNY133", _W, True, "memory_per_shard_mb does not have num_shards entries."),
    ("OMNY134", _W, True, "A configuration's num_shards is not in allowed_shards."),
    ("OMNY135", _W, True, "Shard-count limits are inconsistent (min/max/allowed/num_shards)."),
    ("OMNY136", _E, True, "A shard needs more memory than max_shard_size_mb."),
    ("OMNY137", _W, True, "max_shard_size_mb exceeds min_vram_mb (no runtime headroom)."),
    ("OMNY138", _W, True, "A metadata input/output does not name a graph input/output."),
    ("OMNY139", _E, True, "A configuration lists the same cut point twice."),
    # --- .omny v2 container (a model read from an OMNY file) ---
    ("OMNY140", _W, True, "The v2 container's header flags are not zero (kept, not understood)."),
    ("OMNY141", _W, True, "The v2 container has a reserved section (kept, not interpreted)."),
    ("OMNY142", _W, True, "The v2 container has bytes in its padding or outside every section."),
    ("OMNY143", _W, True, "The v2 manifest's version is not 2.0."),
    ("OMNY144", _W, True, "The v2 manifest's tensor names differ from the embedded model's."),
    ("OMNY145", _W, True, "The v2 manifest's allowed shard counts differ from the embedded plan."),
    # --- IR v11 device configurations ---
    ("OMNY200", _E, True, "Multi-device fields on a model with ir_version < 11 (lost on save)."),
    ("OMNY201", _E, True, "A node device configuration has no ModelConfiguration."),
    ("OMNY202", _E, True, "A configuration has an empty name."),
    ("OMNY203", _E, True, "A node references a configuration not declared on the model."),
    ("OMNY204", _E, True, "A node references a same-named copy, not the registered configuration."),
    ("OMNY205", _E, True, "A ShardingSpec has no value."),
    ("OMNY206", _E, True, "A sharded value has an empty name."),
    ("OMNY207", _E, True, "A sharded value is not an input or output of its node."),
    ("OMNY208", _E, True, "A sharded axis is out of range."),
    ("OMNY209", _E, True, "A value is sharded along the same axis more than once."),
    ("OMNY210", _E, True, "A sharded dimension has num_shards < 1."),
    ("OMNY211", _E, True, "A device index is outside the configuration's devices."),
    ("OMNY212", _E, True, "Two model configurations have the same name."),
    ("OMNY213", _E, True, "device_names does not have num_devices entries."),
    ("OMNY214", _E, True, "A configuration has num_devices < 1."),
    ("OMNY215", _E, True, "A node has two device configurations for one configuration."),
    ("OMNY216", _E, True, "A device-group key shadows a device index."),
    ("OMNY217", _W, True, "A device-group key is not used by the spec's devices."),
    ("OMNY218", _E, True, "The number of devices does not match the number of shards."),
    ("OMNY219", _E, True, "A pipeline stage is negative or beyond int32."),
    ("OMNY220", _E, True, "A node shards one value twice under one configuration."),
    ("OMNY221", _W, True, "A sharded axis's size is not a multiple of its shard count (uneven)."),
    ("OMNY222", _E, True, "A sharded dim's stated size disagrees with the value's shape."),
    ("OMNY223", _E, True, "A value's producer and a sharded reader shard it differently."),
    ("OMNY224", _E, True, "A partial sum reaches a non-linear op before its AllReduce."),
    ("OMNY225", _E, True, "The tensor-parallel record is malformed or disagrees with the plan."),
    ("OMNY226", _E, False, "A tensor-parallel region's specs differ from those of the record."),
    # --- pipeline consistency ---
    ("OMNY300", _E, False, "An edge goes from a later stage to an earlier one."),
    ("OMNY301", _E, False, "Some main-graph nodes have no stage in a staged configuration."),
    ("OMNY302", _E, False, "Stages are not contiguous from 0 (a stage has no node)."),
    ("OMNY303", _E, False, "A stage is beyond the configuration's devices."),
    ("OMNY304", _W, False, "Fewer stages than devices: some devices stay idle."),
    ("OMNY305", _W, False, "A node inside a subgraph has a stage other than its parent's."),
    ("OMNY310", _E, False, "The annotated stages contradict a cut point of the .omny plan."),
    ("OMNY311", _W, False, "The annotated stages differ from those the plan's cut points give."),
    ("OMNY312", _I, False, "A .omny configuration is not annotated in the IR."),
    ("OMNY313", _E, False, "An omny/ configuration does not match the .omny plan."),
    ("OMNY320", _E, True, "More than one activation crosses a strict cut."),
    ("OMNY321", _I, False, "Tensors crossing a stage boundary."),
    ("OMNY322", _E, True, "A configuration's cut points cannot be ordered into a pipeline."),
    ("OMNY323", _E, True, "A stage of a configuration's plan has no node."),
    ("OMNY324", _E, True, "A stage of a configuration's plan produces nothing that is read."),
)
"""Every diagnostic code, in order: its default severity, whether an error with it blocks
:func:`~onnx_ir_multidevice.annotate`, and its summary (the registry behind the docs' table)."""


def node_location(node: ir.Node, index: int | None = None) -> str:
    """Return the location string of ``node``: ``node:<name>``.

    Args:
        node: The node.
        index: Its position in the main graph, used for an unnamed node.
    """
    if node.name:
        return f"node:{node.name}"
    if index is not None:
        return f"node:#{index}({node.op_type})"
    return f"node:<unnamed {node.op_type}>"


def value_location(value: ir.Value) -> str:
    """Return the location string of ``value``: ``value:<name>``."""
    return f"value:{value.name}" if value.name else "value:<unnamed>"


def configuration_location(name: str) -> str:
    """Return the location string of a configuration: ``configuration:<name>``."""
    return f"configuration:{name}"


def make(code: str, message: str, location: str, severity: Severity | None = None) -> Diagnostic:
    """Build a :class:`Diagnostic` with the default severity of ``code`` from :data:`CODES`."""
    info = CODES[code]
    return Diagnostic(code, severity or info.severity, message, location)


UNREADABLE_CODES: frozenset[str] = frozenset(
    {"OMNY102", "OMNY103", "OMNY104", "OMNY106", "OMNY107", "OMNY108", "OMNY109"}
)
"""Codes of a file whose model or plan the other commands cannot read.

:func:`~onnx_ir_multidevice.load` or :func:`~onnx_ir_multidevice.omny.read` refuse it
(``OmnyFormatError``), so ``omny check`` exits with status 2 on them, as ``omny split`` and
the others do."""

DEFAULT_MAX_PER_CODE = 20
"""How many diagnostics of one code (and severity) :func:`~onnx_ir_multidevice.check` lists
by default; the rest are counted and summed up in one diagnostic."""


class DiagnosticCollector(list):
    """A list of diagnostics that keeps at most ``limit`` of each code and severity.

    The rules append to it as to a list; past the limit a diagnostic is only counted
    (:meth:`omitted`), so that a file with a million broken cut points costs a million
    counts, not a million messages kept in memory and printed.
    """

    def __init__(self, limit: int | None = DEFAULT_MAX_PER_CODE) -> None:
        """Create an empty collector; ``limit=None`` keeps everything."""
        super().__init__()
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise TypeError(
                f"max_per_code={limit!r}: expected an integer or None (no limit), such as 20"
            )
        if limit is not None and limit < 0:
            raise ValueError(f"max_per_code must be >= 0 or None, got {limit}")
        self.limit = limit
        self._seen: dict[tuple[str, Severity], int] = {}

    def append(self, diagnostic: Diagnostic) -> None:
        """Keep ``diagnostic`` unless its code and severity reached the limit (then count it)."""
        limit = self.limit
        if limit is None:
            super().append(diagnostic)
            return
        key = (diagnostic.code, diagnostic.severity)
        seen = self._seen.get(key, 0) + 1
        self._seen[key] = seen
        if seen <= limit:
            super().append(diagnostic)

    def extend(self, diagnostics: Iterable[Diagnostic]) -> None:
        """:meth:`append` each diagnostic."""
        for diagnostic in diagnostics:
            self.append(diagnostic)

    def omitted(self) -> dict[tuple[str, Severity], int]:
        """How many diagnostics of each code and severity were counted but not kept."""
        limit = self.limit
        if limit is None:
            return {}
        return {key: seen - limit for key, seen in self._seen.items() if seen > limit}


def omitted_summary(code: str, severity: Severity, count: int, shown: int) -> Diagnostic:
    """The diagnostic that stands for ``count`` diagnostics of ``code`` left out of a report."""
    noun = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "info"}[severity]
    plural = noun if count == 1 else f"{noun}s"
    return Diagnostic(
        code,
        severity,
        f"... and {count:,} more {code} {plural} ({CODES[code].title.rstrip('.')}); "
        f"{'the first is' if shown == 1 else f'the first {shown} are'} listed: omny check --all "
        "(max_per_code=None in Python) lists every one",
        "model",
    )
