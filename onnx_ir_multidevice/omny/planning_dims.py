"""The planning dims a plan was made at, recorded beside the ``.omny`` metadata.

A plan measures memory at concrete values of the model's symbolic dimensions (``batch``,
``seq``, ``height``...): its *planning dims*. ``check``, ``split``, ``verify``, ``run``,
``inspect`` and the exporters need the same values, so :func:`write_planning_dims` records them
in a ``metadata_props`` entry of this package, :data:`PLANNING_DIMS_KEY`, whose value is a
JSON object ``{"batch": 1, "seq": 128}`` (keys sorted, compact). The entry lives *beside*
``omnynet_metadata``, never inside its JSON: the reference reader refuses any key the
``.omny`` specification does not list.

:func:`read_planning_dims` is strict: a value that is not a JSON object of positive integers
raises :class:`~onnx_ir_multidevice.OmnyFormatError` naming the entry, since every later step
would otherwise run at dims nobody chose.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "MAX_PLANNING_DIM",
    "PLANNING_DIMS_KEY",
    "format_planning_dims",
    "parse_planning_dims",
    "read_planning_dims",
    "write_planning_dims",
]

import json
from collections.abc import Mapping
from typing import Any

import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyFormatError
from onnx_ir_multidevice._util import require_model

PLANNING_DIMS_KEY = "onnx_ir_multidevice.planning_dims"
"""The ``metadata_props`` key of the planning dims (a JSON object of positive integers)."""

MAX_PLANNING_DIM = 2**40
"""Largest value accepted for one planning dim (a larger one is a typo, not a plan)."""

_PATH = f"metadata_props[{PLANNING_DIMS_KEY}]"


def _checked(dims: Mapping[Any, object], path: str) -> dict[str, int]:
    result: dict[str, int] = {}
    for name, value in dims.items():
        if not isinstance(name, str) or not name:
            raise OmnyFormatError(path, f"dimension names must be non-empty strings, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise OmnyFormatError(f"{path}.{name}", f"expected a positive integer, got {value!r}")
        if not 1 <= value <= MAX_PLANNING_DIM:
            raise OmnyFormatError(
                f"{path}.{name}",
                f"expected an integer from 1 to {MAX_PLANNING_DIM}, got {value}",
            )
        result[name] = value
    return result


def parse_planning_dims(text: str) -> dict[str, int]:
    """Parse the recorded value (a JSON object of positive integers).

    Args:
        text: The entry's value.

    Returns:
        The dims, by name.

    Raises:
        OmnyFormatError: The text is not such an object; ``path`` names the entry (and the
            dimension when one value is wrong).
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise OmnyFormatError(
            _PATH, f"not JSON ({error}); re-plan the model (`omny plan`) to record its dims"
        ) from error
    if not isinstance(value, dict):
        raise OmnyFormatError(
            _PATH, f'expected a JSON object such as {{"seq": 128}}, got {type(value).__name__}'
        )
    return _checked(value, _PATH)


def format_planning_dims(dims: Mapping[str, int]) -> str:
    """The recorded form of ``dims``: compact JSON with sorted keys (deterministic bytes).

    Raises:
        OmnyFormatError: A name is empty or a value is not an integer from 1 to
            :data:`MAX_PLANNING_DIM`.
    """
    checked = _checked(dims, "planning dims")
    return json.dumps(dict(sorted(checked.items())), separators=(",", ":"))


def read_planning_dims(model: ir.Model) -> dict[str, int] | None:
    """Return the planning dims recorded in ``model``, or ``None`` when none are.

    Raises:
        OmnyFormatError: The entry exists but is malformed (see :func:`parse_planning_dims`).
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
    """
    require_model(model, "read_planning_dims")
    text = model.metadata_props.get(PLANNING_DIMS_KEY)
    return None if text is None else parse_planning_dims(text)


def write_planning_dims(model: ir.Model, dims: Mapping[str, int] | None) -> None:
    """Record ``dims`` in ``model.metadata_props`` (in place); ``None`` or ``{}`` removes it.

    An existing entry is replaced where it stands, so the order of the other properties is
    kept.

    Raises:
        OmnyFormatError: A name is empty or a value is not an integer from 1 to
            :data:`MAX_PLANNING_DIM`.
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
    """
    require_model(model, "write_planning_dims")
    if not dims:
        model.metadata_props.pop(PLANNING_DIMS_KEY, None)
        return
    model.metadata_props[PLANNING_DIMS_KEY] = format_planning_dims(dims)
