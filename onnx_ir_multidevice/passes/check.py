"""Pass that fails when the checker finds errors (a gate in a :class:`~onnx_ir.passes.PassManager`).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["CheckPass"]

import onnx_ir as ir

from onnx_ir_multidevice._errors import CheckError
from onnx_ir_multidevice.checker import core as _check
from onnx_ir_multidevice.checker.diagnostics import Severity


class CheckPass(ir.passes.InPlacePass):
    """Run :func:`~onnx_ir_multidevice.checker.core.check`; raise :class:`CheckError` on errors.

    Never modifies the model (``modified`` is always ``False``). Inside a
    :class:`~onnx_ir.passes.PassManager` the error arrives wrapped in a
    :class:`~onnx_ir.passes.PassError` whose ``__cause__`` is the :class:`CheckError`.
    """

    def __init__(
        self, *, relaxed_cuts: bool = False, strict: bool = False, warnings_as_errors: bool = False
    ) -> None:
        """Create the pass.

        Args:
            relaxed_cuts: Accept cuts that carry side activations (``OMNY320`` as warning).
            strict: Also fail on warnings: departures from the ``.omny`` spec that run
                correctly here (``check(..., strict=True)``).
            warnings_as_errors: The same as ``strict`` (its older name).

        .. versionchanged:: 0.2
            ``strict``.
        """
        super().__init__()
        self.relaxed_cuts = relaxed_cuts
        self.strict = strict or warnings_as_errors
        self.warnings_as_errors = self.strict

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Check ``model``; raise :class:`CheckError` on errors."""
        diagnostics = _check.check(model, relaxed_cuts=self.relaxed_cuts, strict=self.strict)
        problems = [d for d in diagnostics if d.severity is Severity.ERROR]
        if problems:
            raise CheckError(problems)
        return ir.passes.PassResult(model, modified=False)
