"""What the planner is asked for: :class:`PlanOptions`, checked once when it is made.

:func:`~onnx_ir_multidevice.planner.planning.plan` and
:func:`~onnx_ir_multidevice.planner.planning.plan_model` take a :class:`PlanOptions` or the same
fields as keywords; either way the options are built and checked once, before any analysis,
so that a bad request fails fast with a :class:`~onnx_ir_multidevice._errors.PlanError` naming
the field (``omny plan`` reports it as a usage error, exit status 2).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_SHARDS", "PlanOptions"]

import dataclasses
import numbers
import types
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from onnx_ir_multidevice._errors import PlanError
from onnx_ir_multidevice.analysis.cut_points import DEFAULT_SIDE_LIMIT_BYTES
from onnx_ir_multidevice.analysis.sizes import check_dims
from onnx_ir_multidevice.planner.devices import parse_size
from onnx_ir_multidevice.planner.memory import DEFAULT_HEADROOM
from onnx_ir_multidevice.planner.partition import BALANCES, DEFAULT_FLOPS_PER_BYTE
from onnx_ir_multidevice.planner.tensor_parallel import DEFAULT_COLLECTIVE_FLOPS_PER_BYTE

DEFAULT_MAX_SHARDS = 8
"""Largest shard count tried when neither ``shards`` nor ``devices`` is given."""


@dataclasses.dataclass(frozen=True)
class PlanOptions:
    """The planner's request: shard counts, devices, limits, planning dims.

    Every field is checked, and ``devices``, ``shards`` and ``dims`` normalised, when the
    object is made; :func:`dataclasses.replace` checks again.

    Example:
        >>> options = PlanOptions(devices=["24GiB", "8GiB"], dims={"seq": 512})
        >>> options.devices, options.shard_counts
        ((25769803776, 8589934592), (2,))

    Raises:
        PlanError: If a field is not valid (the message names it).

    .. versionadded:: 0.1
    """

    devices: Sequence[int | str] | str | None = None
    """Device memory sizes in pipeline order, as bytes or strings (``"24GiB"``); a string is a
    comma-separated list. Stored as a tuple of byte counts. Stage ``k`` must fit device ``k``
    with the headroom. Without ``shards``, one configuration with ``len(devices)`` shards is
    planned; with ``shards``, each count ``n`` uses the first ``n`` devices."""

    shards: int | Iterable[int] | None = None
    """Shard count(s) to plan: an int (``2``) or an iterable of ints (``[2, 4]``), each at
    least 1; each must be feasible. Stored as a sorted tuple without repeats. ``None``: the
    count of ``devices`` when given, else every count from 2 to :data:`DEFAULT_MAX_SHARDS`
    that is feasible."""

    max_shard_size_mb: int | None = None
    """Upper bound on each shard's memory in MiB (headroom excluded); ``None``: no bound."""

    dims: Mapping[str, int] | None = dataclasses.field(default=None, hash=False)
    """Planning values of symbolic dimensions (``{"seq": 512}``); a graph input's symbolic
    first dimension defaults to 1. Stored as a read-only mapping."""

    relaxed: bool = False
    """Also cut where small side activations cross (see
    :mod:`~onnx_ir_multidevice.analysis.cut_points`)."""

    headroom: float = DEFAULT_HEADROOM
    """Share of each device kept for the runtime, in ``[0, 1)``."""

    side_limit_bytes: int = DEFAULT_SIDE_LIMIT_BYTES
    """Budget of side activations per relaxed cut, in bytes at the planning dims."""

    name: str | None = None
    """Model name for the metadata; ``None``: the graph name, else ``"model"``."""

    assign_names: bool = False
    """Name unnamed nodes and values in place (onnx-ir ``NameFixPass``) instead of refusing
    a cut on an unnamed one."""

    static: bool = False
    """Pin every symbolic dim of the model, in place, before planning
    (:func:`~onnx_ir_multidevice.planner.static_dims.pin_dims`): inputs, outputs and the
    inferred shape of every value, at ``dims`` (others at example values), so that no cut
    has a dynamic dim (what a fixed-buffer runtime and ``check --strict`` want)."""

    balance: str = "speed"
    """What the cuts optimise first, always within the devices' memory:

    * ``"speed"`` (default): the plan that runs fastest, i.e. the smallest estimated time of
      the slowest pipeline step: a stage's FLOPs, or a link's bytes sent per request times
      ``flops_per_byte``; then the least largest stage memory, then the fewest bytes sent;
    * ``"compute"``: the same with free transfers (the largest stage FLOPs first);
    * ``"memory"``: the largest stage memory as small as possible, then the largest stage
      FLOPs (every device's share of memory smallest, whatever the speed).

    See :func:`~onnx_ir_multidevice.planner.partition.partition`; each configuration's
    :attr:`~onnx_ir_multidevice.planner.partition.Partition.bound` says what bound it.

    .. versionadded:: 0.1
    .. versionchanged:: 0.1
       ``"speed"`` is the default (it was ``"memory"``, whose 2-stage plans of real models
       often ran no faster than the whole model).
    """

    flops_per_byte: float = DEFAULT_FLOPS_PER_BYTE
    """The price of a byte sent between stages, in FLOPs of stage compute (the devices'
    FLOP/s over the links' bytes/s), for ``balance="speed"``; 0: transfers are free.
    Default :data:`~onnx_ir_multidevice.planner.partition.DEFAULT_FLOPS_PER_BYTE`.

    .. versionadded:: 0.1
    """

    tensor_parallel: int | str | None = None
    """Tensor parallelism (opt-in): ``None`` (default) plans pipeline stages only; an integer
    ``k >= 1`` or ``"auto"`` (up to the device count) lets the planner give each stage a
    tensor-parallel degree up to ``k``, choosing the combination of stages and degrees that
    runs fastest on the devices while fitting memory
    (:mod:`~onnx_ir_multidevice.planner.tensor_parallel`). The devices are ``devices`` (their
    count) or, without them, the largest of ``shards`` (required then). The plan has one
    configuration, and the model gets the tensor-parallel record
    (:func:`~onnx_ir_multidevice.omny.write_tensor_parallel`).

    .. versionadded:: 0.1
    """

    collective_flops_per_byte: float = DEFAULT_COLLECTIVE_FLOPS_PER_BYTE
    """The price of a byte of a collective (``AllReduce``) in FLOPs, for ``tensor_parallel``;
    default :data:`~onnx_ir_multidevice.planner.tensor_parallel.DEFAULT_COLLECTIVE_FLOPS_PER_BYTE`.

    .. versionadded:: 0.1
    """

    def __post_init__(self) -> None:
        """Check every field; normalise ``devices``, ``shards`` and ``dims``."""
        devices = _capacities(self.devices)
        shards = _shard_counts(self.shards)
        if devices is not None and shards is not None and shards[-1] > len(devices):
            raise PlanError(
                f"{shards[-1]} shards need {shards[-1]} devices but only {len(devices)} "
                "device sizes were given"
            )
        limit = _max_shard_size(self.max_shard_size_mb)
        dims = _checked_dims(self.dims)
        if not _is_fraction(self.headroom):
            raise PlanError(f"headroom must be in [0, 1), got {self.headroom!r}")
        side = self.side_limit_bytes
        if not _is_count(side, minimum=0):
            raise PlanError(f"side_limit_bytes must be a byte count of at least 0, got {side!r}")
        if self.balance not in BALANCES:
            raise PlanError(
                f"balance must be one of {', '.join(map(repr, BALANCES))}, got {self.balance!r}"
            )
        price = _flops_price("flops_per_byte", self.flops_per_byte)
        parallel = _degree(self.tensor_parallel)
        if parallel is not None and devices is None and shards is None:
            raise PlanError(
                "tensor_parallel needs the devices: give devices (their sizes) or shards "
                "(the largest is the device count)"
            )
        collective = _flops_price("collective_flops_per_byte", self.collective_flops_per_byte)
        if self.name is not None and not isinstance(self.name, str):
            raise PlanError(f"name must be a string, got {self.name!r}")
        normalised = {
            "devices": devices,
            "shards": shards,
            "max_shard_size_mb": limit,
            "dims": dims,
            "side_limit_bytes": int(side),
            "flops_per_byte": price,
            "tensor_parallel": parallel,
            "collective_flops_per_byte": collective,
            "relaxed": bool(self.relaxed),
            "assign_names": bool(self.assign_names),
            "static": bool(self.static),
        }
        for field, value in normalised.items():
            object.__setattr__(self, field, value)

    @property
    def shard_counts(self) -> tuple[int, ...]:
        """The shard counts to try: ``shards``, else ``len(devices)``, else 2 to 8."""
        if self.shards is not None:
            return self.shards  # type: ignore[return-value]  # __post_init__ made it a tuple
        if self.devices is not None:
            return (len(self.devices),)
        return tuple(range(2, DEFAULT_MAX_SHARDS + 1))

    @property
    def num_devices(self) -> int | None:
        """The devices a tensor-parallel plan is for (``None`` without ``tensor_parallel``)."""
        if self.tensor_parallel is None:
            return None
        if self.devices is not None:
            return len(self.devices)
        return max(self.shard_counts)

    @property
    def max_degree(self) -> int | None:
        """The largest tensor-parallel degree allowed (``None`` without ``tensor_parallel``)."""
        count = self.num_devices
        if count is None:
            return None
        return count if self.tensor_parallel == "auto" else min(count, int(self.tensor_parallel))  # type: ignore[arg-type]

    @property
    def explicit(self) -> bool:
        """Whether the caller chose the shard counts (each must then be feasible)."""
        return self.shards is not None or self.devices is not None

    @classmethod
    def of(cls, options: PlanOptions | None = None, **keywords: Any) -> PlanOptions:
        """Return ``options`` with ``keywords`` replacing its fields (a new object if any).

        Raises:
            TypeError: If ``options`` is not a :class:`PlanOptions` or a keyword is not a
                field.
            PlanError: If a value is not valid.
        """
        if options is None:
            return cls(**keywords)
        if not isinstance(options, PlanOptions):
            raise TypeError(f"options must be a PlanOptions, not {type(options).__name__}")
        return dataclasses.replace(options, **keywords) if keywords else options


