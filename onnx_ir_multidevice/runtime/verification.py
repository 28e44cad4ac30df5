"""Check numerically that a split model computes what the whole model computes.

:func:`verify` runs the whole model and the chain of its stage models (from
:func:`~onnx_ir_multidevice._split.build.split`) on onnxruntime with the same inputs and compares
every graph output. Inputs not given are generated from the input types by
:func:`make_inputs`.
"""

from __future__ import annotations

__all__ = [
    "OutputComparison",
    "VerifyReport",
    "make_inputs",
    "verify",
    "verify_stages",
]

import dataclasses
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice._errors import VerifyError
from onnx_ir_multidevice._util import require_model

# Ops through which an index input keeps its values (so a Gather further on bounds it).
_VALUE_PRESERVING_OPS = frozenset(
    {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Transpose"}
)
_DEFAULT_INT_HIGH = 4
"""Exclusive upper bound of generated integers when no ``Gather`` bounds an input."""

_INLINE_LIMIT_BYTES = 1 << 30
"""Models with more weight bytes than this are handed to onnxruntime through a file."""


@dataclasses.dataclass(frozen=True)
class OutputComparison:
    """How one graph output of the chained stages compares with the whole model's."""

    name: str
    """Graph output name."""
    shape: tuple[int, ...]
    """Shape of the whole model's output."""
    dtype: str
    """NumPy dtype name of the whole model's output."""
    max_abs_diff: float
    """Largest ``|split - whole|`` over the elements (``inf`` if shapes differ)."""
    max_rel_diff: float
    """Largest ``|split - whole| / |whole|`` over elements where ``whole != 0``."""
    mismatches: int
    """Elements with ``|split - whole| > atol + rtol * |whole|`` (all of them if shapes differ)."""
    ok: bool
    """``True`` when shapes and dtypes agree and no element is outside the tolerance."""


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """Result of :func:`verify`: one :class:`OutputComparison` per graph output."""

    num_stages: int
    """Number of stage models chained."""
    rtol: float
    """Relative tolerance used."""
    atol: float
    """Absolute tolerance used."""
    outputs: tuple[OutputComparison, ...]
    """One entry per graph output, in graph order."""
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]
    """``(name, shape, dtype)`` of each input fed."""
    whole_seconds: float
    """Time onnxruntime took to run the whole model once."""
    stage_seconds: tuple[float, ...]
    """Time onnxruntime took to run each stage once."""

    @property
    def ok(self) -> bool:
        """Whether every output agrees within tolerance."""
        return all(o.ok for o in self.outputs)

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready data (``inf`` written as ``None``)."""

        def number(x: float) -> float | None:
            return x if np.isfinite(x) else None

        return {
            "ok": self.ok,
            "num_stages": self.num_stages,
            "rtol": self.rtol,
            "atol": self.atol,
            "inputs": [{"name": n, "shape": list(s), "dtype": d} for n, s, d in self.inputs],
            "outputs": [
                {
                    "name": o.name,
                    "shape": list(o.shape),
                    "dtype": o.dtype,
                    "max_abs_diff": number(o.max_abs_diff),
                    "max_rel_diff": number(o.max_rel_diff),
                    "mismatches": o.mismatches,
                    "ok": o.ok,
                }
                for o in self.outputs
            ],
            "whole_seconds": self.whole_seconds,
            "stage_seconds": list(self.stage_seconds),
        }

    def __str__(self) -> str:
        verdict = "OK" if self.ok else "MISMATCH"
        lines = [
            f"{verdict}: {self.num_stages} stages vs whole model "
            f"(rtol={self.rtol:g}, atol={self.atol:g})"
        ]
        width = max((len(o.name) for o in self.outputs), default=6)
        lines.append(f"  {'output':<{width}}  {'max abs diff':>12}  {'max rel diff':>12}  status")
        for o in self.outputs:
            status = "ok" if o.ok else f"{o.mismatches} element(s) off"
            lines.append(
                f"  {o.name:<{width}}  {o.max_abs_diff:>12.3g}  {o.max_rel_diff:>12.3g}  {status}"
            )
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Inputs


def _gather_bound(value: ir.Value) -> int | None:
    """Smallest data dimension of the ``Gather`` nodes that index with ``value``."""
    bound: int | None = None
    stack = [value]
    seen: set[ir.Value] = set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        for use in current.uses():
            node, position = use.node, use.idx
            if node.op_type in ("Gather", "GatherElements") and node.domain in ("", "ai.onnx"):
                if position != 1:
                    continue
                data = node.inputs[0]
                axis_attr = node.attributes.get("axis")
                axis = axis_attr.as_int() if axis_attr is not None else 0
                if (
                    data is None
                    or data.shape is None
                    or not -data.shape.rank() <= axis < (data.shape.rank())
                ):
                    continue
                dim = data.shape[axis]
                if isinstance(dim, int):
                    bound = dim if bound is None else min(bound, dim)
            elif node.op_type in _VALUE_PRESERVING_OPS and position == 0:
                stack.extend(node.outputs)
    return bound


def _concrete_shape(value: ir.Value, dims: Mapping[str, int]) -> tuple[int, ...]:
    if value.shape is None:
        raise VerifyError(f"Graph input {value.name!r} has no shape; pass its array in `inputs`.")
    shape = []
    for dim in value.shape:
        if isinstance(dim, int):
            shape.append(dim)
        else:
            name = getattr(dim, "value", None)
            shape.append(int(dims.get(name, 1)) if name is not None else 1)
    return tuple(shape)


def _checked_dims(dims: Mapping[str, int] | None) -> dict[str, int]:
    """``dims`` as a dict, after checking that every value is a positive integer."""
    checked = dict(dims or {})
    for name, value in checked.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise VerifyError(
                f"dims[{name!r}] must be a positive integer, got {value!r} "
                "(e.g. dims={'batch': 2})"
            )
    return checked


def _check_tolerances(rtol: float, atol: float) -> None:
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not 0.0 <= value < float("inf"):
            raise VerifyError(f"{name} must be a finite number >= 0, got {value!r}")


def make_inputs(
    model: ir.Model,
    *,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Generate one array per graph input of ``model`` from the input types.

    * symbolic dimensions take their value from ``dims`` (by name), else 1;
    * inputs whose name contains ``mask`` (any case) are all ones;
    * integer inputs are uniform in ``[0, n)`` where ``n`` is the smallest data dimension of
      the ``Gather`` nodes they index (through casts and reshapes), else ``[0, 4)``;
    * boolean inputs are random, floating-point inputs standard normal.

    Initializers that are also graph inputs (overridable defaults) get no array.

    Args:
        model: The model.
        dims: Values of symbolic dimensions, by name (``{"batch": 2}``).
        seed: Seed of the random generator.

    Returns:
        ``{input name: array}``.

    Raises:
        VerifyError: An input has no type or shape, or a dtype NumPy cannot hold (bfloat16,
            float8...); pass such inputs explicitly. Or a value of ``dims`` is not a
            positive integer.
    """
    require_model(model, "make_inputs")
    dims = _checked_dims(dims)
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    initializers = model.graph.initializers
    for value in model.graph.inputs:
        name = value.name or ""
        if name in initializers:
            continue
        if value.dtype is None:
            raise VerifyError(f"Graph input {name!r} has no type; pass its array in `inputs`.")
        shape = _concrete_shape(value, dims)
        try:
            np_dtype = np.dtype(value.dtype.numpy())
        except (TypeError, ValueError) as error:
            raise VerifyError(
                f"Cannot generate input {name!r} of type {value.dtype}; pass it in `inputs`."
            ) from error
        if np_dtype.kind not in "biuf" or (np_dtype.kind == "f" and np_dtype.itemsize < 2):
            raise VerifyError(
                f"Cannot generate input {name!r} of type {value.dtype}; pass it in `inputs`."
            )
        if "mask" in name.lower():
            array = np.ones(shape, dtype=np_dtype)
        elif np_dtype.kind == "b":
            array = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif np_dtype.kind in "iu":
            high = _gather_bound(value) or _DEFAULT_INT_HIGH
            if np_dtype.kind == "u" or np_dtype.itemsize < 8:
                high = min(high, int(np.iinfo(np_dtype).max) + 1)
            array = rng.integers(0, max(high, 1), size=shape).astype(np_dtype)
        else:
            array = rng.standard_normal(shape).astype(np_dtype)
        arrays[name] = array
    return arrays


