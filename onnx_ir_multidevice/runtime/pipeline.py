"""Pipelined execution of a split model: one onnxruntime session per stage, run concurrently.

:class:`Pipeline` runs the stages of a model (see :mod:`onnx_ir_multidevice.runtime.stages`
for where they come from) as a pipeline: while stage 1 runs request ``k``, stage 0 already
runs request ``k + 1``. An engine moves the requests through the stages (see
:mod:`onnx_ir_multidevice.runtime.engines`): the in-process ``"thread"`` engine gives each
stage one worker thread (onnxruntime releases the GIL while it runs, so stages run in
parallel); the ``"ray"`` engine gives each stage one actor; others can be registered.

Guarantees, on every engine (the pipeline keeps the bookkeeping):

* **Order**: results come back in the order the requests were sent.
* **Back-pressure**: at most ``max_in_flight`` requests are inside the stages at once;
  :meth:`Pipeline.send_input` blocks (optionally with a timeout) until one completes.
  Completed results wait for :meth:`Pipeline.receive_output`.
* **Faults**: a request that fails in a stage raises :class:`~onnx_ir_multidevice.PipelineError`
  (with ``.stage`` and ``.request``) when its turn to be received comes; the requests around it
  are unaffected and the pipeline stays usable.
* **No hangs**: :meth:`Pipeline.close` cancels the runs in progress, ends every worker, and
  wakes every caller waiting on the pipeline with a :class:`~onnx_ir_multidevice.PipelineError`.

Tensors move between stages by reference: the numpy arrays a stage returns are handed to the
next stage as they are, and a request drops each tensor once no later stage reads it.
"""

from __future__ import annotations

__all__ = ["Pipeline", "PipelineTimeoutError"]

import contextlib
import inspect
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from onnx_ir_multidevice._errors import PipelineError
from onnx_ir_multidevice.runtime.devices import Device, parse_device
from onnx_ir_multidevice.runtime.engines import Engine, InlineEngine, get_engine
from onnx_ir_multidevice.runtime.engines.protocol import Outputs
from onnx_ir_multidevice.runtime.inputs import TensorSpec, generate_inputs
from onnx_ir_multidevice.runtime.runner import StageFailure
from onnx_ir_multidevice.runtime.stages import StageChain, load_stages
from onnx_ir_multidevice.runtime.stats import PipelineStats, StatsRecorder


class PipelineTimeoutError(PipelineError, TimeoutError):
    """A call on a :class:`Pipeline` waited longer than its ``timeout``.

    Nothing is lost: a request that timed out in :meth:`Pipeline.receive_output` can still be
    received by a later call, and :meth:`Pipeline.send_input` did not send anything.
    """


# ---------------------------------------------------------------------------------------------
# Bookkeeping shared by all engines


