"""The ``.omny`` metadata format: the ``omnynet_metadata`` JSON as frozen dataclasses.

This layer knows JSON and the schema of the ``.omny`` specification, nothing about graphs.
:meth:`OmnyMetadata.from_json` parses a document, :meth:`OmnyMetadata.to_json` writes one.

Rules the layer follows:

* **Lossless.** A parsed document that was not changed is written back byte for byte (the
  parsed object keeps the source text; :func:`dataclasses.replace` and the constructors drop
  it, so any changed object is re-serialised). A changed document is re-serialised in the
  style detected in its source (indent, separators, arrays of scalars on one line as in the
  specification's example, ``ensure_ascii``, surrounding whitespace), keeps the original key
  order of every object, and keeps the spelling of unchanged numbers (``1200.0``, ``1e3``,
  ``-0``). String escapes of a changed document follow the detected ``ensure_ascii`` only.
* **Unknown keys are kept.** Keys the specification does not define, at every level, go to
  the ``extra`` mapping of the object that holds them and are written back where they were.
* **From scratch means spec-shaped.** An object built with the constructors holds exactly
  the specification's keys in its order (``export_info.validated`` only when not ``None``),
  written as ``json.dumps(obj, indent=2)`` would, which is what the reference writer
  (omnynet-export) produces. Its reader crashes on any key it does not know.
* **Strict, bounded parsing.** Every problem raises
  :class:`~onnx_ir_multidevice.OmnyFormatError` naming the JSON path, e.g.
  ``sharding.configurations[1].cut_point_ids[2]: expected a string, got 3``.

Decisions where the specification is silent:

* Required keys are those whose field has no default: ``name`` and ``shape`` of an input or
  output, ``model.name``, ``id``/``after_node``/``tensor_name``/``shape`` of a cut point, and
  all three keys of a shard configuration. Every other key may be missing and then takes the
  reference writer's default.
* ``bool`` is not an integer. An integral number written as a float (``1200.0``, ``1.2e3``)
  is accepted where the specification says ``int`` and read as the ``int`` 1200; its
  spelling is kept. A non-integral one (``1200.5``) is rejected.
* Integers are signed 64-bit, anywhere in the document (extras included). Memory sizes,
  parameter counts and the opset are ``>= 0``; shard counts (``num_shards``, ``min_shards``,
  ``max_shards``, ``allowed_shards``) are ``>= 1``; ``-1`` (a dynamic dimension) is accepted
  only in the ``shape`` of inputs, outputs and cut points, and no other negative number is.
  Cross-field consistency (``min_shards <= max_shards``, ids that resolve, one memory figure
  per shard...) is the checker's job, not this layer's.
* ``NaN``, ``Infinity``, ``-Infinity``, numbers that overflow a double, duplicate keys, lone
  UTF-16 surrogates and invalid UTF-8 are rejected. Documents are limited in size
  (:data:`MAX_DOCUMENT_SIZE`) and nesting depth (:data:`MAX_NESTING_DEPTH`), checked by a
  linear scan before the JSON parser runs, so hostile input fails fast with a clear error.
"""

from __future__ import annotations

__all__ = [
    "MAX_DOCUMENT_SIZE",
    "MAX_NESTING_DEPTH",
    "OMNY_FORMAT_VERSION",
    "OMNY_METADATA_KEY",
    "OMNY_VERSION_KEY",
    "CutPoint",
    "ExportInfo",
    "ModelInfo",
    "OmnyMetadata",
    "ShardConfiguration",
    "Sharding",
    "TensorInfo",
]

import dataclasses
import itertools
import json
import math
import operator
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

from onnx_ir_multidevice._errors import OmnyFormatError
from onnx_ir_multidevice._util import gc_paused

OMNY_VERSION_KEY = "omnynet_version"
"""Key of the ``metadata_props`` entry that holds the format version."""

OMNY_METADATA_KEY = "omnynet_metadata"
"""Key of the ``metadata_props`` entry that holds the JSON document."""

OMNY_FORMAT_VERSION = "1.0"
"""Version of the ``.omny`` specification this module implements."""

MAX_DOCUMENT_SIZE = 64 * 1024 * 1024
"""Default largest document :meth:`OmnyMetadata.from_json` accepts (bytes, or characters)."""

MAX_NESTING_DEPTH = 64
"""Default deepest nesting of arrays and objects :meth:`OmnyMetadata.from_json` accepts."""

# Filled in once the dataclasses exist (their defaults are built while the tables are empty).
_SCHEMAS: dict[type, dict[str, _Kind]] = {}
_TUPLE_FIELDS: dict[type, tuple[str, ...]] = {}
_REQUIRED: dict[type, tuple[str, ...]] = {}
_DEFAULTS: dict[type, dict[str, Any]] = {}
_SPEC_INDEX: dict[type, dict[str, int]] = {}

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_JSON_WS = " \t\r\n"


# ---------------------------------------------------------------------------------------
# JSON values that remember their spelling, and the frozen JSON object of ``extra``
# ---------------------------------------------------------------------------------------


class _SpelledInt(int):
    """An ``int`` read from a non-canonical spelling (``1200.0``, ``1e3``, ``-0``).

    It equals, hashes and prints as the plain ``int``; the writer uses :attr:`raw`.
    """

    raw: str

    def __new__(cls, value: int, raw: str) -> _SpelledInt:
        self = super().__new__(cls, value)
        self.raw = raw
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_SpelledInt, (int(self), self.raw))

    __repr__ = int.__repr__


class _SpelledFloat(float):
    """A ``float`` read from a non-canonical spelling (``1e2``, ``0.10``); see `_SpelledInt`."""

    raw: str

    def __new__(cls, value: float, raw: str) -> _SpelledFloat:
        self = super().__new__(cls, value)
        self.raw = raw
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_SpelledFloat, (float(self), self.raw))

    __repr__ = float.__repr__


