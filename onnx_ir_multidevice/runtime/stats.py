"""Per-stage timing of a pipeline: busy periods, latency, throughput and utilisation.

Every stage records one *busy period* per request it runs (start and end on the backend's
clock). :class:`PipelineStats` summarises them over the *wall time* of the measurement, from
the first request sent after the last reset to the last request completed:

* a stage's **utilisation** is its busy time divided by the wall time (1.0: never idle);
* **throughput** is completed requests per second of wall time;
* **latency** of a request is the time from ``send_input`` to its result being ready.

Periods are kept for the most recent requests only (:data:`MAX_PERIODS` per stage); counts and
busy totals cover every request since the reset.
"""

from __future__ import annotations

__all__ = ["MAX_PERIODS", "BusyPeriod", "PipelineStats", "StageStats", "StatsRecorder"]

import collections
import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

MAX_PERIODS = 100_000
"""Busy periods (and request latencies) kept per stage for percentiles and the timeline."""


@dataclasses.dataclass(frozen=True)
class BusyPeriod:
    """One stage running one request."""

    request: int
    """0-based request number."""

    start: float
    """Seconds since the start of the measurement."""

    end: float
    """Seconds since the start of the measurement."""

    @property
    def duration(self) -> float:
        """Length of the period in seconds."""
        return self.end - self.start


def _ms(values: Sequence[float], q: float | None = None) -> float:
    if not values:
        return 0.0
    if q is None:
        return float(np.mean(values)) * 1e3
    return float(np.percentile(values, q)) * 1e3


