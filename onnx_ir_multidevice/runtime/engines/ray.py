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

If Ray is not initialized, the backend calls ``ray.init(address=address)``: a local instance
when ``address`` is ``None``, else the running cluster at ``address`` (``"auto"``,
``"10.0.0.1:6379"``, ``"ray://..."``); it never shuts Ray down.

**Placement** (``placement``): ``None`` lets Ray's scheduler place each actor by its resource
request; a strategy name (``"pack"``, ``"spread"``, ``"strict_pack"``, ``"strict_spread"``)
reserves one placement group with one bundle per stage (the stage's request) and puts stage
``i`` in bundle ``i``; a sequence gives each stage a node: a node id (hex), a node's IP
address, or the name of a custom resource that node was started with (``ray start
--resources '{"gpu-box": 1}'``), ``None`` for a stage Ray may place anywhere. Before creating
any actor the engine checks that every stage fits some alive node (and, for the strict
strategies, that the stages fit together), so a stage no node can host is refused at once,
not left pending. :attr:`RayEngine.placements` and the pipeline's stats name the node id and
address each stage's actor runs on.

**Stage files** (``ship_files``): a stage made from a path (a split directory) or from an IR
model with external data would be read from the driver's file system. When the cluster has
more than one node (or ``ship_files=True``), the driver instead reads each stage's model
file and its external data files and puts each file into Ray's object store, in objects of
:data:`SHIP_CHUNK_BYTES` at most (a file over 2 GiB is never held whole by the driver or the
actor), each file once (the segments of a tensor-parallel rank share one data file); the
actor writes them to a folder of its own under ``<tmp>/omny-ray-stages/<pipeline id>/`` on its
node (:data:`STAGE_FILES`), makes its session from there, and removes the folder when the
pipeline closes. A stage held in memory (an IR model) is saved by the driver and shipped so
on any cluster, so that its files land in that folder too. An actor that cannot remove them
(killed, crashed) leaves its files: :meth:`Pipeline.close` then runs a small task on each node
that hosted a stage to remove the pipeline's folder there. No shared file system is needed. The
stages' activation sizes are summed as they pass on (``PipelineStats.between_nodes_bytes``:
bytes per request from one node to the next).

**Faults**: a stage actor that dies (killed, crashed, or its node removed) fails every
request that still needs it with a fatal :class:`~onnx_ir_multidevice.PipelineError` naming
the stage and its node, as soon as Ray reports the death: at once for a killed actor, within
Ray's node health check (``health_check_period_ms`` x ``health_check_failure_threshold``, 3 s
x 5 by default) for a lost node; the pipeline then refuses new requests. A new pipeline
places its stages on the nodes left.

