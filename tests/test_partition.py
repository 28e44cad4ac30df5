"""Optimality of the partitioner against enumeration of every cut combination."""

from __future__ import annotations

import itertools
import math

import numpy as np
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cut_points import random_graphs

from onnx_ir_multidevice._errors import PlanError
from onnx_ir_multidevice.analysis.cut_points import analyse_cut_points
from onnx_ir_multidevice.planner.memory import MemoryModel, usable_bytes
from onnx_ir_multidevice.planner.partition import DEFAULT_FLOPS_PER_BYTE, partition
from onnx_ir_multidevice.testing import zoo


def brute_force(
    memory: MemoryModel,
    n: int,
    capacities=None,
    max_stage=None,
    balance="memory",
    flops_per_byte=DEFAULT_FLOPS_PER_BYTE,
):
    """Best (bottleneck, max flops, transfer) over every choice of n - 1 usable boundaries.

    With ``balance="compute"``: the best (max flops, bottleneck, transfer), in that order;
    with ``"speed"``: (slowest step, bottleneck, transfer), a step being a stage's FLOPs or a
    link's bytes times ``flops_per_byte`` (rounded up).
    """
    chain = memory.analysis.chain
    # Usable: every chain cut whose node has one output (.omny can name it), whatever is known
    # of its size (issue 9: the choice of cuts never depends on a dim being bound).
    usable = [b for b, cut in enumerate(chain, start=1) if len(cut.node.outputs) == 1]
    best = None
    for combo in itertools.combinations(usable, n - 1):
        ends = [0, *combo, memory.num_segments]
        stages = list(itertools.pairwise(ends))
        totals = [int(memory.total_bytes([i], [j])[0]) for i, j in stages]
        if capacities is not None and any(
            t > usable_bytes(c, memory.headroom) for t, c in zip(totals, capacities, strict=True)
        ):
            continue
        if max_stage is not None and max(totals) > max_stage:
            continue
        flops = max(int(memory.flops([i], [j])[0]) for i, j in stages)
        transfer = sum(chain[b - 1].bytes or 0 for b in combo)
        key = (max(totals), flops, transfer)
        if balance == "compute":
            key = (flops, max(totals), transfer)
        elif balance == "speed":
            links = [math.ceil((chain[b - 1].bytes or 0) * flops_per_byte) for b in combo]
            key = (max([flops, *links]), max(totals), transfer)
        if best is None or key < best:
            best = key
    return best


def objective(found, balance="memory"):
    if balance == "compute":
        return (max(found.flops), found.bottleneck_bytes, found.transfer_bytes)
    if balance == "speed":
        return (found.bound.time_flops, found.bottleneck_bytes, found.transfer_bytes)
    return (found.bottleneck_bytes, max(found.flops), found.transfer_bytes)


@pytest.mark.parametrize(
    ("model", "relaxed"),
    [
        (zoo.resnet(depth_blocks=3), False),
        (zoo.resnet(depth_blocks=3), True),
        (zoo.bert(layers=2), True),
        (zoo.gpt(layers=2), True),
        (zoo.vit(layers=2), False),
        (zoo.control_flow(), True),
    ],
    ids=["resnet", "resnet-relaxed", "bert-relaxed", "gpt-tied-relaxed", "vit", "control-flow"],
)
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("balance", ["speed", "memory"])
def test_zoo_partitions_are_optimal(model, relaxed, n, balance):
    memory = MemoryModel(analyse_cut_points(model.graph, relaxed=relaxed, side_limit_bytes=8192))
    expected = brute_force(memory, n, balance=balance)
    if expected is None:
        with pytest.raises(PlanError):
            partition(memory, n, balance=balance)
        return
    found = partition(memory, n, balance=balance)
    assert found.num_stages == n and len(found.cuts) == n - 1
    assert objective(found, balance) == expected
    assert [m.total_bytes for m in found.memory] == [
        int(memory.total_bytes([i], [j])[0]) for i, j in found.segments
    ]