def _capacities(devices: Sequence[int | str] | str | None) -> tuple[int, ...] | None:
    if devices is None:
        return None
    if isinstance(devices, str):
        devices = devices.split(",")
    result = []
    for device in devices:
        if isinstance(device, str):
            try:
                result.append(parse_size(device))
            except ValueError as exc:
                raise PlanError(str(exc)) from exc
        elif isinstance(device, numbers.Integral) and not isinstance(device, bool) and device > 0:
            result.append(int(device))
        else:
            raise PlanError(f"device size {device!r} must be a positive byte count or e.g. '24GiB'")
    if not result:
        raise PlanError("devices is empty; give one memory size per device, e.g. ['24GiB', '8GiB']")
    return tuple(result)


def _is_fraction(x: object) -> bool:
    """Whether ``x`` is a real number (not a bool) in ``[0, 1)``."""
    if not isinstance(x, numbers.Real) or isinstance(x, bool):
        return False
    try:
        return 0 <= Fraction(str(x)) < 1
    except ValueError:  # nan, inf
        return False


def _is_count(n: object, minimum: int = 1) -> bool:
    """Whether ``n`` is an integer (Python or NumPy, not a bool) of at least ``minimum``."""
    return isinstance(n, numbers.Integral) and not isinstance(n, bool) and int(n) >= minimum


