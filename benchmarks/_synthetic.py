"""Synthetic models for benchmarks: a long residual MLP chain built quickly with onnx-ir.

``make_chain_model(num_nodes)`` returns a valid, runnable model with exactly ``num_nodes``
nodes. Each block of four nodes is ``MatMul -> Add (bias) -> Relu -> Add (residual)`` with
its own ``W`` and ``b`` initializers; leftover nodes are ``Identity``. Optionally every node
gets an IR v11 pipeline stage (blocks split evenly over ``num_stages`` stages).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

__all__ = ["make_chain_model"]


def make_chain_model(
    num_nodes: int,
    *,
    hidden: int = 16,
    batch: int | str = "batch",
    num_stages: int | None = None,
    seed: int = 0,
) -> ir.Model:
    """Build a residual MLP chain with ``num_nodes`` nodes.

    Args:
        num_nodes: Number of nodes (at least 1).
        hidden: Width of the hidden state; each block holds ``hidden * (hidden + 1)`` floats.
        batch: The batch dimension of the input (an int or a symbolic name).
        num_stages: When given, the model is IR v11 with one device configuration
            ``"pipeline"`` of that many devices, and every node has a pipeline stage
            (contiguous, blocks split evenly).
        seed: Seed of the random weights.

    Returns:
        The model: input ``x`` ``[batch, hidden]`` float, output ``y`` of the same shape.
    """
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be at least 1, got {num_nodes}")
    rng = np.random.default_rng(seed)
    float_type = ir.TensorType(ir.DataType.FLOAT)
    shape = ir.Shape([batch, hidden])

    def value(name: str) -> ir.Value:
        return ir.Value(name=name, shape=shape, type=float_type)

    x = value("x")
    num_blocks, extra = divmod(num_nodes, 4)
    weights = (rng.standard_normal((num_blocks, hidden, hidden)) / hidden).astype(np.float32)
    biases = (rng.standard_normal((num_blocks, hidden)) * 0.1).astype(np.float32)
    nodes: list[ir.Node] = []
    initializers: list[ir.Value] = []
    h = x
    for i in range(num_blocks):
        w = ir.Value(name=f"blk{i}.W", shape=ir.Shape([hidden, hidden]), type=float_type)
        w.const_value = ir.tensor(weights[i], name=w.name)
        b = ir.Value(name=f"blk{i}.b", shape=ir.Shape([hidden]), type=float_type)
        b.const_value = ir.tensor(biases[i], name=b.name)
        initializers += (w, b)
        mm, add, act, res = (value(f"blk{i}.{s}") for s in ("mm", "add", "relu", "out"))
        nodes += (
            ir.Node("", "MatMul", [h, w], outputs=[mm], name=f"blk{i}/MatMul"),
            ir.Node("", "Add", [mm, b], outputs=[add], name=f"blk{i}/Add"),
            ir.Node("", "Relu", [add], outputs=[act], name=f"blk{i}/Relu"),
            ir.Node("", "Add", [act, h], outputs=[res], name=f"blk{i}/Residual"),
        )
        h = res
    for j in range(extra):
        out = value(f"tail{j}")
        nodes.append(ir.Node("", "Identity", [h], outputs=[out], name=f"tail{j}/Identity"))
        h = out
    h.name = "y"
    graph = ir.Graph(
        [x], [h], nodes=nodes, initializers=initializers, opset_imports={"": 18}, name="chain"
    )
    model = ir.Model(graph, ir_version=10, producer_name="benchmarks._synthetic")
    if num_stages is not None:
        model.ir_version = 11
        config = model.add_device_configuration("pipeline", num_devices=num_stages)
        for k, node in enumerate(nodes):
            node.set_pipeline_stage(config, k * num_stages // len(nodes))
    return model
