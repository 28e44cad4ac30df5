"""Pipelined execution of a split model: one onnxruntime session per stage, run concurrently.

:class:`Pipeline` runs the stages of a model (see :mod:`onnx_ir_multidevice.runtime.stages`
for where they come from) as a pipeline: while stage 1 runs request ``k``, stage 0 already
runs request ``k + 1``. An engine moves the requests through the stages (see
:mod:`onnx_ir_multidevice.runtime.engines`): the in-process ``"thread"`` engine gives each
stage one worker thread (onnxruntime releases the GIL while it runs, so stages run in
parallel); the ``"ray"`` engine gives each stage one actor; others can be registered.

Guarantees, on every engine (the pipeline keeps the bookkeeping):

* **Own results**: :meth:`Pipeline.run` returns its own request's outputs and
  :meth:`Pipeline.map` yields its own requests' outputs, whatever other threads do meanwhile;
  results are delivered by request number, never by position.
* **Order**: :meth:`Pipeline.receive_output` returns the results of
  :meth:`Pipeline.send_input` in the order of their request numbers; :meth:`Pipeline.map`
  yields in the order of its iterable.
* **Back-pressure**: at most ``max_in_flight`` requests (of every caller) are inside the
  stages at once; sending blocks (optionally with a timeout) until one completes. Completed
  results wait for :meth:`Pipeline.receive_output`.
* **Faults**: a request that fails in a stage raises :class:`~onnx_ir_multidevice.PipelineError`
  (with ``.stage`` and ``.request``) when its turn to be received comes; the requests around it
  are unaffected and the pipeline stays usable. A stage that can run no more (its worker or
  actor died) fails every request that still needs it, naming the stage and its device, and
  the pipeline refuses later requests.
* **Interrupts**: a ``run()`` or ``map()`` interrupted in the caller's thread
  (``KeyboardInterrupt``, any exception in the loop over ``map()``) drops the requests it sent;
  nothing is left behind for :meth:`Pipeline.receive_output`.
* **No hangs**: :meth:`Pipeline.close` cancels the runs in progress, ends every worker, and
  wakes every caller waiting on the pipeline with a :class:`~onnx_ir_multidevice.PipelineError`.

Tensors move between stages by reference: the numpy arrays a stage returns are handed to the
next stage as they are, and a request drops each tensor once no later stage reads it.
"""

from __future__ import annotations

__all__ = ["Pipeline", "PipelineTimeoutError"]