@dataclasses.dataclass(frozen=True)
class StageStats:
    """Timing of one stage."""

    index: int
    """0-based stage index."""

    device: str
    """Device the stage runs on, e.g. ``"cpu"`` or ``"cuda:0"``."""

    requests: int
    """Requests the stage ran (failures included)."""

    busy_s: float
    """Total busy time in seconds."""

    utilisation: float
    """Busy time divided by the pipeline's wall time."""

    mean_ms: float
    """Mean time per request (ms)."""

    p50_ms: float
    """Median time per request (ms)."""

    p90_ms: float
    """90th percentile of the time per request (ms)."""

    periods: tuple[BusyPeriod, ...] = dataclasses.field(repr=False)
    """The busy periods, oldest first."""

    node_id: str | None = None
    """Id of the node the stage runs on, for an engine that spans nodes (Ray); else ``None``."""

    node_address: str | None = None
    """IP address of that node (``None`` like :attr:`node_id`)."""

    out_bytes_mean: float | None = None
    """Mean bytes per request of the activations the stage passes on (its outputs and the
    inputs it forwards; the final outputs for the last stage), summed over the arrays'
    ``nbytes``, for an engine that ships activations between processes (Ray); else ``None``."""

    def to_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dictionary (periods left out)."""
        data = dataclasses.asdict(self)
        del data["periods"]
        return data


@dataclasses.dataclass(frozen=True)
class PipelineStats:
    """Timing of a pipeline since its creation or its last :meth:`reset_stats`."""

    backend: str
    """``"thread"`` or ``"ray"``."""

    requests: int
    """Requests completed (results ready, failures included)."""

    failed: int
    """Requests that failed."""

    wall_s: float
    """Seconds from the first request sent to the last one completed."""

    throughput: float
    """Completed requests per second of wall time."""

    latency_mean_ms: float
    """Mean time from ``send_input`` to the result being ready (ms)."""

    latency_p50_ms: float
    """Median latency (ms)."""

    latency_p90_ms: float
    """90th percentile of the latency (ms)."""

    stages: tuple[StageStats, ...]
    """Per-stage figures, in pipeline order."""

    @property
    def between_nodes_bytes(self) -> float | None:
        """Mean bytes per request that went from one stage's node to the next stage's node.

        The sum of :attr:`StageStats.out_bytes_mean` over the stages whose next stage runs on
        another node: computed from the sizes of the arrays the stages pass on (not from
        Ray's transfer counters; Ray adds a small header per object). The requests the driver
        sends and the final outputs it gets back are not counted. ``None`` unless every stage
        has a node and its bytes (the Ray engine).
        """
        if not self.stages or not all(
            s.node_id and s.out_bytes_mean is not None for s in self.stages
        ):
            return None
        return float(
            sum(
                a.out_bytes_mean or 0.0
                for a, b in zip(self.stages, self.stages[1:], strict=False)
                if a.node_id != b.node_id
            )
        )

    def to_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dictionary (periods left out)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["stages"] = [s.to_dict() for s in self.stages]
        data["between_nodes_bytes"] = self.between_nodes_bytes
        return data

    def format(self) -> str:
        """A human-readable table of the figures."""
        lines = [
            (
                f"{self.requests} requests ({self.failed} failed) in {self.wall_s:.3f} s on the "
                f"{self.backend} backend: {self.throughput:.1f} requests/s, latency mean "
                f"{self.latency_mean_ms:.2f} ms, p50 {self.latency_p50_ms:.2f} ms, "
                f"p90 {self.latency_p90_ms:.2f} ms"
            ),
            (
                f"{'stage':>5}  {'device':<10} {'requests':>8} {'mean ms':>9} {'p50 ms':>9} "
                f"{'p90 ms':>9} {'busy s':>8} {'util':>6}"
            ),
        ]
        nodes = any(s.node_id for s in self.stages)
        if nodes:
            lines[-1] += "  node"
        for s in self.stages:
            lines.append(
                f"{s.index:>5}  {s.device:<10} {s.requests:>8} {s.mean_ms:>9.2f} "
                f"{s.p50_ms:>9.2f} {s.p90_ms:>9.2f} {s.busy_s:>8.3f} {s.utilisation:>6.1%}"
                + (f"  {(s.node_id or '?')[:8]} ({s.node_address or '?'})" if nodes else "")
            )
        if self.between_nodes_bytes is not None:
            lines.append(
                f"activations between nodes: {self.between_nodes_bytes:,.0f} bytes per request"
            )
        return "\n".join(lines)

    def plot_timeline(self, ax: Any = None, *, max_requests: int | None = 40) -> Any:
        """Draw each stage's busy periods on a time axis (needs matplotlib).

        One row per stage, one bar per request, coloured by request number, so the overlap
        of stages working on different requests (the pipelining) shows at a glance.

        Args:
            ax: The matplotlib axes to draw on (default: a new figure's).
            max_requests: Draw only the first this many requests (``None``: all).

        Returns:
            The axes.
        """
        import matplotlib.pyplot as plt  # noqa: PLC0415

        if ax is None:
            _, ax = plt.subplots(figsize=(9, 0.6 + 0.55 * len(self.stages)))
        cmap = plt.get_cmap("tab10")
        first = min((p.request for s in self.stages for p in s.periods), default=0)
        for s in self.stages:
            bars = [
                p for p in s.periods if max_requests is None or p.request - first < max_requests
            ]
            ax.broken_barh(
                [(p.start * 1e3, p.duration * 1e3) for p in bars],
                (s.index - 0.4, 0.8),
                facecolors=[cmap(p.request % 10) for p in bars],
                edgecolor="white",
                linewidth=0.5,
            )
        ax.set_yticks([s.index for s in self.stages])
        ax.set_yticklabels([f"stage {s.index}\n{s.device}" for s in self.stages])
        ax.invert_yaxis()
        ax.set_xlabel("time (ms)")
        ax.set_title(
            f"{self.backend} backend: {self.throughput:.1f} requests/s, "
            + ", ".join(f"stage {s.index} {s.utilisation:.0%} busy" for s in self.stages)
        )
        return ax


class StatsRecorder:
    """Thread-safe collector of busy periods and request latencies.

    Args:
        devices: Device name of each stage.
        backend: Backend name for the report.
        clock: The clock the periods are measured with (``time.perf_counter`` in-process,
            ``time.time`` across Ray processes).
    """

    def __init__(self, devices: Sequence[str], backend: str, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._devices = tuple(devices)
        self._backend = backend
        self._lock = threading.Lock()
        self.reset()

    def place(self, stage: int, node_id: str, address: str) -> None:
        """Record the node ``stage`` runs on (kept across :meth:`reset`)."""
        with self._lock:
            self._nodes[stage] = (node_id, address)

    def reset(self) -> None:
        """Forget everything measured so far."""
        with self._lock:
            n = len(self._devices)
            if not hasattr(self, "_nodes"):
                self._nodes: dict[int, tuple[str, str]] = {}
            self._t0: float | None = None
            self._t_last = 0.0
            self._sent: dict[int, float] = {}
            self._latencies: collections.deque[float] = collections.deque(maxlen=MAX_PERIODS)
            self._done = 0
            self._failed = 0
            self._count = [0] * n
            self._busy = [0.0] * n
            self._out_bytes: list[int | None] = [None] * n
            self._periods: list[collections.deque[tuple[int, float, float]]] = [
                collections.deque(maxlen=MAX_PERIODS) for _ in range(n)
            ]

    def sent(self, request: int) -> None:
        """Note that ``request`` was sent now."""
        now = self.clock()
        with self._lock:
            if self._t0 is None:
                self._t0 = now
            self._sent[request] = now

    def discard(self, request: int) -> None:
        """Forget ``request``: it was sent, then dropped before any stage ran it."""
        with self._lock:
            self._sent.pop(request, None)

    def busy(
        self, stage: int, request: int, start: float, end: float, out_bytes: int | None = None
    ) -> None:
        """Record that ``stage`` ran ``request`` from ``start`` to ``end`` (backend clock).

        ``out_bytes``: the bytes of the activations it passed on (``None``: not measured).
        """
        with self._lock:
            if self._t0 is None or start < self._t0:  # a request sent before a reset
                return
            self._count[stage] += 1
            self._busy[stage] += end - start
            if out_bytes is not None:
                self._out_bytes[stage] = (self._out_bytes[stage] or 0) + out_bytes
            self._periods[stage].append((request, start, end))

    def done(self, request: int, *, failed: bool) -> None:
        """Note that ``request`` completed now."""
        now = self.clock()
        with self._lock:
            sent = self._sent.pop(request, None)
            if sent is None:  # sent before a reset
                return
            self._done += 1
            self._failed += failed
            self._latencies.append(now - sent)
            self._t_last = now

    def snapshot(self) -> PipelineStats:
        """The figures so far."""
        with self._lock:
            t0 = self._t0 if self._t0 is not None else 0.0
            wall = max(self._t_last - t0, 0.0) if self._done else 0.0
            stages = []
            for i, device in enumerate(self._devices):
                periods = tuple(BusyPeriod(r, s - t0, e - t0) for r, s, e in self._periods[i])
                durations = [p.duration for p in periods]
                stages.append(
                    StageStats(
                        index=i,
                        device=device,
                        requests=self._count[i],
                        busy_s=self._busy[i],
                        utilisation=self._busy[i] / wall if wall > 0 else 0.0,
                        mean_ms=_ms(durations),
                        p50_ms=_ms(durations, 50),
                        p90_ms=_ms(durations, 90),
                        periods=periods,
                        node_id=self._nodes.get(i, (None, None))[0],
                        node_address=self._nodes.get(i, (None, None))[1],
                        out_bytes_mean=(
                            None
                            if self._out_bytes[i] is None
                            else (self._out_bytes[i] or 0) / max(self._count[i], 1)
                        ),
                    )
                )
            latencies = list(self._latencies)
            return PipelineStats(
                backend=self._backend,
                requests=self._done,
                failed=self._failed,
                wall_s=wall,
                throughput=self._done / wall if wall > 0 else 0.0,
                latency_mean_ms=_ms(latencies),
                latency_p50_ms=_ms(latencies, 50),
                latency_p90_ms=_ms(latencies, 90),
                stages=tuple(stages),
            )
