"""``OMNY14x``: the ``.omny`` v2 container a model was read from.

:func:`onnx_ir_multidevice.load` keeps the container of a v2 file in
``model.meta[CONTAINER_META_KEY]``; these rules report what
:func:`~onnx_ir_multidevice.omny.container.container_findings` finds in it: bytes kept but not
understood (non-zero header flags, a reserved section, non-zero padding, bytes outside every
section) and a manifest that disagrees with the embedded model (its version, tensor names)
or with the embedded plan (allowed shard counts). A model read from a v1 file has no
container and gets none of these codes.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["check_container"]

import onnx_ir as ir

from onnx_ir_multidevice.checker.diagnostics import Diagnostic, make
from onnx_ir_multidevice.omny.container import (
    CONTAINER_META_KEY,
    Container,
    OmnyContainerError,
    container_findings,
)

# container_findings' codes -> ours.
_CODES = {
    "flags-nonzero": "OMNY140",
    "reserved-section": "OMNY141",
    "padding-nonzero": "OMNY142",
    "unreferenced-bytes": "OMNY142",
    "manifest-version": "OMNY143",
    "manifest-inputs": "OMNY144",
    "manifest-outputs": "OMNY144",
    "manifest-allowed-shards": "OMNY145",
    "manifest-configurations": "OMNY145",
}


def check_container(model: ir.Model, diagnostics: list[Diagnostic]) -> None:
    """Run the OMNY14x rules on the container ``model`` was read from, if any.

    Args:
        model: The model (not modified).
        diagnostics: Where the findings go; their location is the header field
            (``header.flags``) or the manifest path (``manifest.input.tensor_names``).
    """
    container = model.meta.get(CONTAINER_META_KEY)
    if not isinstance(container, Container):
        return
    try:
        findings = container_findings(container)
    except OmnyContainerError as error:  # the embedded model no longer parses
        diagnostics.append(make("OMNY101", str(error), "model"))
        return
    for finding in findings:
        diagnostics.append(
            make(_CODES[finding.code], f"{container.source}: {finding.message}", finding.location)
        )
