"""One sparse table: cut-point discovery (minima) and the memory model (maxima) share it."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from onnx_ir_multidevice.analysis import cut_points
from onnx_ir_multidevice.analysis.sparse_table import SparseTable, floor_log2
from onnx_ir_multidevice.planner import memory


@pytest.mark.parametrize("size", [1, 2, 3, 7, 8, 9, 33])
@pytest.mark.parametrize("kind", ["min", "max"])
def test_every_range_gives_the_brute_force_answer(size, kind):
    values = np.random.default_rng(size).integers(-50, 50, size)
    table = SparseTable(values.tolist(), kind)
    pick = min if kind == "min" else max
    lo, hi = np.triu_indices(size + 1, 1)
    expected = [pick(values[a:b]) for a, b in zip(lo, hi, strict=True)]
    assert table.query(lo, hi).tolist() == expected
    assert [table.at(int(a), int(b), 999) for a, b in zip(lo, hi, strict=True)] == expected
    assert table.at(3, 3, 999) == 999


def test_floor_log2_is_exact():
    n = np.arange(1, 5000)
    assert floor_log2(n).tolist() == [int(x).bit_length() - 1 for x in n]
    assert floor_log2(np.array([0])).tolist() == [0]


def test_no_second_sparse_table():
    for module in (cut_points, memory):
        own = [c for c in vars(module).values() if inspect.isclass(c)]
        own = [c for c in own if c.__module__ == module.__name__]
        tables = [c.__name__ for c in own if "bit_length" in inspect.getsource(c)]
        assert tables == [], (module.__name__, tables)
    assert memory.SparseTable is cut_points.SparseTable
