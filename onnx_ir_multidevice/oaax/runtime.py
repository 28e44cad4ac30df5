"""The OAAX runtime API over :class:`~onnx_ir_multidevice.Pipeline`, in Python.

The nine functions of the OAAX runtime header, with its names and integer return codes
(0 success, non-zero failure), as methods of :class:`OaaxRuntime` (one runtime instance, as
one loaded shared library) and as module-level functions on a process-wide instance. The C ABI
(a shared library with ``dlopen``-able symbols) is out of scope: this is the same contract for
Python hosts, and the reference a C shim would wrap.

Lifecycle: ``runtime_initialization()`` or ``runtime_initialization_with_args(...)`` once,
then ``runtime_model_loading(path)`` once (a second load fails), then any number of
``send_input`` / ``receive_output``, then ``runtime_destruction()``; a call out of this order
fails with a message in ``runtime_error_message()``, and after destruction every call fails
(the three string functions still answer). The instance is thread-safe: one thread may send
while another polls.

Model files: an ``.omny`` (v1 or v2 container) with one shard configuration (or the one the
``shards`` key names) runs as a pipeline of its stages; a plain ``.onnx`` runs as one stage; a
directory written by ``omny split`` runs its stages. Inputs and outputs must have a type of
the OAAX enum: float16 or bfloat16 I/O is refused at load.

``send_input`` validates the :class:`~onnx_ir_multidevice.oaax.tensors.TensorsStruct`
against the model's inputs (names, data types, ranks, fixed dims, data sizes) before anything
is queued, and refuses a request while ``max_queued`` requests are sent and not received
(a bound on finished-but-unread results). ``receive_output`` never blocks and never raises:
it returns non-zero at once when the oldest request is not finished (or nothing was sent),
and, when that request failed, names the request, the stage and its device in
``runtime_error_message()``. Results come back in send order.

Initialisation keys (values are strings as a C host passes them, or Python values; unknown
keys are ignored, as the specification requires):

=====================  ===========================================================
key                    meaning
=====================  ===========================================================
``providers``          device of each stage, comma-separated (``"cpu,cuda:0"``) or one
                       for all (``"cpu"``, the default); alias ``devices``
``threads``            onnxruntime intra-op threads per stage (one int, or comma-
                       separated per stage; 0 = onnxruntime's default); aliases
                       ``intra_op_num_threads`` and the reference runtime's ``num_threads``
``max_in_flight``      requests inside the stages at once (default: twice the stages)
``max_queued``         requests sent and not received at once (default 1024)
``backend``            pipeline engine: ``thread`` (default), ``ray``, or a registered one
``shards``             which configuration of a several-configuration ``.omny`` to run
``send_timeout``       seconds ``send_input`` waits for room in the stages (default 60;
                       ``inf``: no limit)
``log_level``          the OAAX reference runtime's levels: 0 trace, 1 debug, 2 info,
                       3 warning, 4 error, 5 critical, 6 off (a number outside 0-6 is
                       clamped; the names ``trace`` ... ``critical``, ``off`` also work;
                       an unreadable value falls back to 2 and says so in the log): log
                       at that level on stderr
``log_file``           a file that receives the runtime's log lines
=====================  ===========================================================

Without ``log_level`` (or with level 6) and without ``log_file`` the runtime is silent (its logger,
``onnx_ir_multidevice.oaax.runtime.<n>``, still propagates to the application's logging).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "FAILED",
    "NOT_READY",
    "OK",
    "RUNTIME_NAME",
    "OaaxRuntime",
    "default_runtime",
    "receive_output",
    "runtime_destruction",
    "runtime_error_message",
    "runtime_initialization",
    "runtime_initialization_with_args",
    "runtime_model_loading",
    "runtime_name",
    "runtime_version",
    "send_input",
]

import enum
import itertools
import logging
import math
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import OmnyError, PipelineError
from onnx_ir_multidevice._proto.files import load
from onnx_ir_multidevice._version import __version__
from onnx_ir_multidevice.oaax.tensors import TensorDataType, TensorsStruct, oaax_data_type
from onnx_ir_multidevice.runtime.pipeline import Pipeline, PipelineTimeoutError

RUNTIME_NAME = "onnx-ir-multidevice-oaax"
"""What :meth:`OaaxRuntime.runtime_name` returns."""

DEFAULT_MAX_QUEUED = 1024
"""Default of the ``max_queued`` key."""

DEFAULT_SEND_TIMEOUT = 60.0
"""Default of the ``send_timeout`` key, in seconds."""

OK = 0
"""Return code of a call that succeeded."""

FAILED = 1
"""Return code of a call that failed; :meth:`OaaxRuntime.runtime_error_message` says why."""

NOT_READY = 2
"""Return code of :meth:`OaaxRuntime.receive_output` when nothing is ready yet (the oldest
request is still running, or none was sent): not an error, call again later. (The
specification only says 0 / non-zero.)"""

_TRACE = logging.DEBUG - 5
_OFF = logging.CRITICAL + 10
_LEVELS = (_TRACE, logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR,
           logging.CRITICAL, _OFF)  # fmt: skip
"""Python logging level of each OAAX reference-runtime level 0-6 (spdlog's: 6 is off)."""

_LEVEL_NAMES = {"trace": 0, "debug": 1, "info": 2, "warning": 3, "warn": 3, "error": 4,
                "err": 4, "critical": 5, "off": 6}  # fmt: skip

DEFAULT_LOG_LEVEL = 2
"""The ``log_level`` an unreadable value falls back to (info, as in the reference runtime)."""
_instances = itertools.count()


class _State(enum.Enum):
    NEW = "not initialised"
    READY = "initialised, no model loaded"
    LOADED = "model loaded"
    DESTROYED = "destroyed"


class _Refused(Exception):
    """A call that fails with a message (the message goes to ``runtime_error_message``)."""


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


def _log_level(value: Any) -> tuple[int, bool]:
    """The OAAX level (0-6) of a ``log_level`` value, and whether the value was readable.

    Numbers are clamped into 0-6, as the reference runtime does; a name (``"info"``) is
    looked up; anything else gives :data:`DEFAULT_LOG_LEVEL`.
    """
    if isinstance(value, bool):
        return DEFAULT_LOG_LEVEL, False
    text = _text(value).strip().lower() if not isinstance(value, int) else str(value)
    if text in _LEVEL_NAMES:
        return _LEVEL_NAMES[text], True
    try:
        number = int(text)
    except ValueError:
        return DEFAULT_LOG_LEVEL, False
    return min(max(number, 0), len(_LEVELS) - 1), True


def _thread_count(key: str, value: Any) -> int | None:
    """A thread count; 0 means onnxruntime's default (``None``), as in the reference runtime."""
    try:
        number = int(_text(value)) if not isinstance(value, int) else value
    except ValueError:
        number = -1
    if isinstance(number, bool) or number < 0:
        raise _Refused(
            f"init key {key!r}: expected a thread count (0 for onnxruntime's default), "
            f"got {value!r}"
        )
    return number or None


def _positive_int(key: str, value: Any) -> int:
    try:
        number = int(_text(value)) if not isinstance(value, int) else value
    except ValueError:
        number = 0
    if isinstance(number, bool) or number < 1:
        raise _Refused(f"init key {key!r}: expected a positive integer, got {value!r}")
    return number


def _threads(key: str, value: Any) -> int | list[int | None] | None:
    if isinstance(value, (list, tuple)):
        return [_thread_count(key, v) for v in value]
    text = _text(value)
    if "," in text:
        return [_thread_count(key, v.strip()) for v in text.split(",")]
    return _thread_count(key, value)


def _seconds(key: str, value: Any) -> float:
    """A timeout in seconds: a number of at least 0 (``inf``: no limit)."""
    try:
        seconds = float(_text(value)) if not isinstance(value, (int, float)) else float(value)
    except (ValueError, OverflowError):
        seconds = math.nan
    if isinstance(value, bool) or not seconds >= 0:  # NaN fails too
        raise _Refused(
            f"init key {key!r}: expected a number of seconds of at least 0 (inf: no limit), "
            f"got {value!r}"
        )
    return seconds


class OaaxRuntime:
    """One OAAX runtime instance over a :class:`~onnx_ir_multidevice.Pipeline`.

    Every method returns what the C function of the same name returns (an ``int`` status, or a
    string). See the module docstring for the lifecycle, the keys and the guarantees.

    .. versionadded:: 0.1
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the state; never held while waiting on the pipeline
        self._send_lock = threading.Lock()  # one send at a time: max_queued is exact
        self._state = _State.NEW
        self._error = ""
        self._pipeline: Pipeline | None = None
        self._expected: dict[str, tuple[TensorDataType, Any]] = {}
        self._options: dict[str, Any] = {}
        self._max_queued = DEFAULT_MAX_QUEUED
        self._send_timeout = DEFAULT_SEND_TIMEOUT
        self._shards: int | None = None
        self._logger = logging.getLogger(f"{__name__}.{next(_instances)}")
        self._handlers: list[logging.Handler] = [logging.NullHandler()]
        self._logger.addHandler(self._handlers[0])  # silent unless asked (or logging is set up)

    # -- helpers --------------------------------------------------------------------------

    def _fail(self, message: str, code: int = FAILED) -> int:
        self._error = message
        self._logger.error(message)
        return code

    def _require(self, *states: _State, what: str) -> None:
        state = self._state
        if state in states:
            return
        if state is _State.DESTROYED:
            raise _Refused(f"{what}: the runtime was destroyed; create a new one")
        if state is _State.NEW:
            raise _Refused(f"{what}: call runtime_initialization() first")
        if _State.NEW in states:
            raise _Refused(f"{what}: the runtime is already initialised (initialise it once)")
        if state is _State.READY:
            raise _Refused(f"{what}: load a model first (runtime_model_loading)")
        raise _Refused(f"{what}: a model is already loaded (one model per runtime instance)")

    # -- initialisation -------------------------------------------------------------------

    def runtime_initialization(self) -> int:
        """Initialise with the defaults. 0 on success; non-zero if already done or destroyed."""
        return self.runtime_initialization_with_args(0, [], [])

    def runtime_initialization_with_args(
        self, length: int, keys: Sequence[str | bytes], values: Sequence[Any]
    ) -> int:
        """Initialise with ``length`` key/value pairs; unknown keys are ignored.

        Args:
            length: Number of pairs (``keys`` and ``values`` hold at least that many).
            keys: Key names (``str`` or UTF-8 ``bytes``).
            values: Values: strings (as the C API passes them) or Python values.

        Returns:
            0 on success; non-zero when called twice, after destruction, with fewer keys or
            values than ``length``, or with a known key whose value is not valid.
        """
        try:
            with self._lock:
                self._require(_State.NEW, what="runtime_initialization")
                if length < 0 or len(keys) < length or len(values) < length:
                    raise _Refused(
                        f"runtime_initialization_with_args: length {length} but {len(keys)} "
                        f"keys and {len(values)} values"
                    )
                self._configure({_text(keys[i]): values[i] for i in range(length)})
                self._state = _State.READY
                self._error = ""
            self._logger.info("initialised (%s)", self._options or "defaults")
            return OK
        except _Refused as refused:
            return self._fail(str(refused))
        except Exception as error:  # a bad value of an unexpected type
            return self._fail(f"runtime_initialization: {error!r}")

    def _configure(self, args: Mapping[str, Any]) -> None:
        options: dict[str, Any] = {}
        notes: list[str] = []
        for key, value in args.items():
            if key in ("providers", "devices"):
                options["providers"] = (
                    [_text(v) for v in value] if isinstance(value, (list, tuple)) else _text(value)
                )
            elif key in ("threads", "intra_op_num_threads", "num_threads"):
                threads = _threads(key, value)
                if threads is None:
                    options.pop("intra_op_num_threads", None)
                else:
                    options["intra_op_num_threads"] = threads
            elif key == "max_in_flight":
                options["max_in_flight"] = _positive_int(key, value)
            elif key == "backend":
                options["backend"] = _text(value)
            elif key == "max_queued":
                self._max_queued = _positive_int(key, value)
            elif key == "shards":
                self._shards = _positive_int(key, value)
            elif key == "send_timeout":
                self._send_timeout = _seconds(key, value)
            elif key == "log_level":
                level, readable = _log_level(value)
                self._logger.setLevel(_LEVELS[level])
                if _LEVELS[level] < _OFF:
                    self._add_handler(logging.StreamHandler())
                if not readable:  # said once every handler is in place
                    notes.append(
                        f"init key 'log_level': {value!r} is not a level 0-6 or a level name; "
                        f"using {DEFAULT_LOG_LEVEL} (info)"
                    )
            elif key == "log_file":
                try:
                    self._add_handler(logging.FileHandler(_text(value), encoding="utf-8"))
                except OSError as error:
                    raise _Refused(f"init key 'log_file': cannot open {value} ({error})") from None
            else:
                self._logger.debug("ignoring unknown init key %r", key)
        for note in notes:
            self._logger.warning("%s", note)
        self._options = options

    def _add_handler(self, handler: logging.Handler) -> None:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s %(levelname)s {RUNTIME_NAME}: %(message)s")
        )
        self._logger.addHandler(handler)
        self._handlers.append(handler)

    # -- model ------------------------------------------------------------------------------

    def runtime_model_loading(self, file_path: str | bytes | os.PathLike) -> int:
        """Load the model (an ``.omny``, an ``.onnx`` or an ``omny split`` directory).

        Returns:
            0 on success; non-zero before initialisation, after destruction, for a second
            model, for a file that cannot be loaded or run, or for an input or output whose
            type OAAX tensors cannot carry (float16, bfloat16...).
        """
        try:
            with self._lock:
                self._require(_State.READY, what="runtime_model_loading")
                if not isinstance(file_path, (str, bytes, os.PathLike)):
                    raise _Refused(
                        "runtime_model_loading: expected the path of a model file or split "
                        f"directory, got {type(file_path).__name__}"
                    )
                path = Path(os.fsdecode(file_path))
                if not str(path) or "\x00" in str(path):
                    raise _Refused(
                        f"runtime_model_loading: {str(path)!r} is not a valid path; give the "
                        "path of a model file or split directory"
                    )
                self._pipeline = self._open(path)
                self._state = _State.LOADED
                self._error = ""
            self._logger.info(
                "loaded %s: %d stage(s) on %s",
                path,
                self._pipeline.num_stages,
                ", ".join(map(str, self._pipeline.devices)),
            )
            return OK
        except _Refused as refused:
            return self._fail(str(refused))
        except (OmnyError, OSError, ValueError) as error:
            return self._fail(f"runtime_model_loading: {file_path!r}: {error}")
        except Exception as error:  # never raise to the host
            return self._fail(
                f"runtime_model_loading: {file_path!r}: {type(error).__name__}: {error}"
            )

    def _open(self, path: Path) -> Pipeline:
        if path.is_dir():
            pipeline = Pipeline(path, self._shards, **self._options)
            try:
                self._check_output_types(path, pipeline)
            except BaseException:
                pipeline.close()
                raise
        else:
            model = load(path)
            shards = self._shards
            metadata = omny.read(model)
            if shards is None:
                counts = [] if metadata is None else [
                    c.num_shards for c in metadata.sharding.configurations
                ]  # fmt: skip
                if len(counts) > 1:
                    raise _Refused(
                        f"runtime_model_loading: {path} has configurations of {counts} shards; "
                        "initialise with the key 'shards' to choose one"
                    )
                shards = counts[0] if counts else 1
            self._check_types(path, model)
            pipeline = Pipeline(model, shards, **self._options)
        try:
            self._expected = {}
            for spec in pipeline.inputs:
                data_type = oaax_data_type(spec.dtype)
                if data_type is None:
                    raise _Refused(
                        f"runtime_model_loading: {path}: input {spec.name!r} has type "
                        f"{spec.dtype}, which OAAX tensors cannot carry"
                    )
                self._expected[spec.name] = (data_type, spec.shape)
        except BaseException:
            pipeline.close()
            raise
        return pipeline

    @staticmethod
    def _check_output_types(path: Path, pipeline: Pipeline) -> None:
        """Refuse a split directory whose outputs OAAX tensors cannot carry (before any run).

        The stage models declare the outputs' element types (the pipeline's input specs give
        only the inputs'); an output the manifest names and no stage declares is refused too,
        since ``receive_output`` could not describe it.
        """
        declared: dict[str | None, ir.DataType | None] = {}
        for stage in pipeline.chain.stages:
            source = stage.source
            if isinstance(source, ir.Model):
                graph_outputs = [(v.name, v.dtype) for v in source.graph.outputs]
            else:
                try:
                    proto = (
                        onnx.ModelProto.FromString(source)
                        if isinstance(source, bytes)
                        else onnx.load(source, load_external_data=False)
                    )
                except Exception as error:  # onnx's and protobuf's own errors
                    raise _Refused(
                        f"runtime_model_loading: {path}: stage {stage.index} cannot be read "
                        f"({error})"
                    ) from None
                graph_outputs = [
                    (o.name, ir.DataType(o.type.tensor_type.elem_type)
                     if o.type.HasField("tensor_type") else None)
                    for o in proto.graph.output
                ]  # fmt: skip
            for name, dtype in graph_outputs:
                declared[name] = dtype
        bad = [
            f"{name!r} ({declared.get(name) or 'no declared type'})"
            for name in pipeline.output_names
            if name not in pipeline.input_names and oaax_data_type(declared.get(name)) is None
        ]
        if bad:
            raise _Refused(
                f"runtime_model_loading: {path}: output {', '.join(bad)}: OAAX tensors have no "
                "such data type (no float16, bfloat16 or 8-bit float); cast the model's outputs "
                "to float32 and split it again"
            )

    def _check_types(self, path: Path, model: Any) -> None:
        initializers = model.graph.initializers
        values = [
            *(v for v in model.graph.inputs if v.name not in initializers),
            *model.graph.outputs,
        ]
        bad = [
            f"{v.name!r} ({v.dtype})"
            for v in values
            if oaax_data_type(v.dtype) is None
        ]  # fmt: skip
        if bad:
            raise _Refused(
                f"runtime_model_loading: {path}: {', '.join(bad)}: OAAX tensors have no such "
                "data type (no float16, bfloat16 or 8-bit float); cast the model's inputs and "
                "outputs to float32"
            )

    # -- inference --------------------------------------------------------------------------

    def send_input(self, input_tensors: TensorsStruct) -> int:
        """Queue one request; it may be called many times before :meth:`receive_output`.

        The struct is validated against the model's inputs before anything is queued. On
        success the runtime owns the struct (it is not changed; keep no reference to reuse).

        Returns:
            0 when queued; non-zero (nothing queued) when the runtime has no model, the
            struct is not valid for the model (names, data types, ranks, dims, sizes),
            ``max_queued`` requests wait to be received, or there was no room in the stages
            within ``send_timeout``.
        """
        try:
            with self._lock:
                self._require(_State.LOADED, what="send_input")
                pipeline = self._pipeline
                assert pipeline is not None
            if not isinstance(input_tensors, TensorsStruct):
                raise _Refused(
                    f"send_input: expected a TensorsStruct, got {type(input_tensors).__name__}"
                )
            try:
                arrays = input_tensors.validate(self._expected)
            except ValueError as error:
                raise _Refused(f"send_input: {error}; nothing was queued") from None
            with self._send_lock:
                if pipeline.in_flight >= self._max_queued:
                    raise _Refused(
                        f"send_input: {pipeline.in_flight} requests are sent and not received "
                        f"(max_queued {self._max_queued}); call receive_output first"
                    )
                request = pipeline.send_input(arrays, timeout=self._send_timeout)
            self._error = ""
            self._logger.debug("request %d queued", request)
            return OK
        except _Refused as refused:
            return self._fail(str(refused))
        except PipelineTimeoutError as error:
            return self._fail(f"send_input: {error}; nothing was queued")
        except PipelineError as error:  # closed while waiting (destroyed)
            return self._fail(f"send_input: {error}")
        except Exception as error:  # never raise to the host
            return self._fail(f"send_input: {type(error).__name__}: {error}")

    def receive_output(self, output_tensors: list[TensorsStruct]) -> int:
        """Take the outputs of the oldest request sent, if they are ready; never blocks.

        Args:
            output_tensors: A list, the Python form of ``tensors_struct **``: on success it
                holds exactly the output :class:`TensorsStruct` (its old content is
                replaced); the caller owns it.

        Returns:
            0 with the outputs; non-zero when the runtime has no model, nothing was sent,
            the oldest request is not finished yet (try again later), or it failed: then
            :meth:`runtime_error_message` names the request, the stage and its device, and
            the next call moves on to the next request. Never raises.
        """
        try:
            with self._lock:
                self._require(_State.LOADED, what="receive_output")
                pipeline = self._pipeline
                assert pipeline is not None
            if not isinstance(output_tensors, list):
                raise _Refused(
                    "receive_output: pass a list to receive the outputs (the Python form of "
                    f"tensors_struct **), not {type(output_tensors).__name__}"
                )
            if pipeline.in_flight == 0:
                self._error = "receive_output: no request in flight; call send_input first"
                return NOT_READY
            try:
                outputs = pipeline.receive_output(timeout=0)
            except PipelineTimeoutError:
                self._error = "receive_output: the oldest request is not finished yet"
                return NOT_READY
            except PipelineError as error:
                return self._fail(self._describe_failure(pipeline, error))
            output_tensors[:] = [TensorsStruct.from_arrays(outputs)]
            self._error = ""
            return OK
        except _Refused as refused:
            return self._fail(str(refused))
        except Exception as error:  # never raise to the host
            return self._fail(f"receive_output: {type(error).__name__}: {error}")

    @staticmethod
    def _describe_failure(pipeline: Pipeline, error: PipelineError) -> str:
        stage = error.stage
        request = "?" if error.request is None else error.request
        if stage is None:
            return f"receive_output: request {request} failed: {error}"
        device = pipeline.devices[stage] if 0 <= stage < len(pipeline.devices) else "?"
        return f"receive_output: request {request} failed in stage {stage} on {device}: {error}"

    # -- end --------------------------------------------------------------------------------

    def runtime_destruction(self) -> int:
        """Stop the pipeline (requests in flight are dropped, every worker ends); free all.

        Returns:
            0 on success; non-zero before initialisation or when already destroyed.
        """
        try:
            with self._lock:
                self._require(_State.READY, _State.LOADED, what="runtime_destruction")
                pipeline, self._pipeline = self._pipeline, None
                self._state = _State.DESTROYED
            if pipeline is not None:
                pipeline.close()
            self._logger.info("destroyed")
            for handler in self._handlers:
                self._logger.removeHandler(handler)
                handler.close()
            self._handlers = [logging.NullHandler()]
            self._logger.addHandler(self._handlers[0])
            self._error = ""
            return OK
        except _Refused as refused:
            return self._fail(str(refused))

    def runtime_error_message(self) -> str:
        """The last error's message (``""`` when the last call succeeded)."""
        return self._error

    def runtime_version(self) -> str:
        """The runtime's version (the package's)."""
        return __version__

    def runtime_name(self) -> str:
        """The runtime's name."""
        return RUNTIME_NAME

    def __repr__(self) -> str:
        return f"OaaxRuntime({self._state.value})"


_DEFAULT = OaaxRuntime()


def default_runtime() -> OaaxRuntime:
    """The process-wide instance behind the module-level functions.

    Like a shared library loaded once, it lives as long as the process: after
    :func:`runtime_destruction` every module-level call fails. Create an
    :class:`OaaxRuntime` for a fresh instance.
    """
    return _DEFAULT


def runtime_initialization() -> int:
    """:meth:`OaaxRuntime.runtime_initialization` of the process-wide instance."""
    return _DEFAULT.runtime_initialization()


def runtime_initialization_with_args(
    length: int, keys: Sequence[str | bytes], values: Sequence[Any]
) -> int:
    """:meth:`OaaxRuntime.runtime_initialization_with_args` of the process-wide instance."""
    return _DEFAULT.runtime_initialization_with_args(length, keys, values)


def runtime_model_loading(file_path: str | bytes | os.PathLike) -> int:
    """:meth:`OaaxRuntime.runtime_model_loading` of the process-wide instance."""
    return _DEFAULT.runtime_model_loading(file_path)


def send_input(input_tensors: TensorsStruct) -> int:
    """:meth:`OaaxRuntime.send_input` of the process-wide instance."""
    return _DEFAULT.send_input(input_tensors)


def receive_output(output_tensors: list[TensorsStruct]) -> int:
    """:meth:`OaaxRuntime.receive_output` of the process-wide instance."""
    return _DEFAULT.receive_output(output_tensors)


def runtime_destruction() -> int:
    """:meth:`OaaxRuntime.runtime_destruction` of the process-wide instance."""
    return _DEFAULT.runtime_destruction()


def runtime_error_message() -> str:
    """:meth:`OaaxRuntime.runtime_error_message` of the process-wide instance."""
    return _DEFAULT.runtime_error_message()


def runtime_version() -> str:
    """:meth:`OaaxRuntime.runtime_version` of the process-wide instance."""
    return _DEFAULT.runtime_version()


def runtime_name() -> str:
    """:meth:`OaaxRuntime.runtime_name` of the process-wide instance."""
    return _DEFAULT.runtime_name()
