"""``manifest.json`` of a split directory: how the stage files chain, as frozen dataclasses.

:class:`SplitManifest` is the document: :meth:`SplitManifest.build` describes the stages of a
split (``omny split``, :func:`save_split`, the exporters), :meth:`SplitManifest.write` and
:meth:`SplitManifest.read` put it in and take it from a split directory (the pipeline runtime,
``omny run``, :func:`~onnx_ir_multidevice.runtime.measure.measure_stages`),
:meth:`SplitManifest.from_json` / :meth:`SplitManifest.to_json` convert the text. The format
lives in this module only; its keys are described in ``docs/splitting.md``.

Rules the module follows (those of the ``.omny`` format layer):

* **Lossless.** A document that was read and not changed is written back byte for byte (the
  parsed object keeps its source text; :func:`dataclasses.replace` and the constructors drop
  it). A changed or new document is written as ``json.dumps(document, indent=2)`` and a
  newline, which is what ``omny split`` has always written.
* **Unknown keys are kept**, at every level, in the ``extra`` mapping of the object that holds
  them, and written back after the known keys.
* **Strict parsing, located errors.** Every problem raises :class:`ManifestError`, an
  :class:`~onnx_ir_multidevice.OmnyFormatError` whose ``path`` names the JSON element
  (``stages[1].inputs[0].from``) and whose message says what to do. Every key ``omny split``
  writes is required, except ``stages[i].external_data`` (``()`` when missing;
  :meth:`SplitManifest.build` leaves it empty, as no file is written yet).
* **Files stay in the folder.** Reading from a folder refuses any file name that leads out
  of it (:func:`inside_folder`).
"""

from __future__ import annotations

__all__ = [
    "GRAPH_INPUT",
    "GRAPH_OUTPUT",
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "Destination",
    "ManifestError",
    "ManifestCollective",
    "ManifestInput",
    "ManifestOutput",
    "ManifestRank",
    "ManifestStage",
    "ManifestTensorParallel",
    "Source",
    "SplitManifest",
    "build_manifest",
    "read_manifest",
]

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NoReturn

import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyFormatError, OmnyIOError, SplitError
from onnx_ir_multidevice._regular_files import read_regular
from onnx_ir_multidevice.omny._schema import _freeze, _FrozenDict

MANIFEST_FORMAT = "onnx-ir-multidevice/split"
"""Value of the ``format`` key of ``manifest.json``."""

MANIFEST_VERSION = 1
"""Value of the ``version`` key of ``manifest.json``."""

MANIFEST_NAME = "manifest.json"
"""File name of the manifest, next to the stage models."""

GRAPH_INPUT: Literal["input"] = "input"
"""``from`` of a stage input that is a graph input (fed by the caller, not by a stage)."""

GRAPH_OUTPUT: Literal["output"] = "output"
"""Entry of an output's ``to`` when the tensor is a graph output (returned to the caller)."""

Source = int | Literal["input"]
"""Where a stage input comes from: ``"input"`` (:data:`GRAPH_INPUT`) or a stage index."""

Destination = int | Literal["output"]
"""Who reads a stage output: a stage index or ``"output"`` (:data:`GRAPH_OUTPUT`)."""

_FIX = "split the model again (`omny split`) or correct the file"
"""What to do about a malformed manifest, said at the end of every message."""


def _stage_file(index: int) -> str:
    return f"stage_{index}.onnx"


# ---------------------------------------------------------------------------------------------
# Errors