class _Book:
    """Request numbers, back-pressure and in-order delivery of results.

    Engines call :meth:`done` (from any thread) when a request leaves the last stage or
    fails; the caller's threads wait in :meth:`admit` and :meth:`take`.
    """

    def __init__(self, max_in_flight: int, recorder: StatsRecorder, devices: Sequence[str]):
        self.max_in_flight = max_in_flight
        self.recorder = recorder
        self.devices = devices
        self.cond = threading.Condition()
        self.receive_lock = threading.Lock()
        self.next_request = 0
        self.next_receive = 0
        self.in_pipeline = 0
        self.results: dict[int, Outputs | StageFailure] = {}
        self.closed = False

    @property
    def outstanding(self) -> int:
        """Requests sent and not received yet."""
        return self.next_request - self.next_receive

    def admit(self, timeout: float | None) -> int:
        """Wait for room in the pipeline and take the next request number."""
        with self.cond:
            ok = self.cond.wait_for(
                lambda: self.closed or self.in_pipeline < self.max_in_flight, timeout
            )
            if self.closed:
                raise PipelineError("the pipeline is closed; create a new one")
            if not ok:
                raise PipelineTimeoutError(
                    f"send_input timed out after {timeout} s: {self.in_pipeline} requests "
                    f"(max_in_flight) are still inside the stages; receive or wait, or raise "
                    "the timeout",
                    request=self.next_request,
                )
            request = self.next_request
            self.next_request += 1
            self.in_pipeline += 1
        self.recorder.sent(request)
        return request

    def done(self, request: int, result: Outputs | StageFailure) -> None:
        """Deliver the result (or failure) of ``request``."""
        self.recorder.done(request, failed=isinstance(result, StageFailure))
        with self.cond:
            if self.closed:
                return
            self.results[request] = result
            self.in_pipeline -= 1
            self.cond.notify_all()

    def take(self, timeout: float | None) -> Outputs:
        """Wait for the result of the oldest request not received yet."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.receive_lock.acquire(timeout=-1 if timeout is None else timeout):
            raise PipelineTimeoutError(
                f"receive_output timed out after {timeout} s waiting for another receiver"
            )
        try:
            with self.cond:
                if self.closed:
                    raise PipelineError("the pipeline is closed; nothing more can be received")
                request = self.next_receive
                if request >= self.next_request:
                    raise PipelineError(
                        "receive_output: no request in flight (every request sent has been "
                        "received); call send_input first"
                    )
                remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
                ok = self.cond.wait_for(lambda: self.closed or request in self.results, remaining)
                if self.closed:
                    raise PipelineError(
                        f"the pipeline was closed while request {request} was in flight; "
                        "its result is lost",
                        request=request,
                    )
                if not ok:
                    raise PipelineTimeoutError(
                        f"receive_output timed out after {timeout} s waiting for request "
                        f"{request}; it is still running and can be received later",
                        request=request,
                    )
                result = self.results.pop(request)
                self.next_receive = request + 1
        finally:
            self.receive_lock.release()
        if isinstance(result, StageFailure):
            where = "" if result.stage is None else f" on {self.devices[result.stage]}"
            error = PipelineError(
                f"failed{where}: {result.message}",
                stage=result.stage,
                request=request,
            )
            raise error from result.cause
        return result

    def close(self) -> bool:
        """Mark the pipeline closed and wake every waiting caller; False if it already was."""
        with self.cond:
            if self.closed:
                return False
            self.closed = True
            self.results.clear()
            self.cond.notify_all()
            return True


def _shutdown(book: _Book, engine: Engine, timeout: float) -> None:
    if book.close():
        engine.close(timeout)


# ---------------------------------------------------------------------------------------------
# Public API


def _per_stage(name: str, value: Any, n: int, convert: Callable[[Any], Any]) -> list[Any]:
    if isinstance(value, str) and "," in value:
        value = [part.strip() for part in value.split(",")]
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != n:
            raise PipelineError(
                f"{name} gives {len(value)} values for {n} stages; give one per stage or a "
                "single value for all"
            )
        return [convert(v) for v in value]
    return [convert(value)] * n


def _device(value: Any) -> Device:
    try:
        return parse_device("cpu" if value is None else value)
    except ValueError as exc:
        raise PipelineError(f"providers: {exc}") from exc


def _check_engine_options(backend: str, factory: Any, options: Mapping[str, Any]) -> None:
    """Refuse options the engine's factory does not take, naming them."""
    if not options:
        return
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C callable: let the call decide
        return
    try:
        signature.bind_partial(None, None, None, None, None, spinning=False, **options)
    except TypeError as exc:
        raise PipelineError(
            f"backend {backend!r} does not take the option(s) {sorted(options)}: {exc}"
        ) from exc


