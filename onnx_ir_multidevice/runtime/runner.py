"""Running one stage: :class:`StageRunner`, an onnxruntime session with its own options.

Both engines of :class:`~onnx_ir_multidevice.runtime.Pipeline` run their stages through it
(the thread engine in its worker threads, the Ray engine inside each actor). A request that
fails in a stage travels on as a :class:`StageFailure` in place of its outputs.
"""

from __future__ import annotations

__all__ = ["StageFailure", "StageRunner", "as_numpy", "failure_message"]

import dataclasses
import os
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from onnx_ir_multidevice._errors import ExternalDataError, PipelineError
from onnx_ir_multidevice._proto.external import proto_problems
from onnx_ir_multidevice.runtime.devices import Device
from onnx_ir_multidevice.runtime.sessions import ModelSession, session_options
from onnx_ir_multidevice.runtime.stages import StageModel


@dataclasses.dataclass
class StageFailure:
    """A request that failed in a stage; it travels to the caller in place of the outputs."""

    stage: int | None
    """0-based index of the stage that failed (``None`` when the backend lost the request)."""

    message: str
    """What went wrong, e.g. onnxruntime's error message."""

    cause: BaseException | None = None
    """The original exception, where it is at hand (in-process backends)."""

    fatal: bool = False
    """The stage can run no more requests (its worker or actor died): the pipeline refuses
    later requests, and the engine fails those it holds that still need that stage."""


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

    The session is made by :class:`~onnx_ir_multidevice.runtime.sessions.ModelSession`;
    :meth:`close` removes the temporary folder a large stage model was saved to.

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
        import onnxruntime as ort  # optional dependency (the runtime extra)

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
        options = session_options(intra_op_num_threads=threads, sequential=True, spinning=spinning)
        try:
            self._owner = ModelSession(
                stage.source, options, device.ort_providers(index=device_index)
            )
        except Exception as exc:
            damaged = _data_problems(stage)
            if damaged is not None:  # its data file, not onnxruntime, is what to name
                raise damaged from damaged.__cause__  # the ExternalDataError
            raise PipelineError(
                f"onnxruntime cannot load the stage model on {device}: {exc}", stage=stage.index
            ) from exc
        self.session: Any = self._owner.session
        try:
            self._check_session()
        except BaseException:
            self._owner.close()
            raise
        self._run_options = ort.RunOptions
        self._ort_value = ort.OrtValue
        # OrtValues can carry every tensor but strings; other stages exchange numpy arrays.
        io_types = [v.type for v in (*self.session.get_inputs(), *self.session.get_outputs())]
        self._values_ok = all(t.startswith("tensor(") and t != "tensor(string)" for t in io_types)
        self._lock = threading.Lock()
        self._current: Any = None
        self._cancelled = False

    def _check_session(self) -> None:
        """Refuse a provider fallback, and stage inputs the chain does not route."""
        stage, device = self.stage, self.device
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
                f"the stage model reads {undeclared} which the stage chain does not route to it",
                stage=stage.index,
            )
        self._feeds = tuple(n for n in stage.inputs if n in session_inputs)

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
            session = self.session
        try:
            if use_values:
                values = session.run_with_ort_values(list(self.stage.outputs), feed, run_options)
            else:
                values = session.run(list(self.stage.outputs), feed, run_options)
        finally:
            with self._lock:
                self._current = None
        return dict(zip(self.stage.outputs, values, strict=True))

    def describe_failure(self, exc: BaseException, env: Mapping[str, Any]) -> str:
        """One line saying why a run of this stage failed, and on what.

        onnxruntime's message (:func:`failure_message`), then the stage's file (or, for a
        model given in memory, its graph's name), the element type and shape of each tensor
        the stage was fed, and those its model declares, so a bad request can be told from a
        bad model without a debugger.

        Args:
            exc: What :meth:`run` raised.
            env: The tensors :meth:`run` was given.

        Returns:
            The message.
        """
        source = self.stage.source
        if isinstance(source, str):
            model = f"stage file {source}"
        else:
            session = self.session
            graph = None if session is None else session.get_modelmeta().graph_name
            model = f"stage model graph {graph!r}" if graph else "stage model given in memory"
        fed = ", ".join(
            f"{name}: {_describe_value(env[name])}" for name in self._feeds if name in env
        )
        session = self.session
        declared = (
            ""
            if session is None
            else "; it declares "
            + ", ".join(
                f"{i.name}: {_type_name(i.type)}[{', '.join(str(d) for d in i.shape)}]"
                for i in session.get_inputs()
            )
        )
        return f"{failure_message(exc)} ({model}; it was fed {fed or 'nothing'}{declared})"

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

    def close(self) -> None:
        """Cancel (as :meth:`cancel`), release the session and remove its temporary files.

        A run in progress in another thread keeps the session until it returns.
        """
        self.cancel()
        with self._lock:
            self.session = None
        self._owner.close()


def _type_name(ort_type: str) -> str:
    """``float`` for onnxruntime's ``tensor(float)``; other type strings as they are."""
    if ort_type.startswith("tensor(") and ort_type.endswith(")"):
        return ort_type[len("tensor(") : -1]
    return ort_type


def _describe_value(value: Any) -> str:
    """``float32[3, 16]`` for a numpy array or an OrtValue: its element type and shape."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype}[{', '.join(str(d) for d in value.shape)}]"
    try:  # an onnxruntime.OrtValue: its element type as numpy names it, as for arrays
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.element_type())
        return f"{dtype}[{', '.join(str(d) for d in value.shape())}]"
    except Exception:  # anything else: what it is
        return type(value).__name__


def _data_problems(stage: StageModel) -> PipelineError | None:
    """Why the data files of a stage file cannot be read, after onnxruntime failed to load it.

    Returns:
        A :class:`PipelineError` naming the stage file, its data file and the problem (caused
        by an :class:`~onnx_ir_multidevice.ExternalDataError`), or ``None`` when the stage
        is not a file or its data files are as it says.
    """
    source = stage.source
    if not isinstance(source, str) or not os.path.isfile(source):
        return None
    try:
        proto = onnx.load_model(source, load_external_data=False)
    except Exception:  # the file itself is damaged: onnxruntime's message says so
        return None
    problems = proto_problems(proto, os.path.dirname(os.path.abspath(source)))
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    error = PipelineError(
        f"{source}: {problems[0]}{more}; split the model again (`omny split`)",
        stage=stage.index,
    )
    error.__cause__ = ExternalDataError(source, problems)
    return error
