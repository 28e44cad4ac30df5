"""Read and write ``.omny`` metadata on an :class:`onnx_ir.Model`.

An ``.omny`` file is an ONNX model with two entries in ``ModelProto.metadata_props``:

``omnynet_version``
    The format version (``"1.0"``). It equals the ``version`` field of the JSON document.
``omnynet_metadata``
    The JSON document (:class:`~onnx_ir_multidevice.OmnyMetadata`).

:func:`write` replaces existing entries where they are, or appends version then JSON (the
reference exporter's order); every other property and its position is left alone. It does
not touch ``producer_name`` unless asked: see :func:`write`.
"""

from __future__ import annotations

__all__ = ["read", "write"]

import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyFormatError
from onnx_ir_multidevice._util import require_model
from onnx_ir_multidevice._version import __version__
from onnx_ir_multidevice.omny._schema import (
    OMNY_METADATA_KEY,
    OMNY_VERSION_KEY,
    OmnyMetadata,
)

#: ``producer_name`` written by :func:`write` with ``set_producer=True``.
PRODUCER_NAME = "onnx-ir-multidevice"


def _prop_path(key: str) -> str:
    return f"metadata_props[{key}]"


def read(model: ir.Model) -> OmnyMetadata | None:
    """Read the ``.omny`` metadata of a model.

    Args:
        model: The model.

    Returns:
        The parsed metadata, or ``None`` when the model carries neither ``omnynet_version``
        nor ``omnynet_metadata`` (a plain ONNX model).

    Raises:
        OmnyFormatError: Only one of the two properties is present, the JSON is malformed
            (``path`` is the JSON path of the offending element, or
            ``metadata_props[omnynet_metadata]`` when the document as a whole cannot be
            read), or the JSON ``version`` differs from ``omnynet_version``.
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
    """
    require_model(model, "omny.read")
    props = model.metadata_props
    version = props.get(OMNY_VERSION_KEY)
    text = props.get(OMNY_METADATA_KEY)
    if version is None and text is None:
        return None
    if text is None:
        raise OmnyFormatError(
            _prop_path(OMNY_METADATA_KEY),
            f"missing although {OMNY_VERSION_KEY!r} is set ({version!r}); the file is not "
            f"a complete .omny model: add the metadata JSON or remove {OMNY_VERSION_KEY!r}",
        )
    if version is None:
        raise OmnyFormatError(
            _prop_path(OMNY_VERSION_KEY),
            f"missing although {OMNY_METADATA_KEY!r} is set; add it with the format "
            "version (the JSON document's 'version')",
        )
    try:
        metadata = OmnyMetadata.from_json(text)
    except OmnyFormatError as error:
        if error.path:
            raise
        # The whole document is unreadable: say where it is and how to get a good one.
        raise OmnyFormatError(
            _prop_path(OMNY_METADATA_KEY),
            f"{error.reason}; the .omny metadata JSON is damaged: re-create it "
            "(`omny plan`, or the exporter that wrote it)",
        ) from error
    if metadata.version != version:
        raise OmnyFormatError(
            "version",
            f"the JSON says {metadata.version!r} but {OMNY_VERSION_KEY!r} says {version!r}; "
            "make them agree",
        )
    return metadata


def write(model: ir.Model, metadata: OmnyMetadata, *, set_producer: bool = False) -> None:
    """Store ``.omny`` metadata in a model's ``metadata_props``, in place.

    Existing ``omnynet_version`` / ``omnynet_metadata`` entries are replaced where they
    stand; otherwise they are appended in that order. Other properties keep their values
    and order.

    Args:
        model: The model to modify.
        metadata: The metadata to store. ``omnynet_version`` is set to ``metadata.version``.
        set_producer: Also set ``producer_name`` to ``"onnx-ir-multidevice"`` and
            ``producer_version`` to this package's version. Off by default so a round trip
            keeps the original producer. The reference exporter writes
            ``"omnynet-export"``; this package never claims to be it, since readers may use
            the producer to decide which exporter's quirks to expect.

    Raises:
        TypeError: ``model`` is not an :class:`onnx_ir.Model` or ``metadata`` not an
            :class:`~onnx_ir_multidevice.OmnyMetadata`.
    """
    require_model(model, "omny.write")
    if not isinstance(metadata, OmnyMetadata):
        raise TypeError(
            f"omny.write() takes an OmnyMetadata, not {type(metadata).__name__}; parse JSON "
            "with OmnyMetadata.from_json()"
        )
    props = model.metadata_props
    props[OMNY_VERSION_KEY] = metadata.version
    props[OMNY_METADATA_KEY] = metadata.to_json()
    if set_producer:
        model.producer_name = PRODUCER_NAME
        model.producer_version = __version__