class ManifestError(OmnyFormatError):
    """A ``manifest.json`` is malformed; :attr:`path` says where in the document.

    Attributes:
        file: The manifest file (``None`` for a document parsed from text).
        path: JSON path of the offending element, e.g. ``stages[1].file`` (``""``: the whole
            document).
        reason: What is wrong, and what to do.
    """

    def __init__(self, file: str | os.PathLike | None, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.file = None if file is None else os.fspath(file)
        message = f"{path}: {reason}" if path else reason
        self.args = (message if self.file is None else f"{self.file}: {message}",)


# ---------------------------------------------------------------------------------------------
# The dataclasses


def _extra_field() -> Any:
    return dataclasses.field(default_factory=_FrozenDict, kw_only=True)


def _frozen_extra(owner: object) -> None:
    """Make ``owner.extra`` a deeply read-only JSON object (a caller may give a dict)."""
    extra = owner.extra  # type: ignore[attr-defined]
    if type(extra) is not _FrozenDict:
        frozen = _freeze(extra, "extra")
        if not isinstance(frozen, _FrozenDict):
            raise TypeError(f"extra must be a mapping, got {type(extra).__name__}")
        object.__setattr__(owner, "extra", frozen)


def _thaw(extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` as plain JSON values (``dict`` and ``list``), for :meth:`SplitManifest.to_dict`."""

    def thaw(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: thaw(item) for key, item in value.items()}
        if isinstance(value, tuple):
            return [thaw(item) for item in value]
        return value

    return thaw(extra)


def _tuples(owner: object, *names: str) -> None:
    for name in names:
        value = getattr(owner, name)
        if type(value) is not tuple:
            object.__setattr__(owner, name, tuple(value))


@dataclasses.dataclass(frozen=True)
class ManifestInput:
    """A tensor a stage reads (``stages[i].inputs[j]``).

    .. versionadded:: 0.1
    """

    name: str
    """Tensor name (the stage model's graph input of that name)."""

    source: Source
    """Where it comes from (the JSON key ``from``): :data:`GRAPH_INPUT` (``"input"``) for a
    graph input, which the caller feeds, else the 0-based index of the earlier stage that
    produces it."""

    extra: Mapping[str, Any] = _extra_field()
    """Keys of this object the format does not define, in document order (read-only)."""

    def __post_init__(self) -> None:
        _frozen_extra(self)

    @property
    def is_graph_input(self) -> bool:
        """Whether the tensor is a graph input (:attr:`source` is :data:`GRAPH_INPUT`)."""
        return self.source == GRAPH_INPUT

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: ``{"name", "from"}``, then :attr:`extra`."""
        return {"name": self.name, "from": self.source, **_thaw(self.extra)}


@dataclasses.dataclass(frozen=True)
class ManifestOutput:
    """A tensor a stage produces (``stages[i].outputs[j]``).

    .. versionadded:: 0.1
    """

    name: str
    """Tensor name (the stage model's graph output of that name)."""

    to: tuple[Destination, ...]
    """Who reads it: the 0-based indices of the later stages that do, in increasing order,
    then :data:`GRAPH_OUTPUT` (``"output"``) when it is a graph output. Empty when nothing
    reads it."""

    extra: Mapping[str, Any] = _extra_field()
    """Keys of this object the format does not define, in document order (read-only)."""

    def __post_init__(self) -> None:
        _tuples(self, "to")
        _frozen_extra(self)

    @property
    def destinations(self) -> tuple[int, ...]:
        """The stages that read it (:attr:`to` without :data:`GRAPH_OUTPUT`)."""
        return tuple(t for t in self.to if isinstance(t, int))

    @property
    def is_graph_output(self) -> bool:
        """Whether the tensor is a graph output (:data:`GRAPH_OUTPUT` is in :attr:`to`)."""
        return GRAPH_OUTPUT in self.to

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: ``{"name", "to"}``, then :attr:`extra`."""
        return {"name": self.name, "to": list(self.to), **_thaw(self.extra)}


@dataclasses.dataclass(frozen=True)
class ManifestCollective:
    """One collective between two segments of a tensor-parallel stage.

    ``stages[i].tensor_parallel.steps[s][j]``: after segment ``s`` of every rank, the ranks'
    pieces ``partial`` are made whole as ``value`` (``AllReduce``: summed; ``AllGather``:
    concatenated on ``axis``, block by block when ``blocks`` > 1).

    .. versionadded:: 0.1
    """

    kind: str
    """``"AllReduce"`` or ``"AllGather"``."""

    value: str
    """The whole value's name (what the next segments and the stage outputs read)."""

    partial: str
    """The name of each rank's piece (an output of segment ``s``)."""

    axis: int = -1
    """``AllGather``: the axis the pieces are joined on."""

    blocks: int = 1
    """``AllGather``: how many equal blocks the axis is made of."""

    extra: Mapping[str, Any] = _extra_field()
    """Keys of this object the format does not define, in document order (read-only)."""

    def __post_init__(self) -> None:
        _frozen_extra(self)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: ``kind``, ``value``, ``partial``, ``axis``, ``blocks``."""
        return {
            "kind": self.kind,
            "value": self.value,
            "partial": self.partial,
            "axis": self.axis,
            "blocks": self.blocks,
            **_thaw(self.extra),
        }


@dataclasses.dataclass(frozen=True)
class ManifestRank:
    """One rank of a tensor-parallel stage: its segment files and its weight slices.

    .. versionadded:: 0.1
    """

    rank: int
    """0-based rank (rank ``k`` holds slice ``k`` of every sharded weight)."""

    device: int
    """The device index (into the IR v11 configuration's devices) the record gives it."""

    segments: tuple[str, ...]
    """Segment ``s``'s model file, relative to the manifest, in order."""

    external_data: tuple[str, ...] = ()
    """The rank's weight file(s), relative to the manifest (all its segments read one)."""

    extra: Mapping[str, Any] = _extra_field()
    """Keys of this object the format does not define, in document order (read-only)."""

    paths: tuple[pathlib.Path, ...] = dataclasses.field(default=(), compare=False, kw_only=True)
    """The segment files, when the manifest was read from a folder. Not part of the document."""

    def __post_init__(self) -> None:
        _tuples(self, "segments", "external_data", "paths")
        _frozen_extra(self)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: ``rank``, ``device``, ``segments``, ``external_data``."""
        return {
            "rank": self.rank,
            "device": self.device,
            "segments": list(self.segments),
            "external_data": list(self.external_data),
            **_thaw(self.extra),
        }


@dataclasses.dataclass(frozen=True)
class ManifestTensorParallel:
    """How a stage is split over the ranks of a tensor-parallel group.

    ``stages[i].tensor_parallel``, absent for a stage that runs on one device.

    Every rank holds the same number of segments; ``steps[s]`` are the collectives run after
    segment ``s`` of every rank (the last step is empty).

    .. versionadded:: 0.1
    """

    degree: int
    """How many ranks (at least 2)."""

    devices: tuple[int, ...]
    """The device of each rank (the record's ``devices``)."""

    ranks: tuple[ManifestRank, ...]
    """The ranks, in order."""

    steps: tuple[tuple[ManifestCollective, ...], ...]
    """``steps[s]``: the collectives after segment ``s``."""

    extra: Mapping[str, Any] = _extra_field()
    """Keys of this object the format does not define, in document order (read-only)."""

    def __post_init__(self) -> None:
        _tuples(self, "devices", "ranks")
        object.__setattr__(self, "steps", tuple(tuple(step) for step in self.steps))
        _frozen_extra(self)

    @property
    def num_segments(self) -> int:
        """Segments per rank."""
        return len(self.steps)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: ``degree``, ``devices``, ``ranks``, ``steps``."""
        return {
            "degree": self.degree,
            "devices": list(self.devices),
            "ranks": [rank.to_dict() for rank in self.ranks],
            "steps": [[c.to_dict() for c in step] for step in self.steps],
            **_thaw(self.extra),
        }


@dataclasses.dataclass(frozen=True)
class ManifestStage:
    """One entry of ``stages`` in ``manifest.json``: a stage model and how it chains.

    .. versionadded:: 0.1
    """

    index: int
    """0-based stage index (the entries are listed in this order; stage ``k`` runs on device
    ``k``)."""

    file: str
    """File name of the stage model, relative to the manifest."""

    inputs: tuple[ManifestInput, ...]
    """The tensors the stage reads, in the order of the stage model's graph inputs."""

    outputs: tuple[ManifestOutput, ...]
    """The tensors the stage produces, in the order of the stage model's graph outputs."""

    external_data: tuple[str, ...] = ()
    """Weight files the stage reads, relative to the manifest (``()``: none, or not written
    yet: :func:`build_manifest` describes stages before any file exists)."""

    tensor_parallel: ManifestTensorParallel | None = None
    """How the stage is split over a tensor-parallel group (the JSON key is absent when
    ``None``: the stage runs on one device). :attr:`file` is then rank 0's first segment."""

    extra: Mapping[str, Any] = _extra_field()
    """Keys of this object the format does not define, in document order (read-only)."""

    path: pathlib.Path | None = dataclasses.field(default=None, compare=False, kw_only=True)
    """The stage model file, when the manifest was read from a folder: the folder joined with
    :attr:`file` (it exists); ``None`` otherwise. Not part of the document."""

    def __post_init__(self) -> None:
        _tuples(self, "inputs", "outputs", "external_data")
        _frozen_extra(self)

    @property
    def input_names(self) -> tuple[str, ...]:
        """The names of :attr:`inputs`."""
        return tuple(item.name for item in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        """The names of :attr:`outputs`."""
        return tuple(item.name for item in self.outputs)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: ``index``, ``file``, ``inputs``, ``outputs``, ``external_data``.

        Then ``tensor_parallel`` when the stage has it, then :attr:`extra`.
        """
        document = {
            "index": self.index,
            "file": self.file,
            "inputs": [item.to_dict() for item in self.inputs],
            "outputs": [item.to_dict() for item in self.outputs],
            "external_data": list(self.external_data),
        }
        if self.tensor_parallel is not None:
            document["tensor_parallel"] = self.tensor_parallel.to_dict()
        return {**document, **_thaw(self.extra)}


@dataclasses.dataclass(frozen=True)
class SplitManifest:
    """The ``manifest.json`` of a split directory: the stage files and how they chain.

    Build one with :meth:`build`, read one with :meth:`read` (validated, files checked) or
    :meth:`from_json`; write it with :meth:`write` or :meth:`to_json`. Objects are equal when
    their documents are (:attr:`folder` and the stages' ``path`` are not compared).

    .. versionadded:: 0.1
    """

    stages: tuple[ManifestStage, ...]
    """The stages in pipeline order (at least one); ``num_stages`` in the JSON is their
    number."""

    graph_inputs: tuple[str, ...]
    """Names of the inputs a caller feeds to the original model (an initializer that is also
    a graph input, an overridable default, is read by its stage and not listed)."""

    graph_outputs: tuple[str, ...]
    """Names of the original model's outputs. One that is directly a graph input is produced
    by no stage: a runtime takes it from the inputs."""

    extra: Mapping[str, Any] = _extra_field()
    """Keys of the document the format does not define, in document order (read-only)."""

    folder: pathlib.Path | None = dataclasses.field(default=None, compare=False, kw_only=True)
    """The split directory the manifest was read from (``None``: built, or parsed from text).
    Not part of the document."""

    _source: str | None = dataclasses.field(default=None, init=False, compare=False, repr=False)
    # The text it was parsed from, written back while the object is unchanged.

    def __post_init__(self) -> None:
        _tuples(self, "stages", "graph_inputs", "graph_outputs")
        _frozen_extra(self)

    @property
    def num_stages(self) -> int:
        """Number of stages."""
        return len(self.stages)

    def stage_path(self, index: int) -> pathlib.Path:
        """The model file of stage ``index``, in the folder the manifest was read from.

        :meth:`read` checked that it lies inside the folder and exists.

        Raises:
            ValueError: The manifest was not read from a folder (built or parsed from text).
        """
        path = self.stages[index].path
        if path is None:
            raise ValueError(
                "this manifest was not read from a split folder: read it with "
                "SplitManifest.read(folder) to get the stage files"
            )
        return path

    # -- building ---------------------------------------------------------------------------

    @classmethod
    def build(
        cls, model: ir.Model, stages: Sequence[ir.Model], *, files: Sequence[str] | None = None
    ) -> SplitManifest:
        """Describe how ``stages`` (from :func:`~onnx_ir_multidevice.split`) chain together.

        Args:
            model: The model that was split (for its graph inputs and outputs).
            stages: The stage models.
            files: File name of each stage, relative to the manifest; defaults to
                ``stage_<i>.onnx``.

        Returns:
            The manifest, with no :attr:`ManifestStage.external_data` (no file is written).

        Raises:
            SplitError: A stage reads a name that is neither a graph input nor an output of an
                earlier stage.
        """
        # The inputs a caller feeds: an initializer that is also a graph input (an overridable
        # default, as IR v3 models declare every weight) is read by its stage, not fed.
        initializers = model.graph.initializers
        graph_inputs = [v.name or "" for v in model.graph.inputs if v.name not in initializers]
        graph_outputs = [v.name or "" for v in model.graph.outputs]
        produced_by: dict[str, Source] = {v.name or "": GRAPH_INPUT for v in model.graph.inputs}
        consumers: dict[tuple[int, str], list[Destination]] = {}
        entries: list[tuple[list[ManifestInput], list[tuple[str, list[Destination]]]]] = []
        for i, stage in enumerate(stages):
            inputs = []
            for value in stage.graph.inputs:
                name = value.name or ""
                source = produced_by.get(name)
                if source is None:
                    raise SplitError(
                        f"Stage {i} reads {value.name!r}, which is neither a graph input nor an "
                        "output of an earlier stage."
                    )
                if isinstance(source, int):
                    consumers[(source, name)].append(i)
                inputs.append(ManifestInput(name, source))
            outputs = []
            for value in stage.graph.outputs:
                name = value.name or ""
                if name not in produced_by:
                    produced_by[name] = i
                targets: list[Destination] = []
                consumers[(i, name)] = targets
                outputs.append((name, targets))
            entries.append((inputs, outputs))
        output_names = set(graph_outputs)
        for i, (_, outputs) in enumerate(entries):
            for name, targets in outputs:
                if name in output_names and produced_by.get(name) == i:
                    targets.append(GRAPH_OUTPUT)
        return cls(
            stages=tuple(
                ManifestStage(
                    index=i,
                    file=files[i] if files is not None else _stage_file(i),
                    inputs=tuple(inputs),
                    outputs=tuple(ManifestOutput(name, tuple(to)) for name, to in outputs),
                )
                for i, (inputs, outputs) in enumerate(entries)
            ),
            graph_inputs=tuple(graph_inputs),
            graph_outputs=tuple(graph_outputs),
        )

    # -- JSON -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The JSON document, of plain ``dict`` and ``list`` values (``docs/splitting.md``)."""
        return {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "num_stages": self.num_stages,
            "graph_inputs": list(self.graph_inputs),
            "graph_outputs": list(self.graph_outputs),
            "stages": [stage.to_dict() for stage in self.stages],
            **_thaw(self.extra),
        }

    def to_json(self) -> str:
        """The text of ``manifest.json``.

        The source text of an unchanged parsed manifest, else ``json.dumps(self.to_dict(),
        indent=2)`` and a newline (what ``omny split`` writes).
        """
        if self._source is not None:
            return self._source
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, document: Any, *, file: str | os.PathLike | None = None) -> SplitManifest:
        """Validate a parsed JSON document (as :func:`json.loads` gives it).

        Args:
            document: The document.
            file: The file it was read from, named in errors.

        Raises:
            ManifestError: The document is malformed; ``path`` names the element.
        """
        return _Reader(file).manifest(document)

    @classmethod
    def from_json(
        cls, text: str | bytes, *, file: str | os.PathLike | None = None
    ) -> SplitManifest:
        """Parse and validate the text of a ``manifest.json``; :meth:`to_json` gives it back.

        Args:
            text: The JSON text (bytes are decoded as UTF-8).
            file: The file it was read from, named in errors.

        Raises:
            ManifestError: The text is not JSON or the document is malformed.
        """
        try:
            if isinstance(text, bytes):
                text = text.decode("utf-8")
            document = json.loads(text)
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError alike
            raise ManifestError(file, "", f"not valid JSON: {exc}; {_FIX}") from exc
        manifest = cls.from_dict(document, file=file)
        object.__setattr__(manifest, "_source", text)
        return manifest

    # -- folders ----------------------------------------------------------------------------

    @classmethod
    def read(cls, folder: str | os.PathLike) -> SplitManifest:
        """Read and validate the ``manifest.json`` of a directory written by ``omny split``.

        Args:
            folder: The split directory.

        Returns:
            The manifest, with :attr:`folder` and the path of every stage file.

        Raises:
            OmnyIOError: The directory has no manifest, it cannot be read, or a stage file it
                names does not exist.
            ManifestError: The manifest is not valid JSON, is of another format or version, an
                entry is malformed, or a file it names is outside the split folder (an
                absolute path, ``..``, a symbolic link leading out); ``path`` names the
                entry, e.g. ``stages[1].file``.
        """
        folder = pathlib.Path(folder)
        file = folder / MANIFEST_NAME
        manifest = cls.from_json(_load_text(folder, file), file=file)
        stages = []
        for stage in manifest.stages:
            where = f"stages[{stage.index}]"
            path = inside_folder(file, f"{where}.file", stage.file)
            if not path.is_file():
                raise OmnyIOError(f"{file}: {where}.file: {path} does not exist")
            for k, data in enumerate(stage.external_data):
                _require_data(file, f"{where}.external_data[{k}]", data)
            parallel = stage.tensor_parallel
            if parallel is not None:
                ranks = []
                for rank in parallel.ranks:
                    at = f"{where}.tensor_parallel.ranks[{rank.rank}]"
                    paths = []
                    for s, name in enumerate(rank.segments):
                        segment = inside_folder(file, f"{at}.segments[{s}]", name)
                        if not segment.is_file():
                            raise OmnyIOError(
                                f"{file}: {at}.segments[{s}]: {segment} does not exist"
                            )
                        paths.append(segment)
                    for k, data in enumerate(rank.external_data):
                        _require_data(file, f"{at}.external_data[{k}]", data)
                    ranks.append(dataclasses.replace(rank, paths=tuple(paths)))
                parallel = dataclasses.replace(parallel, ranks=tuple(ranks))
            stages.append(dataclasses.replace(stage, path=path, tensor_parallel=parallel))
        source = manifest._source
        manifest = dataclasses.replace(manifest, stages=tuple(stages), folder=folder)
        object.__setattr__(manifest, "_source", source)  # paths are not part of the document
        return manifest

    def write(self, folder: str | os.PathLike) -> pathlib.Path:
        """Write :meth:`to_json` to ``folder/manifest.json``, as UTF-8, newlines untranslated.

        The folder exists. The file is written in place; :func:`save_split` writes the whole
        split directory atomically, manifest included.

        Returns:
            The file written.
        """
        file = pathlib.Path(folder) / MANIFEST_NAME
        with open(file, "w", encoding="utf-8", newline="") as f:
            f.write(self.to_json())
        return file


Manifest = SplitManifest
"""The former name of :class:`SplitManifest` (what :func:`read_manifest` returned)."""


# ---------------------------------------------------------------------------------------------
# Validation


def _kind(value: Any) -> str:
    """How a JSON value is named in messages (``a string``, ``the number -1``...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    names: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
    return names.get(type(value), repr(value))


class _Reader:
    """Validates a parsed document into the dataclasses; errors name ``file`` and the path."""

    def __init__(self, file: str | os.PathLike | None) -> None:
        self.file = file

    def fail(self, path: str, reason: str) -> NoReturn:
        raise ManifestError(self.file, path, f"{reason}; {_FIX}")

    def object(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(path, f"expected an object, got {_kind(value)}")
        return value

    def key(self, container: dict[str, Any], key: str, where: str, what: str) -> Any:
        if key not in container:
            self.fail(f"{where}.{key}" if where else key, f"missing: expected {what}")
        return container[key]

    def list(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {_kind(value)}")
        return value

    def integer(self, value: Any, path: str, low: int, high: int, what: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value < high:
            self.fail(path, f"expected {what}, got {_kind(value)}")
        return value

    def names(self, value: Any, path: str) -> tuple[str, ...]:
        items = self.list(value, path)
        for i, name in enumerate(items):
            if not isinstance(name, str) or not name:
                self.fail(f"{path}[{i}]", f"expected a tensor name, got {_kind(name)}")
        return tuple(items)

    @staticmethod
    def extra(container: dict[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
        return {k: v for k, v in container.items() if k not in known}

    def manifest(self, document: Any) -> SplitManifest:
        if not isinstance(document, dict):
            raise ManifestError(self.file, "", f"expected a JSON object; {_FIX}")
        declared = document.get("format")
        if declared != MANIFEST_FORMAT:
            self.fail("format", f"expected {MANIFEST_FORMAT!r}, got {declared!r}")
        version = document.get("version")
        if version != MANIFEST_VERSION or isinstance(version, bool):
            raise ManifestError(
                self.file,
                "version",
                f"this reader knows version {MANIFEST_VERSION}, got {version!r}; split the "
                "model again with this version (`omny split`), or read it with the version "
                "that wrote it",
            )
        entries = self.list(self.key(document, "stages", "", "the list of stages"), "stages")
        if not entries:
            self.fail("stages", "expected a non-empty list, got an empty one")
        count = len(entries)
        stages = tuple(self.stage(entry, i, count) for i, entry in enumerate(entries))
        num_stages = self.key(document, "num_stages", "", "the number of stages")
        if num_stages != count or isinstance(num_stages, bool):
            self.fail("num_stages", f"says {num_stages!r} but {count} stages are listed")
        self.chained(stages)
        known = ("format", "version", "num_stages", "graph_inputs", "graph_outputs", "stages")
        return SplitManifest(
            stages=stages,
            graph_inputs=self.names(
                self.key(document, "graph_inputs", "", "the input names"), "graph_inputs"
            ),
            graph_outputs=self.names(
                self.key(document, "graph_outputs", "", "the output names"), "graph_outputs"
            ),
            extra=self.extra(document, known),
        )

    def chained(self, stages: tuple[ManifestStage, ...]) -> None:
        """Every input from a stage is an output of that stage sent to the reader."""
        for stage in stages:
            for j, item in enumerate(stage.inputs):
                if item.is_graph_input:
                    continue
                producer = stages[int(item.source)]
                if not any(
                    output.name == item.name and stage.index in output.to
                    for output in producer.outputs
                ):
                    self.fail(
                        f"stages[{stage.index}].inputs[{j}].from",
                        f"stage {item.source} sends no {item.name!r} to stage {stage.index} "
                        f"(stages[{item.source}].outputs lists no such output with "
                        f"{stage.index} in its 'to')",
                    )

    def stage(self, value: Any, i: int, count: int) -> ManifestStage:
        where = f"stages[{i}]"
        entry = self.object(value, where)
        index = self.key(entry, "index", where, f"the stage index {i}")
        if index != i or isinstance(index, bool):
            self.fail(f"{where}.index", f"expected {i} (stages are listed in order), got {index!r}")
        file = self.key(entry, "file", where, "the stage model's file name")
        if not isinstance(file, str) or not file:
            self.fail(f"{where}.file", f"expected the stage model's file name, got {_kind(file)}")
        inputs = self.list(
            self.key(entry, "inputs", where, "the list of inputs"), f"{where}.inputs"
        )
        outputs = self.list(
            self.key(entry, "outputs", where, "the list of outputs"), f"{where}.outputs"
        )
        external = entry.get("external_data", [])
        if not isinstance(external, list) or not all(isinstance(x, str) and x for x in external):
            self.fail(f"{where}.external_data", "expected a list of file names")
        return ManifestStage(
            index=i,
            file=file,
            inputs=tuple(
                self.input(item, f"{where}.inputs[{j}]", i) for j, item in enumerate(inputs)
            ),
            outputs=tuple(
                self.output(item, f"{where}.outputs[{j}]", i, count)
                for j, item in enumerate(outputs)
            ),
            external_data=tuple(external),
            tensor_parallel=(
                self.tensor_parallel(entry["tensor_parallel"], f"{where}.tensor_parallel")
                if "tensor_parallel" in entry
                else None
            ),
            extra=self.extra(
                entry, ("index", "file", "inputs", "outputs", "external_data", "tensor_parallel")
            ),
        )

    def files(self, value: Any, path: str, *, empty: bool) -> tuple[str, ...]:
        items = self.list(value, path)
        if not empty and not items:
            self.fail(path, "expected a non-empty list of file names, got an empty one")
        for i, name in enumerate(items):
            if not isinstance(name, str) or not name:
                self.fail(f"{path}[{i}]", f"expected a file name, got {_kind(name)}")
        return tuple(items)

    def tensor_parallel(self, value: Any, where: str) -> ManifestTensorParallel:
        entry = self.object(value, where)
        big = 1 << 31
        degree = self.integer(
            self.key(entry, "degree", where, "the number of ranks"),
            f"{where}.degree", 2, big, "a number of ranks of at least 2",
        )  # fmt: skip
        devices_list = self.list(
            self.key(entry, "devices", where, "the device of each rank"), f"{where}.devices"
        )
        devices = tuple(
            self.integer(d, f"{where}.devices[{k}]", 0, big, "a device index")
            for k, d in enumerate(devices_list)
        )
        if len(devices) != degree or len(set(devices)) != degree:
            self.fail(f"{where}.devices", f"expected {degree} distinct device indices")
        raw_ranks = self.list(self.key(entry, "ranks", where, "the ranks"), f"{where}.ranks")
        if len(raw_ranks) != degree:
            self.fail(f"{where}.ranks", f"expected {degree} ranks, got {len(raw_ranks)}")
        raw_steps = self.list(
            self.key(entry, "steps", where, "the collectives after each segment"),
            f"{where}.steps",
        )
        if not raw_steps:
            self.fail(f"{where}.steps", "expected one list of collectives per segment")
        ranks = []
        for k, item in enumerate(raw_ranks):
            at = f"{where}.ranks[{k}]"
            rank = self.object(item, at)
            number = self.key(rank, "rank", at, f"the rank {k}")
            if number != k or isinstance(number, bool):
                self.fail(f"{at}.rank", f"expected {k} (ranks are listed in order), got {number!r}")
            device = self.integer(
                self.key(rank, "device", at, "a device index"), f"{at}.device", 0, big,
                "a device index",
            )  # fmt: skip
            if device != devices[k]:
                self.fail(f"{at}.device", f"says {device} but devices[{k}] is {devices[k]}")
            segments = self.files(
                self.key(rank, "segments", at, "the segment files"), f"{at}.segments", empty=False
            )
            if len(segments) != len(raw_steps):
                self.fail(
                    f"{at}.segments",
                    f"{len(segments)} segments for {len(raw_steps)} steps; give one step per "
                    "segment",
                )
            data = self.files(rank.get("external_data", []), f"{at}.external_data", empty=True)
            ranks.append(
                ManifestRank(
                    k,
                    device,
                    segments,
                    data,
                    extra=self.extra(rank, ("rank", "device", "segments", "external_data")),
                )
            )
        steps = []
        for s, step in enumerate(raw_steps):
            items = self.list(step, f"{where}.steps[{s}]")
            steps.append(
                tuple(self.collective(c, f"{where}.steps[{s}][{j}]") for j, c in enumerate(items))
            )
        return ManifestTensorParallel(
            degree, devices, tuple(ranks), tuple(steps),
            extra=self.extra(entry, ("degree", "devices", "ranks", "steps")),
        )  # fmt: skip

    def collective(self, value: Any, where: str) -> ManifestCollective:
        item = self.object(value, where)
        kind = self.key(item, "kind", where, "'AllReduce' or 'AllGather'")
        if kind not in ("AllReduce", "AllGather"):
            self.fail(f"{where}.kind", f"expected 'AllReduce' or 'AllGather', got {kind!r}")
        names = []
        for key in ("value", "partial"):
            name = self.key(item, key, where, "a tensor name")
            if not isinstance(name, str) or not name:
                self.fail(f"{where}.{key}", f"expected a tensor name, got {_kind(name)}")
            names.append(name)
        axis = self.integer(item.get("axis", -1), f"{where}.axis", -64, 64, "an axis")
        blocks = self.integer(item.get("blocks", 1), f"{where}.blocks", 1, 1 << 31, "blocks >= 1")
        return ManifestCollective(
            kind, names[0], names[1], axis, blocks,
            extra=self.extra(item, ("kind", "value", "partial", "axis", "blocks")),
        )  # fmt: skip

    def input(self, value: Any, where: str, stage: int) -> ManifestInput:
        item = self.object(value, where)
        name = self.key(item, "name", where, "a tensor name")
        if not isinstance(name, str) or not name:
            self.fail(f"{where}.name", f"expected a tensor name, got {_kind(name)}")
        source = self.key(item, "from", where, f"{GRAPH_INPUT!r} or a stage index")
        if source != GRAPH_INPUT:
            earlier = f"{GRAPH_INPUT!r} or the index of an earlier stage (0 to {stage - 1})"
            self.integer(source, f"{where}.from", 0, stage, earlier if stage else repr(GRAPH_INPUT))
        return ManifestInput(name, source, extra=self.extra(item, ("name", "from")))

    def output(self, value: Any, where: str, stage: int, count: int) -> ManifestOutput:
        item = self.object(value, where)
        name = self.key(item, "name", where, "a tensor name")
        if not isinstance(name, str) or not name:
            self.fail(f"{where}.name", f"expected a tensor name, got {_kind(name)}")
        targets = self.list(
            self.key(item, "to", where, "the list of stages that read it"), f"{where}.to"
        )
        later = f"{GRAPH_OUTPUT!r} or the index of a later stage ({stage + 1} to {count - 1})"
        for k, target in enumerate(targets):
            if target != GRAPH_OUTPUT:
                what = later if stage + 1 < count else repr(GRAPH_OUTPUT)
                self.integer(target, f"{where}.to[{k}]", stage + 1, count, what)
        return ManifestOutput(name, tuple(targets), extra=self.extra(item, ("name", "to")))


# ---------------------------------------------------------------------------------------------
# Files


def _load_text(folder: pathlib.Path, file: pathlib.Path) -> bytes:
    if not os.path.lexists(file):
        raise OmnyIOError(
            f"{folder}: is a directory without {MANIFEST_NAME}; pass a directory written by "
            "`omny split`, or a model file"
        )
    try:
        return read_regular(file, "manifest")
    except OSError as exc:
        raise OmnyIOError(
            f"cannot read {file}: {exc}; expected a directory written by `omny split`"
        ) from exc


def inside_folder(file: pathlib.Path, where: str, name: str) -> pathlib.Path:
    """The path of ``name``, a file the manifest ``file`` names, refused outside its folder.

    The one check of every file name a manifest gives (stage models, their data files): a
    relative path that stays inside the split folder once normalised and once symbolic links
    are followed.

    Raises:
        ManifestError: ``name`` is empty, absolute, holds a NUL byte, or leads out of the
            folder (``..``, a link); ``where`` names the entry.
    """
    folder = file.parent
    if not name or "\0" in name:
        raise ManifestError(
            file, where, f"expected a file name inside the split folder, got {name!r}"
        )
    if os.path.isabs(name) or name.startswith(("/", "\\")) or pathlib.PureWindowsPath(name).drive:
        raise ManifestError(
            file,
            where,
            f"{name!r} is an absolute path, outside the split folder; a manifest names its "
            "files relative to its own folder (rewrite it, or split the model again)",
        )
    real_folder = os.path.realpath(folder)
    real = os.path.realpath(folder / name)
    if real != real_folder and not real.startswith(real_folder.rstrip(os.sep) + os.sep):
        raise ManifestError(
            file,
            where,
            f"{name!r} leads to {real}, outside the split folder ({real_folder}); a manifest "
            "names files inside its own folder (rewrite it, or split the model again)",
        )
    return folder / name


# ---------------------------------------------------------------------------------------------
# Functions (the first API; each is one method of SplitManifest)


def build_manifest(
    model: ir.Model, stages: Sequence[ir.Model], *, files: Sequence[str] | None = None
) -> SplitManifest:
    """Describe how ``stages`` (from :func:`split`) chain together: :meth:`SplitManifest.build`.

    Args:
        model: The model that was split (for its graph inputs and outputs).
        stages: The stage models.
        files: File name of each stage, relative to the manifest; defaults to
            ``stage_<i>.onnx``.

    Returns:
        The manifest (:meth:`SplitManifest.to_dict` gives the JSON document).

    Raises:
        SplitError: A stage reads a name that is neither a graph input nor an output of an
            earlier stage.
    """
    return SplitManifest.build(model, stages, files=files)


def _require_data(manifest: pathlib.Path, where: str, name: str) -> None:
    """Check that the data file ``name`` of a manifest entry is inside the folder and exists.

    Raises:
        ManifestError: ``name`` leads out of the split folder.
        OmnyIOError: The file does not exist (deleted or renamed since the split).
    """
    path = inside_folder(manifest, where, name)
    if not path.is_file():
        raise OmnyIOError(f"{manifest}: {where}: {path} does not exist; {_FIX}")


def read_manifest(folder: str | os.PathLike) -> SplitManifest:
    """Read and validate the ``manifest.json`` of a split directory: :meth:`SplitManifest.read`.

    Args:
        folder: The split directory.

    Returns:
        The manifest, with the path of every stage file.

    Raises:
        OmnyIOError: The directory has no manifest, it cannot be read, or a stage file it
            names does not exist.
        ManifestError: The manifest is not valid JSON, is of another format or version, an
            entry is malformed, or a file it names is outside the split folder (an absolute
            path, ``..``, a symbolic link leading out) (an
            :class:`~onnx_ir_multidevice.OmnyFormatError` whose ``path`` names the entry,
            e.g. ``stages[1].file``).
    """
    return SplitManifest.read(folder)