# ---------------------------------------------------------------------------------------------
# Running


def _weight_bytes(model: ir.Model) -> tuple[int, bool]:
    total = 0
    external = False
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is None:
                continue
            total += tensor.nbytes
            external = external or isinstance(tensor, ir.ExternalTensor)
    return total, external


class _Runner:
    """Creates onnxruntime sessions for IR models, through a file when they are large."""

    def __init__(self, providers: Sequence[str] | None) -> None:
        try:
            import onnxruntime
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise VerifyError(
                "verify needs onnxruntime: pip install 'onnx-ir-multidevice[runtime]'"
            ) from error
        self._ort = onnxruntime
        self._providers = list(providers) if providers else ["CPUExecutionProvider"]
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def session(self, model: ir.Model, label: str) -> Any:
        options = self._ort.SessionOptions()
        options.log_severity_level = 3
        size, external = _weight_bytes(model)
        try:
            if external or size > _INLINE_LIMIT_BYTES:
                if self._tmp is None:
                    self._tmp = tempfile.TemporaryDirectory(prefix="omny-verify-")
                stem = label.replace(" ", "_")
                path = os.path.join(self._tmp.name, f"{stem}.onnx")
                ir.save(model, path, external_data=f"{stem}.onnx.data")
                return self._ort.InferenceSession(path, options, providers=self._providers)
            proto = ir.to_proto(model)
            return self._ort.InferenceSession(
                proto.SerializeToString(), options, providers=self._providers
            )
        except VerifyError:
            raise
        except Exception as error:
            raise VerifyError(f"onnxruntime cannot load the {label}: {error}") from error

    def run(
        self, model: ir.Model, feeds: Mapping[str, np.ndarray], label: str
    ) -> tuple[dict[str, np.ndarray], float]:
        session = self.session(model, label)
        names = [i.name for i in session.get_inputs()]
        missing = [n for n in names if n not in feeds]
        if missing:
            raise VerifyError(f"The {label} needs input(s) {missing} that were not provided.")
        start = time.perf_counter()
        try:
            results = session.run(None, {n: feeds[n] for n in names})
        except Exception as error:
            raise VerifyError(f"onnxruntime failed running the {label}: {error}") from error
        seconds = time.perf_counter() - start
        return dict(zip([o.name for o in session.get_outputs()], results)), seconds

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _compare(
    name: str, whole: np.ndarray, split: np.ndarray, rtol: float, atol: float
) -> OutputComparison:
    whole = np.asarray(whole)
    split = np.asarray(split)
    if whole.shape != split.shape or whole.dtype != split.dtype:
        return OutputComparison(
            name, tuple(whole.shape), str(whole.dtype), float("inf"), float("inf"),
            int(max(whole.size, split.size)), False,
        )  # fmt: skip
    if whole.size == 0:
        return OutputComparison(name, tuple(whole.shape), str(whole.dtype), 0.0, 0.0, 0, True)
    if whole.dtype.kind in "fc":
        a = whole.astype(np.float64) if whole.dtype.kind == "f" else whole.astype(np.complex128)
        b = split.astype(a.dtype)
        both_nan = np.isnan(a) & np.isnan(b)
        same_inf = np.isinf(a) & (a == b)
        diff = np.where(both_nan | same_inf, 0.0, np.abs(b - a))
        diff = np.where(np.isnan(diff), np.inf, diff)
    elif whole.dtype.kind in "biu":
        a = whole.astype(np.float64)
        diff = np.abs(split.astype(np.float64) - a)
    else:  # strings, objects: exact comparison
        equal = whole == split
        bad = int(np.size(equal) - np.count_nonzero(equal))
        value = 0.0 if bad == 0 else float("inf")
        return OutputComparison(name, tuple(whole.shape), str(whole.dtype), value, value, bad,
                                bad == 0)  # fmt: skip
    magnitude = np.abs(a)
    magnitude = np.where(np.isfinite(magnitude), magnitude, 0.0)  # NaN/inf earn no tolerance
    bad = int(np.count_nonzero(diff > atol + rtol * magnitude))
    nonzero = magnitude > 0
    max_rel = float(np.max(diff[nonzero] / magnitude[nonzero])) if nonzero.any() else 0.0
    return OutputComparison(
        name, tuple(whole.shape), str(whole.dtype), float(np.max(diff)), max_rel, bad, bad == 0
    )


