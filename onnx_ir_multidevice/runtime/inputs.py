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
* boolean inputs are random, floating-point inputs standard normal.

:func:`~onnx_ir_multidevice.runtime.verification.make_inputs` (for ``verify``) and
:meth:`~onnx_ir_multidevice.runtime.Pipeline.example_inputs` (for ``omny run``) both call it,
so the same model, seed and dims give the same arrays.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_INT_HIGH",
    "TensorSpec",
    "check_dims",
    "dim_names",
    "example_binding",
    "generate_inputs",
    "index_bound",
    "input_specs",
]

import dataclasses
from collections.abc import Iterable, Mapping

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice.analysis.shapes import (
    evaluate_dims,
    example_dims,
    input_symbols,
    normalize_dims,
)

DEFAULT_INT_HIGH = 4
"""Exclusive upper bound of generated integers when no ``Gather`` bounds an input."""

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


def check_dims(dims: Mapping[str, int] | None) -> dict[str, int]:
    """``dims`` as a dict, after checking that every value is a positive integer.

    Raises:
        ValueError: A value is not a positive integer (the message names it).
    """
    checked = dict(dims or {})
    for name, value in checked.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(
                f"dims[{name!r}] must be a positive integer, got {value!r} "
                "(e.g. dims={'batch': 2})"
            )
    return checked


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


def generate_inputs(
    specs: Iterable[TensorSpec],
    dims: Mapping[str, int] | None = None,
    *,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """One random array per spec, by the rules of the module docstring.

    The arrays are drawn in the order of ``specs`` from one generator seeded with ``seed``.

    Args:
        specs: The inputs to generate.
        dims: Values of symbolic dimensions, by name (``{"batch": 2}``); others get the
            example values of :func:`example_binding`.
        seed: Seed of the random generator.

    Returns:
        ``{input name: array}``.

    Raises:
        ValueError: An input has no declared type or shape, or an element type numpy cannot
            generate (strings, bfloat16, float8...); or a value of ``dims`` is not a positive
            integer. The message names the input.
    """
    specs = list(specs)
    bindings = example_binding(specs, dims)
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        name = spec.name
        if spec.dtype is None:
            raise ValueError(f"input {name!r} has no declared element type")
        if spec.shape is None:
            raise ValueError(f"input {name!r} has no declared shape")
        dtype = spec.dtype
        if dtype.kind not in "biuf" or (dtype.kind == "f" and dtype.itemsize < 2):
            raise ValueError(f"Cannot generate input {name!r} of type {dtype}")
        shape = evaluate_dims(normalize_dims(name, spec.shape), bindings)
        if shape is None:
            raise ValueError(
                f"input {name!r}: its shape {list(spec.shape)} has no positive size at {bindings}"
            )
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
