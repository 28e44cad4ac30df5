"""The in-process engine: one worker thread per stage, connected by queues.

onnxruntime releases the GIL while it runs, so the stages run in parallel. Tensors go from
stage to stage as the :class:`onnxruntime.OrtValue` or numpy arrays a stage returned (on the
GPU for a CUDA stage), without copies. Registered as ``"thread"``, the default backend of
:class:`~onnx_ir_multidevice.runtime.Pipeline`.
"""

from __future__ import annotations

__all__ = ["ThreadEngine"]

import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from onnx_ir_multidevice.runtime.devices import Device
from onnx_ir_multidevice.runtime.engines.protocol import OnDone
from onnx_ir_multidevice.runtime.engines.registry import register_engine
from onnx_ir_multidevice.runtime.runner import StageFailure, StageRunner, as_numpy, failure_message
from onnx_ir_multidevice.runtime.stages import StageChain
from onnx_ir_multidevice.runtime.stats import StatsRecorder

_STOP = object()


class ThreadEngine:
    """One worker thread per stage, connected by queues.

    It is an :class:`~onnx_ir_multidevice.runtime.engines.InlineEngine`. Each queue holds at
    most ``max_in_flight`` requests, since no more are admitted.

    Args:
        chain: The stages.
        devices: Device of each stage.
        threads: onnxruntime intra-op threads of each stage.
        recorder: Where busy periods go.
        on_done: Called with each request's outputs or failure.
        spinning: Whether onnxruntime's threads spin while idle.

    Raises:
        PipelineError: A stage's session cannot be made (those already made are closed).
    """

    name = "thread"
    clock = staticmethod(time.perf_counter)

    def __init__(
        self,
        chain: StageChain,
        devices: Sequence[Device],
        threads: Sequence[int | None],
        recorder: StatsRecorder,
        on_done: OnDone,
        *,
        spinning: bool,
    ) -> None:
        self._chain = chain
        self._recorder = recorder
        self._on_done = on_done
        self._runners: list[StageRunner] = []
        try:
            for stage, device, n in zip(chain.stages, devices, threads):
                self._runners.append(StageRunner(stage, device, n, spinning=spinning))
        except BaseException:
            for runner in self._runners:
                runner.close()
            raise
        self._queues: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in self._runners]
        self._stopping = threading.Event()
        self.threads = [
            threading.Thread(
                target=self._work, args=(i,), name=f"omny-pipeline-stage-{i}", daemon=True
            )
            for i in range(len(self._runners))
        ]
        for thread in self.threads:
            thread.start()

    def submit(self, request: int, env: dict[str, Any]) -> None:
        """Queue the request for the first stage's worker."""
        self._queues[0].put((request, env))

    def _step(self, index: int, request: int, env: dict[str, Any]) -> dict[str, Any] | None:
        """Run stage ``index`` on one request: the tensors to pass on, or ``None`` if it failed.

        A failure is delivered to the caller here (unless the pipeline is closing).
        """
        clock = self.clock
        start = clock()
        try:
            produced = self._runners[index].run(env, ort_values=True)
        except Exception as exc:  # any failure of the stage belongs to this request
            self._recorder.busy(index, request, start, clock())
            if not self._stopping.is_set():
                self._on_done(request, StageFailure(index, failure_message(exc), exc))
            return None
        self._recorder.busy(index, request, start, clock())
        env.update(produced)
        if index + 1 == len(self._runners):
            outputs = {name: as_numpy(env[name]) for name in self._chain.graph_outputs}
            self._on_done(request, outputs)
            return None
        keep = self._chain.keep_after[index]
        return {k: v for k, v in env.items() if k in keep}

    def _work(self, index: int) -> None:
        inbox = self._queues[index]
        outbox = self._queues[index + 1] if index + 1 < len(self._queues) else None
        while True:
            item = inbox.get()
            if item is _STOP:
                return
            if self._stopping.is_set():
                continue
            request, env = item
            try:
                passed_on = self._step(index, request, env)
            except Exception as exc:  # a bug of ours: fail the request, keep the worker
                self._on_done(request, StageFailure(index, f"internal error: {exc!r}", exc))
                continue
            if passed_on is not None and outbox is not None:
                outbox.put((request, passed_on))

    def run_inline(self, request: int, env: dict[str, Any]) -> None:
        """Run one request through every stage in the calling thread (no hand-offs).

        For a lone request nothing runs concurrently anyway, and waking a worker thread per
        stage costs latency (most on a loaded machine).
        """
        for index in range(len(self._runners)):
            if self._stopping.is_set():
                return
            passed_on = self._step(index, request, env)
            if passed_on is None:
                return
            env = passed_on

    def close(self, timeout: float) -> None:
        """Cancel the runs in progress, end the workers, close the stage sessions."""
        self._stopping.set()
        for runner in self._runners:
            runner.cancel()
        for inbox in self._queues:
            inbox.put(_STOP)
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        for runner in self._runners:
            runner.close()


register_engine("thread", ThreadEngine)
