"""What a :class:`~onnx_ir_multidevice.runtime.Pipeline` asks of the engine that runs its stages.

An engine is made by a factory (usually its class) registered under a name with
:func:`~onnx_ir_multidevice.runtime.engines.register_engine`; ``Pipeline(backend=name)`` calls
it once and then hands it requests. The :class:`~onnx_ir_multidevice.runtime.Pipeline` keeps the
bookkeeping (request numbers, back-pressure, delivery in order, timeouts, closing); an engine
only moves each request through the stages and reports its end.
"""

from __future__ import annotations

__all__ = ["Engine", "EngineFactory", "InlineEngine", "OnDone", "Outputs"]

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from onnx_ir_multidevice.runtime.devices import Device
from onnx_ir_multidevice.runtime.runner import StageFailure
from onnx_ir_multidevice.runtime.stages import StageChain
from onnx_ir_multidevice.runtime.stats import StatsRecorder

Outputs = dict[str, np.ndarray]
"""The graph outputs of one request, by name, in the order of ``chain.graph_outputs``."""

OnDone = Callable[[int, "Outputs | StageFailure"], None]
"""``on_done(request, result)``: the pipeline's callback for a request that left the engine."""


@runtime_checkable
class Engine(Protocol):
    """Runs the stages of a pipeline for every request it is handed.

    Threading contract:

    * :meth:`submit` is called from the caller's threads, possibly from several at once and
      not always in request order (the pipeline numbers requests before handing them on).
      It returns without waiting for the request to run.
    * For every request submitted, the engine calls ``on_done(request, outputs)`` or
      ``on_done(request, StageFailure(...))`` exactly once, from any thread, unless the
      pipeline was closed first. ``outputs`` holds numpy arrays of
      ``chain.graph_outputs``. The pipeline admits at most ``max_in_flight`` requests, so
      the engine needs no queue bounds of its own.
    * A failure of one request is a :class:`~onnx_ir_multidevice.runtime.runner.StageFailure`
      passed to ``on_done``, never an exception out of :meth:`submit` (one raised there
      fails that request alone). The pipeline routes results by request number, so
      ``on_done`` may come in any order; a second ``on_done`` for a request is ignored.
    * A stage that can run no more requests (its worker or actor died) is reported with a
      ``StageFailure(..., fatal=True)`` naming the stage: the pipeline then refuses later
      requests. The engine still calls ``on_done`` for every request it holds: those that
      still need the dead stage with that failure, those past it with their outputs.
    * :meth:`close` is called once, from any thread (also from the garbage collector's
      finaliser of an unreferenced pipeline); no :meth:`submit` follows it.

    Engines may record each stage's busy periods with ``recorder.busy(stage, request,
    start, end)`` (times on the factory's ``clock``) for :meth:`Pipeline.stats`.
    """

    def submit(self, request: int, env: dict[str, Any]) -> None:
        """Start request number ``request`` with the graph inputs ``env`` (name -> array).

        The engine owns ``env`` from now on and may add to it or drop from it.
        """
        ...

    def close(self, timeout: float) -> None:
        """Stop: cancel the runs in progress, end every worker, release every session.

        Args:
            timeout: Seconds to wait for workers to end; return after that even if some
                did not.
        """
        ...


@runtime_checkable
class InlineEngine(Engine, Protocol):
    """An engine that can also run a lone request in the calling thread.

    :meth:`Pipeline.run <onnx_ir_multidevice.runtime.Pipeline.run>` uses it when no other
    request is inside the stages: a lone request has nothing to overlap with, and handing it
    from thread to thread costs latency. Other threads may :meth:`submit` (or run inline)
    while it runs, so an engine that runs a stage one request at a time must make the
    caller's thread and its own workers take turns.
    """

    def run_inline(self, request: int, env: dict[str, Any]) -> None:
        """Run ``request`` through every stage in this thread; call ``on_done`` before returning.

        An exception that is not a stage's failure (``KeyboardInterrupt`` in the caller's
        thread...) propagates without ``on_done``: the pipeline drops the request.
        """
        ...


class EngineFactory(Protocol):
    """Makes an engine for one pipeline: an engine class, or any callable of this signature.

    A factory may carry a ``clock`` attribute (a function returning seconds, the clock its
    busy periods use: ``time.perf_counter`` in one process, ``time.time`` across processes);
    without one the pipeline uses ``time.perf_counter``.
    """

    def __call__(
        self,
        chain: StageChain,
        devices: Sequence[Device],
        threads: Sequence[int | None],
        recorder: StatsRecorder,
        on_done: OnDone,
        /,
        *,
        spinning: bool,
    ) -> Engine:
        """Start the engine.

        Args:
            chain: The stages and how tensors flow between them.
            devices: The device of each stage.
            threads: onnxruntime intra-op threads of each stage (``None``: its default).
            recorder: Where busy periods go (``recorder.busy(stage, request, start, end)``).
            on_done: The pipeline's callback, see :class:`Engine`.
            spinning: Whether onnxruntime's threads spin while idle.
            **options: The pipeline's ``engine_options`` (and ``actor_options`` from its
                ``ray_actor_options``), as further keyword parameters of the factory's own
                (not part of this protocol: each engine takes its own, and the pipeline
                refuses those its factory does not take).

        Returns:
            The running engine.

        Raises:
            PipelineError: A stage cannot be started (the engine releases what it started).
        """
        ...