def verify_stages(
    model: ir.Model,
    stages: Sequence[ir.Model],
    inputs: Mapping[str, np.ndarray] | None = None,
    *,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    providers: Sequence[str] | None = None,
) -> VerifyReport:
    """Compare the chained ``stages`` with the whole ``model`` on onnxruntime.

    Args:
        model: The whole model.
        stages: Its stage models, in pipeline order (as :func:`split` returns them).
        inputs: Arrays by graph input name; missing ones are generated (:func:`make_inputs`).
        rtol: Relative tolerance.
        atol: Absolute tolerance.
        dims: Values of symbolic dimensions for generated inputs.
        seed: Seed for generated inputs.
        providers: onnxruntime execution providers (default CPU).

    Returns:
        The report; :attr:`VerifyReport.ok` tells whether all outputs agree.

    Raises:
        VerifyError: onnxruntime cannot load or run the model or a stage (the message names
            it), a stage reads a name nothing provides, ``rtol`` or ``atol`` is negative, or
            a value of ``dims`` is not a positive integer.
    """
    _check_tolerances(rtol, atol)
    feeds = make_inputs(model, dims=dims, seed=seed)
    if inputs:
        feeds.update({k: np.asarray(v) for k, v in inputs.items()})
    runner = _Runner(providers)
    try:
        expected, whole_seconds = runner.run(model, feeds, "whole model")
        env: dict[str, np.ndarray] = dict(feeds)
        stage_seconds = []
        for i, stage in enumerate(stages):
            label = f"stage {i}"
            names = [v.name for v in stage.graph.inputs if v.name not in stage.graph.initializers]
            missing = [n for n in names if n not in env]
            if missing:
                raise VerifyError(
                    f"Stage {i} reads {missing}, which neither the graph inputs nor earlier "
                    "stages provide."
                )
            produced, seconds = runner.run(stage, env, label)
            env.update(produced)
            stage_seconds.append(seconds)
    finally:
        runner.close()
    comparisons = []
    for value in model.graph.outputs:
        name = value.name or ""
        if name not in env:
            raise VerifyError(f"No stage produces the graph output {name!r}.")
        comparisons.append(_compare(name, expected[name], env[name], rtol, atol))
    return VerifyReport(
        num_stages=len(stages),
        rtol=rtol,
        atol=atol,
        outputs=tuple(comparisons),
        inputs=tuple((n, tuple(a.shape), str(a.dtype)) for n, a in feeds.items()),
        whole_seconds=whole_seconds,
        stage_seconds=tuple(stage_seconds),
    )


