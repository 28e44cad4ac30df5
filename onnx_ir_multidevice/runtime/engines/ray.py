"""Ray backend of :class:`~onnx_ir_multidevice.runtime.Pipeline`: one actor per stage.

Select it with ``Pipeline(..., backend="ray")`` (needs the ``ray`` extra). Each stage becomes
one Ray actor holding the stage's onnxruntime session; its resource request is ``num_cpus`` =
the stage's thread count (or 1) and ``num_gpus`` = 1 for a GPU device, so Ray places the
stages on the machines that have those devices. Override with ``ray_actor_options``
(``{"resources": {...}}``, ``scheduling_strategy``...).

A request is a chain of actor calls: the :class:`ray.ObjectRef` returned by stage ``i`` is the
argument of stage ``i + 1``, so activations go from actor to actor through Ray's object
store and never through the driver; only the final outputs come back. Actor calls from one
caller run in order, so while stage 1 works on request ``k``, stage 0 works on ``k + 1``.

A stage that fails returns a :class:`~onnx_ir_multidevice.runtime.runner.StageFailure`, which
the later stages pass on unchanged; the driver raises it as a
:class:`~onnx_ir_multidevice.PipelineError` in the request's turn. GPU stages use device index
0 inside their actor (Ray sets ``CUDA_VISIBLE_DEVICES`` to the GPU it assigned).

If Ray is not initialized, the backend calls ``ray.init()`` (a local instance); it never
shuts Ray down. :meth:`Pipeline.close` kills the stage actors (first letting the stages that
hold a model over the protobuf limit remove their temporary files, for up to the close's
timeout).

Importing this module registers the engine as ``"ray"`` without importing Ray: Ray is
imported when a Ray pipeline starts.
"""

from __future__ import annotations

__all__ = ["RayEngine"]

import time
from collections.abc import Mapping, Sequence
from typing import Any

import onnx_ir as ir

from onnx_ir_multidevice._errors import PipelineError
from onnx_ir_multidevice.runtime.devices import Device
from onnx_ir_multidevice.runtime.engines.protocol import OnDone
from onnx_ir_multidevice.runtime.engines.registry import register_engine
from onnx_ir_multidevice.runtime.runner import StageFailure, StageRunner, failure_message
from onnx_ir_multidevice.runtime.stages import StageChain, StageModel
from onnx_ir_multidevice.runtime.stats import StatsRecorder
from onnx_ir_multidevice.runtime.tensor_parallel import TensorParallelStage

Periods = list[tuple[int, float, float]]
"""(stage, start, end) of each stage a request went through, on ``time.time``."""


def _ray() -> Any:
    """The ``ray`` module, or a :class:`PipelineError` saying how to install it."""
    try:
        import ray  # optional dependency (the ray extra): imported when a Ray pipeline starts
    except ImportError as exc:
        raise PipelineError(
            f"backend='ray' needs Ray ({exc}); install it with "
            "`pip install 'onnx-ir-multidevice[ray]'` or use backend='thread'"
        ) from exc
    return ray


_FEWER_RESOURCES = (
    "lower --threads (intra_op_num_threads in Python, or pass ray_actor_options) or start Ray "
    "with more resources"
)
"""The advice of the errors of actors that ask for more than the Ray cluster has. The flag
first, the Python arguments in the parentheses that ``omny`` leaves out of its messages."""


def _actor_options(options: Any, n: int) -> list[dict[str, Any]]:
    """One dict of actor options per stage, from one dict for all or one per stage."""
    if options is None or isinstance(options, Mapping):
        return [dict(options or {}) for _ in range(n)]
    options = list(options)
    if len(options) != n:
        raise PipelineError(
            f"ray_actor_options gives {len(options)} values for {n} stages; give one per stage "
            "or a single value for all"
        )
    return [dict(o) for o in options]


