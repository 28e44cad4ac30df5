"""Replace a value without losing the sharding specs bound to it.

onnx-ir binds a :class:`~onnx_ir.ShardingSpec` to a :class:`~onnx_ir.Value` object. When
:meth:`onnx_ir.Value.replace_all_uses_with` (or :meth:`onnx_ir.Node.replace_input_with`)
swaps a node's input for another value, onnx-ir *drops* the consumer's specs of the old value
instead of moving them, so the placement of the tensor is silently lost (the same happens in
``IdentityEliminationPass`` and the onnxscript optimizer). :func:`replace_all_uses_preserving`
does the replacement and re-attaches each dropped spec to the new value, on the same node and
under the same configuration.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["move_sharding", "replace_all_uses_preserving"]

import dataclasses

import onnx_ir as ir


def _specs_by_node(
    value: ir.Value,
) -> dict[ir.Node, list[tuple[ir.ModelConfiguration | None, ir.ShardingSpec]]]:
    """The specs of ``value`` held by each of its consumers, per configuration."""
    found: dict[ir.Node, list[tuple[ir.ModelConfiguration | None, ir.ShardingSpec]]] = {}
    for node in dict.fromkeys(value.consumers()):
        for entry in node.device_configurations:
            for spec in entry.sharding_specs:
                if spec.value is value:
                    found.setdefault(node, []).append((entry.configuration, spec))
    return found


def move_sharding(
    node: ir.Node,
    configuration: ir.ModelConfiguration | None,
    spec: ir.ShardingSpec,
    new: ir.Value,
) -> bool:
    """Attach a copy of ``spec`` bound to ``new`` to ``node`` under ``configuration``.

    The node's entry for ``configuration`` gets the copy unless it already shards ``new``;
    a node without an entry for ``configuration`` gets a new one (no pipeline stage).

    Args:
        node: The node that should hold the spec; ``new`` must be one of its inputs/outputs.
        configuration: The configuration the spec belongs to.
        spec: The spec to copy (its ``value`` is replaced by ``new``).
        new: The value the copy is bound to.

    Returns:
        Whether the node changed.
    """
    moved = dataclasses.replace(spec, value=new)
    entries = node.device_configurations
    for i, entry in enumerate(entries):
        if entry.configuration is not configuration:
            continue
        if any(s.value is new for s in entry.sharding_specs):
            return False
        updated = dataclasses.replace(entry, sharding_specs=(*entry.sharding_specs, moved))
        node.device_configurations = (*entries[:i], updated, *entries[i + 1 :])
        return True
    node.device_configurations = (
        *entries,
        ir.NodeDeviceConfiguration(configuration=configuration, sharding_specs=(moved,)),
    )
    return True


def replace_all_uses_preserving(
    old: ir.Value, new: ir.Value, *, replace_graph_outputs: bool = False
) -> int:
    """Replace every use of ``old`` by ``new``, keeping the consumers' sharding specs.

    Does what :meth:`onnx_ir.Value.replace_all_uses_with` does, then gives every consumer
    that had a spec of ``old`` the same spec bound to ``new`` (same configuration, devices,
    sharded dims and group map). Specs that a consumer already has for ``new`` win. The
    producer's specs of ``old`` stay on the producer (``old`` is still its output).

    Args:
        old: The value to replace.
        new: The replacement.
        replace_graph_outputs: Also replace ``old`` where it is a graph output (see
            :meth:`onnx_ir.Value.replace_all_uses_with`).

    Returns:
        The number of specs re-attached.

    Raises:
        ValueError: ``old`` is a graph output and ``replace_graph_outputs`` is false.

    .. versionadded:: 0.1
    """
    pending = _specs_by_node(old)
    old.replace_all_uses_with(new, replace_graph_outputs=replace_graph_outputs)
    moved = 0
    for node, specs in pending.items():
        for configuration, spec in specs:
            still_there = any(s.value is old for s in node.sharding_of(old))
            if still_there:
                continue  # old is still an input/output of the node: onnx-ir kept it
            moved += move_sharding(node, configuration, spec, new)
    return moved