class _FrozenDict(dict):
    """A read-only JSON object: a ``dict`` whose mutating methods raise ``TypeError``.

    Being a ``dict`` it works with ``json.dumps`` and compares equal to a plain ``dict``;
    being immutable (its values are frozen too: tuples, frozen dicts) it is hashable.
    """

    __slots__ = ()

    def _readonly(self, *args: object, **kwargs: object) -> Any:
        raise TypeError("'extra' is read-only; build a new object with dataclasses.replace()")

    __setitem__ = __delitem__ = __ior__ = _readonly
    clear = pop = popitem = setdefault = update = _readonly

    def __hash__(self) -> int:  # type: ignore[override]  # frozen: hashable
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_FrozenDict, (dict(self),))

    def __copy__(self) -> _FrozenDict:
        return self

    def __deepcopy__(self, memo: object) -> _FrozenDict:
        return self


_NO_EXTRA = _FrozenDict()


def _no_extra() -> _FrozenDict:
    return _NO_EXTRA


def _freeze(value: Any, path: str, depth: int = 0) -> Any:
    """Returns a deeply immutable copy of a JSON value given by a caller (for ``extra``)."""
    if depth > MAX_NESTING_DEPTH:
        raise ValueError(f"{path}: nested deeper than {MAX_NESTING_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if not value.isascii() and _SURROGATE_RE.search(value):
            raise ValueError(f"{path}: string contains an unpaired UTF-16 surrogate")
        return value
    if isinstance(value, int):
        # What omny.read accepts, so that a written document reads back.
        if not _INT64_MIN <= value <= _INT64_MAX:
            # str() of an int over 4300 digits raises: name the size of a huge one.
            shown = _short(str(value)) if value.bit_length() < 1000 else "of 1000+ bits"
            raise ValueError(f"{path}: integer {shown} is outside the signed 64-bit range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value!r} cannot be written as JSON")
        return value
    if isinstance(value, Mapping):
        if type(value) is _FrozenDict:
            return value
        frozen = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: object keys must be strings, got {key!r}")
            if not key.isascii() and _SURROGATE_RE.search(key):
                raise ValueError(f"{path}: key {key!r} contains an unpaired UTF-16 surrogate")
            frozen[key] = _freeze(item, _join(path, key), depth + 1)
        return _FrozenDict(frozen)
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
    raise TypeError(f"{path}: {type(value).__name__} is not a JSON value")


# ---------------------------------------------------------------------------------------
# The dataclasses
# ---------------------------------------------------------------------------------------


def _extra_field() -> Any:
    return dataclasses.field(default_factory=_no_extra, kw_only=True)


def _private_field() -> Any:
    # Layout of the parsed source (``_json_keys``: key order of the JSON object, known and
    # unknown keys; ``_json_style``: the document's style). Not part of the value: excluded
    # from ``==``, ``hash`` and ``repr``; ``dataclasses.replace`` copies it.
    return dataclasses.field(default=None, kw_only=True, compare=False, repr=False)


class _Record:
    """Shared ``__post_init__``: sequences become tuples, ``extra`` becomes read-only."""

    def __post_init__(self) -> None:
        cls = type(self)
        for name in _TUPLE_FIELDS.get(cls, ()):
            value = getattr(self, name)
            if type(value) is not tuple:
                object.__setattr__(self, name, tuple(value))
        extra = self.extra  # type: ignore[attr-defined]  # every record class declares extra
        if type(extra) is not _FrozenDict:
            frozen = _freeze(extra, "extra")
            if not isinstance(frozen, _FrozenDict):
                raise TypeError(f"extra must be a mapping, got {type(extra).__name__}")
            known = [key for key in frozen if key in _SCHEMAS[cls]]
            if known:
                raise ValueError(
                    f"extra of {cls.__name__} holds keys of the specification {known}; "
                    "set them with the fields of the same name"
                )
            object.__setattr__(self, "extra", frozen)


@dataclasses.dataclass(frozen=True)
class TensorInfo(_Record):
    """A model input or output (``inputs[i]`` / ``outputs[i]``).

    .. versionadded:: 0.1.0
    """

    name: str
    """Tensor name in the ONNX graph."""

    shape: tuple[int, ...]
    """Tensor shape; ``-1`` marks a dynamic dimension."""

    dtype: str = "float32"
    """Element type, spelled like ``"float32"``, ``"float16"``, ``"int64"``."""

    extra: Mapping[str, Any] = _extra_field()
    """Keys of this object that the specification does not define, in document order.

    Read-only; values are JSON values (``str``, ``int``, ``float``, ``bool``, ``None``,
    tuples for arrays, read-only mappings for objects). Empty for objects built from scratch
    unless given; a non-empty ``extra`` is written back, which the reference reader rejects.
    """

    _json_keys: tuple[str, ...] | None = _private_field()


@dataclasses.dataclass(frozen=True)
class ModelInfo(_Record):
    """The ``model`` object: what the model is and how big.

    .. versionadded:: 0.1.0
    """

    name: str
    """Human-readable model name."""

    architecture: str = "unknown"
    """Architecture type, e.g. ``"vision_transformer"`` or ``"cnn"``."""

    total_params: int = 0
    """Total number of parameters."""

    total_size_mb: int = 0
    """Model file size in MB."""

    inference_memory_mb: int = 0
    """Total memory needed for inference (weights and activations), in MB."""

    extra: Mapping[str, Any] = _extra_field()
    """Keys the specification does not define (read-only); see :attr:`TensorInfo.extra`."""

    _json_keys: tuple[str, ...] | None = _private_field()


@dataclasses.dataclass(frozen=True)
class CutPoint(_Record):
    """A place where the model can be split (``cut_points[i]``).

    .. versionadded:: 0.1.0
    """

    id: str
    """Unique identifier, referenced by :attr:`ShardConfiguration.cut_point_ids`."""

    after_node: str
    """Name of the ONNX node after which the model is cut."""

    tensor_name: str
    """Name of the tensor that crosses the cut (the output of :attr:`after_node`)."""

    shape: tuple[int, ...]
    """Shape of the cut tensor; ``-1`` marks a dynamic dimension."""

    dtype: str = "float32"
    """Element type of the cut tensor."""

    cumulative_memory_mb: int = 0
    """Memory from the start of the model up to this cut, in MB."""

    shard_memory_mb: int = 0
    """Memory of the shard that ends at this cut (from the previous cut), in MB."""

    extra: Mapping[str, Any] = _extra_field()
    """Keys the specification does not define (read-only); see :attr:`TensorInfo.extra`."""

    _json_keys: tuple[str, ...] | None = _private_field()


@dataclasses.dataclass(frozen=True)
class ShardConfiguration(_Record):
    """One precomputed way to shard the model (``sharding.configurations[i]``).

    .. versionadded:: 0.1.0
    """

    num_shards: int
    """Number of shards (stages), ``>= 1``."""

    memory_per_shard_mb: tuple[int, ...]
    """Memory each shard needs, in MB, one entry per shard in pipeline order."""

    cut_point_ids: tuple[str, ...]
    """Ids of the cut points used, in pipeline order (``num_shards - 1`` of them)."""

    extra: Mapping[str, Any] = _extra_field()
    """Keys the specification does not define (read-only); see :attr:`TensorInfo.extra`."""

    _json_keys: tuple[str, ...] | None = _private_field()


@dataclasses.dataclass(frozen=True)
class Sharding(_Record):
    """The ``sharding`` object: memory limits, supported shard counts, configurations.

    .. versionadded:: 0.1.0
    """

    min_vram_mb: int = 1500
    """Minimum memory a device needs, in MB."""

    max_shard_size_mb: int = 1200
    """Largest memory one shard may need, in MB."""

    min_shards: int = 2
    """Smallest supported number of shards, ``>= 1``."""

    max_shards: int = 8
    """Largest supported number of shards, ``>= 1``."""

    allowed_shards: tuple[int, ...] = (2, 4)
    """Shard counts that were tested or are supported, each ``>= 1``."""

    configurations: tuple[ShardConfiguration, ...] = ()
    """Precomputed shard configurations, in document order."""

    extra: Mapping[str, Any] = _extra_field()
    """Keys the specification does not define (read-only); see :attr:`TensorInfo.extra`."""

    _json_keys: tuple[str, ...] | None = _private_field()

    def configuration_index(
        self, shards: int | None = None, choice: int | ShardConfiguration | None = None
    ) -> int | None:
        """Return the position in :attr:`configurations` of the one to use; ``None`` if none fits.

        The one rule of every part that picks a configuration (split, exporters, OAAX, the
        binding, the command line):

        * ``choice`` an ``int``: that index, if it exists;
        * ``choice`` a :class:`ShardConfiguration`: its position (the very object, else the
          first equal one);
        * else the first configuration with ``num_shards == shards``;
        * with neither: the only configuration (``None`` when there are several).

        The caller checks that the chosen configuration has the shard count it needs.

        .. versionadded:: 0.1
        """
        configurations = self.configurations
        if isinstance(choice, int):
            return choice if 0 <= choice < len(configurations) else None
        if choice is not None:
            found = next((i for i, c in enumerate(configurations) if c is choice), None)
            if found is None:
                found = next((i for i, c in enumerate(configurations) if c == choice), None)
            return found
        if shards is None:
            return 0 if len(configurations) == 1 else None
        return next((i for i, c in enumerate(configurations) if c.num_shards == shards), None)


def parse_configuration(value: Any) -> int | str | None:
    """A configuration as the user names it: a ``.omny`` configuration index or an IR v11 name.

    The one reading of ``--configuration ID`` (``omny split``) and of the exporters'
    ``configuration`` option: an ``int``, or a string of digits, is an index into
    :attr:`Sharding.configurations` (:meth:`Sharding.configuration_index` checks that it
    exists); any other string is the name of an IR v11 model configuration; ``None`` is no
    choice.
    """
    if value is None or isinstance(value, int):
        return value
    text = str(value)
    return int(text) if text.isdigit() else text


@dataclasses.dataclass(frozen=True)
class ExportInfo(_Record):
    """The ``export_info`` object: who wrote the file, when, from what.

    .. versionadded:: 0.1.0
    """

    exported_at: str = ""
    """Export time, an ISO 8601 string such as ``"2026-01-06T12:00:00Z"``."""

    exporter_version: str = "0.1.0"
    """Version of the exporter that wrote the file."""

    source_framework: str = "pytorch"
    """Framework the model came from."""

    source_version: str = ""
    """Version of :attr:`source_framework`."""

    onnx_opset: int = 17
    """Default-domain ONNX opset of the model."""

    validated: bool | None = None
    """Whether the exporter validated the model (written by omnynet-export).

    Not in the specification's table. ``None`` means absent: it is written only when not
    ``None``, or as ``null`` when the parsed source had ``"validated": null``.
    """

    extra: Mapping[str, Any] = _extra_field()
    """Keys the specification does not define (read-only); see :attr:`TensorInfo.extra`."""

    _json_keys: tuple[str, ...] | None = _private_field()


@dataclasses.dataclass(frozen=True)
class OmnyMetadata(_Record):
    """The whole ``omnynet_metadata`` document.

    Build one with the constructor (then :meth:`to_json` writes a spec-shaped document) or
    parse one with :meth:`from_json` (then :meth:`to_json` gives the same text back until
    the object is replaced by a changed copy, e.g. with :func:`dataclasses.replace`).

    All dataclasses of this module are frozen and hashable; sequences are tuples; two
    objects are equal when their values and ``extra`` are, whatever their source layout.

    .. versionadded:: 0.1.0
    """

    version: str = OMNY_FORMAT_VERSION
    """Version of the metadata schema, ``"1.0"``."""

    model: ModelInfo = ModelInfo("unknown")
    """What the model is."""

    inputs: tuple[TensorInfo, ...] = ()
    """Graph inputs, in document order."""

    outputs: tuple[TensorInfo, ...] = ()
    """Graph outputs, in document order."""

    cut_points: tuple[CutPoint, ...] = ()
    """Cut points, in document order (which the specification does not require to be the
    pipeline order)."""

    sharding: Sharding = Sharding()
    """Memory limits and precomputed shard configurations."""

    export_info: ExportInfo = ExportInfo()
    """Who wrote the file, when, from what."""

    extra: Mapping[str, Any] = _extra_field()
    """Top-level keys the specification does not define (read-only); see
    :attr:`TensorInfo.extra`."""

    _json_keys: tuple[str, ...] | None = _private_field()

    _json_style: _LazyStyle | None = _private_field()  # noqa: RUF009  # a dataclasses.field

    _source: str | None = dataclasses.field(default=None, init=False, compare=False, repr=False)

    _cut_index: dict[str, CutPoint] | None = dataclasses.field(
        default=None, init=False, compare=False, repr=False
    )

    @classmethod
    def from_json(
        cls,
        text: str | bytes,
        *,
        max_size: int = MAX_DOCUMENT_SIZE,
        max_depth: int = MAX_NESTING_DEPTH,
    ) -> OmnyMetadata:
        """Parses an ``omnynet_metadata`` JSON document.

        Args:
            text: The document, as text or as UTF-8 bytes.
            max_size: Largest accepted document, in bytes for ``bytes`` input and in
                characters for ``str`` input.
            max_depth: Deepest accepted nesting of arrays and objects (the top-level object
                is depth 1).

        Returns:
            The metadata. Until it is replaced by a changed copy, :meth:`to_json` returns
            ``text`` unchanged (decoded, for ``bytes``).

        Raises:
            OmnyFormatError: The document is not valid JSON, exceeds a limit, or does not
                follow the schema; the error names the JSON path and what is wrong.
            TypeError: ``text`` is neither ``str`` nor ``bytes``.
        """
        text = _decode_checked(text, max_size)
        _check_text(text, max_depth)
        document = _loads(text)
        if type(document) is not dict:
            if type(document) is _Duplicate:
                raise OmnyFormatError(document.key, "duplicate key")
            raise OmnyFormatError(
                "", f"expected a JSON object at the top level, got {_describe(document)}"
            )
        reader = _Reader(check_strings=_SURROGATE_ESCAPE_RE.search(text) is not None)
        try:
            with gc_paused():
                metadata = reader.read_object(OmnyMetadata, document)
        except _Problem as problem:
            raise problem.error() from None
        object.__setattr__(metadata, "_json_style", _LazyStyle(text))
        object.__setattr__(metadata, "_source", text)
        return metadata

    def to_json(self) -> str:
        """Writes the document.

        Returns:
            The source text if this object came unchanged from :meth:`from_json`; otherwise
            the document in the source's style and key order, or, for an object built from
            scratch, in the reference writer's style (``json.dumps(obj, indent=2)``).

        Raises:
            OmnyFormatError: A field holds a value the format cannot carry (a negative size,
                a ``bool`` where an integer belongs...); ``from_json`` would reject the output.
        """
        if self._source is not None:
            return self._source
        style = self._json_style.get() if self._json_style is not None else _DEFAULT_STYLE
        try:
            with gc_paused():
                tree = _dump_object(self)
                text = _Writer(style).write(tree)
        except _Problem as problem:
            raise problem.error() from None
        return style.lead + text + style.trail

    def cut_point(self, id: str) -> CutPoint | None:
        """Returns the cut point with this id (the first one if the id repeats), or ``None``.

        The index is built on the first call, so a lookup per configuration id stays linear.
        """
        index = self._cut_index
        if index is None:
            index = {}
            for cut in self.cut_points:
                index.setdefault(cut.id, cut)
            object.__setattr__(self, "_cut_index", index)
        return index.get(id)


# ---------------------------------------------------------------------------------------
# Reading: text checks, json.loads hooks, schema walk
# ---------------------------------------------------------------------------------------

_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_NOT_SYNTAX_BYTES = bytes(b for b in range(256) if b not in b'[]{}"')
_BRACKET_DELTA = [0] * 256
_BRACKET_DELTA[ord("[")] = _BRACKET_DELTA[ord("{")] = 1
_BRACKET_DELTA[ord("]")] = _BRACKET_DELTA[ord("}")] = -1


def _line_col(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    return f"line {line}, column {pos - text.rfind(chr(10), 0, pos)}"


def _decode(text: str | bytes, max_size: int) -> str:
    if isinstance(text, (bytes, bytearray, memoryview)):
        data = bytes(text)
        if len(data) > max_size:
            raise OmnyFormatError(
                "", f"document is {len(data)} bytes, more than the limit of {max_size} bytes"
            )
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise OmnyFormatError(
                "", f"document is not valid UTF-8: {error.reason} at byte {error.start}"
            ) from None
    if not isinstance(text, str):
        raise TypeError(f"expected str or bytes, got {type(text).__name__}")
    if len(text) > max_size:
        raise OmnyFormatError(
            "",
            f"document is {len(text)} characters, more than the limit of {max_size}",
        )
    return text


def _decode_checked(text: str | bytes, max_size: int) -> str:
    text = _decode(text, max_size)
    if text.startswith("\ufeff"):
        raise OmnyFormatError("", "document starts with a byte order mark (U+FEFF); remove it")
    return text


def _check_text(text: str, max_depth: int) -> None:
    """Rejects lone surrogates and too deep nesting, in linear time, before ``json.loads``.

    The C JSON scanner recurses once per nesting level, so depth is checked first, with
    byte operations: escaped backslashes and escaped quotes are removed, then every byte but
    brackets and quotes, then the strings; the running bracket count gives the depth. Up to
    the first syntax error (where the JSON parser stops) this is the parser's nesting; past
    it, it can only over-count.
    """
    if not text.isascii():
        match = _SURROGATE_RE.search(text)
        if match is not None:
            raise OmnyFormatError(
                "",
                f"document contains an unpaired UTF-16 surrogate "
                f"U+{ord(match.group()):04X} at {_line_col(text, match.start())}",
            )
    if text.count("[") + text.count("{") <= max_depth:
        return
    data = text.encode("utf-8")
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    data = data.translate(None, _NOT_SYNTAX_BYTES).replace(b'""', b"")
    if b'"' in data:
        data = b"".join(data.split(b'"')[0::2])  # even parts are outside strings
    depth = _max_depth(data)
    if depth > max_depth:
        raise OmnyFormatError(
            "",
            f"document nests arrays and objects {depth} deep, more than the limit of {max_depth}",
        )


def _max_depth(brackets: bytes) -> int:
    """The largest running count of opening minus closing brackets (ASCII ``[]{}`` only)."""
    if len(brackets) < 100_000:
        deltas = map(_BRACKET_DELTA.__getitem__, brackets)
        return max(itertools.accumulate(deltas), default=0)
    import numpy as np  # a dependency of the package; vectorised for hostile sizes

    table = np.array(_BRACKET_DELTA, dtype=np.int8)
    running = np.cumsum(table[np.frombuffer(brackets, dtype=np.uint8)], dtype=np.int64)
    return int(running.max())


class _BadNumber:
    """A number the format refuses; reported with its JSON path by the schema walk."""

    __slots__ = ("raw", "reason")

    def __init__(self, raw: str, reason: str) -> None:
        self.raw = raw
        self.reason = reason


class _Duplicate:
    """Stands for a JSON object with a repeated key; reported by the schema walk."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key


def _short(raw: str, limit: int = 40) -> str:
    return raw if len(raw) <= limit else raw[: limit - 3] + "..."


def _parse_int(raw: str) -> Any:
    if len(raw) <= 20:  # JSON has no leading zeros: 21+ characters is out of range anyway
        value = int(raw)
        if _INT64_MIN <= value <= _INT64_MAX:
            return value if raw != "-0" else _SpelledInt(0, raw)
    return _BadNumber(raw, f"integer {_short(raw)} is outside the signed 64-bit range")


def _parse_float(raw: str) -> Any:
    value = float(raw)
    if value in (math.inf, -math.inf):
        return _BadNumber(raw, f"number {_short(raw)} is too large for a 64-bit float")
    if float.__repr__(value) == raw:
        return value
    return _SpelledFloat(value, raw)


def _parse_constant(raw: str) -> Any:
    return _BadNumber(raw, f"{raw} is not allowed (JSON has no NaN or infinity)")


def _pairs_hook(pairs: list[tuple[str, Any]]) -> Any:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen = set()
    for key, _ in pairs:
        if key in seen:
            return _Duplicate(key)
        seen.add(key)
    raise AssertionError("unreachable")  # pragma: no cover


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs_hook,
    parse_int=_parse_int,
    parse_float=_parse_float,
    parse_constant=_parse_constant,
)


def _loads(text: str) -> Any:
    try:
        with gc_paused():
            return _DECODER.decode(text)
    except json.JSONDecodeError as error:
        raise OmnyFormatError(
            "", f"not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None
    except RecursionError:  # pragma: no cover - prevented by _check_text
        raise OmnyFormatError("", "document is nested too deeply") from None


def _join(path: str, key: str) -> str:
    if key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{encode_basestring_ascii(key)}]"


class _Problem(Exception):
    """A schema problem; the path is collected on the way out (free when nothing fails)."""

    def __init__(self, reason: str, *parts: str | int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.parts: list[str | int] = list(reversed(parts))  # innermost first

    def error(self, prefix: str = "") -> OmnyFormatError:
        path = prefix
        for part in reversed(self.parts):
            path = f"{path}[{part}]" if isinstance(part, int) else _join(path, part)
        return OmnyFormatError(path, self.reason)


def _describe(value: Any) -> str:
    """Spells a value for an error message (``3``, ``"x"``, ``true``, ``an array``...)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    kind = type(value)
    if kind is str:
        return _short(encode_basestring_ascii(value), 60)
    if kind in (_SpelledInt, _SpelledFloat, _BadNumber):
        return _short(value.raw)
    if isinstance(value, (int, float)):
        return _short(repr(value))
    if isinstance(value, (dict, _Duplicate, Mapping)):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    return _short(f"{type(value).__name__} {value!r}")


def _expected(what: str, value: Any) -> _Problem:
    if type(value) is _BadNumber:
        return _Problem(value.reason)
    if type(value) is _Duplicate:
        return _Problem("duplicate key", value.key)
    return _Problem(f"expected {what}, got {_describe(value)}")


class _Reader:
    """Walks the output of ``json.loads`` along the schema and builds the dataclasses."""

    def __init__(self, check_strings: bool) -> None:
        # Only when the text has \uD8xx-style escapes can a decoded string hold a lone
        # surrogate (raw ones were rejected on the text), so only then are strings checked.
        self.check_strings = check_strings
        self.key_orders: dict[tuple[str, ...], tuple[str, ...]] = {}

    def check_string(self, value: str) -> None:
        if _SURROGATE_RE.search(value):
            raise _Problem("string contains an unpaired UTF-16 surrogate")

    def read_object(self, cls: type, value: Any) -> Any:
        if type(value) is not dict:
            raise _expected("an object", value)
        kinds = _SCHEMAS[cls]
        fields: dict[str, Any] = {}
        extra: dict[str, Any] | None = None
        key = ""
        try:
            for key, item in value.items():
                kind = kinds.get(key)
                if kind is None:
                    if self.check_strings:
                        self.check_string(key)
                    if extra is None:
                        extra = {}
                    extra[key] = self.read_extra(item)
                else:
                    fields[key] = kind.read(self, item)
        except _Problem as problem:
            problem.parts.append(key)
            raise
        if len(fields) < len(kinds):
            for name in _REQUIRED[cls]:
                if name not in fields:
                    raise _Problem("required key is missing", name)
        keys = tuple(value)
        keys = self.key_orders.setdefault(keys, keys)
        if extra:
            return cls(**fields, extra=_FrozenDict(extra), _json_keys=keys)
        return cls(**fields, _json_keys=keys)

    def read_extra(self, value: Any) -> Any:
        kind = type(value)
        if kind is str:
            if self.check_strings:
                self.check_string(value)
            return value
        if kind is dict:
            frozen = {}
            key = ""
            try:
                for key, item in value.items():
                    if self.check_strings:
                        self.check_string(key)
                    frozen[key] = self.read_extra(item)
            except _Problem as problem:
                problem.parts.append(key)
                raise
            return _FrozenDict(frozen)
        if kind is list:
            return _read_items(self, value, self.read_extra)
        if kind is _Duplicate or kind is _BadNumber:
            raise _expected("", value)
        return value  # int, float (maybe spelled), bool, None


def _read_items(
    reader: _Reader, value: list[Any], read_item: Callable[..., Any]
) -> tuple[Any, ...]:
    items: list[Any] = []
    try:
        for item in value:
            items.append(read_item(item))
    except _Problem as problem:
        problem.parts.append(len(items))
        raise
    return tuple(items)


def _integral(value: float) -> int:
    """Reads a JSON float where an integer belongs: ``1200.0`` -> 1200, ``1200.5`` -> error."""
    raw = value.raw if type(value) is _SpelledFloat else float.__repr__(value)
    if not value.is_integer():
        raise _Problem(f"expected an integer, got {_short(raw)}")
    if not -(2.0**63) <= value <= 2.0**63:
        raise _Problem(f"integer {_short(raw)} is outside the signed 64-bit range")
    exact = Decimal(raw)
    if exact != exact.to_integral_value():
        raise _Problem(f"expected an integer, got {_short(raw)}")
    number = int(exact)
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise _Problem(f"integer {_short(raw)} is outside the signed 64-bit range")
    return _SpelledInt(number, raw)


# ---------------------------------------------------------------------------------------
# Field kinds: how each field of the schema is read and written
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Kind:
    """Reads (``json.loads`` output -> field value) and dumps (field value -> JSON) a field.

    Both raise :class:`_Problem` with a path relative to the value.
    """

    read: Callable[[_Reader, Any], Any]
    dump: Callable[[Any], Any]
    optional: bool = False  # ``None`` means "absent": not written


def _read_str(reader: _Reader, value: Any) -> str:
    if type(value) is not str:
        raise _expected("a string", value)
    if reader.check_strings:
        reader.check_string(value)
    return value


def _read_strs(reader: _Reader, value: Any) -> tuple[str, ...]:
    if type(value) is not list:
        raise _expected("an array", value)
    if not reader.check_strings and all(type(item) is str for item in value):
        return tuple(value)
    return _read_items(reader, value, lambda item: _read_str(reader, item))


def _dump_str(value: Any) -> str:
    if not isinstance(value, str):
        raise _expected("a string", value)
    if not value.isascii() and _SURROGATE_RE.search(value):
        raise _Problem("string contains an unpaired UTF-16 surrogate")
    return value


def _int_kind(minimum: int, what: str) -> tuple[Callable[..., int], Callable[..., int]]:
    def read(reader: _Reader | None, value: Any) -> int:
        kind = type(value)
        if kind is int or kind is _SpelledInt:
            number = value
        elif kind is float or kind is _SpelledFloat:
            number = _integral(value)
        else:
            raise _expected("an integer", value)
        if number < minimum:
            raise _Problem(f"expected {what}, got {_describe(value)}")
        return number

    def dump(value: Any) -> int:
        if isinstance(value, bool):
            raise _expected("an integer", value)
        try:
            number = operator.index(value)
        except TypeError:
            raise _expected("an integer", value) from None
        if number < minimum:
            raise _Problem(f"expected {what}, got {number}")
        if number > _INT64_MAX:
            raise _Problem(f"integer {number} is outside the signed 64-bit range")
        return value if type(value) is _SpelledInt else int(number)

    return read, dump


def _scalar_kind(minimum: int, what: str) -> _Kind:
    read, dump = _int_kind(minimum, what)
    return _Kind(read, dump)


def _ints_kind(minimum: int, what: str) -> _Kind:
    read_item, dump_item = _int_kind(minimum, what)

    def read(reader: _Reader, value: Any) -> tuple[int, ...]:
        if type(value) is not list:
            raise _expected("an array", value)
        if all(type(item) is int for item in value) and (not value or min(value) >= minimum):
            return tuple(value)
        return _read_items(reader, value, lambda item: read_item(reader, item))

    return _Kind(read, _tuple_dumper(dump_item))


def _tuple_dumper(dump_item: Callable[[Any], Any]) -> Callable[[Any], tuple[Any, ...]]:
    def dump(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, (tuple, list)):
            raise _expected("an array", value)
        items: list[Any] = []
        try:
            for item in value:
                items.append(dump_item(item))
        except _Problem as problem:
            problem.parts.append(len(items))
            raise
        return tuple(items)

    return dump


def _read_optional_bool(reader: _Reader, value: Any) -> bool | None:
    if value is None or value is True or value is False:
        return value
    raise _expected("true, false or null", value)


def _dump_optional_bool(value: Any) -> bool | None:
    if value is None or value is True or value is False:
        return value
    raise _expected("True, False or None", value)


def _object_kind(cls: type) -> _Kind:
    def read(reader: _Reader, value: Any) -> Any:
        return reader.read_object(cls, value)

    def dump(value: Any) -> Any:
        if not isinstance(value, cls):
            raise _Problem(f"expected a {cls.__name__}, got {_describe(value)}")
        return _dump_object(value)

    return _Kind(read, dump)


def _objects_kind(cls: type) -> _Kind:
    kind = _object_kind(cls)

    def read(reader: _Reader, value: Any) -> tuple[Any, ...]:
        if type(value) is not list:
            raise _expected("an array", value)
        return _read_items(reader, value, lambda item: reader.read_object(cls, item))

    return _Kind(read, _tuple_dumper(kind.dump))


_STR = _Kind(_read_str, _dump_str)
_STRS = _Kind(_read_strs, _tuple_dumper(_dump_str))
_NON_NEGATIVE = "a non-negative integer"
_SIZE = _scalar_kind(0, _NON_NEGATIVE)
_SIZES = _ints_kind(0, _NON_NEGATIVE)
_COUNT_WHAT = "an integer >= 1"
_COUNT = _scalar_kind(1, _COUNT_WHAT)
_COUNTS = _ints_kind(1, _COUNT_WHAT)
_SHAPE = _ints_kind(-1, "a dimension >= 0 or -1 (dynamic)")
_OPTIONAL_BOOL = _Kind(_read_optional_bool, _dump_optional_bool, optional=True)
_TENSOR_INFOS = _objects_kind(TensorInfo)

# Schema: JSON key -> kind, in the specification's order (= dataclass field order).
_SCHEMAS.update(
    {
        TensorInfo: {"name": _STR, "shape": _SHAPE, "dtype": _STR},
        ModelInfo: {
            "name": _STR,
            "architecture": _STR,
            "total_params": _SIZE,
            "total_size_mb": _SIZE,
            "inference_memory_mb": _SIZE,
        },
        CutPoint: {
            "id": _STR,
            "after_node": _STR,
            "tensor_name": _STR,
            "shape": _SHAPE,
            "dtype": _STR,
            "cumulative_memory_mb": _SIZE,
            "shard_memory_mb": _SIZE,
        },
        ShardConfiguration: {
            "num_shards": _COUNT,
            "memory_per_shard_mb": _SIZES,
            "cut_point_ids": _STRS,
        },
        Sharding: {
            "min_vram_mb": _SIZE,
            "max_shard_size_mb": _SIZE,
            "min_shards": _COUNT,
            "max_shards": _COUNT,
            "allowed_shards": _COUNTS,
            "configurations": _objects_kind(ShardConfiguration),
        },
        ExportInfo: {
            "exported_at": _STR,
            "exporter_version": _STR,
            "source_framework": _STR,
            "source_version": _STR,
            "onnx_opset": _SIZE,
            "validated": _OPTIONAL_BOOL,
        },
        OmnyMetadata: {
            "version": _STR,
            "model": _object_kind(ModelInfo),
            "inputs": _TENSOR_INFOS,
            "outputs": _TENSOR_INFOS,
            "cut_points": _objects_kind(CutPoint),
            "sharding": _object_kind(Sharding),
            "export_info": _object_kind(ExportInfo),
        },
    }
)


def _fill_schema_tables() -> None:
    for cls, kinds in _SCHEMAS.items():
        public = [f for f in dataclasses.fields(cls) if f.name in kinds]
        assert [f.name for f in public] == list(kinds), cls  # schema order = field order
        _REQUIRED[cls] = tuple(f.name for f in public if f.default is dataclasses.MISSING)
        _DEFAULTS[cls] = {f.name: f.default for f in public}
        _TUPLE_FIELDS[cls] = tuple(f.name for f in public if str(f.type).startswith("tuple"))
        _SPEC_INDEX[cls] = {key: i for i, key in enumerate(kinds)}


_fill_schema_tables()


# ---------------------------------------------------------------------------------------
# Writing: dataclasses -> ordered JSON tree -> text in a detected style
# ---------------------------------------------------------------------------------------


def _output_keys(obj: Any, kinds: dict[str, _Kind]) -> list[str]:
    """The keys to write, in order: the source's order if parsed, else the spec's."""
    cls = type(obj)
    extra = obj.extra

    def wanted(name: str) -> bool:
        return not (kinds[name].optional and getattr(obj, name) is None)

    source_keys = obj._json_keys
    if source_keys is None:
        keys = [name for name in kinds if wanted(name)]
        keys.extend(extra)
        return keys
    keys = []
    seen = set()
    for key in source_keys:
        if key in seen:
            continue
        seen.add(key)
        if key in kinds or key in extra:  # an optional known key the source had stays, as null
            keys.append(key)
    missing = [name for name in kinds if name not in seen]
    if missing:
        # A known key the source did not have: written only when it differs from the
        # default, after the last present known key that precedes it in the spec.
        index = _SPEC_INDEX[cls]
        defaults = _DEFAULTS[cls]
        for name in missing:
            if not wanted(name) or getattr(obj, name) == defaults[name]:
                continue
            position = 0
            for i, key in enumerate(keys):
                if key in index and index[key] < index[name]:
                    position = i + 1
            keys.insert(position, name)
    if extra and any(key not in seen for key in extra):
        keys.extend(key for key in extra if key not in seen)
    return keys


def _dump_object(obj: Any) -> dict[str, Any]:
    kinds = _SCHEMAS[type(obj)]
    extra = obj.extra
    tree = {}
    key = ""
    try:
        for key in _output_keys(obj, kinds):
            kind = kinds.get(key)
            tree[key] = extra[key] if kind is None else kind.dump(getattr(obj, key))
    except _Problem as problem:
        problem.parts.append(key)
        raise
    return tree


@dataclasses.dataclass(frozen=True)
class _Style:
    """How a document is laid out. The defaults are ``json.dumps(obj, indent=2)``."""

    indent: str | None = "  "  # None: everything on one line
    newline: str = "\n"
    line_sep: str = ","  # between items at a line end (indented layout)
    item_sep: str = ", "  # between items on one line
    key_sep: str = ": "
    inline_scalar_arrays: bool = False  # indented layout, but [1, 2, 3] on one line
    ensure_ascii: bool = True
    lead: str = ""  # whitespace before the document
    trail: str = ""  # whitespace after the document


_DEFAULT_STYLE = _Style()


class _LazyStyle:
    """The style of a source text, detected when a changed copy is first written."""

    __slots__ = ("_style", "_text")

    def __init__(self, text: str) -> None:
        self._text: str | None = text
        self._style: _Style | None = None

    def get(self) -> _Style:
        if self._style is None:
            assert self._text is not None
            self._style = _detect_style(self._text)
            self._text = None
        return self._style


_WS_RE = re.compile(r"[ \t\r\n]*")
_LITERAL_RE = re.compile(r'[^ \t\r\n,:\[\]{}"]+')


def _tokens(text: str, pos: int, end: int) -> Any:
    """Yields ``(first character, start, end)`` of each token of valid JSON text."""
    while True:
        pos = _WS_RE.match(text, pos, end).end()  # type: ignore[union-attr]  # \s* always matches
        if pos >= end:
            return
        char = text[pos]
        if char == '"':
            stop = pos + 1
            while True:
                quote = text.find('"', stop, end)
                if quote < 0:
                    stop = end
                    break
                backslash = quote - 1
                while text[backslash] == "\\":
                    backslash -= 1
                stop = quote + 1
                if (quote - 1 - backslash) % 2 == 0:
                    break
        elif char in "{}[],:":
            stop = pos + 1
        else:
            match = _LITERAL_RE.match(text, pos, end)
            stop = match.end() if match is not None else pos + 1
        yield char, pos, stop
        pos = stop


def _style_known(found: Mapping[str, Any], indent: str | None, inline: bool | None) -> bool:
    """Whether :func:`_detect_style` has seen every separator the layout found so far uses.

    Compact JSON (no indent) needs the key and item separators; indented JSON the key and
    line separators, and the item separator of one-line scalar arrays unless there are none.
    """
    if "key_sep" not in found:
        return False
    if indent is None:
        return "item_sep" in found
    return "line_sep" in found and (inline is False or "item_sep" in found)


def _detect_style(text: str) -> _Style:
    """Detects the layout of a (valid) JSON text; unknown aspects keep the defaults."""
    start = len(text) - len(text.lstrip(_JSON_WS))
    end = len(text.rstrip(_JSON_WS))
    found: dict[str, Any] = {
        "lead": text[:start],
        "trail": text[end:],
        # ensure_ascii escapes everything above U+007E, DEL included.
        "ensure_ascii": text.isascii() and "\x7f" not in text,
    }
    indent: str | None = None
    first = True  # looking at the gap after the top-level "{"
    inline: bool | None = None
    previous = ""
    previous_end = start
    key_colon_start = start
    scalar_array_open = False  # inside a one-line array of scalars
    for char, begin, stop in _tokens(text, start, end):
        gap = text[previous_end:begin]
        if first and previous == "{":
            first = False
            if char != "}" and "\n" in gap:
                found["newline"] = "\r\n" if "\r\n" in gap else "\n"
                indent = gap[gap.rfind("\n") + 1 :]
        if previous == ":" and "key_sep" not in found:
            found["key_sep"] = text[key_colon_start:previous_end] + gap
        if previous == ",":
            if "\n" in gap:
                found.setdefault("line_sep", "," + gap[: gap.find("\n")].rstrip("\r"))
            elif indent is None or scalar_array_open:
                found.setdefault("item_sep", "," + gap)
            scalar_array_open = False
        if previous == "[" and char not in "[{]":
            if inline is None:
                inline = "\n" not in gap
            scalar_array_open = "\n" not in gap
        if char == ":":
            key_colon_start = previous_end
        elif char == "]":
            scalar_array_open = False
        previous, previous_end = char, stop
        if not first and _style_known(found, indent, inline):
            break
    found["indent"] = indent
    found["inline_scalar_arrays"] = bool(inline) and indent is not None
    return _Style(**found)


_OBJECT_TYPES = frozenset({dict, _FrozenDict})
_ARRAY_TYPES = frozenset({tuple, list})
_CONTAINER_TYPES = _OBJECT_TYPES | _ARRAY_TYPES


class _Writer:
    """Writes an ordered JSON tree in a :class:`_Style`.

    The tree holds ``dict`` (or frozen dict) objects, ``tuple`` (or ``list``) arrays and
    scalars, as built by :func:`_dump_object` and :func:`_freeze`.
    """

    def __init__(self, style: _Style) -> None:
        self.style = style
        self.encode = encode_basestring_ascii if style.ensure_ascii else encode_basestring
        self.out: list[str] = []

    def write(self, tree: Any) -> str:
        if self.style.indent is None:
            self.flat(tree)
        else:
            self.block(tree, 0)
        return "".join(self.out)

    def scalar(self, value: Any) -> str:
        kind = type(value)
        if kind is str:
            return self.encode(value)
        if kind is int:
            return int.__repr__(value)
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        if kind is _SpelledInt or kind is _SpelledFloat:
            return value.raw
        if kind is float:
            if not math.isfinite(value):
                raise _Problem(f"{value!r} cannot be written as JSON")
            return float.__repr__(value)
        if isinstance(value, str):
            return self.encode(value)
        if isinstance(value, int):
            return int.__repr__(value)
        if isinstance(value, float):
            return self.scalar(float(value))
        raise _Problem(f"{type(value).__name__} is not a JSON value")

    def flat(self, value: Any) -> None:
        out = self.out
        kind = type(value)
        if kind in _OBJECT_TYPES:
            out.append("{")
            for i, (key, item) in enumerate(value.items()):
                if i:
                    out.append(self.style.item_sep)
                out.append(self.encode(key))
                out.append(self.style.key_sep)
                self.flat(item)
            out.append("}")
        elif kind in _ARRAY_TYPES:
            out.append("[")
            for i, item in enumerate(value):
                if i:
                    out.append(self.style.item_sep)
                self.flat(item)
            out.append("]")
        else:
            out.append(self.scalar(value))

    def block(self, value: Any, level: int) -> None:
        out = self.out
        style = self.style
        kind = type(value)
        if kind in _OBJECT_TYPES:
            if not value:
                out.append("{}")
                return
            inner = style.newline + style.indent * (level + 1)  # type: ignore[operator]  # block(): only with an indent
            separator = style.line_sep + inner
            out.append("{" + inner)
            for i, (key, item) in enumerate(value.items()):
                if i:
                    out.append(separator)
                out.append(self.encode(key))
                out.append(style.key_sep)
                if type(item) in _CONTAINER_TYPES:
                    self.block(item, level + 1)
                else:
                    out.append(self.scalar(item))
            out.append(style.newline + style.indent * level + "}")  # type: ignore[operator]  # block(): only with an indent
        elif kind in _ARRAY_TYPES:
            if not value:
                out.append("[]")
                return
            containers = [type(item) in _CONTAINER_TYPES for item in value]
            if style.inline_scalar_arrays and not any(containers):
                out.append("[" + style.item_sep.join(map(self.scalar, value)) + "]")
                return
            inner = style.newline + style.indent * (level + 1)  # type: ignore[operator]  # block(): only with an indent
            separator = style.line_sep + inner
            out.append("[" + inner)
            for i, item in enumerate(value):
                if i:
                    out.append(separator)
                if containers[i]:
                    self.block(item, level + 1)
                else:
                    out.append(self.scalar(item))
            out.append(style.newline + style.indent * level + "]")  # type: ignore[operator]  # block(): only with an indent
        else:
            out.append(self.scalar(value))