import collections
import inspect
import math
import numbers
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableSequence, Sequence
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

    A request that timed out in :meth:`Pipeline.receive_output` can still be received by a
    later call, and a send that timed out waiting for room sent nothing. A :meth:`Pipeline.run`
    or :meth:`Pipeline.map` that timed out waiting for a result dropped its requests (their
    results are discarded when they arrive).
    """


# ---------------------------------------------------------------------------------------------
# Bookkeeping shared by all engines


class _Book:
    """Request numbers, back-pressure, and the delivery of each result to whoever waits for it.

    Every request gets a number (in admission order) and an *owner*: a list the admitting
    call keeps (``run()`` and ``map()`` have their own; every ``send_input`` request is also
    in :attr:`queue`, the FIFO of :meth:`take`). Results are routed by number: a caller
    only ever takes the result of a request it admitted, so callers in different threads
    cannot get each other's results. Engines call :meth:`done` (from any thread) when a
    request leaves the last stage or fails; callers wait in :meth:`admit`, :meth:`take` and
    :meth:`wait`, and give up their requests with :meth:`abandon` (a result that arrives for
    an abandoned request is dropped).

    Every state change happens under :attr:`cond`, in an order chosen so that an exception
    raised in the caller's thread part-way (``KeyboardInterrupt``) leaves nothing that
    :meth:`abandon` cannot undo.
    """

    def __init__(self, max_in_flight: int, recorder: StatsRecorder, devices: Sequence[str]):
        self.max_in_flight = max_in_flight
        self.recorder = recorder
        self.devices = devices
        self.cond = threading.Condition()
        self.next_request = 0
        self.inside: dict[int, bool] = {}
        """Requests admitted and not done: number -> handed to the engine yet."""
        self.waiting: set[int] = set()
        """Requests whose result a caller will take (not abandoned, not taken yet)."""
        self.results: dict[int, Outputs | StageFailure] = {}
        """Results of waited-for requests, until taken."""
        self.queue: collections.deque[int] = collections.deque()
        """``send_input`` requests not received yet, in number order."""
        self.closed = False
        self.dropped = 0
        """``send_input`` requests not received when the pipeline was closed."""
        self.broken: tuple[int, StageFailure] | None = None
        """The request and the failure that broke the pipeline (a stage that can run no more)."""

    # -- admission -----------------------------------------------------------------------

    def refusal(self) -> PipelineError | None:
        """Why no request can be admitted now (closed or broken), or ``None``."""
        if self.closed:
            return PipelineError("the pipeline is closed; create a new one")
        if self.broken is not None:
            request, failure = self.broken
            where = "" if failure.stage is None else f" on {self.devices[failure.stage]}"
            stage = "a stage" if failure.stage is None else f"stage {failure.stage}"
            error = PipelineError(
                f"the pipeline is broken: {stage}{where} can run no more requests since "
                f"request {request} ({failure.message})",
                stage=failure.stage,
            )
            error.__cause__ = failure.cause
            return error
        return None

    def admit(
        self, what: str, timeout: float | None, owner: MutableSequence[int], *, queued: bool = False
    ) -> tuple[int, bool]:
        """Wait for room in the stages, take the next request number, record it in ``owner``.

        Returns:
            The request number, and whether no other request was inside the stages.
        """
        with self.cond:
            ok = self.cond.wait_for(
                lambda: (
                    self.closed or self.broken is not None or len(self.inside) < self.max_in_flight
                ),
                timeout,
            )
            refusal = self.refusal()
            if refusal is not None:
                raise refusal
            if not ok:
                raise PipelineTimeoutError(
                    f"{what} timed out after {timeout} s waiting for room in the pipeline: "
                    f"{len(self.inside)} requests are inside the stages (max_in_flight="
                    f"{self.max_in_flight}); nothing was sent (wait for requests to finish, "
                    "or raise the timeout)",
                )
            request = self.next_request
            self.next_request = request + 1
            owner.append(request)  # first: whatever follows, abandon(owner) can undo it
            idle = not self.inside
            self.inside[request] = False
            self.waiting.add(request)
            if queued:
                self.queue.append(request)
        self.recorder.sent(request)
        return request, idle

    def dispatched(self, request: int) -> None:
        """Note that the engine has ``request`` (it will call :meth:`done` for it)."""
        with self.cond:
            if request in self.inside:
                self.inside[request] = True

    # -- delivery ------------------------------------------------------------------------

    def done(self, request: int, result: Outputs | StageFailure) -> None:
        """Deliver the result (or failure) of ``request``; later deliveries of it are ignored.

        A fatal failure (a stage that can run no more) breaks the pipeline: later admissions
        are refused; the engine fails the requests it still holds.
        """
        failed = isinstance(result, StageFailure)
        with self.cond:
            if self.closed or self.inside.pop(request, None) is None:
                return
            if request in self.waiting:
                self.results[request] = result
            if isinstance(result, StageFailure) and result.fatal and self.broken is None:
                self.broken = (request, result)
            self.cond.notify_all()
        self.recorder.done(request, failed=failed)

    def _result(self, request: int) -> Outputs:
        """Take the result of ``request`` (under :attr:`cond`): outputs, or raise its failure."""
        result = self.results.pop(request)
        self.waiting.discard(request)
        if isinstance(result, StageFailure):
            where = "" if result.stage is None else f" on {self.devices[result.stage]}"
            error = PipelineError(
                f"failed{where}: {result.message}", stage=result.stage, request=request
            )
            raise error from result.cause
        return result

    def take(self, timeout: float | None) -> Outputs:
        """Wait for the result of the oldest ``send_input`` request not received yet."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while True:
                if self.closed:
                    dropped = (
                        f"; the {self.dropped} requests sent with send_input and not received "
                        "when it was closed were dropped"
                        if self.dropped
                        else ""
                    )
                    raise PipelineError(
                        f"the pipeline is closed; nothing more can be received{dropped}"
                    )
                if not self.queue:
                    raise PipelineError(
                        "receive_output: nothing to receive, no request in flight from "
                        "send_input (every one sent has been received); call send_input first"
                    )
                request = self.queue[0]
                remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
                ok = self.cond.wait_for(
                    lambda: (
                        self.closed  # noqa: B023 - evaluated at once, in this iteration
                        or request in self.results  # noqa: B023
                        or request not in self.waiting  # noqa: B023 - taken by another
                    ),
                    remaining,
                )
                if self.closed:
                    raise PipelineError(
                        f"the pipeline was closed while request {request} was in flight; "
                        "its result is lost",
                        request=request,
                    )
                if request in self.results:
                    self.queue.popleft()
                    return self._result(request)
                if request not in self.waiting:  # another receiver took it: the next one
                    continue
                if not ok:
                    raise PipelineTimeoutError(
                        f"receive_output timed out after {timeout} s waiting for request "
                        f"{request}; it is still running or waiting for a stage, and a later "
                        "call can receive it",
                        request=request,
                    )

    def wait(self, request: int, timeout: float | None, what: str) -> Outputs:
        """Wait for the result of ``request``, admitted by the calling ``run()`` or ``map()``."""
        with self.cond:
            ok = self.cond.wait_for(lambda: self.closed or request in self.results, timeout)
            if self.closed:
                raise PipelineError(
                    f"the pipeline was closed while request {request} was in flight; "
                    "its result is lost",
                    request=request,
                )
            if not ok:
                raise PipelineTimeoutError(
                    f"{what} timed out after {timeout} s waiting for request {request}; the "
                    "request was dropped (its result is discarded when it arrives)",
                    request=request,
                )
            return self._result(request)

    def abandon(self, owner: MutableSequence[int]) -> None:
        """Give up the requests in ``owner``: nobody will take their results.

        Their results are dropped (now, or when they arrive); a request never handed to the
        engine leaves the stages' count. Results already taken are unaffected.
        """
        if not owner:
            return
        with self.cond:
            for request in owner:
                self.waiting.discard(request)
                self.results.pop(request, None)
                if self.queue and request in self.queue:
                    self.queue.remove(request)
                if self.inside.get(request) is False:  # admitted, never handed to the engine
                    del self.inside[request]
                    self.recorder.discard(request)
            owner.clear()
            self.cond.notify_all()

    def close(self) -> bool:
        """Mark the pipeline closed and wake every waiting caller; False if it already was."""
        with self.cond:
            if self.closed:
                return False
            self.closed = True
            self.dropped = len(self.queue)
            self.results.clear()
            self.waiting.clear()
            self.queue.clear()
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
            f"backend {backend!r} does not take the {'option' if len(options) == 1 else 'options'} "
            f"{sorted(options)}: {exc}"
        ) from exc