:meth:`Pipeline.close` kills the stage actors (first letting the stages that hold temporary
files remove them, for up to the close's timeout) and removes the placement group.

**Tensor-parallel stages** run in one actor each: the actor holds every rank's segment
sessions and runs them as the thread engine does
(:class:`~onnx_ir_multidevice.runtime.tensor_parallel.TensorParallelRunner`: the ranks in
threads, the collectives in the actor's process), so a shard group stays on one node, as
tensor parallelism needs a fast link; the pipeline's stages spread over the nodes. The actor
asks for ``degree x threads`` CPUs. Shipped, a stage's files go once each (every segment of a
rank reads one data file). Spanning one group over several actors or nodes, with the
collectives through Ray objects, is not built: :class:`TensorParallelRunner`'s collectives are
the seam.

Importing this module registers the engine as ``"ray"`` without importing Ray: Ray is
imported when a Ray pipeline starts.
"""

from __future__ import annotations

__all__ = ["RayEngine"]

import contextlib
import dataclasses
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import onnx
import onnx_ir as ir

from onnx_ir_multidevice._errors import PipelineError
from onnx_ir_multidevice._proto.external import proto_tensors
from onnx_ir_multidevice.runtime.devices import Device
from onnx_ir_multidevice.runtime.engines.protocol import OnDone
from onnx_ir_multidevice.runtime.engines.registry import register_engine
from onnx_ir_multidevice.runtime.runner import StageFailure, StageRunner, failure_message
from onnx_ir_multidevice.runtime.sessions import save_for_session
from onnx_ir_multidevice.runtime.stages import StageChain, StageModel
from onnx_ir_multidevice.runtime.stats import StatsRecorder
from onnx_ir_multidevice.runtime.tensor_parallel import TensorParallelRunner, TensorParallelStage

Periods = list[tuple[int, float, float, int]]
"""(stage, start, end, bytes passed on) of each stage a request went through (``time.time``)."""


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


STRATEGIES = ("pack", "spread", "strict_pack", "strict_spread")
"""The placement-group strategies ``placement`` may name (case-insensitive)."""

_LABEL_AMOUNT = 0.001
"""How much of a node's custom resource a stage placed by that label asks for."""


@dataclasses.dataclass(frozen=True)
class _Shipped:
    """A stage's files in Ray's object store.

    The model file's name and, per file, the refs of its chunks (:data:`SHIP_CHUNK_BYTES` each
    at most).
    """

    model: str
    files: Mapping[str, tuple[Any, ...]]
    nbytes: int


SHIP_CHUNK_BYTES = 256 << 20
"""The largest object a shipped file is cut into: a file of any size (over 2 GiB) travels
without the driver or the actor holding more than one chunk of it in memory."""


def _put_file(ray: Any, path: str) -> tuple[Any, ...]:
    """Put the file at ``path`` into the object store, chunk by chunk (one ref per chunk)."""
    refs = []
    with open(path, "rb") as f:
        while chunk := f.read(SHIP_CHUNK_BYTES):
            refs.append(ray.put(chunk))
            del chunk  # one chunk in memory at a time
    return tuple(refs) or (ray.put(b""),)


def _external_files(path: str) -> list[str]:
    """The external data files a model file names, relative to its folder."""
    proto = onnx.load_model(path, load_external_data=False)
    names = []
    for _, name, tensor in proto_tensors(proto):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), None)
        if not location:
            raise PipelineError(f"{path}: external tensor {name!r} names no data file")
        if os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
            raise PipelineError(
                f"{path}: external tensor {name!r} reads {location!r}, outside the model's "
                "folder: the Ray engine ships only the files next to the model"
            )
        if location not in names:
            names.append(location)
    return names


def _ship(
    ray: Any, source: bytes | str | ir.Model, sent: dict[str, Any] | None = None
) -> bytes | _Shipped:
    """Put a stage's files into the object store (bytes need nothing: they travel as they are).

    ``sent`` maps the real path of each file put so far to its refs: a file two sources read
    (the data file of a tensor-parallel rank, read by all its segments) is put once.
    """
    if isinstance(source, bytes):
        return source
    sent = {} if sent is None else sent
    folder = None
    try:
        if isinstance(source, ir.Model):
            folder = tempfile.mkdtemp(prefix="omny-ship-")
            source = save_for_session(source, folder)
        base = os.path.dirname(source)
        names = [os.path.basename(source), *_external_files(source)]
        files = {}
        total = 0
        for name in names:
            path = os.path.realpath(os.path.join(base, name))
            if path not in sent or folder is not None:
                sent[path] = _put_file(ray, path)
            total += os.path.getsize(path)
            files[name] = sent[path]
        return _Shipped(names[0], files, total)
    except OSError as exc:
        raise PipelineError(
            f"cannot read the stage's files to send them to its node: {exc}"
        ) from exc
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _in_memory(stage: StageModel) -> bool:
    """Whether a stage (one of its segments, when tensor-parallel) is an IR model in memory."""
    if isinstance(stage, TensorParallelStage):
        return any(isinstance(s.source, ir.Model) for rank in stage.ranks for s in rank)
    return isinstance(stage.source, ir.Model)