def verify(
    model: ir.Model,
    shards: int,
    inputs: Mapping[str, np.ndarray] | None = None,
    *,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    configuration: Any = None,
    metadata: Any = None,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    providers: Sequence[str] | None = None,
) -> VerifyReport:
    """Split ``model`` into ``shards`` stages and compare them with the whole model.

    Runs the whole model and the chained stage models on onnxruntime with the same inputs
    and compares every graph output: an element agrees when
    ``|split - whole| <= atol + rtol * |whole|`` (NaN agrees with NaN).

    .. versionadded:: 0.1

    Args:
        model: The model (not modified).
        shards: Number of stages.
        inputs: Arrays by graph input name; missing ones are generated (:func:`make_inputs`).
        rtol: Relative tolerance.
        atol: Absolute tolerance.
        configuration: Which configuration to split by (see
            :func:`~onnx_ir_multidevice._split.build.split`).
        metadata: ``.omny`` metadata to use instead of the model's.
        dims: Values of symbolic dimensions for generated inputs (others are 1).
        seed: Seed for generated inputs.
        providers: onnxruntime execution providers (default CPU).

    Returns:
        The report.

    Raises:
        SplitError: The model cannot be split so.
        VerifyError: onnxruntime cannot load or run the model or a stage (named), ``rtol``
            or ``atol`` is negative, or a value of ``dims`` is not a positive integer.
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
    """
    from onnx_ir_multidevice._split import split

    require_model(model, "verify")
    _check_tolerances(rtol, atol)
    _checked_dims(dims)
    stages = split(model, shards, configuration=configuration, metadata=metadata)
    return verify_stages(
        model, stages, inputs, rtol=rtol, atol=atol, dims=dims, seed=seed, providers=providers
    )