def _threads(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PipelineError(f"intra_op_num_threads must be a positive integer, got {value!r}")
    return value


class Pipeline:
    """Run a model split into stages as a pipeline, one onnxruntime session per stage.

    Example::

        with Pipeline("model.omny", shards=2, providers=["cpu", "cuda:0"]) as pipe:
            out = pipe.run({"x": x})                   # one request
            for out in pipe.map(batches):              # a stream, results in order
                ...
            pipe.send_input({"x": x}); pipe.send_input({"x": y})   # queue API (OAAX-style)
            first, second = pipe.receive_output(), pipe.receive_output()
            print(pipe.stats().format())

    Args:
        source: A planned model (:class:`onnx_ir.Model`, :class:`onnx.ModelProto` or a path
            to a ``.onnx`` / ``.omny`` file, with ``.omny`` metadata or pipeline annotations),
            which is split into ``shards`` stages; a directory written by ``omny split``; or a
            list of stage models (IR models, protos or paths) whose input and output names
            chain. ``shards=1`` runs a whole model as a single stage.
        shards: Number of stages (required for a single model).
        providers: Device of each stage: a list with one entry per stage (``["cpu",
            "cuda:0"]``), a comma-separated string, or one device for all stages. Default
            ``"cpu"``. See :func:`~onnx_ir_multidevice.runtime.parse_device`.
        intra_op_num_threads: onnxruntime threads of each stage: one int for all stages or
            one per stage (default: onnxruntime's choice).
        backend: Name of the engine that runs the stages (see
            :mod:`~onnx_ir_multidevice.runtime.engines`): ``"thread"`` (in-process, one worker
            thread per stage), ``"ray"`` (one Ray actor per stage; needs the ``ray`` extra),
            or one added with :func:`~onnx_ir_multidevice.register_engine`.
        max_in_flight: Most requests inside the stages at once (default: twice the number
            of stages, enough to keep every stage busy).
        outputs: Names to return (default: the model's graph outputs).
        spinning: Let onnxruntime's intra-op threads spin while idle. Off by default, since
            the stages share the machine's cores.
        ray_actor_options: Ray only: options for each stage's actor (one dict for all, or one
            per stage), merged over the defaults ``num_cpus`` (the stage's thread count or 1)
            and ``num_gpus`` (1 on a GPU device, else 0). Passed to the engine as its
            ``actor_options``.
        engine_options: Further keyword arguments of the engine's factory.

    Raises:
        PipelineError: The stages do not chain, a manifest is malformed, an argument does not
            fit the number of stages, a device is not available, the backend is not
            registered, or it takes no such option.
        OmnyIOError: A model or manifest file cannot be read.

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        source: Any,
        shards: int | None = None,
        *,
        providers: str | Device | Sequence[str | Device] | None = None,
        intra_op_num_threads: int | Sequence[int | None] | None = None,
        backend: str = "thread",
        max_in_flight: int | None = None,
        outputs: Sequence[str] | None = None,
        spinning: bool = False,
        ray_actor_options: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        engine_options: Mapping[str, Any] | None = None,
    ) -> None:
        factory = get_engine(backend)
        options = dict(engine_options or {})
        if ray_actor_options is not None:
            options.setdefault("actor_options", ray_actor_options)
        _check_engine_options(backend, factory, options)
        self._chain = load_stages(source, shards, outputs=outputs)
        n = self._chain.num_stages
        self._devices = tuple(_per_stage("providers", providers, n, _device))
        self._threads = tuple(_per_stage("intra_op_num_threads", intra_op_num_threads, n, _threads))
        if max_in_flight is None:
            max_in_flight = 2 * n
        if (
            isinstance(max_in_flight, bool)
            or not isinstance(max_in_flight, int)
            or max_in_flight < 1
        ):
            raise PipelineError(f"max_in_flight must be a positive integer, got {max_in_flight!r}")
        self._backend = backend
        self._run_lock = threading.Lock()
        clock = getattr(factory, "clock", time.perf_counter)
        self._recorder = StatsRecorder([str(d) for d in self._devices], backend, clock)
        self._book = _Book(max_in_flight, self._recorder, [str(d) for d in self._devices])
        self._engine: Engine = factory(
            self._chain,
            self._devices,
            self._threads,
            self._recorder,
            self._book.done,
            spinning=spinning,
            **options,
        )
        self._finalizer = weakref.finalize(self, _shutdown, self._book, self._engine, 5.0)

    # -- description ---------------------------------------------------------------------

    @property
    def chain(self) -> StageChain:
        """The stage models and how tensors flow between them."""
        return self._chain

    @property
    def plan(self) -> StageChain:
        """Deprecated name of :attr:`chain` (removed in the next release)."""
        warnings.warn(
            "Pipeline.plan is deprecated and will be removed in the next release; use "
            "Pipeline.chain (in onnx_ir_multidevice, a *plan* is the .omny plan the planner "
            "writes)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._chain

    @property
    def num_stages(self) -> int:
        """Number of stages."""
        return self._chain.num_stages

    @property
    def devices(self) -> tuple[Device, ...]:
        """Device of each stage."""
        return self._devices

    @property
    def backend(self) -> str:
        """Name of the engine that runs the stages (``"thread"``, ``"ray"``...)."""
        return self._backend

    @property
    def max_in_flight(self) -> int:
        """Most requests inside the stages at once."""
        return self._book.max_in_flight

    @property
    def input_names(self) -> tuple[str, ...]:
        """Names every request must provide."""
        return self._chain.graph_inputs

    @property
    def output_names(self) -> tuple[str, ...]:
        """Names every result holds, in order."""
        return self._chain.graph_outputs

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        """Declared shape, element type and index bound of each input."""
        return self._chain.specs

    @property
    def in_flight(self) -> int:
        """Requests sent and not received yet."""
        return self._book.outstanding

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._book.closed

    def __repr__(self) -> str:
        devices = ", ".join(str(d) for d in self._devices)
        state = "closed" if self.closed else f"{self.in_flight} in flight"
        return (
            f"Pipeline({self.num_stages} stages on [{devices}], backend={self._backend!r}, {state})"
        )

    # -- queue API -----------------------------------------------------------------------

    def _check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(inputs, Mapping):
            raise PipelineError(
                f"inputs must be a mapping of input name to array, got {type(inputs).__name__}"
            )
        expected = self._chain.graph_inputs
        missing = [n for n in expected if n not in inputs]
        unknown = sorted(set(inputs).difference(expected))
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing {missing}")
            if unknown:
                parts.append(f"unknown {unknown}")
            raise PipelineError(
                f"bad request inputs: {'; '.join(parts)}; the pipeline reads {list(expected)}"
            )
        return {n: v if isinstance(v, np.ndarray) else np.asarray(v) for n, v in inputs.items()}

    def send_input(self, inputs: Mapping[str, Any], *, timeout: float | None = None) -> int:
        """Queue one request; it may be called many times before :meth:`receive_output`.

        Blocks while ``max_in_flight`` requests are inside the stages (back-pressure).

        Args:
            inputs: Graph input name -> array (numpy arrays are passed on without a copy).
            timeout: Seconds to wait for room in the pipeline (``None``: no limit).

        Returns:
            The request number (0-based, in sending order), as in ``PipelineError.request``.

        Raises:
            PipelineError: An input is missing or unknown, or the pipeline is closed.
            PipelineTimeoutError: No room within ``timeout``; nothing was sent.
        """
        env = self._check_inputs(inputs)
        request = self._book.admit(timeout)
        try:
            self._engine.submit(request, env)
        except Exception as exc:  # e.g. Ray refused the call: the failure keeps its turn
            self._book.done(request, StageFailure(None, f"could not submit: {exc!r}", exc))
        return request

    def receive_output(self, *, timeout: float | None = None) -> Outputs:
        """Return the outputs of the oldest request not received yet (in sending order).

        Args:
            timeout: Seconds to wait for it (``None``: until it is ready).

        Returns:
            Output name -> numpy array.

        Raises:
            PipelineError: That request failed (``.stage`` and ``.request`` say where; the
                pipeline stays usable), no request is in flight, or the pipeline was closed.
            PipelineTimeoutError: Not ready within ``timeout``; a later call can receive it.
        """
        return self._book.take(timeout)

    # -- convenience ---------------------------------------------------------------------

    def _require_idle(self, what: str) -> None:
        if self._book.outstanding:
            raise PipelineError(
                f"{what} needs every earlier request received, but {self._book.outstanding} "
                "sent with send_input are not; receive them first"
            )

    def run(self, inputs: Mapping[str, Any], *, timeout: float | None = None) -> Outputs:
        """Run one request through every stage and return its outputs.

        On an engine that can (an :class:`~onnx_ir_multidevice.runtime.engines.InlineEngine`,
        such as the in-process one) the stages run one after another in the calling thread:
        a lone request has nothing to overlap with, and this saves a thread hand-off per
        stage. Its busy periods are recorded as for any request.

        Args:
            inputs: Graph input name -> array.
            timeout: Seconds to wait for the result (``None``: no limit).

        Returns:
            Output name -> numpy array.

        Raises:
            PipelineError: The request failed in a stage, or requests sent with
                :meth:`send_input` are still waiting to be received.
        """
        with self._run_lock:
            self._require_idle("run()")
            if isinstance(self._engine, InlineEngine):
                # in-process: run the stages in this thread, bookkept like any request
                env = self._check_inputs(inputs)
                self._engine.run_inline(self._book.admit(timeout), env)
            else:
                self.send_input(inputs, timeout=timeout)
            return self.receive_output(timeout=timeout)

    def map(
        self, requests: Iterable[Mapping[str, Any]], *, timeout: float | None = None
    ) -> Iterator[Outputs]:
        """Stream requests through the pipeline; yield their outputs in order.

        At most ``max_in_flight`` requests are sent ahead of the results the iterator has
        yielded, so a long (or endless) iterable runs in bounded memory.

        Args:
            requests: Graph inputs of each request.
            timeout: Seconds to wait for each result.

        Yields:
            The outputs of each request, in order.

        Raises:
            PipelineError: A request failed (the iterator stops there; requests already sent
                are received and discarded, so the pipeline stays usable), or requests sent
                with :meth:`send_input` are still waiting to be received.
        """
        self._require_idle("map()")
        return self._map(iter(requests), timeout)

    def _map(self, requests: Iterator[Mapping[str, Any]], timeout: float | None):
        pending = 0
        try:
            for inputs in requests:
                if pending >= self.max_in_flight:
                    pending -= 1
                    yield self.receive_output(timeout=timeout)
                self.send_input(inputs)
                pending += 1
            while pending:
                pending -= 1
                yield self.receive_output(timeout=timeout)
        finally:
            # Stopped early (a failure, or the caller left the loop): drop what is in flight.
            while pending and not self.closed:
                pending -= 1
                with contextlib.suppress(PipelineError):
                    self.receive_output()

    def example_inputs(
        self, dims: Mapping[str, int] | None = None, *, seed: int = 0
    ) -> dict[str, np.ndarray]:
        """Random inputs of the declared shapes and types, e.g. for benchmarks.

        The same generator as :func:`~onnx_ir_multidevice.runtime.verification.make_inputs`
        (:func:`~onnx_ir_multidevice.runtime.inputs.generate_inputs`): for a pipeline built
        from a model, the same model, ``dims`` and ``seed`` give the arrays ``verify`` feeds.
        Floating-point inputs are standard normal; integer inputs are uniform below the
        smallest table a ``Gather`` indexes with them (valid token ids; from the stage models
        that read them for a split directory or a list of stages), else below 4; inputs
        named ``*mask*`` are ones; booleans are random.

        Args:
            dims: Size of each symbolic dimension; any not given takes the planning dims the
                model records, else an example value (batch 1, 128 tokens, 224 x 224 images:
                :func:`~onnx_ir_multidevice.analysis.shapes.example_dims`).
            seed: Seed of the random generator.

        Returns:
            Input name -> array.

        Raises:
            PipelineError: An input's element type or shape is not declared by the model, or
                cannot be generated, or a value of ``dims`` is not a positive integer.
        """
        try:
            return generate_inputs(
                self.inputs, {**self._chain.planning_dims, **(dims or {})}, seed=seed
            )
        except ValueError as exc:
            raise PipelineError(f"{exc}; build the request arrays yourself") from exc

    # -- timing --------------------------------------------------------------------------

    def stats(self) -> PipelineStats:
        """Per-stage busy periods, latency, throughput and utilisation so far."""
        return self._recorder.snapshot()

    def reset_stats(self) -> None:
        """Forget the timing measured so far (e.g. after warm-up requests)."""
        self._recorder.reset()

    # -- life cycle ----------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Stop the pipeline: cancel the runs in progress and end every worker.

        Requests in flight are dropped; callers waiting in :meth:`receive_output` or
        :meth:`send_input` get a :class:`~onnx_ir_multidevice.PipelineError`. Calling it
        again does nothing.

        Args:
            timeout: Seconds to wait for the workers to end (onnxruntime stops a run between
                two operators).
        """
        self._finalizer.detach()
        _shutdown(self._book, self._engine, timeout)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
