"""Range-minimum and range-maximum queries over a fixed integer array: the sparse table.

Level ``k`` of the table holds the minimum (or maximum) of every window of ``2**k`` values;
a query over ``[lo, hi)`` combines the two windows of the largest such size that cover it,
so each query is O(1) after an O(n log n) build. Cut-point discovery asks for minima one at a
time (:meth:`SparseTable.at`), the planner's memory model for maxima over whole arrays of
ranges at once (:meth:`SparseTable.query`).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["SparseTable", "floor_log2"]

from collections.abc import Sequence
from typing import Literal

import numpy as np

_COMBINE = {"min": (np.minimum, min), "max": (np.maximum, max)}


def floor_log2(length: np.ndarray) -> np.ndarray:
    """``floor(log2(n))`` of positive integers, exactly (0 for 0)."""
    _, exponent = np.frexp(np.maximum(length, 1).astype(np.float64))
    return exponent.astype(np.int64) - 1


class SparseTable:
    """Range-minimum or range-maximum queries over a fixed integer array (one 2-D table).

    Args:
        values: The array (``int64`` values).
        kind: ``"min"`` or ``"max"``: what a query returns.
    """

    def __init__(self, values: Sequence[int] | np.ndarray, kind: Literal["min", "max"]) -> None:
        combine, self._pick = _COMBINE[kind]
        values = np.asarray(values, dtype=np.int64)
        size = len(values)
        levels = max(1, size.bit_length())
        table = np.zeros((levels, max(size, 1)), dtype=np.int64)
        table[0, :size] = values
        span = 1
        for k in range(1, levels):
            n = size - 2 * span + 1
            table[k, :n] = combine(table[k - 1, :n], table[k - 1, span : span + n])
            span *= 2
        self.table = table
        self.log2 = floor_log2(np.arange(size + 1))
        self.spans = np.left_shift(1, self.log2)
        # Flat views for 1-D ``take`` (faster than 2-D fancy indexing): level ``k`` starts
        # at ``offsets[length]`` when ``k = log2[length]``; ``back`` is that minus the span.
        width = table.shape[1]
        self._combine = combine
        self._flat = table.reshape(-1)
        self._offsets = self.log2 * width
        self._back = self._offsets - self.spans

    def query(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Minimum (maximum) over ``[lo, hi)`` element-wise (``hi > lo`` everywhere)."""
        length = hi - lo
        flat = self._flat
        return self._combine(
            flat.take(self._offsets.take(length) + lo), flat.take(self._back.take(length) + hi)
        )

    def at(self, lo: int, hi: int, default: int) -> int:
        """Minimum (maximum) over ``[lo, hi)`` of one range; ``default`` when it is empty."""
        if hi <= lo:
            return default
        k = (hi - lo).bit_length() - 1
        row = self.table[k]
        return int(self._pick(row[lo], row[hi - (1 << k)]))