def _ship_stage(ray: Any, stage: StageModel) -> StageModel:
    """``stage`` with :class:`_Shipped` sources, each file put into the object store once.

    A tensor-parallel stage's every segment of every rank is shipped.
    """
    sent: dict[str, Any] = {}
    if isinstance(stage, TensorParallelStage):
        ranks = tuple(
            tuple(
                dataclasses.replace(segment, source=_ship(ray, segment.source, sent))  # type: ignore[arg-type]  # _Shipped: unpacked by the actor
                for segment in segments
            )
            for segments in stage.ranks
        )
        return dataclasses.replace(stage, source=ranks[0][0].source, ranks=ranks)
    return dataclasses.replace(stage, source=_ship(ray, stage.source, sent))  # type: ignore[arg-type]  # as above


STAGE_FILES = "omny-ray-stages"
"""The folder, in the temporary folder of each node, under which stage actors write the files
shipped to them: ``<tmp>/omny-ray-stages/<pipeline id>/stage<i>-...``."""


def _pipeline_folder(pipeline: str) -> str:
    """The folder of one pipeline's shipped files on this node."""
    return os.path.join(tempfile.gettempdir(), STAGE_FILES, pipeline)


def _remove_pipeline_files(pipeline: str) -> None:
    """Remove one pipeline's shipped files on this node (a task run after its actors died)."""
    shutil.rmtree(_pipeline_folder(pipeline), ignore_errors=True)


