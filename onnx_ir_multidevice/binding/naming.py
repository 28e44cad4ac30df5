"""The naming convention of the IR configurations this package creates from a ``.omny`` plan.

Configuration ``i`` of a ``.omny`` document becomes an :class:`onnx_ir.ModelConfiguration`
named ``omny/<n>-shards`` for the first configuration with ``n`` shards,
``omny/<n>-shards#1`` for the second, ``#2`` for the third... Names depend only on the
document, so annotating a subset of the configurations gives the same names. The ``omny/``
prefix marks a configuration as this package's: the annotate pass owns (and replaces) it,
the strip pass removes it, and the checker compares it with the plan.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["OMNY_CONFIGURATION_PREFIX", "configuration_name", "configuration_names"]

from collections.abc import Iterable

#: Name prefix of the configurations this package creates (and the strip pass removes).
OMNY_CONFIGURATION_PREFIX = "omny/"


def configuration_name(num_shards: int, repeat: int = 0) -> str:
    """The IR configuration name of an ``.omny`` configuration with ``num_shards`` shards.

    ``omny/<n>-shards`` for the first one (``repeat=0``, the one
    ``Sharding.configuration_index(n)`` chooses), ``omny/<n>-shards#<m>`` for the ``m``-th
    further one.
    """
    base = f"{OMNY_CONFIGURATION_PREFIX}{num_shards}-shards"
    return base if repeat == 0 else f"{base}#{repeat}"


def configuration_names(configurations: Iterable[object]) -> list[str]:
    """Return the IR configuration name of each ``.omny`` shard configuration, in order.

    The first configuration with ``n`` shards is ``omny/<n>-shards``; the ``m``-th further
    one with the same count is ``omny/<n>-shards#<m>``.

    Args:
        configurations: The ``.omny`` shard configurations (anything with ``num_shards``).
    """
    seen: dict[int, int] = {}
    names = []
    for configuration in configurations:
        n = configuration.num_shards  # type: ignore[attr-defined]  # any object with num_shards (documented)
        count = seen.get(n, 0)
        seen[n] = count + 1
        names.append(configuration_name(n, count))
    return names
