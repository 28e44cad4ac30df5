"""Check numerically that a split model computes what the whole model computes.

:func:`verify` runs the whole model and the chain of its stage models (from
:func:`~onnx_ir_multidevice._split.build.split`) on onnxruntime with the same inputs and compares
every graph output. Inputs not given are generated from the input types by
:func:`make_inputs`.

Memory, by design: **one onnxruntime session exists at a time**, so verifying a model never
needs more memory than running it. The whole model runs first; its graph outputs are kept and
its session released. Then the stages run one at a time, each session released before the
next is created; after each stage, the tensors no later stage reads and that are not graph
outputs are dropped. The peak is therefore the largest of one session (the whole model's) plus
the kept tensors, never the whole model and its stages together. Stage models share the
weights of the input model (no copy); weights in external data stay on disk until onnxruntime
reads them. Measured on a 1.1-billion-parameter decoder (4.4 GB of weights, 2 stages): peak
resident memory 1.03x the weight bytes (``benchmarks/llm.py``).
"""

from __future__ import annotations

__all__ = [
    "OutputComparison",
    "VerifyReport",
    "compare_outputs",
    "make_inputs",
    "verify",
    "verify_stages",
]

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice._errors import VerifyError
from onnx_ir_multidevice._split import split
from onnx_ir_multidevice._split.tensor_parallel import tensor_parallel_configuration
from onnx_ir_multidevice._util import plural, require_model
from onnx_ir_multidevice.analysis.precision import default_tolerance
from onnx_ir_multidevice.omny.planning_dims import read_planning_dims
from onnx_ir_multidevice.runtime.inputs import (
    check_dims,
    generate_inputs,
    generated_at,
    input_specs,
)
from onnx_ir_multidevice.runtime.sessions import ModelSession


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
    """Elements with ``|split - whole| > atol * min(1, scale) + rtol * |whole|`` (all of them
    if shapes differ)."""
    ok: bool
    """``True`` when shapes and dtypes agree and no element is outside the tolerance."""
    scale: float = 1.0
    """The whole model's output scale: its largest finite ``|value|`` (0 when every element is
    0 or not finite; 1 for strings and objects, compared exactly)."""
    near_zero: bool = False
    """``True`` when every element of the whole model's floating-point output is within
    ``atol`` of zero (``scale <= atol``): an absolute tolerance alone would accept any split, so the
    comparison is made at the output's scale, and the inputs probably do not exercise the
    model (random weights or inputs); feed real inputs to test more."""


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
    whole_create_seconds: float = 0.0
    """Time it took to create the whole model's session (saving it first when needed)."""
    stage_create_seconds: tuple[float, ...] = ()
    """Time it took to create each stage's session."""

    @property
    def ok(self) -> bool:
        """Whether every output agrees within tolerance."""
        return all(o.ok for o in self.outputs)

    @property
    def near_zero_outputs(self) -> tuple[str, ...]:
        """The outputs whose whole-model values are all within ``atol`` of zero."""
        return tuple(o.name for o in self.outputs if o.near_zero)

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
                    "scale": o.scale,
                    "near_zero": o.near_zero,
                }
                for o in self.outputs
            ],
            "whole_seconds": self.whole_seconds,
            "stage_seconds": list(self.stage_seconds),
            "whole_create_seconds": self.whole_create_seconds,
            "stage_create_seconds": list(self.stage_create_seconds),
        }

    def __str__(self) -> str:
        verdict = "OK" if self.ok else "MISMATCH"
        lines = [
            (
                f"{verdict}: {plural(self.num_stages, 'stage')} vs whole model "
                f"(rtol={self.rtol:g}, atol={self.atol:g})"
            )
        ]
        width = max((len(o.name) for o in self.outputs), default=6)
        lines.append(f"  {'output':<{width}}  {'max abs diff':>12}  {'max rel diff':>12}  status")
        for o in self.outputs:
            status = "ok" if o.ok else f"{plural(o.mismatches, 'element')} off"
            lines.append(
                f"  {o.name:<{width}}  {o.max_abs_diff:>12.3g}  {o.max_rel_diff:>12.3g}  {status}"
            )
        near_zero = [o for o in self.outputs if o.near_zero]
        if near_zero:
            names = ", ".join(f"{o.name} (largest |value| {o.scale:.3g})" for o in near_zero)
            lines.append(
                f"  note: every value of {names} is within atol={self.atol:g} of zero, so an "
                "absolute tolerance would accept any split: compared at the output's scale "
                "(atol x largest |value|); the inputs (or random weights) barely exercise the "
                "model: pass real inputs to test more"
            )
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Inputs


