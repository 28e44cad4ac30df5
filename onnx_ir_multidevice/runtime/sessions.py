"""The one hand-off of a model to onnxruntime: :class:`ModelSession`.

``verify``, the pipeline's stages (both engines) and ``omny demo`` all create their
onnxruntime sessions here, from an :class:`onnx_ir.Model`, an :class:`onnx.ModelProto`, the
serialized bytes of one, or a path:

* a **path** is handed to onnxruntime as an absolute path (links resolved, as
  :func:`~onnx_ir_multidevice.load` does): onnxruntime finds external data relative to the
  model file, whatever the working directory, now or when the session is made;
* a model that fits in one protobuf message and carries its weights is handed over as
  **bytes**, without touching the disk; tensor attributes (``Constant`` values) it reads from
  external files are embedded in those bytes (onnxruntime would look for their files relative
  to the working directory, and refuse: "External data path ... escapes working directory");
* a model with **external initializers**, or larger than :data:`PROTO_LIMIT_BYTES`
  (protobuf cannot serialize a message of 2 GiB or more), is saved to a **private temporary
  folder** with its weights in a data file (and its external tensor attributes embedded); the
  folder is removed when the session is closed (:meth:`ModelSession.close`, or leaving its
  ``with`` block), and at the latest when the :class:`ModelSession` is garbage-collected.

An IR model's multi-device fields (IR v11 configurations, which onnxruntime does not use) are
left out of what onnxruntime gets, and its IR version lowered to the lowest its content then
needs (:func:`~onnx_ir_multidevice.graph.ir_versions.lowest_ir_version`): onnxruntime 1.20 to
1.22 refuse a model above IR 10, which an annotated whole model is. The model is not changed.

:func:`session_source` makes the same decision ahead of time, for a session that is created
later or in another process (a Ray actor): it keeps the bytes or the path, or the IR model
itself when only a file can carry it.

onnxruntime is an optional dependency (the ``runtime`` extra): it is imported when a session
or its options are first made.
"""

from __future__ import annotations

__all__ = ["PROTO_LIMIT_BYTES", "ModelSession", "session_options", "session_source"]

import os
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any, Union

import onnx
import onnx_ir as ir

from onnx_ir_multidevice._proto.external import external_attributes_embedded, proto_tensors
from onnx_ir_multidevice.graph.dtypes import stored_nbytes
from onnx_ir_multidevice.graph.ir_versions import MULTI_DEVICE_IR_VERSION, lowest_ir_version

PROTO_LIMIT_BYTES = 1_800_000_000
"""Models whose weights or serialized proto reach this size go through a temporary file
instead of bytes (protobuf's hard limit is 2 GiB)."""

_MODEL_FILE = "model.onnx"

ModelSource = Union[ir.Model, onnx.ModelProto, bytes, str, "os.PathLike[str]"]
"""What :class:`ModelSession` accepts."""


def _onnxruntime() -> Any:
    try:
        import onnxruntime  # optional dependency (the runtime extra), imported on first use
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"running a model needs onnxruntime ({error}): "
            "pip install 'onnx-ir-multidevice[runtime]'"
        ) from error
    return onnxruntime


_LOG_FATAL_ONLY = 4
"""onnxruntime's log severity for fatal messages only (0 verbose ... 3 error, 4 fatal)."""


def session_options(
    *,
    intra_op_num_threads: int | None = None,
    sequential: bool = False,
    spinning: bool | None = None,
) -> Any:
    """:class:`onnxruntime.SessionOptions` with the package's defaults (nothing logged).

    onnxruntime logs nothing on stderr (``log_severity_level`` 4, fatal only): its error
    lines, in terminal colours, only repeat what the exception raised to the caller says,
    which every command reports in its own words. Runs inherit the level.

    Args:
        intra_op_num_threads: onnxruntime's intra-op thread count (``None``: its default).
        sequential: Run operators one at a time (``ORT_SEQUENTIAL``, one inter-op thread):
            a pipeline stage gets its parallelism from the other stages.
        spinning: Whether intra-op threads spin while waiting for work (``None``: the
            default of onnxruntime).

    Returns:
        The options.

    Raises:
        ImportError: onnxruntime is not installed.
    """
    ort = _onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = _LOG_FATAL_ONLY
    if intra_op_num_threads is not None:
        options.intra_op_num_threads = intra_op_num_threads
    if sequential:
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if spinning is not None:
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if spinning else "0"
        )
    return options


def _needs_file(model: ir.Model) -> bool:
    """Whether ``model`` has external initializers or weights too large for one message."""
    total = 0
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is None:
                continue
            if isinstance(tensor, ir.ExternalTensor):
                return True
            total += stored_nbytes(tensor) or 0  # no size (UNDEFINED): onnxruntime says why
    return total >= PROTO_LIMIT_BYTES


