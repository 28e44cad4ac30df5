"""Pass that removes this package's multi-device annotations, and only those.

A configuration is ours when its name starts with ``omny/`` (see
:data:`~onnx_ir_multidevice.binding.naming.OMNY_CONFIGURATION_PREFIX`). The pass removes
those configurations from the model and every node entry that refers to them -- by object,
or by name for the unresolved placeholders onnx-ir creates when loading a dangling
reference -- in the main graph, in subgraph bodies and in functions, so no dangling reference
remains. Configurations of other tools and the ``.omny`` metadata are left alone. A model at
IR 11 or above left without any multi-device field gets the lowest IR version its content
needs (:func:`~onnx_ir_multidevice.graph.ir_versions.lowest_ir_version`: annotating raised it
to 11, which onnxruntime 1.20 to 1.22 refuse).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["StripAnnotationsPass", "strip_configurations"]

import operator
from collections.abc import Callable, Sequence

import onnx_ir as ir

from onnx_ir_multidevice.binding.naming import OMNY_CONFIGURATION_PREFIX
from onnx_ir_multidevice.graph.ir_versions import lowest_ir_version

_ENTRIES = operator.attrgetter("device_configurations")


def strip_configurations(
    model: ir.Model,
    predicate: Callable[[ir.ModelConfiguration], bool],
    *,
    nodes: Sequence[ir.Node] | None = None,
) -> bool:
    """Remove the configurations for which ``predicate`` is true, with their node entries.

    A node entry goes when its configuration is a removed object, or is a same-named
    placeholder that is not registered on the model.

    Args:
        model: The model, modified in place.
        predicate: Selects the configurations to remove.
        nodes: The nodes of ``model.graph`` (in any order), when already listed (for
            instance ``GraphIndex.graph_nodes``).

    Returns:
        Whether anything was removed.
    """
    removed = [c for c in model.device_configurations if predicate(c)]
    kept = tuple(c for c in model.device_configurations if not predicate(c))
    modified = len(kept) != len(model.device_configurations)
    model.device_configurations = kept
    removed_ids = {id(c) for c in removed}
    kept_ids = {id(c) for c in kept}

    def goes(entry: ir.NodeDeviceConfiguration) -> bool:
        configuration = entry.configuration
        if configuration is None:
            return False
        if id(configuration) in removed_ids:
            return True
        return id(configuration) not in kept_ids and predicate(configuration)

    if nodes is None:
        nodes = tuple(model.graph)
    # Entry tuples shared between nodes (as annotate() writes them) are looked at once.
    entries_list = list(map(_ENTRIES, nodes))
    distinct = dict(zip(map(id, entries_list), entries_list, strict=True))
    if not removed and not any(
        predicate(e.configuration)
        for entries in distinct.values()
        for e in entries
        if e.configuration is not None and id(e.configuration) not in kept_ids
    ):
        # Nothing removed and no dangling main-graph reference: skip the deep walk.
        return False
    nodes = list(model.graph.all_nodes())
    for function in model.functions.values():
        nodes.extend(function.all_nodes())
    for node in nodes:
        entries = node.device_configurations
        if entries and any(goes(e) for e in entries):
            node.device_configurations = tuple(e for e in entries if not goes(e))
            modified = True
    return modified


def _is_ours(configuration: ir.ModelConfiguration) -> bool:
    return configuration.name.startswith(OMNY_CONFIGURATION_PREFIX)


class StripAnnotationsPass(ir.passes.InPlacePass):
    """Remove the ``omny/`` configurations and their node annotations.

    Leaves the ``.omny`` metadata (the plan) and other configurations alone; annotating
    again restores what this removed. A model left with no multi-device field gets the
    lowest IR version its content needs (never a higher one).
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Strip ``model`` in place; ``modified`` when anything was removed or lowered."""
        modified = strip_configurations(model, _is_ours)
        lowest = lowest_ir_version(model)
        if lowest != model.ir_version:
            model.ir_version = lowest
            modified = True
        return ir.passes.PassResult(model, modified=modified)
