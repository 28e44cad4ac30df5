"""Whether a model fits a container: protobuf's 2 GiB limit and no external data."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import onnx
import onnx_ir as ir

from onnx_ir_multidevice.omny.container._layout import MAX_MODEL_SIZE

# --------------------------------------------------------------------------- size guard


def model_fits_container(n_bytes: int) -> bool:
    """Whether a serialized ``ModelProto`` of ``n_bytes`` fits one container.

    Args:
        n_bytes: Size of the serialized model (``ModelProto.ByteSize()``).

    Returns:
        ``True`` below 2 GiB (protobuf's limit; a container has no external data).
    """
    return 0 <= n_bytes <= MAX_MODEL_SIZE


def _iter_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        yield from _iter_attribute_tensors(node.attribute)


def _iter_attribute_tensors(
    attributes: Sequence[onnx.AttributeProto],
) -> Iterator[onnx.TensorProto]:
    for attribute in attributes:
        if attribute.HasField("t"):
            yield attribute.t
        yield from attribute.tensors
        if attribute.HasField("sparse_tensor"):
            yield attribute.sparse_tensor.values
            yield attribute.sparse_tensor.indices
        for sparse in attribute.sparse_tensors:
            yield sparse.values
            yield sparse.indices
        if attribute.HasField("g"):
            yield from _iter_tensors(attribute.g)
        for graph in attribute.graphs:
            yield from _iter_tensors(graph)


def uses_external_data(model: onnx.ModelProto | ir.Model) -> bool:
    """Whether any tensor of a model is stored in an external data file.

    Args:
        model: A model proto (initializers, sparse initializers and tensor attributes of
            every graph, subgraph and function are looked at) or an onnx-ir model (the
            initializers of every graph).

    Returns:
        ``True`` if one is; such a model cannot go into a container as it is.
    """
    if isinstance(model, ir.Model):
        return any(
            isinstance(value.const_value, ir.ExternalTensor)
            for graph in model.graphs()
            for value in graph.initializers.values()
        )
    tensors = [*_iter_tensors(model.graph)]
    for function in model.functions:
        for node in function.node:
            tensors.extend(_iter_attribute_tensors(node.attribute))
    return any(tensor.data_location == onnx.TensorProto.EXTERNAL for tensor in tensors)


def unfit_model_reason(*, n_bytes: int | None = None, external_data: bool = False) -> str | None:
    """Say why a model cannot be written as one container, before anything is written.

    Args:
        n_bytes: Size of the serialized model, if known (``ModelProto.ByteSize()``).
        external_data: Whether the model keeps tensors in external files
            (:func:`uses_external_data`).

    Returns:
        ``None`` when it fits, else a message to show the user (what and what to do).
    """
    if external_data:
        return (
            "the model keeps tensors in external data files; an .omny v2 container holds one "
            "self-contained ModelProto: write a v1 .omny (ONNX with external data) instead"
        )
    if n_bytes is not None and not model_fits_container(n_bytes):
        return (
            f"the serialized model is {n_bytes} bytes, 2 GiB or more; an .omny v2 container "
            "holds one ModelProto, which protobuf limits to 2 GiB: write a v1 .omny with "
            "external data instead"
        )
    return None