def _unship(ray: Any, shipped: _Shipped, folder: str, written: dict[str, Any] | None = None) -> str:
    """Write shipped files into ``folder``; return the model's path.

    ``written`` maps each file name written to ``folder`` so far to its refs: a file shipped
    again (the same refs) is not written twice; a different file of the same name goes to a
    new subfolder with the rest of its model's files.
    """
    written = {} if written is None else written
    clash = any(written.get(name, ref) != ref for name, ref in shipped.files.items())
    if clash:
        folder = tempfile.mkdtemp(prefix="model-", dir=folder)
    for name, refs in shipped.files.items():
        if not clash and name in written:
            continue
        path = os.path.join(folder, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            for ref in refs:  # one chunk in memory at a time
                f.write(ray.get(ref))
        if not clash:
            written[name] = refs
    return os.path.join(folder, shipped.model)


def _unship_stage(ray: Any, stage: StageModel, pipeline: str) -> tuple[str | None, StageModel]:
    """Write a stage's shipped files into a new folder under the pipeline's.

    Returns ``(folder, stage)``, the stage's sources paths in it (``(None, stage)`` when
    nothing was shipped).
    """
    if not isinstance(stage.source, _Shipped):
        return None, stage
    parent = _pipeline_folder(pipeline)
    os.makedirs(parent, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=f"stage{stage.index}-", dir=parent)
    written: dict[str, Any] = {}

    def local(segment: StageModel) -> StageModel:
        source = segment.source
        if isinstance(source, _Shipped):
            return dataclasses.replace(segment, source=_unship(ray, source, folder, written))
        return segment

    try:
        if isinstance(stage, TensorParallelStage):
            ranks = tuple(tuple(local(s) for s in segments) for segments in stage.ranks)
            return folder, dataclasses.replace(stage, source=ranks[0][0].source, ranks=ranks)
        return folder, local(stage)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


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
        pipeline: str,
    ) -> None:
        ray = _ray()
        index = device.index
        if device.is_gpu and ray.get_gpu_ids():
            index = 0  # Ray narrowed CUDA_VISIBLE_DEVICES to the GPU it assigned
        self._index = stage.index
        self._folder: str | None = None
        self._folder, stage = _unship_stage(ray, stage, pipeline)
        try:
            self._runner: StageRunner | TensorParallelRunner
            if isinstance(stage, TensorParallelStage):  # every rank in this actor
                if index != device.index:
                    device = dataclasses.replace(device, index=index)
                self._runner = TensorParallelRunner(stage, device, threads, spinning=spinning)
            else:
                self._runner = StageRunner(
                    stage, device, threads, device_index=index, spinning=spinning
                )
        except BaseException:
            self._remove_folder()
            raise
        self._keep = keep
        self._final = final_outputs
        self._dead: StageFailure | None = None

    def ready(self) -> tuple[str, str]:
        """The id and IP address of the node this actor runs on."""
        ray = _ray()
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def _remove_folder(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            # and the pipeline's folder, unless other stages' files are there still (the root
            # stays: another pipeline may be creating its folder in it now)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(self._folder))
            self._folder = None

    def close(self) -> None:
        self._runner.close()
        self._remove_folder()

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
            periods.append((self._index, start, time.time(), 0))
            return StageFailure(self._index, failure_message(exc)), periods
        except BaseException as exc:  # SystemExit...: the stage cannot be trusted any more
            periods.append((self._index, start, time.time(), 0))
            self._dead = StageFailure(
                self._index,
                f"the stage's Ray actor raised {failure_message(exc)}; the pipeline can run no "
                "more requests: close it and create a new one",
                fatal=True,
            )
            return self._dead, periods
        end = time.time()
        merged = dict(env)
        merged.update(produced)
        if self._final is not None:
            out = {name: merged[name] for name in self._final}
        else:
            out = {k: v for k, v in merged.items() if k in self._keep}
        periods.append((self._index, start, end, sum(_nbytes(v) for v in out.values())))
        return out, periods


_CLEANUP_TIMEOUT = 300.0
"""Seconds :meth:`RayEngine.close` waits at most for the tasks that remove a dead actor's
files; it returns as soon as they are done. A node must start a worker process for them,
which took over 30 s on a 2-core machine running three CPU-bound jobs: a shorter wait left
the files behind there."""


def _succeeded(ray: Any, ref: Any) -> bool:
    """Whether a finished actor call returned (rather than raised: the actor died)."""
    try:
        ray.get(ref, timeout=0)
    except Exception:  # noqa: BLE001 (RayActorError and the like: the call did not succeed)
        return False
    return True


def _nbytes(value: Any) -> int:
    """Bytes of an activation's data (an array's ``nbytes``; 0 for what has none)."""
    return int(getattr(value, "nbytes", 0) or 0)


def _placement(value: Any, n: int) -> tuple[str | None, list[str | None]]:
    """``(strategy, per-stage node labels)`` from the ``placement`` option."""
    if value is None:
        return None, [None] * n
    if isinstance(value, str):
        if value.lower() not in STRATEGIES:
            raise PipelineError(
                f"placement {value!r} is not a strategy ({', '.join(STRATEGIES)}); give one of "
                "those, or one node (id, IP address or custom resource) per stage"
            )
        return value.lower(), [None] * n
    labels = list(value)
    if len(labels) != n or not all(x is None or isinstance(x, str) for x in labels):
        raise PipelineError(
            f"placement gives {labels!r} for {n} stages; give one node (id, IP address or "
            "custom resource name, or None) per stage"
        )
    return None, labels


def _demand(options: Mapping[str, Any]) -> dict[str, float]:
    """The resources an actor with these options asks for, by Ray's resource names."""
    demand = {
        "CPU": float(options.get("num_cpus") or 0),
        "GPU": float(options.get("num_gpus") or 0),
    }
    for key, amount in (options.get("resources") or {}).items():
        demand[key] = float(amount)
    return demand


def _node_name(node: Mapping[str, Any]) -> str:
    return f"{node['NodeID'][:8]} ({node.get('NodeManagerAddress', '?')})"


def _resources(node: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in node.get("Resources", {}).items() if not k.startswith("node:")}
    shown.pop("object_store_memory", None)
    shown.pop("memory", None)
    return f"node {_node_name(node)}: {shown}"


def _fits(node: Mapping[str, Any], demand: Mapping[str, float]) -> bool:
    have = node.get("Resources", {})
    return all(have.get(k, 0.0) >= v for k, v in demand.items() if v)


def _place_on(
    ray: Any,
    nodes: Sequence[Mapping[str, Any]],
    label: str,
    stage: int,
    options: dict[str, Any],
    demand: dict[str, float],
) -> None:
    """Pin a stage's actor to the node ``label`` names (id, IP address or custom resource)."""
    by_id = [node for node in nodes if node["NodeID"] == label]
    if by_id:
        options["scheduling_strategy"] = (
            ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(label, soft=False)
        )
        demand["node:" + by_id[0]["NodeID"]] = 0.0  # the check below looks at this node only
        _require(nodes, by_id, demand, stage, f"node {label[:8]}")
        return
    resource = (
        f"node:{label}" if any(node.get("NodeManagerAddress") == label for node in nodes) else label
    )
    options["resources"] = {**(options.get("resources") or {}), resource: _LABEL_AMOUNT}
    demand[resource] = _LABEL_AMOUNT
    holders = [node for node in nodes if resource in node.get("Resources", {})]
    if not holders:
        raise PipelineError(
            f"stage {stage} is placed on {label!r}, but no alive node of the Ray cluster has "
            f"that id, address or resource; the nodes: "
            + "; ".join(_resources(node) for node in nodes),
            stage=stage,
        )
    _require(nodes, holders, demand, stage, repr(label))


def _require(
    nodes: Sequence[Mapping[str, Any]],
    candidates: Sequence[Mapping[str, Any]],
    demand: Mapping[str, float],
    stage: int,
    what: str,
) -> None:
    if not any(_fits(node, demand) for node in candidates):
        asked = {k: v for k, v in demand.items() if v}
        raise PipelineError(
            f"stage {stage} is placed on {what}, which cannot host it: it asks for {asked}; "
            + "; ".join(_resources(node) for node in candidates)
            + f"; {_FEWER_RESOURCES}",
            stage=stage,
        )


def _check_fits(
    nodes: Sequence[Mapping[str, Any]], demands: Sequence[Mapping[str, float]], strategy: str | None
) -> None:
    """Refuse up front a stage that no node can host, or stages a strict strategy cannot place."""
    listing = "; ".join(_resources(node) for node in nodes)
    for i, demand in enumerate(demands):
        if not any(_fits(node, demand) for node in nodes):
            asked = {k: v for k, v in demand.items() if v}
            raise PipelineError(
                f"no node of the Ray cluster can host stage {i}: it asks for {asked}; "
                f"{listing}; {_FEWER_RESOURCES}",
                stage=i,
            )
    if strategy == "strict_pack":
        total: dict[str, float] = {}
        for demand in demands:
            for k, v in demand.items():
                total[k] = total.get(k, 0.0) + v
        if not any(_fits(node, total) for node in nodes):
            raise PipelineError(
                f"placement 'strict_pack' needs one node with {total} for the "
                f"{len(demands)} stages; {listing}"
            )
    if strategy == "strict_spread" and not _distinct_nodes(nodes, demands):
        raise PipelineError(
            f"placement 'strict_spread' needs {len(demands)} distinct nodes, one per stage, "
            f"each fitting its stage ({[dict(d) for d in demands]}); {listing}"
        )


def _distinct_nodes(
    nodes: Sequence[Mapping[str, Any]], demands: Sequence[Mapping[str, float]]
) -> bool:
    """Whether every stage can have a node of its own that fits it (bipartite matching)."""
    owner: dict[int, int] = {}  # node -> stage

    def assign(stage: int, seen: set[int]) -> bool:
        for k, node in enumerate(nodes):
            if k in seen or not _fits(node, demands[stage]):
                continue
            seen.add(k)
            if k not in owner or assign(owner[k], seen):
                owner[k] = stage
                return True
        return False

    return all(assign(stage, set()) for stage in range(len(demands)))


_TOKEN_ADVICE = (
    "a cluster with token authentication (Ray 2.52+: `ray start --head` turns it on when "
    "~/.ray/auth_token exists) needs RAY_AUTH_MODE=token in this process too and the "
    "cluster's token in ~/.ray/auth_token, in the file RAY_AUTH_TOKEN_PATH names, or in "
    "RAY_AUTH_TOKEN (`ray get-auth-token` prints it on the head node)"
)
"""What to do when the cluster refuses the driver (Ray reports a missing token as a failure
to connect)."""


def _connect(ray: Any, address: str | None) -> None:
    """Start or join a Ray cluster unless Ray is initialized already."""
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, include_dashboard=False)
    except ray.exceptions.AuthenticationError as exc:
        raise PipelineError(
            f"the Ray cluster at {address!r} refused this process's authentication token "
            f"({' '.join(str(exc).split())[:200]}); {_TOKEN_ADVICE}"
        ) from exc
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise PipelineError(
            f"cannot connect to the Ray cluster at {address!r}: {exc}; start it with "
            "`ray start --head` and give the address it prints; "
            + _TOKEN_ADVICE.replace("a cluster", "if it is running, a cluster", 1)
        ) from exc