def _checked_dims(dims: Mapping[str, int] | None) -> dict[str, int]:
    """``dims`` as a dict, after checking that every value is a positive integer."""
    try:
        return check_dims(dims)
    except ValueError as exc:
        raise VerifyError(str(exc)) from exc


def _tolerances(model: ir.Model, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """The tolerances given, the model's default (:func:`default_tolerance`) for ``None``."""
    if rtol is None or atol is None:
        default_rtol, default_atol = default_tolerance(model)
        rtol = default_rtol if rtol is None else rtol
        atol = default_atol if atol is None else atol
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not 0.0 <= value < float("inf"):
            raise VerifyError(f"{name} must be a finite number >= 0, got {value!r}")
    return rtol, atol


def make_inputs(
    model: ir.Model,
    *,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Generate one array per graph input of ``model`` from the input types.

    The rules are those of :func:`~onnx_ir_multidevice.runtime.inputs.generate_inputs`,
    which :meth:`Pipeline.example_inputs <onnx_ir_multidevice.runtime.Pipeline.example_inputs>`
    (``omny run``) uses too:

    * symbolic dimensions take their value from ``dims`` (by name), else from the planning
      dims the model records (:func:`~onnx_ir_multidevice.omny.read_planning_dims`), else
      an example value that looks like real data (batch 1, 128 tokens, 224 x 224 images:
      :func:`~onnx_ir_multidevice.analysis.shapes.example_dims`);
    * inputs whose name contains ``mask`` (any case) are all ones;
    * integer inputs are uniform in ``[0, n)`` where ``n`` is the smallest data dimension of
      the ``Gather`` nodes they index (through casts and reshapes), else ``[0, 4)``;
    * boolean inputs are random, floating-point inputs standard normal;
    * the arrays take at most ``runtime.inputs.MAX_GENERATED_BYTES`` (64 MiB) together, or
      what the environment variable ``OMNY_MAX_INPUT_BYTES`` says: larger dims are refused
      before anything is allocated, naming the dims used.

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
            positive integer, or the inputs would be over the bound on generated bytes.
    """
    require_model(model, "make_inputs")
    dims = {**(read_planning_dims(model) or {}), **_checked_dims(dims)}
    try:
        return generate_inputs(input_specs(model).values(), dims, seed=seed)
    except ValueError as exc:
        raise VerifyError(f"{exc}; pass its array in `inputs`.") from exc


# ---------------------------------------------------------------------------------------------
# Running


def _run(
    model: ir.Model,
    feeds: Mapping[str, np.ndarray],
    label: str,
    providers: Sequence[Any] | None,
    note: str | None = None,
) -> tuple[dict[str, np.ndarray], float, float]:
    """Run ``model`` once on onnxruntime, then release the session.

    ``note`` is added to the message when the run fails (the dims generated inputs took).

    Returns:
        Its outputs by name, the seconds the run took and the seconds the session took to be
        created.
    """
    start = time.perf_counter()
    try:
        owner = ModelSession(model, providers=providers)
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise VerifyError(f"verify needs onnxruntime: {error}") from error
    except Exception as error:
        raise VerifyError(f"onnxruntime cannot load the {label}: {error}") from error
    created = time.perf_counter() - start
    with owner:
        session = owner.session
        names = [i.name for i in session.get_inputs()]
        missing = [n for n in names if n not in feeds]
        if missing:
            raise VerifyError(
                f"The {label} needs {'input' if len(missing) == 1 else 'inputs'} {missing} that "
                f"{'was' if len(missing) == 1 else 'were'} not provided."
            )
        outputs = [o.name for o in session.get_outputs()]
        start = time.perf_counter()
        try:
            results = session.run(None, {n: feeds[n] for n in names})
        except Exception as error:
            text = str(error).strip()
            raise VerifyError(
                f"onnxruntime failed running the {label}: {text}" + (f"; {note}" if note else "")
            ) from error
        seconds = time.perf_counter() - start
        del session  # the owner's close releases the last reference: one session at a time
    return dict(zip(outputs, results, strict=True)), seconds, created


def compare_outputs(
    name: str, whole: Any, split: Any, rtol: float = 1e-4, atol: float = 1e-4
) -> OutputComparison:
    """Compare one output of the chained stages (or a pipeline) with the whole model's.

    An element agrees when ``|split - whole| <= atol * min(1, scale) + rtol * |whole|``, where
    ``scale`` is the largest finite ``|whole|``: the absolute tolerance is relative to the
    output's scale when the output is small (outputs of about 1e-9 would pass any split with
    ``atol`` alone), and ``atol`` itself otherwise. An output whose values are all within
    ``atol`` of zero is flagged :attr:`OutputComparison.near_zero`. NaN agrees with NaN and
    an infinity with the same infinity. Integers and booleans compare as numbers, strings
    and objects exactly. Different shapes or dtypes disagree everywhere.

    Args:
        name: The output's name (kept in the result).
        whole: The whole model's array.
        split: The array to check.
        rtol: Relative tolerance.
        atol: Absolute tolerance.

    Returns:
        The comparison: largest absolute and relative differences, elements out of
        tolerance, and the verdict.
    """
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
    scale = float(np.max(magnitude))
    bad = int(np.count_nonzero(diff > atol * min(1.0, scale) + rtol * magnitude))
    nonzero = magnitude > 0
    max_rel = float(np.max(diff[nonzero] / magnitude[nonzero])) if nonzero.any() else 0.0
    return OutputComparison(
        name, tuple(whole.shape), str(whole.dtype), float(np.max(diff)), max_rel, bad, bad == 0,
        scale, whole.dtype.kind in "fc" and scale <= atol,
    )  # fmt: skip


def verify_stages(
    model: ir.Model,
    stages: Sequence[ir.Model],
    inputs: Mapping[str, np.ndarray] | None = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    providers: Sequence[str] | None = None,
) -> VerifyReport:
    """Compare the chained ``stages`` with the whole ``model`` on onnxruntime.

    Args:
        model: The whole model.
        stages: Its stage models, in pipeline order (as :func:`split` returns them).
        inputs: Arrays by graph input name; missing ones are generated (:func:`make_inputs`).
        rtol: Relative tolerance (default: by the model's arithmetic, see :func:`verify`).
        atol: Absolute tolerance (default: likewise).
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
    rtol, atol = _tolerances(model, rtol, atol)
    feeds = make_inputs(model, dims=dims, seed=seed)
    if inputs:
        feeds.update({k: np.asarray(v) for k, v in inputs.items()})
    generated = [s for s in input_specs(model).values() if s.name not in (inputs or {})]
    note = generated_at(generated, {**(read_planning_dims(model) or {}), **_checked_dims(dims)})
    # One session at a time (see the module docstring): the whole model, then each stage.
    expected, whole_seconds, whole_create = _run(model, feeds, "whole model", providers, note)
    env: dict[str, np.ndarray] = dict(feeds)
    stage_seconds, stage_create = [], []
    needed_later = _needed_after(stages, {v.name or "" for v in model.graph.outputs})
    for i, stage in enumerate(stages):
        names = [v.name for v in stage.graph.inputs if v.name not in stage.graph.initializers]
        missing = [n for n in names if n not in env]
        if missing:
            raise VerifyError(
                f"Stage {i} reads {missing}, which neither the graph inputs nor earlier "
                "stages provide."
            )
        produced, seconds, created = _run(stage, env, f"stage {i}", providers, note)
        env.update(produced)
        for name in [n for n in env if n not in needed_later[i] and n not in feeds]:
            del env[name]  # read by no later stage and not a graph output
        stage_seconds.append(seconds)
        stage_create.append(created)
    comparisons = []
    for value in model.graph.outputs:
        name = value.name or ""
        if name not in env:
            raise VerifyError(f"No stage produces the graph output {name!r}.")
        comparisons.append(compare_outputs(name, expected[name], env[name], rtol, atol))
    return VerifyReport(
        num_stages=len(stages),
        rtol=rtol,
        atol=atol,
        outputs=tuple(comparisons),
        inputs=tuple((n, tuple(a.shape), str(a.dtype)) for n, a in feeds.items()),
        whole_seconds=whole_seconds,
        stage_seconds=tuple(stage_seconds),
        whole_create_seconds=whole_create,
        stage_create_seconds=tuple(stage_create),
    )


def _needed_after(stages: Sequence[ir.Model], graph_outputs: set[str]) -> list[set[str]]:
    """``result[i]``: the names read by a stage after ``i``, and the graph outputs."""
    result: list[set[str]] = []
    needed = set(graph_outputs)
    for stage in reversed(stages):
        result.append(set(needed))
        needed.update(v.name or "" for v in stage.graph.inputs)
    result.reverse()
    return result


_TENSOR_PARALLEL_VERIFY: Callable[..., Any] | None = None


def register_tensor_parallel_verify(check: Callable[..., Any]) -> None:
    """Set what :func:`verify` runs for a model whose record splits stages over devices.

    :mod:`~onnx_ir_multidevice.runtime.tensor_parallel`, which builds on this module, registers
    its ``verify_tensor_parallel`` when the runtime package is imported (a registration
    instead of an import keeps the layers one way).
    """
    global _TENSOR_PARALLEL_VERIFY  # noqa: PLW0603 (the one registration point)
    _TENSOR_PARALLEL_VERIFY = check


def verify(
    model: ir.Model | str | os.PathLike,
    shards: int,
    inputs: Mapping[str, np.ndarray] | None = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    configuration: Any = None,
    metadata: Any = None,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    providers: Sequence[str] | None = None,
) -> VerifyReport:
    """Split ``model`` into ``shards`` stages and compare them with the whole model.

    Runs the whole model and the chained stage models on onnxruntime with the same inputs
    and compares every graph output: an element agrees when
    ``|split - whole| <= atol * min(1, scale) + rtol * |whole|``, ``scale`` being the output's
    largest finite ``|value|`` (NaN agrees with NaN; see :func:`compare_outputs`). An output
    whose values are all within ``atol`` of zero is compared at its own scale and reported
    (:attr:`VerifyReport.near_zero_outputs`, a note in the text).

    .. versionadded:: 0.1

    Args:
        model: The model (not modified), or the path of a model file (``str`` or
            ``os.PathLike``, loaded with :func:`onnx_ir_multidevice.load`).
        shards: Number of stages.
        inputs: Arrays by graph input name; missing ones are generated (:func:`make_inputs`).
        rtol: Relative tolerance. Default: by the model's arithmetic
            (:func:`~onnx_ir_multidevice.analysis.default_tolerance`): ``1e-4``
            for fp32 models, ``1e-2`` for fp16 and quantized ones, where onnxruntime's
            fusions on each side of a cut round differently.
        atol: Absolute tolerance; the same default.
        configuration: Which configuration to split by (see
            :func:`~onnx_ir_multidevice._split.build.split`).
        metadata: ``.omny`` metadata to use instead of the model's.
        dims: Values of symbolic dimensions for generated inputs (others: the planning dims
            the model records, else example values; see :func:`make_inputs`).
        seed: Seed for generated inputs.
        providers: onnxruntime execution providers (default CPU).

    A model whose tensor-parallel record (``omny plan --tensor-parallel``) gives a stage of
    ``shards`` a degree above 1 is verified as :func:`~onnx_ir_multidevice.save_split` splits
    it: such a stage runs as its ranks' segments with the collectives in process.

    Returns:
        The report.

    Raises:
        OmnyFormatError: The model's tensor-parallel record is malformed (OMNY225).
        SplitError: The model cannot be split so.
        VerifyError: onnxruntime cannot load or run the model or a stage (named), ``rtol``
            or ``atol`` is negative, or a value of ``dims`` is not a positive integer.
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
    """
    if isinstance(model, (str, os.PathLike)):
        from onnx_ir_multidevice._proto.files import load  # lazy: only for a path

        model = load(model)
    require_model(model, "verify")
    rtol, atol = _tolerances(model, rtol, atol)
    _checked_dims(dims)
    if configuration is None and metadata is None and _TENSOR_PARALLEL_VERIFY is not None:
        parallel = tensor_parallel_configuration(model, shards)
        if parallel is not None and parallel.parallel:  # the split `omny split` writes
            report: VerifyReport = _TENSOR_PARALLEL_VERIFY(
                model, None, inputs, shards=shards, rtol=rtol, atol=atol, seed=seed,
                input_dims=dims,
            )  # fmt: skip
            return report
    stages = split(model, shards, configuration=configuration, metadata=metadata)
    return verify_stages(
        model, stages, inputs, rtol=rtol, atol=atol, dims=dims, seed=seed, providers=providers
    )
