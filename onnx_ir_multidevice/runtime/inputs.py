"""Random model inputs: the one generator behind ``omny verify``, ``omny run`` and the demo.

An input is described by a :class:`TensorSpec`: its name, its declared shape (symbolic
dimensions by name), its element type and, for an integer input, the exclusive upper bound of
valid values. The bound is found once, from an IR model, by :func:`index_bound`: the smallest
table a ``Gather`` indexes with the input (a token id must stay below the vocabulary size).
:func:`generate_inputs` turns specs into arrays with one set of rules:

* symbolic dimensions take their value from ``dims`` (by name; a dimension written as an
  expression, ``past_seq + seq``, is evaluated; one without a name is ``"<input>[<axis>]"``),
  else an example value that looks like real data
  (:func:`~onnx_ir_multidevice.analysis.shapes.example_dims`: batch 1, 128 tokens, images
  of 224 x 224, waveforms of 512 samples...).
  :func:`~onnx_ir_multidevice.runtime.verification.verify` and ``omny run`` pass the
  planning dims the model records (:func:`~onnx_ir_multidevice.omny.read_planning_dims`), so
  a model is verified and run at the dims it was planned at;
* inputs whose name contains ``mask`` (any case) are all ones;
* integer inputs are uniform in ``[0, high)`` (``high``: the spec's bound, else
  :data:`DEFAULT_INT_HIGH`);
* boolean inputs are random, floating-point inputs standard normal;
* the arrays of one call take at most :data:`MAX_GENERATED_BYTES` together (a bound on what a
  large planning dim, a ``config.json`` ``dims`` value or a ``--dim`` can make ``verify`` and
  ``run`` allocate): the sizes are computed before anything is allocated, and a request over
  the bound is refused with a message naming the inputs, the dims they were generated at, and
  how to lower them or raise the bound (``max_bytes=``, or the environment variable
  :data:`MAX_BYTES_ENV`).

:func:`~onnx_ir_multidevice.runtime.verification.make_inputs` (for ``verify``) and
:meth:`~onnx_ir_multidevice.runtime.Pipeline.example_inputs` (for ``omny run``) both call it,
so the same model, seed and dims give the same arrays.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_INT_HIGH",
    "MAX_BYTES_ENV",
    "MAX_GENERATED_BYTES",
    "TensorSpec",
    "check_dims",
    "dim_names",
    "example_binding",
    "generated_at",
    "generate_inputs",
    "index_bound",
    "input_specs",
    "max_generated_bytes",
]

import dataclasses
import os
from collections.abc import Iterable, Mapping

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice.analysis.dim_expressions import DimExpression
from onnx_ir_multidevice.analysis.shapes import (
    evaluate_dims,
    example_dims,
    input_symbols,
    normalize_dims,
)
from onnx_ir_multidevice.analysis.sizes import check_dims

DEFAULT_INT_HIGH = 4
"""Exclusive upper bound of generated integers when no ``Gather`` bounds an input."""

MAX_GENERATED_BYTES = 64 * 2**20
"""Default bound on the bytes of the arrays one :func:`generate_inputs` call makes (64 MiB:
a batch of 32 RGB images of 224 x 224 in float32 takes 19 MiB, 4,096 int64 token ids 32 KiB).
Override it per call with ``max_bytes=``, or for a process (the ``omny`` commands included)
with the environment variable :data:`MAX_BYTES_ENV`."""

MAX_BYTES_ENV = "OMNY_MAX_INPUT_BYTES"
"""Environment variable that overrides :data:`MAX_GENERATED_BYTES` (a byte count)."""

# Ops through which an index input keeps its values (so a Gather further on bounds it).
_VALUE_PRESERVING_OPS = frozenset(
    {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Transpose"}
)


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """Name, shape and element type of a graph input, as the model declares it."""

    name: str
    """Tensor name."""

    shape: tuple[int | str | None, ...] | None
    """Dimensions: an ``int``, a symbolic name (or expression), or ``None`` when unnamed (a
    ``dim_value`` of ``-1`` included); ``None`` if unknown."""

    dtype: np.dtype | None
    """numpy element type (``None`` when the model does not say)."""

    high: int | None = None
    """Exclusive upper bound of an integer input's valid values: the smallest table a
    ``Gather`` indexes with it (``None``: no ``Gather`` bounds it). See :func:`index_bound`."""


def index_bound(value: ir.Value) -> int | None:
    """Smallest data dimension of the ``Gather`` nodes that index with ``value``.

    Follows the value through ops that keep its values (``Cast``, ``Reshape``, ``Unsqueeze``...)
    to every ``Gather`` / ``GatherElements`` that uses it as indices, and takes the size of
    the gathered axis of their data. Linear in the number of uses visited.

    Args:
        value: An integer graph input.

    Returns:
        The bound, or ``None`` when no ``Gather`` with a known data dimension uses the value.
    """
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


def _spec_of_value(value: ir.Value) -> TensorSpec:
    shape = None
    if value.shape is not None:
        # SymbolicDim.value is the name or None
        shape = tuple(
            (d if d >= 0 else None) if isinstance(d, int) else d.value for d in value.shape.dims
        )
    dtype = None
    if value.dtype is not None:
        try:
            dtype = np.dtype(value.dtype.numpy())
        except TypeError:  # UNDEFINED
            dtype = None
    high = index_bound(value) if dtype is not None and dtype.kind in "iu" else None
    return TensorSpec(value.name or "", shape, dtype, high)


def input_specs(model: ir.Model) -> dict[str, TensorSpec]:
    """The spec of each graph input a caller feeds, in graph order, with its index bound.

    Initializers that are also graph inputs (overridable defaults) are left out.

    Args:
        model: The model.

    Returns:
        ``{input name: spec}``.
    """
    initializers = model.graph.initializers
    return {
        value.name or "": _spec_of_value(value)
        for value in model.graph.inputs
        if value.name not in initializers
    }


def dim_names(specs: Iterable[TensorSpec]) -> list[str]:
    """The names ``dims`` may bind for inputs of these specs (the input symbols).

    See :func:`~onnx_ir_multidevice.analysis.shapes.input_symbols`.
    """
    return list(input_symbols({spec.name: spec.shape for spec in specs}))


def example_binding(
    specs: Iterable[TensorSpec], dims: Mapping[str, int] | None = None
) -> dict[str, int]:
    """``dims`` completed with example values for every other symbol of the inputs.

    See :func:`~onnx_ir_multidevice.analysis.shapes.example_dims`.
    """
    specs = list(specs)
    floats = [s.name for s in specs if s.dtype is not None and s.dtype.kind == "f"]
    return example_dims(
        {spec.name: spec.shape for spec in specs}, check_dims(dims), float_inputs=floats
    )


def generated_at(specs: Iterable[TensorSpec], dims: Mapping[str, int] | None = None) -> str | None:
    """What to tell a user whose model failed at generated inputs: the dims used, and the fix.

    A model can run at some sizes only (a TorchScript decoder that baked ``seq=16`` into a
    ``Reshape``, a position table of 256 rows): the example sizes the generator picks then
    fail inside onnxruntime with a message about a node, not about the sizes.

    Args:
        specs: The generated inputs' specs.
        dims: The dims the generator was given (the rest took example values).

    Returns:
        A sentence naming every symbolic dim with the value it took and the inputs' shapes,
        or ``None`` when no input has a symbolic dim (the sizes are the model's own).
    """
    specs = list(specs)
    names = dim_names(specs)
    if not names:
        return None
    try:
        binding = example_binding(specs, dims)
    except ValueError:
        return None
    used = ", ".join(f"{name}={binding[name]}" for name in names if name in binding)
    shapes = []
    for spec in specs:
        if spec.shape is None:
            continue
        shape = evaluate_dims(normalize_dims(spec.name, spec.shape), binding)
        if shape is not None:
            shapes.append(f"{spec.name}{list(shape)}")
    example = next((n for n in names if n not in (dims or {}) and "batch" not in n), names[0])
    how = f"--dim {example}=N (dims={{{example!r}: N}} in Python)"
    return (
        f"the inputs were generated at {used} ({', '.join(shapes)}); a model that runs at "
        f"some sizes only (one baked into a Reshape, a table of fixed length) needs the sizes "
        f"it runs at: pass them with {how}"
    )


def max_generated_bytes(max_bytes: int | None = None) -> int:
    """The bound on generated bytes: ``max_bytes``, else :data:`MAX_BYTES_ENV`, else the default.

    Raises:
        ValueError: ``max_bytes`` or the environment variable is not a positive byte count.
    """
    if max_bytes is None:
        text = os.environ.get(MAX_BYTES_ENV, "").strip()
        if not text:
            return MAX_GENERATED_BYTES
        try:
            max_bytes = int(text.replace("_", ""))
        except ValueError:
            raise ValueError(
                f"the environment variable {MAX_BYTES_ENV}={text!r} is not a byte count "
                f"(e.g. {MAX_BYTES_ENV}={4 * MAX_GENERATED_BYTES})"
            ) from None
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)) or max_bytes < 1:
        raise ValueError(f"max_bytes must be a positive byte count, got {max_bytes!r}")
    return int(max_bytes)


def _dims_used(normalized: tuple[object, ...], bindings: Mapping[str, int]) -> list[str]:
    """``name=value`` of the symbolic dims an input's shape reads, in axis order."""
    used: list[str] = []
    for dim in normalized:
        if isinstance(dim, DimExpression):
            for name in sorted(dim.names):
                text = f"{name}={bindings.get(name, '?')}"
                if text not in used:
                    used.append(text)
    return used


def _check_cost(planned: list[tuple[TensorSpec, tuple[int, ...], list[str]]], limit: int) -> None:
    """Refuse, before allocating, arrays that would take more than ``limit`` bytes together."""
    costs = [
        (spec, shape, used, int(np.prod(shape, dtype=object)) * spec.dtype.itemsize)  # type: ignore[union-attr]  # planned: typed
        for spec, shape, used in planned
    ]  # fmt: skip  (Python ints: no overflow)
    total = sum(cost for *_, cost in costs)
    if total <= limit:
        return
    costs.sort(key=lambda item: -item[3])
    listed = "; ".join(
        f"{spec.name!r} {list(shape)} {spec.dtype} = {cost} bytes"
        + (f" (at {', '.join(used)})" if used else "")
        for spec, shape, used, cost in costs[:3]
    )
    dims = sorted({d for *_, used, _ in costs for d in used})
    advice = (
        f"pass smaller dims (--dim NAME=N, dims={{...}}; the dims used: {', '.join(dims)})"
        if dims
        else "the model's inputs are that large at their fixed shapes"
    )
    raise ValueError(
        f"the generated inputs would take {total} bytes, over the bound of {limit} bytes on "
        f"generated inputs: {listed}; {advice}, or raise the bound (max_bytes=, or the "
        f"environment variable {MAX_BYTES_ENV})"
    )


def generate_inputs(
    specs: Iterable[TensorSpec],
    dims: Mapping[str, int] | None = None,
    *,
    seed: int = 0,
    max_bytes: int | None = None,
) -> dict[str, np.ndarray]:
    """One random array per spec, by the rules of the module docstring.

    The arrays are drawn in the order of ``specs`` from one generator seeded with ``seed``.

    Args:
        specs: The inputs to generate.
        dims: Values of symbolic dimensions, by name (``{"batch": 2}``); others get the
            example values of :func:`example_binding`.
        seed: Seed of the random generator.
        max_bytes: Most bytes the arrays may take together (default: the environment
            variable :data:`MAX_BYTES_ENV`, else :data:`MAX_GENERATED_BYTES`).

    Returns:
        ``{input name: array}``.

    Raises:
        ValueError: An input has no declared type or shape, or an element type numpy cannot
            generate (strings, bfloat16, float8...); a value of ``dims`` is not a positive
            integer; or the arrays would take more than ``max_bytes`` (nothing is allocated;
            the message names the inputs and the dims used). The message names the input.
    """
    specs = list(specs)
    limit = max_generated_bytes(max_bytes)
    bindings = example_binding(specs, dims)
    planned: list[tuple[TensorSpec, tuple[int, ...], list[str]]] = []
    for spec in specs:
        name = spec.name
        if spec.dtype is None:
            raise ValueError(f"input {name!r} has no declared element type")
        if spec.shape is None:
            raise ValueError(f"input {name!r} has no declared shape")
        dtype = spec.dtype
        if dtype.kind not in "biuf" or (dtype.kind == "f" and dtype.itemsize < 2):
            raise ValueError(f"Cannot generate input {name!r} of type {dtype}")
        normalized = normalize_dims(name, spec.shape)
        shape = evaluate_dims(normalized, bindings)
        if shape is None:
            raise ValueError(
                f"input {name!r}: its shape {list(spec.shape)} has no positive size at {bindings}"
            )
        planned.append((spec, shape, _dims_used(normalized, bindings)))
    _check_cost(planned, limit)
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for spec, shape, _ in planned:
        assert spec.dtype is not None  # checked while planning
        name, dtype = spec.name, spec.dtype
        if "mask" in name.lower():
            array = np.ones(shape, dtype=dtype)
        elif dtype.kind == "b":
            array = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif dtype.kind in "iu":
            high = spec.high or DEFAULT_INT_HIGH
            if dtype.kind == "u" or dtype.itemsize < 8:
                high = min(high, int(np.iinfo(dtype).max) + 1)
            array = rng.integers(0, max(high, 1), size=shape).astype(dtype)
        else:
            array = rng.standard_normal(shape).astype(dtype)
        arrays[name] = array
    return arrays