class _StageActor:
    """Holds one stage's session; :meth:`run` takes and returns ``(env | failure, periods)``."""

    def __init__(
        self,
        stage: StageModel,
        device: Device,
        threads: int | None,
        spinning: bool,
        keep: frozenset[str],
        final_outputs: tuple[str, ...] | None,
    ) -> None:
        index = device.index
        if device.is_gpu and _ray().get_gpu_ids():
            index = 0  # Ray narrowed CUDA_VISIBLE_DEVICES to the GPU it assigned
        self._index = stage.index
        self._runner = StageRunner(stage, device, threads, device_index=index, spinning=spinning)
        self._keep = keep
        self._final = final_outputs
        self._dead: StageFailure | None = None

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        self._runner.close()

    def run(
        self, request: int, payload: tuple[dict[str, Any] | StageFailure, Periods]
    ) -> tuple[dict[str, Any] | StageFailure, Periods]:
        env, periods = payload
        if isinstance(env, StageFailure):
            return payload
        if self._dead is not None:  # every request that needs this stage fails at once
            return self._dead, periods
        start = time.time()
        try:
            produced = self._runner.run(env)
        except Exception as exc:  # any failure of the stage belongs to this request
            periods.append((self._index, start, time.time()))
            return StageFailure(self._index, failure_message(exc)), periods
        except BaseException as exc:  # SystemExit...: the stage cannot be trusted any more
            periods.append((self._index, start, time.time()))
            self._dead = StageFailure(
                self._index,
                f"the stage's Ray actor raised {failure_message(exc)}; the pipeline can run no "
                "more requests: close it and create a new one",
                fatal=True,
            )
            return self._dead, periods
        periods.append((self._index, start, time.time()))
        merged = dict(env)
        merged.update(produced)
        if self._final is not None:
            return {name: merged[name] for name in self._final}, periods
        return {k: v for k, v in merged.items() if k in self._keep}, periods