@settings(max_examples=80, deadline=None)
@given(random_graphs(), st.integers(2, 4), st.floats(0.3, 1.5), st.booleans())
def test_random_partitions_with_capacities_are_optimal(graph, n, scale, uneven):
    memory = MemoryModel(analyse_cut_points(graph, relaxed=True, side_limit_bytes=64))
    whole = int(memory.total_bytes([0], [memory.num_segments])[0])
    base = max(1, int(whole * scale / n / (1 - memory.headroom)))
    capacities = [base * (3 if uneven and k == 0 else 1) for k in range(n)]
    expected = brute_force(memory, n, capacities)
    if expected is None:
        with pytest.raises(PlanError):
            partition(memory, n, capacities=capacities, balance="memory")
        return
    found = partition(memory, n, capacities=capacities, balance="memory")
    assert objective(found) == expected
    assert all(m.required_bytes <= c for m, c in zip(found.memory, capacities, strict=True))


def test_heterogeneous_devices_put_big_stages_on_big_devices():
    memory = MemoryModel(analyse_cut_points(zoo.resnet(depth_blocks=6).graph))
    whole = memory.whole().required_bytes
    capacities = [whole * 3 // 4, whole // 2, whole // 2]
    found = partition(memory, 3, capacities=capacities, balance="memory")
    assert found.memory[0].total_bytes > found.memory[1].total_bytes
    assert all(m.required_bytes <= c for m, c in zip(found.memory, capacities, strict=True))
    assert objective(found) == brute_force(memory, 3, capacities)


def test_errors_name_the_stage_device_and_overflow():
    memory = MemoryModel(analyse_cut_points(zoo.resnet(depth_blocks=2).graph))
    with pytest.raises(PlanError, match=r"at most \d+ stages; 40 were asked for"):
        partition(memory, 40)
    tiny = memory.whole().required_bytes // 10
    with pytest.raises(PlanError, match=r"stage 0 needs .* but device 0 has .*over") as info:
        partition(memory, 2, capacities=[tiny, tiny])
    assert "stage 1" in str(info.value)
    with pytest.raises(PlanError, match="shard limit"):
        partition(memory, 2, max_stage_bytes=1000)
    with pytest.raises(PlanError, match="one capacity per stage"):
        partition(memory, 2, capacities=[10**9])
    with pytest.raises(PlanError, match="at least 1"):
        partition(memory, 0)


def test_one_stage_is_the_whole_model():
    memory = MemoryModel(analyse_cut_points(zoo.vit(layers=1).graph))
    found = partition(memory, 1)
    assert found.cuts == () and found.memory[0] == memory.whole()


@settings(max_examples=60, deadline=None)
@given(random_graphs(), st.integers(2, 4), st.floats(0.3, 1.5), st.booleans())
def test_random_compute_balanced_partitions_are_optimal(graph, n, scale, capped):
    """``balance="compute"``: least largest-stage FLOPs within the devices, by enumeration."""
    memory = MemoryModel(analyse_cut_points(graph, relaxed=True, side_limit_bytes=64))
    whole = int(memory.total_bytes([0], [memory.num_segments])[0])
    capacities = [max(1, int(whole * scale / n / (1 - memory.headroom)))] * n if capped else None
    expected = brute_force(memory, n, capacities, balance="compute")
    if expected is None:
        with pytest.raises(PlanError):
            partition(memory, n, capacities=capacities, balance="compute")
        return
    found = partition(memory, n, capacities=capacities, balance="compute")
    assert objective(found, "compute") == expected
    assert max(found.flops) <= max(partition(memory, n, capacities=capacities).flops)


@pytest.mark.parametrize("n", [2, 3])
def test_zoo_compute_balanced_partitions_are_optimal(n):
    memory = MemoryModel(analyse_cut_points(zoo.gpt(layers=3).graph, relaxed=True))
    found = partition(memory, n, balance="compute")
    assert objective(found, "compute") == brute_force(memory, n, balance="compute")
    with pytest.raises(PlanError, match="balance must be one of 'speed', 'memory', 'compute'"):
        partition(memory, n, balance="fast")
    with pytest.raises(PlanError, match="flops_per_byte must be a number"):
        partition(memory, n, flops_per_byte=-1)


def layer_chain(widths: list[int]) -> ir.Graph:
    """A chain of MatMul + Relu layers, ``widths[k]`` features after layer ``k``."""
    rng = np.random.default_rng(0)
    f32 = ir.TensorType(ir.DataType.FLOAT)
    x = ir.Value(name="x", type=f32, shape=ir.Shape([1, widths[0]]))
    nodes, inits, current = [], [], x
    for k, (a, b) in enumerate(itertools.pairwise(widths)):
        w = ir.Value(name=f"w{k}", const_value=ir.tensor(rng.random((a, b), dtype=np.float32)))
        inits.append(w)
        for op in ("MatMul", "Relu"):
            out = ir.Value(name=f"{op}{k}", type=f32, shape=ir.Shape([1, b]))
            inputs = [current, w] if op == "MatMul" else [current]
            nodes.append(ir.Node("", op, inputs, outputs=[out], name=f"n{op}{k}"))
            current = out
    return ir.Graph([x], [current], nodes=nodes, initializers=inits, opset_imports={"": 18})


@st.composite
def layer_chains(draw) -> ir.Graph:
    """Chains of random widths: cuts that send 4 to 1024 bytes and stages of 2 to 2**17
    FLOPs, so that links and stages both bind at the prices tried."""
    return layer_chain(draw(st.lists(st.sampled_from([1, 4, 16, 64, 256]), min_size=3, max_size=9)))


@pytest.mark.parametrize("price", [0.3, 8.0, 64.0])
@pytest.mark.parametrize(
    ("widths", "n"),
    [([64, 1, 16, 256, 16, 1, 256], 3), ([16, 256, 16, 256, 16, 256, 4, 64], 2)],
)
def test_speed_between_link_prices_is_optimal(widths, n, price):
    """A compute bound between two link prices: the cheap links alone give the fastest plan
    (found wrong by enumeration when the search stopped at link prices only)."""
    memory = MemoryModel(analyse_cut_points(layer_chain(widths)))
    found = partition(memory, n, flops_per_byte=price)
    assert objective(found, "speed") == brute_force(
        memory, n, balance="speed", flops_per_byte=price
    )


@settings(max_examples=80, deadline=None)
@given(
    st.one_of(random_graphs(), layer_chains()),
    st.integers(2, 4),
    st.floats(0.3, 1.5),
    st.sampled_from([None, "even", "uneven", "limit"]),
    st.sampled_from([0.0, 0.05, 0.5, 2.0, 8.0, 64.0]),
)
def test_random_speed_partitions_are_optimal(graph, n, scale, devices, flops_per_byte):
    """The default objective: least slowest step (stage FLOPs or link cost) within memory.

    Property against enumeration of every cut combination, with and without device
    capacities or a shard limit, and prices of a byte from free to dominant (the random
    graphs send 32 bytes per cut and compute tens of FLOPs per node, so transfers bind).
    """
    memory = MemoryModel(analyse_cut_points(graph, relaxed=True, side_limit_bytes=64))
    whole = int(memory.total_bytes([0], [memory.num_segments])[0])
    base = max(1, int(whole * scale / n / (1 - memory.headroom)))
    capacities = max_stage = None
    if devices in ("even", "uneven"):
        capacities = [base * (3 if devices == "uneven" and k == 0 else 1) for k in range(n)]
    elif devices == "limit":
        max_stage = usable_bytes(base, memory.headroom)
    expected = brute_force(
        memory, n, capacities, max_stage, balance="speed", flops_per_byte=flops_per_byte
    )
    options = {"capacities": capacities, "max_stage_bytes": max_stage}
    if expected is None:
        with pytest.raises(PlanError):
            partition(memory, n, flops_per_byte=flops_per_byte, **options)
        return
    found = partition(memory, n, flops_per_byte=flops_per_byte, **options)
    assert objective(found, "speed") == expected
    if capacities is not None:
        assert all(m.required_bytes <= c for m, c in zip(found.memory, capacities, strict=True))
    if max_stage is not None:
        assert found.bottleneck_bytes <= max_stage
    # What bound it: the slowest step is the one named, and memory only where the devices'
    # limits cost speed (an unconstrained plan is faster).
    bound = found.bound
    links = [math.ceil((c.bytes or 0) * flops_per_byte) for c in found.cuts]
    assert bound.time_flops == max([*found.flops, *links])
    if bound.cut is not None:
        assert links[bound.cut] == bound.time_flops > max(found.flops)
    else:
        assert found.flops[bound.stage] == bound.time_flops
    free = brute_force(memory, n, balance="speed", flops_per_byte=flops_per_byte)
    assert (bound.kind == "memory") == (free[0] < expected[0])
    if capacities is None:  # a shard limit binds every device alike: `free` covers it
        return
    for d in bound.devices:  # lifting device d alone allows a faster plan
        lifted = [*capacities[:d], 10**15, *capacities[d + 1 :]]
        assert (
            brute_force(memory, n, lifted, balance="speed", flops_per_byte=flops_per_byte)[0]
            < expected[0]
        )