def _all_node_protos(proto: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``proto``: main graph, subgraphs at any depth, functions."""
    pending = [proto.graph.node, *(f.node for f in proto.functions)]
    while pending:
        for node in pending.pop():
            yield node
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    pending.append(attr.g.node)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    pending.extend(g.node for g in attr.graphs)


def _single_device(proto: onnx.ModelProto, model: ir.Model) -> bool:
    """Drop ``proto``'s multi-device fields and lower its IR version; whether it changed.

    ``proto`` is ``model`` serialized; ``model`` is not changed.
    """
    if proto.ir_version < MULTI_DEVICE_IR_VERSION:
        return False
    changed = bool(proto.configuration)
    del proto.configuration[:]
    for node in _all_node_protos(proto):
        if node.device_configurations:
            del node.device_configurations[:]
            changed = True
    lowest = lowest_ir_version(model, kept=lambda entry: False, configurations=())
    if lowest != proto.ir_version:
        proto.ir_version = lowest
        changed = True
    return changed


def session_source(model: ModelSource) -> bytes | str | ir.Model:
    """What to keep for creating a session of ``model`` later (see the module docstring).

    Args:
        model: An IR model, a proto, serialized bytes or a path.

    Returns:
        The serialized model when it fits in one protobuf message and carries its weights
        (external tensor attributes embedded); the absolute path (as a string, links
        resolved) for a path; else the IR model, which :class:`ModelSession` saves to a
        temporary folder. The IR model is not copied.

    Raises:
        TypeError: ``model`` is none of these.
    """
    if isinstance(model, bytes):
        return model
    if isinstance(model, (str, os.PathLike)):
        return os.path.realpath(model)
    if isinstance(model, onnx.ModelProto):
        external = any(
            t.data_location == onnx.TensorProto.EXTERNAL for _, _, t in proto_tensors(model)
        )
        if not external and model.ByteSize() < PROTO_LIMIT_BYTES:
            return model.SerializeToString()
        return ir.from_proto(model)
    if isinstance(model, ir.Model):
        if _needs_file(model):
            return model
        with external_attributes_embedded(model):
            proto = ir.to_proto(model)
        _single_device(proto, model)
        if proto.ByteSize() < PROTO_LIMIT_BYTES:
            return proto.SerializeToString()
        return model
    raise TypeError(
        "expected an onnx_ir.Model, an onnx.ModelProto, serialized bytes or a path, "
        f"got {type(model).__name__}"
    )


def save_for_session(model: ir.Model, folder: str) -> str:
    """Save ``model`` into ``folder`` as onnxruntime gets it from a file; return the path.

    The weights go to one data file next to the model (external tensor attributes embedded),
    and an annotated model loses its multi-device fields (see the module docstring).
    """
    path = os.path.join(folder, _MODEL_FILE)
    with external_attributes_embedded(model):
        ir.save(model, path, external_data=f"{_MODEL_FILE}.data")
    if model.ir_version >= MULTI_DEVICE_IR_VERSION:
        proto = onnx.load_model(path, load_external_data=False)  # no weights
        if _single_device(proto, model):
            onnx.save_model(proto, path)
    return path


class ModelSession:
    """An onnxruntime :class:`~onnxruntime.InferenceSession` and the files it was made from.

    Use it as a context manager, or call :meth:`close`::

        with ModelSession(model, providers=["CPUExecutionProvider"]) as owner:
            outputs = owner.session.run(None, feeds)

    Args:
        model: An IR model, a proto, serialized bytes, a path, or what
            :func:`session_source` returned. A model with external data or over
            :data:`PROTO_LIMIT_BYTES` goes through a private temporary folder.
        options: Session options (default: :func:`session_options` with no argument).
        providers: onnxruntime's ``providers`` argument: names, or ``(name, options)``
            pairs (default: the CPU provider).

    Raises:
        ImportError: onnxruntime is not installed.
        Exception: Whatever onnxruntime (or saving the model) raises when the model cannot
            be loaded; the temporary folder is removed first.
    """

    def __init__(
        self,
        model: ModelSource,
        options: Any = None,
        providers: Sequence[Any] | None = None,
    ) -> None:
        ort = _onnxruntime()
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self.session: Any = None
        """The onnxruntime session (``None`` once closed)."""
        try:
            source = session_source(model)
            if isinstance(source, ir.Model):
                self._folder = tempfile.TemporaryDirectory(
                    prefix="omny-session-", ignore_cleanup_errors=True
                )
                source = save_for_session(source, self._folder.name)
            self.session = ort.InferenceSession(
                source,
                options if options is not None else session_options(),
                providers=list(providers) if providers else ["CPUExecutionProvider"],
            )
        except BaseException:
            self.close()
            raise

    @property
    def folder(self) -> str | None:
        """The temporary folder the model was saved to (``None``: none was needed)."""
        return None if self._folder is None else self._folder.name

    def close(self) -> None:
        """Release the session and remove the temporary folder; calling it again does nothing."""
        self.session = None
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def __enter__(self) -> ModelSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