class RayEngine:
    """Pipeline engine with one Ray actor per stage (see the module docstring).

    Args:
        chain: The stages.
        devices: Device of each stage.
        threads: onnxruntime intra-op threads of each stage.
        recorder: Where busy periods go.
        on_done: Called with each request's outputs or failure.
        spinning: Whether onnxruntime's threads spin while idle.
        actor_options: Options of each stage's actor, over the defaults: one dict for all
            stages or one per stage (``Pipeline(ray_actor_options=...)``).
        start_timeout: Seconds to wait for every actor to start (Ray waits forever for
            resources the cluster does not have).

    Raises:
        PipelineError: Ray is not installed, an actor cannot be placed in time, or its
            session fails to load.
    """

    name = "ray"
    clock = staticmethod(time.time)

    def __init__(
        self,
        chain: StageChain,
        devices: Sequence[Device],
        threads: Sequence[int | None],
        recorder: StatsRecorder,
        on_done: OnDone,
        *,
        spinning: bool,
        actor_options: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        for stage in chain.stages:
            if isinstance(stage, TensorParallelStage):
                raise PipelineError(
                    f"stage {stage.index} is tensor-parallel ({stage.degree} ranks): the Ray "
                    "engine runs one actor per stage and has no collectives between actors; run "
                    "it with the thread engine (Pipeline(..., backend='thread'), `omny run` "
                    "without --backend ray), or split the model without its tensor-parallel "
                    "record",
                    stage=stage.index,
                )
        ray = _ray()
        actor_options = _actor_options(actor_options, chain.num_stages)
        if not ray.is_initialized():
            ray.init(include_dashboard=False)
        self._recorder = recorder
        self._on_done = on_done
        self._devices = tuple(devices)
        self._closed = False
        # Sessions of IR-model stages save the model to a temporary folder: let them remove it.
        self._files = any(isinstance(stage.source, ir.Model) for stage in chain.stages)
        actor_cls = ray.remote(_StageActor)
        last = chain.num_stages - 1
        self._actors = []
        requested = []
        for i, stage in enumerate(chain.stages):
            options = {
                "num_cpus": threads[i] or 1,
                "num_gpus": 1 if devices[i].is_gpu else 0,
                "max_concurrency": 1,
            }
            options.update(actor_options[i])
            requested.append(options)
            final = chain.graph_outputs if i == last else None
            self._actors.append(
                actor_cls.options(**options).remote(
                    stage, devices[i], threads[i], spinning, chain.keep_after[i], final
                )
            )
        self._check_resources(requested)
        ready = [actor.ready.remote() for actor in self._actors]
        done, _ = ray.wait(ready, num_returns=len(ready), timeout=start_timeout)
        if len(done) < len(ready):
            waiting = [i for i, ref in enumerate(ready) if ref not in done]
            self.close(0)
            raise PipelineError(
                f"the Ray actors of stages {waiting} did not start within {start_timeout} s; "
                f"they ask for {[requested[i] for i in waiting]} and the cluster has "
                f"{ray.available_resources()} free; {_FEWER_RESOURCES}",
                stage=waiting[0],
            )
        for i, ref in enumerate(ready):
            try:
                ray.get(ref)
            except ray.exceptions.RayError as exc:
                self.close(0)
                cause = getattr(exc, "cause", None) or exc
                raise PipelineError(
                    f"the stage's Ray actor failed to start: {cause}", stage=i
                ) from exc

    def _check_resources(self, requested: Sequence[Mapping[str, Any]]) -> None:
        """Fail at once when the actors ask for more CPUs or GPUs than the cluster has."""
        total = _ray().cluster_resources()
        for key, resource in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
            wanted = sum(float(options.get(key) or 0) for options in requested)
            if wanted > total.get(resource, 0.0):
                self.close(0)
                raise PipelineError(
                    f"the stage actors ask for {wanted:g} {resource} in all "
                    f"({[options.get(key) for options in requested]} per stage) but the Ray "
                    f"cluster has {total.get(resource, 0.0):g}; {_FEWER_RESOURCES}"
                )

    @property
    def threads(self) -> list[Any]:
        """No threads of its own: Ray's callbacks deliver the results."""
        return []

    def submit(self, request: int, env: dict[str, Any]) -> None:
        """Chain the stage actors' calls for one request (returns at once)."""
        payload: Any = (env, [])
        for actor in self._actors:
            payload = actor.run.remote(request, payload)
        payload.future().add_done_callback(lambda future: self._finish(request, future))

    def _finish(self, request: int, future: Any) -> None:
        try:
            result, periods = future.result()
        except Exception as exc:  # the actor died or was killed, or Ray lost the request
            if not self._closed:
                self._on_done(request, self._failure(exc))
            return
        for stage, start, end in periods:
            self._recorder.busy(stage, request, start, end)
        self._on_done(request, result)

    def _failure(self, exc: Exception) -> StageFailure:
        """The failure of a request whose actor call raised ``exc`` (in Ray, not in a stage).

        A dead actor (``RayActorError``) is fatal: every later call to it fails too. Its
        stage is found from the actor id; a request past it never got there.
        """
        actor_error = _ray().exceptions.RayActorError
        cause = getattr(exc, "cause", None)
        dead = exc if isinstance(exc, actor_error) else cause
        if not isinstance(dead, actor_error):
            return StageFailure(None, f"Ray lost the request: {failure_message(exc)}")
        stage = next(
            (i for i, a in enumerate(self._actors) if a._actor_id.hex() == dead.actor_id), None
        )
        what = "a stage's Ray actor" if stage is None else "the stage's Ray actor"
        reason = " ".join(str(dead).split())
        return StageFailure(
            stage,
            f"{what} died ({type(dead).__name__}: {reason}); the pipeline can run no more "
            "requests: close it and create a new one",
            fatal=True,
        )

    def close(self, timeout: float) -> None:
        """Kill the stage actors (their runs in progress stop at once).

        Stages whose sessions hold temporary files first get up to ``timeout`` seconds to
        close them (after the runs queued before).
        """
        ray = _ray()
        self._closed = True
        if self._files and self._actors:
            closing = [actor.close.remote() for actor in self._actors]
            ray.wait(closing, num_returns=len(closing), timeout=timeout)
        for actor in self._actors:
            ray.kill(actor, no_restart=True)


register_engine("ray", RayEngine)