def _requested_options(
    devices: Sequence[Device],
    threads: Sequence[int | None],
    per_stage: list[dict[str, Any]],
    degrees: Sequence[int],
) -> list[dict[str, Any]]:
    """Each stage actor's options: its threads, a GPU if its device is one, the caller's over.

    A tensor-parallel stage's actor asks for its threads times its degree (one per rank).
    """
    requested = []
    for i, extra in enumerate(per_stage):
        options: dict[str, Any] = {
            "num_cpus": (threads[i] or 1) * degrees[i],
            "num_gpus": 1 if devices[i].is_gpu else 0,
            "max_concurrency": 1,
        }
        options.update(extra)
        requested.append(options)
    return requested


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
        address: The Ray cluster to connect to when Ray is not initialized yet (``None``: a
            local instance; ``"auto"``, ``"HOST:PORT"`` or ``"ray://HOST:PORT"``).
        placement: Where the stages go (see the module docstring): ``None``, a strategy of
            :data:`STRATEGIES`, or one node (id, IP address or custom resource) per stage.
        ship_files: Send the stages' model and data files through the object store
            (``None``: when the cluster has more than one node).

    Raises:
        PipelineError: Ray is not installed, a stage cannot be placed (checked before any
            actor starts, then by ``start_timeout``), or its session fails to load.
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
        address: str | None = None,
        placement: str | Sequence[str | None] | None = None,
        ship_files: bool | None = None,
    ) -> None:
        ray = _ray()
        n = chain.num_stages
        per_stage = _actor_options(actor_options, n)
        strategy, labels = _placement(placement, n)
        _connect(ray, address)
        self._recorder = recorder
        self._on_done = on_done
        self._devices = tuple(devices)
        self._closed = False
        self._actors: list[Any] = []
        self._group: Any = None
        self._files = False
        self._shipped = False
        self.pipeline_id = uuid.uuid4().hex[:12]
        """Names the folder of the files shipped to this pipeline's actors on each node."""
        self.placements: list[tuple[str, str]] = []
        """``(node id, node IP address)`` of each stage's actor."""
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        if ship_files is None:
            ship_files = len(nodes) > 1
        degrees = [st.degree if isinstance(st, TensorParallelStage) else 1 for st in chain.stages]
        requested = _requested_options(devices, threads, per_stage, degrees)
        demands = [_demand(options) for options in requested]
        for i, label in enumerate(labels):
            if label is not None:
                _place_on(ray, nodes, label, i, requested[i], demands[i])
        self._check_resources(requested)
        _check_fits(nodes, demands, strategy)
        if strategy is not None:
            self._pin_to_group(ray, strategy, requested, demands, start_timeout)
        # Sessions of IR-model stages save the model to a temporary folder: let them remove it.
        self._files = ship_files or any(_in_memory(st) for st in chain.stages)
        self._shipped = self._files
        self._start_actors(ray, chain, devices, threads, spinning, requested, ship_files)
        self._await_actors(ray, requested, start_timeout)
        for i, (node, ip) in enumerate(self.placements):
            recorder.place(i, node, ip)

    def _pin_to_group(
        self,
        ray: Any,
        strategy: str,
        requested: list[dict[str, Any]],
        demands: list[dict[str, float]],
        start_timeout: float,
    ) -> None:
        """Reserve a placement group of one bundle per stage and schedule each actor in its own."""
        util = ray.util
        self._group = util.placement_group(
            [{k: v for k, v in d.items() if v} or {"CPU": 0.001} for d in demands],
            strategy=strategy.upper(),
        )
        done, _ = ray.wait([self._group.ready()], timeout=start_timeout)
        if not done:
            self.close(0)
            raise PipelineError(
                f"the placement group ({strategy.upper()}, bundles {demands}) was not "
                f"ready within {start_timeout} s; the cluster has "
                f"{ray.available_resources()} free; {_FEWER_RESOURCES}"
            )
        for i, options in enumerate(requested):
            options["scheduling_strategy"] = (
                util.scheduling_strategies.PlacementGroupSchedulingStrategy(
                    placement_group=self._group, placement_group_bundle_index=i
                )
            )

    def _start_actors(
        self,
        ray: Any,
        chain: StageChain,
        devices: Sequence[Device],
        threads: Sequence[int | None],
        spinning: bool,
        requested: list[dict[str, Any]],
        ship_files: bool,
    ) -> None:
        """Create one actor per stage (closing those created if one fails)."""
        actor_cls = ray.remote(_StageActor)
        last = chain.num_stages - 1
        try:
            for i, original in enumerate(chain.stages):
                stage = original
                if ship_files or _in_memory(original):
                    # the actor gets _Shipped in place of the sources and writes the files out
                    # into the pipeline's folder on its node (removed even if the actor dies)
                    stage = _ship_stage(ray, original)
                final = chain.graph_outputs if i == last else None
                self._actors.append(
                    actor_cls.options(**requested[i]).remote(
                        stage,
                        devices[i],
                        threads[i],
                        spinning,
                        chain.keep_after[i],
                        final,
                        self.pipeline_id,
                    )
                )
        except BaseException:
            self.close(0)
            raise

    def _await_actors(
        self, ray: Any, requested: list[dict[str, Any]], start_timeout: float
    ) -> None:
        """Wait for every actor to load its stage; record where each runs."""
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
                self.placements.append(tuple(ray.get(ref)))
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

    def where(self, stage: int | None) -> str:
        """``"node 1a2b3c4d (10.0.0.2)"``: where the stage's actor runs, or ``""``."""
        if stage is None or stage >= len(self.placements):
            return ""
        node, ip = self.placements[stage]
        return f"node {node[:8]} ({ip})"

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
        for stage, start, end, sent in periods:
            self._recorder.busy(stage, request, start, end, out_bytes=sent)
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
        what = (
            "a stage's Ray actor"
            if stage is None
            else f"the stage's Ray actor on {self.where(stage)}"
        )
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
        unclosed = False
        if self._files and self._actors:
            closing = [actor.close.remote() for actor in self._actors]
            done, _ = ray.wait(closing, num_returns=len(closing), timeout=timeout)
            unclosed = sum(_succeeded(ray, ref) for ref in done) < len(closing)
        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        if self._shipped and self._actors and unclosed:
            self._remove_files_of_dead_actors(ray, max(timeout, _CLEANUP_TIMEOUT))
        self._actors = []
        if self._group is not None:
            ray.util.remove_placement_group(self._group)
            self._group = None

    def _remove_files_of_dead_actors(self, ray: Any, timeout: float) -> None:
        """Remove the shipped files an actor that did not close left (killed, crashed).

        One small task per node that hosted a stage (every alive node when some actor never
        said where it runs) removes the pipeline's folder there; a node that is gone took its
        files with it.
        """
        nodes = {node for node, _ in self.placements}
        if len(self.placements) < len(self._actors):
            nodes |= {node["NodeID"] for node in ray.nodes() if node.get("Alive")}
        remove = ray.remote(num_cpus=0, max_retries=0)(_remove_pipeline_files)
        strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy
        refs = [
            remove.options(scheduling_strategy=strategy(node, soft=False)).remote(self.pipeline_id)
            for node in sorted(nodes)
        ]
        ray.wait(refs, num_returns=len(refs), timeout=timeout)


register_engine("ray", RayEngine)