def _max_shard_size(limit: object) -> int | None:
    """``max_shard_size_mb`` as an ``int`` (``None`` stays ``None``)."""
    if limit is None:
        return None
    if not _is_count(limit):
        raise PlanError(f"max_shard_size_mb must be a positive number of MiB, got {limit}")
    return int(limit)  # type: ignore[call-overload]  # _is_count: an integer


def _checked_dims(dims: object) -> Mapping[str, int]:
    """``dims`` checked and frozen (a read-only mapping; ``None`` gives an empty one)."""
    if dims is not None and not isinstance(dims, Mapping):
        raise PlanError(f"dims must map dim names to sizes (e.g. {{'seq': 512}}), got {dims!r}")
    try:
        return types.MappingProxyType(check_dims(dims))
    except ValueError as exc:
        raise PlanError(str(exc)) from exc


def _flops_price(field: str, price: object) -> float:
    """A price in FLOPs per byte: a finite real number (not a bool) of at least 0."""
    if (
        not isinstance(price, numbers.Real)
        or isinstance(price, bool)
        or not 0 <= float(price) < float("inf")
    ):
        raise PlanError(f"{field} must be a number of FLOPs of at least 0, got {price!r}")
    return float(price)


def _degree(parallel: object) -> int | str | None:
    """``tensor_parallel``: ``None``, ``"auto"`` or a degree of at least 1 (as an ``int``)."""
    if parallel is None or parallel == "auto":
        return parallel
    if not _is_count(parallel):
        raise PlanError(
            f"tensor_parallel must be a degree of at least 1 or 'auto', got {parallel!r}"
        )
    return int(parallel)  # type: ignore[call-overload]  # _is_count: an integer


def _shard_counts(shards: int | Iterable[int] | None) -> tuple[int, ...] | None:
    if shards is None:
        return None
    if isinstance(shards, numbers.Integral) and not isinstance(shards, bool):
        given: list[object] = [shards]
    elif isinstance(shards, (str, bytes)) or not isinstance(shards, Iterable):
        raise PlanError(
            f"shards must be a shard count or a list of them (e.g. 2 or [2, 4]), got {shards!r}"
        )
    else:
        given = list(shards)
    if not given:
        raise PlanError("shards is empty; give at least one shard count, e.g. [2, 4]")
    for n in given:
        if not _is_count(n):
            raise PlanError(
                f"shards: shard count {n!r} must be a positive integer (at least 1), "
                "e.g. shards=[2, 4]"
            )
    return tuple(sorted({int(n) for n in given if isinstance(n, numbers.Integral)}))