def _timeout(value: Any, what: str) -> float | None:
    """A caller's ``timeout`` as the waits take it: seconds, or ``None`` for no limit.

    ``None``, ``math.inf`` and any value of :data:`threading.TIMEOUT_MAX` or more (which the
    lock primitives refuse with ``OverflowError``) mean "no limit"; a negative value means
    "do not wait".

    Raises:
        PipelineError: ``value`` is not a real number of seconds, or is NaN.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PipelineError(
            f"{what}: timeout must be a number of seconds or None (no limit), got {value!r}"
        )
    seconds = float(value)
    if math.isnan(seconds):
        raise PipelineError(f"{what}: timeout is NaN; give a number of seconds or None (no limit)")
    if seconds >= threading.TIMEOUT_MAX:
        return None
    return max(seconds, 0.0)


def _array(name: str, value: Any) -> np.ndarray:
    """A request input as a numpy array, or a clear refusal.

    An array in the machine's byte order is passed on as it is; one in the other byte order
    (``'>f4'`` on x86) is copied into native order, since onnxruntime reads the bytes as native
    and would compute on garbage.
    """
    if not isinstance(value, np.ndarray):
        try:
            value = np.asarray(value)
        except (ValueError, TypeError) as exc:  # a ragged nested list, an odd object
            raise PipelineError(
                f"bad request input {name!r}: not an array ({exc}); give a numpy array or a "
                "nested list of numbers with the same length at each level"
            ) from None
    if not value.dtype.isnative:
        return value.astype(value.dtype.newbyteorder("="))
    return value


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

    Threads: every method may be called from any thread, concurrently. :meth:`run` and
    :meth:`map` get their own requests' results (delivered by request number), whatever
    other threads send or receive meanwhile, and leave nothing behind when they stop early or
    are interrupted. :meth:`send_input` and :meth:`receive_output` share one queue between
    all threads: results come back in the order of the request numbers ``send_input``
    returned, so a thread that needs to pair results with its own requests uses ``run`` or
    ``map`` (or keeps the queue to itself). ``max_in_flight`` counts the requests of every
    caller. :meth:`close` (from any thread) drops the requests in flight and wakes every
    caller waiting on the pipeline with a :class:`~onnx_ir_multidevice.PipelineError`; every
    later call raises one. A stage whose worker dies (a ``BaseException`` such as
    ``SystemExit`` escaped it) fails every request that still needs it and the pipeline
    refuses later ones, naming the stage and its device. See "Threads and faults" in the
    pipeline guide.

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
        address: Ray only: the running Ray cluster to connect to (``"auto"``, ``"HOST:PORT"``,
            ``"ray://HOST:PORT"``) when Ray is not initialized yet; ``None`` starts a local
            instance. Passed to the engine as its ``address``.
        placement: Ray only: where the stages go: a placement-group strategy (``"pack"``,
            ``"spread"``, ``"strict_pack"``, ``"strict_spread"``) or one node per stage (node
            id, IP address or custom resource name; ``None`` for any). See
            :mod:`~onnx_ir_multidevice.runtime.engines.ray`. Passed as its ``placement``.

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
        address: str | None = None,
        placement: str | Sequence[str | None] | None = None,
    ) -> None:
        factory = get_engine(backend)
        options = dict(engine_options or {})
        if ray_actor_options is not None:
            options.setdefault("actor_options", ray_actor_options)
        if address is not None:
            options.setdefault("address", address)
        if placement is not None:
            options.setdefault("placement", placement)
        _check_engine_options(backend, factory, options)
        self._chain = load_stages(source, shards, outputs=outputs)
        n = self._chain.num_stages
        self._devices = tuple(_per_stage("providers", providers, n, _device))
        threads = "--threads (intra_op_num_threads in Python)"  # `omny run` says the flag only
        self._threads = tuple(_per_stage(threads, intra_op_num_threads, n, _threads))
        if max_in_flight is None:
            max_in_flight = 2 * n
        if (
            isinstance(max_in_flight, bool)
            or not isinstance(max_in_flight, int)
            or max_in_flight < 1
        ):
            raise PipelineError(f"max_in_flight must be a positive integer, got {max_in_flight!r}")
        self._backend = backend
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
        """Requests sent with :meth:`send_input` and not received yet (by any thread).

        Requests of :meth:`run` and :meth:`map` are not counted: they deliver their own
        results.
        """
        return len(self._book.queue)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._book.closed

    def __repr__(self) -> str:
        devices = ", ".join(str(d) for d in self._devices)
        if self.closed:
            state = "closed"
        elif self._book.broken is not None:
            state = f"broken at stage {self._book.broken[1].stage}"
        else:
            state = f"{self.in_flight} in flight"
        return (
            f"Pipeline({self.num_stages} stages on [{devices}], backend={self._backend!r}, {state})"
        )

    # -- queue API -----------------------------------------------------------------------

    def _check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(inputs, Mapping):
            raise PipelineError(
                f"inputs must be a mapping of input name to array, got {type(inputs).__name__}"
            )
        not_names = [k for k in inputs if not isinstance(k, str)]
        if not_names:
            raise PipelineError(
                f"bad request inputs: the keys must be input names (strings), got "
                f"{', '.join(repr(k) for k in not_names[:5])}; the pipeline reads "
                f"{list(self._chain.graph_inputs)}"
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
        return {name: _array(name, value) for name, value in inputs.items()}

    def _dispatch(self, request: int, env: dict[str, Any], *, inline: bool) -> None:
        """Hand an admitted request to the engine (or run it in this thread, ``inline``)."""
        try:
            if inline:
                self._engine.run_inline(request, env)  # type: ignore[attr-defined]  # inline: an InlineEngine
            else:
                self._engine.submit(request, env)
        except Exception as exc:  # e.g. Ray refused the call: the failure keeps its turn
            self._book.done(request, StageFailure(None, f"could not submit: {exc!r}", exc))
        except BaseException as exc:  # e.g. KeyboardInterrupt in this thread: drop it, re-raise
            doing = "while it ran in the calling thread" if inline else "before it was sent"
            self._book.done(
                request, StageFailure(None, f"interrupted by {type(exc).__name__} {doing}", exc)
            )
            raise
        else:
            self._book.dispatched(request)

    def send_input(self, inputs: Mapping[str, Any], *, timeout: float | None = None) -> int:
        """Queue one request; it may be called many times before :meth:`receive_output`.

        Blocks while ``max_in_flight`` requests (of any thread and any of the calls
        :meth:`send_input`, :meth:`run` and :meth:`map`) are inside the stages
        (back-pressure). The request joins the pipeline's one queue of results, shared by
        every thread: :meth:`receive_output` returns them in the order of their request
        numbers.

        Args:
            inputs: Graph input name -> array (numpy arrays are passed on without a copy,
                except those in the other byte order, copied into the machine's).
            timeout: Seconds to wait for room in the pipeline (``None`` or ``math.inf``: no
                limit).

        Returns:
            The request number (0-based, in admission order, shared with :meth:`run` and
            :meth:`map`), as in ``PipelineError.request``.

        Raises:
            PipelineError: An input is missing or unknown, the pipeline is closed, or it is
                broken (a stage can run no more requests). Nothing was sent.
            PipelineTimeoutError: No room within ``timeout``; nothing was sent.
            BaseException: Interrupted (``KeyboardInterrupt``): nothing is left to receive.
        """
        timeout = _timeout(timeout, "send_input")
        env = self._check_inputs(inputs)
        mine: list[int] = []
        try:
            request, _ = self._book.admit("send_input", timeout, mine, queued=True)
            self._dispatch(request, env, inline=False)
        except BaseException:
            self._book.abandon(mine)  # interrupted part-way: nothing of it stays queued
            raise
        return request

    def receive_output(self, *, timeout: float | None = None) -> Outputs:
        """Return the outputs of the oldest :meth:`send_input` request not received yet.

        Results come in the order of the request numbers :meth:`send_input` returned,
        whichever thread sent them and whichever thread receives. Requests of :meth:`run`
        and :meth:`map` are not in this queue: they deliver their own results.

        Args:
            timeout: Seconds to wait for it (``None`` or ``math.inf``: until it is ready).

        Returns:
            Output name -> numpy array.

        Raises:
            PipelineError: That request failed (``.stage`` and ``.request`` say where; the
                pipeline stays usable unless the failure broke a stage), nothing sent with
                :meth:`send_input` is left to receive (it does not wait for a send), or the
                pipeline was closed.
            PipelineTimeoutError: Not ready within ``timeout``; a later call can receive it.
        """
        return self._book.take(_timeout(timeout, "receive_output"))

    # -- convenience ---------------------------------------------------------------------

    def run(self, inputs: Mapping[str, Any], *, timeout: float | None = None) -> Outputs:
        """Run one request through every stage and return its outputs.

        It returns this request's own outputs whatever other threads do meanwhile (other
        :meth:`run` calls, :meth:`map`, the queue API): results are delivered by request
        number. Requests waiting to be received with :meth:`receive_output` stay there.

        On an engine that can (an :class:`~onnx_ir_multidevice.runtime.engines.InlineEngine`,
        such as the in-process one), when no other request is inside the stages, the stages
        run one after another in the calling thread: a lone request has nothing to overlap
        with, and this saves a thread hand-off per stage. Its busy periods are recorded as for
        any request.

        Args:
            inputs: Graph input name -> array.
            timeout: Seconds to wait for room in the pipeline, and then for the result
                (``None`` or ``math.inf``: no limit).

        Returns:
            Output name -> numpy array.

        Raises:
            PipelineError: The request failed in a stage, or the pipeline is closed or broken.
            PipelineTimeoutError: No result within ``timeout``; the request is dropped (its
                result is discarded when it arrives).
            BaseException: An exception raised in the calling thread while it ran the stages
                (``KeyboardInterrupt``...): the request is dropped, the pipeline stays usable.
        """
        timeout = _timeout(timeout, "run()")
        env = self._check_inputs(inputs)
        mine: list[int] = []
        try:
            request, idle = self._book.admit("run()", timeout, mine)
            inline = idle and isinstance(self._engine, InlineEngine)
            self._dispatch(request, env, inline=inline)
            return self._book.wait(request, timeout, "run()")
        finally:
            self._book.abandon(mine)  # a no-op once the result was taken

    def map(
        self, requests: Iterable[Mapping[str, Any]], *, timeout: float | None = None
    ) -> Iterator[Outputs]:
        """Stream requests through the pipeline; yield their outputs in order.

        At most ``max_in_flight`` requests are sent ahead of the results the iterator has
        yielded, so a long (or endless) iterable runs in bounded memory. The iterator gets
        its own requests' results, whatever other threads do meanwhile; consume one iterator
        from one thread at a time (it is a generator).

        When the iterator stops early (a failure, a ``timeout``, the caller leaving the loop
        or closing it, an exception such as ``KeyboardInterrupt`` in the loop or in the
        iterable), the requests it sent and did not yield are dropped at once: their results
        are discarded when they arrive, and nothing is left to receive.

        Args:
            requests: Graph inputs of each request.
            timeout: Seconds to wait for each result.

        Yields:
            The outputs of each request, in order.

        Raises:
            PipelineError: A request failed (the iterator stops there), or the pipeline is
                closed or broken (raised by ``map()`` itself when it already is).
            PipelineTimeoutError: A result took longer than ``timeout``.
        """
        timeout = _timeout(timeout, "map()")
        refusal = self._book.refusal()
        if refusal is not None:
            raise refusal
        if isinstance(requests, Mapping):  # iterating it would yield its input names
            raise PipelineError(
                "map() takes an iterable of requests (each a mapping of input name to array), "
                "got one request; pass a list of requests, or use run(inputs) for one"
            )
        try:
            stream = iter(requests)
        except TypeError:
            raise PipelineError(
                "map() takes an iterable of requests (each a mapping of input name to array), "
                f"got {type(requests).__name__}"
            ) from None
        return self._map(stream, timeout)

    def _map(
        self, requests: Iterator[Mapping[str, Any]], timeout: float | None
    ) -> Iterator[Outputs]:
        mine: collections.deque[int] = collections.deque()
        book = self._book
        try:
            for item, inputs in enumerate(requests):
                if len(mine) >= book.max_in_flight:
                    outputs = book.wait(mine[0], timeout, "map()")
                    mine.popleft()
                    yield outputs
                try:
                    env = self._check_inputs(inputs)
                except PipelineError as exc:  # say which item of a long stream it is
                    raise PipelineError(f"map(): item {item} of the iterable: {exc}") from None
                request, _ = book.admit("map()", None, mine)
                self._dispatch(request, env, inline=False)
            while mine:
                outputs = book.wait(mine[0], timeout, "map()")
                mine.popleft()
                yield outputs
        finally:
            # Stopped early (a failure, an interrupt, the caller left the loop): drop the rest.
            book.abandon(mine)

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

        It may be called from any thread, at any time. Requests in flight and results not
        received yet are dropped; every caller waiting in :meth:`send_input`,
        :meth:`receive_output`, :meth:`run` or :meth:`map` gets a
        :class:`~onnx_ir_multidevice.PipelineError` saying the pipeline was closed, and so
        does every later call. Calling it again does nothing.

        Args:
            timeout: Seconds to wait for the workers to end (onnxruntime stops a run between
                two operators).
        """
        limit = _timeout(timeout, "close()")
        self._finalizer.detach()
        _shutdown(self._book, self._engine, threading.TIMEOUT_MAX if limit is None else limit)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
