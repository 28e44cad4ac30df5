"""The checker: every rule of the ``.omny`` spec, the IR v11 device fields, and the pipeline.

:func:`check` returns a list of :class:`~onnx_ir_multidevice.checker.diagnostics.Diagnostic`
(errors first) and never raises because of what a model contains. This module reads the
input and runs the rules, which live by family in
:mod:`~onnx_ir_multidevice.checker.format_rules`,
:mod:`~onnx_ir_multidevice.checker.device_rules` and
:mod:`~onnx_ir_multidevice.checker.pipeline_rules`:

* ``OMNY1xx`` -- the ``.omny`` format: valid ONNX, ``omnynet_version`` and
  ``omnynet_metadata`` present and parseable, cut points that resolve to a main-graph node
  and to its single output, with a shape fully defined except the batch, not inside control
  flow; positive memory numbers; at least one configuration, each with ``num_shards - 1``
  defined cut points, ``num_shards`` memory entries within ``max_shard_size_mb``, and a shard
  count consistent with ``allowed_shards`` / ``min_shards`` / ``max_shards``. Cut points are
  resolved by :func:`~onnx_ir_multidevice.binding.bind.bind`, as ``split`` and ``annotate``
  resolve them. ``OMNY14x``: the ``.omny`` v2 container a model was read from
  (:mod:`~onnx_ir_multidevice.checker.container_rules`).
* ``OMNY2xx`` -- the IR v11 fields: what onnx-ir's private
  ``_check_device_configurations`` checks, plus duplicate or empty names, ``device_names``
  length, ``num_devices < 1``, two node entries for one configuration, device-group keys,
  shard count versus devices, stages outside ``[0, 2**31)``, and multi-device fields on a
  model whose ``ir_version`` is below 11 (they would be lost on save).
* ``OMNY3xx`` -- the pipeline: no edge from a later stage to an earlier one (outer-scope reads
  of subgraph bodies included), stages contiguous from 0 and within the devices, annotated
  stages that agree with the ``.omny`` plan, and the tensors crossing each boundary (an error
  when a strict cut carries more than one activation, or when a stage's results are read by
  nobody).

Every rule runs in time linear in the size of the model (dictionary indexes, one walk per
configuration).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["CheckReport", "check", "check_device_configurations"]

import dataclasses
import os
from collections.abc import Mapping

import onnx
import onnx_ir as ir

from onnx_ir_multidevice._errors import (
    ExternalDataError,
    ExternalDataProblem,
    OmnyFormatError,
    OmnyIOError,
)
from onnx_ir_multidevice._proto import files as _io
from onnx_ir_multidevice._proto.convert import from_proto
from onnx_ir_multidevice._proto.external import DATA_RECORD_KEY
from onnx_ir_multidevice._proto.unrepresentable import find_unrepresentable
from onnx_ir_multidevice._regular_files import require_regular
from onnx_ir_multidevice._util import gc_paused
from onnx_ir_multidevice.binding.bind import BoundPlan
from onnx_ir_multidevice.checker.container_rules import check_container
from onnx_ir_multidevice.checker.device_rules import check_device_configurations, run_device_rules
from onnx_ir_multidevice.checker.diagnostics import (
    DEFAULT_MAX_PER_CODE,
    UNREADABLE_CODES,
    Diagnostic,
    DiagnosticCollector,
    Severity,
    make,
    omitted_summary,
)
from onnx_ir_multidevice.checker.dims_rules import check_planning_dims
from onnx_ir_multidevice.checker.format_rules import check_format, check_io_sizes
from onnx_ir_multidevice.checker.pipeline_rules import check_pipeline
from onnx_ir_multidevice.checker.tensor_parallel_rules import check_tensor_parallel
from onnx_ir_multidevice.graph.index import AnalysisError, GraphIndex
from onnx_ir_multidevice.omny.container import (
    CONTAINER_META_KEY,
    Container,
    OmnyContainerError,
)

ModelLike = ir.Model | onnx.ModelProto | str | os.PathLike


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """What :func:`run_check` found: the diagnostics, and the model when it could be read."""

    diagnostics: tuple[Diagnostic, ...]
    """Errors first, then warnings, then infos; in rule order within a severity."""

    model: ir.Model | None
    """The checked model, or ``None`` when the input could not be read as ONNX."""

    plan: BoundPlan | None = None
    """The model's ``.omny`` plan bound to it (what the cut-point rules judged), or ``None``
    when it has no readable plan."""

    omitted: tuple[Diagnostic, ...] = ()
    """One diagnostic per code and severity of which more than ``max_per_code`` were found:
    it stands for those left out of :attr:`diagnostics` (its message says how many), and is
    the last of its severity in :attr:`diagnostics`."""

    omitted_counts: Mapping[tuple[str, Severity], int] = dataclasses.field(default_factory=dict)
    """How many diagnostics of each code and severity were left out (``max_per_code``)."""

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        """The diagnostics of severity error."""
        return tuple(d for d in self.diagnostics if d.severity is Severity.ERROR)

    @property
    def unreadable(self) -> bool:
        """Whether the other commands cannot read the model or its plan.

        True when it is not ONNX, or a diagnostic has one of
        :data:`~onnx_ir_multidevice.checker.diagnostics.UNREADABLE_CODES` (``omny check``
        exits with status 2, as they do).
        """
        return self.model is None or any(d.code in UNREADABLE_CODES for d in self.diagnostics)

    def counts(self) -> dict[str, int]:
        """The number of diagnostics found, by severity.

        Keys ``"error"``, ``"warning"``, ``"info"``; those left out by ``max_per_code`` count,
        the diagnostics that stand for them do not.
        """
        counts = dict.fromkeys(("error", "warning", "info"), 0)
        omitted = set(self.omitted)
        for diagnostic in self.diagnostics:
            if diagnostic not in omitted:
                counts[diagnostic.severity.value] += 1
        for (_, severity), count in self.omitted_counts.items():
            counts[severity.value] += count
        return counts


def check(
    model: ModelLike,
    *,
    relaxed_cuts: bool = False,
    strict: bool = False,
    onnx_checker: bool | None = None,
    index: GraphIndex | None = None,
    max_per_code: int | None = DEFAULT_MAX_PER_CODE,
    verify_data: bool = False,
) -> list[Diagnostic]:
    """Check a model: its ``.omny`` plan, its IR v11 device fields and its pipeline stages.

    Never raises because of what the model contains; every problem is a diagnostic. An
    error means the plan cannot run correctly; a warning, that it runs here but departs from
    the ``.omny`` spec or is probably not what was meant (see ``docs/diagnostics.md``).

    Args:
        model: An :class:`onnx_ir.Model` (not modified), an :class:`onnx.ModelProto` (not
            modified), or the path of a ``.onnx`` / ``.omny`` file.
        relaxed_cuts: Accept cut points that carry side activations besides the cut tensor
            (relaxed cuts): ``OMNY320`` becomes a warning instead of an error.
        strict: Turn every warning into an error, for files shipped to a runtime that
            allocates fixed buffers from the spec (``omny check --strict``).
        onnx_checker: Run :func:`onnx.checker.check_model` (``OMNY101``). By default it
            runs for a path or a proto, and not for an :class:`onnx_ir.Model` (that would
            need a full serialisation).
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of the model's main
            graph (``GraphIndex.for_model(model)``), shared with other analyses of the same
            model (:func:`~onnx_ir_multidevice.passes.api.annotate` takes one too). Ignored
            when it was built for another graph (a path or proto gives a new model).
        max_per_code: List at most this many diagnostics of one code and severity; the rest
            are counted, and one more diagnostic of that code says how many were left out.
            ``None`` lists every one.
        verify_data: For a path, read every data file the model's record names and compare
            its CRC-32 with the record, even when its size, modification time and inode match
            (``load(path, verify_data=True)``; ``omny check --verify-data``): a mismatch is
            ``OMNY109``. Ignored for a model or a proto (no data file is read).

    Returns:
        The diagnostics, errors first, then warnings, then infos. No error means valid.

    Raises:
        OmnyIOError: ``model`` is a path that does not exist or cannot be read.
        TypeError: ``model`` is of another type, or ``max_per_code`` is not an integer.
        ValueError: ``max_per_code`` is negative.

    .. versionadded:: 0.1
    .. versionchanged:: 0.2
        ``strict``, ``max_per_code`` and ``verify_data``.
    """
    report = run_check(
        model,
        relaxed_cuts=relaxed_cuts,
        strict=strict,
        onnx_checker=onnx_checker,
        index=index,
        max_per_code=max_per_code,
        verify_data=verify_data,
    )
    return list(report.diagnostics)


def run_check(
    model: ModelLike,
    *,
    relaxed_cuts: bool = False,
    strict: bool = False,
    onnx_checker: bool | None = None,
    index: GraphIndex | None = None,
    max_per_code: int | None = DEFAULT_MAX_PER_CODE,
    verify_data: bool = False,
) -> CheckReport:
    """Like :func:`check`, but also return the model that was checked (see :class:`CheckReport`).

    Raises:
        OmnyIOError: ``model`` is a path that does not exist or cannot be read.
        TypeError: ``model`` is of another type, or ``max_per_code`` is not an integer.
        ValueError: ``max_per_code`` is negative.
    """
    diagnostics = DiagnosticCollector(max_per_code)
    plan: BoundPlan | None = None
    ir_model = _as_model(model, onnx_checker, diagnostics, verify_data=verify_data)
    if ir_model is not None:
        with gc_paused():
            if index is not None and index.graph is not ir_model.graph:
                index = None
            if index is None:
                try:
                    index = GraphIndex.for_model(ir_model)
                except AnalysisError:  # a cycle: reported by the checker (OMNY101)
                    index = None
            found, entries_list = run_device_rules(ir_model, index)
            diagnostics.extend(found)
            plan, configurations = check_format(ir_model, diagnostics, index)
            check_planning_dims(ir_model, diagnostics, index)
            check_container(ir_model, diagnostics)
            check_io_sizes(ir_model, diagnostics)
            try:
                check_pipeline(
                    ir_model,
                    configurations,
                    diagnostics,
                    relaxed_cuts=relaxed_cuts,
                    index=index,
                    entries_list=entries_list,
                )
                check_tensor_parallel(ir_model, configurations, diagnostics)
            except AnalysisError as error:  # a cycle: the graph is not valid ONNX
                diagnostics.append(
                    make("OMNY101", f"the graph cannot be analysed: {error}", "model")
                )
    omitted_counts = diagnostics.omitted()
    shown = diagnostics.limit or 0
    omitted = [
        omitted_summary(code, severity, count, shown)
        for (code, severity), count in omitted_counts.items()
    ]
    result = [*diagnostics, *omitted]
    if strict:
        result = [_as_error(d) for d in result]
        omitted = [_as_error(d) for d in omitted]
        omitted_counts = _counts_as_errors(omitted_counts)
    result.sort(key=Diagnostic.sort_key)
    return CheckReport(tuple(result), ir_model, plan, tuple(omitted), omitted_counts)


def _as_error(diagnostic: Diagnostic) -> Diagnostic:
    """``diagnostic`` with severity error if it was a warning (``strict=True``)."""
    if diagnostic.severity is Severity.WARNING:
        return dataclasses.replace(diagnostic, severity=Severity.ERROR)
    return diagnostic


def _counts_as_errors(
    counts: Mapping[tuple[str, Severity], int],
) -> dict[tuple[str, Severity], int]:
    result: dict[tuple[str, Severity], int] = {}
    for (code, severity), count in counts.items():
        key = (code, Severity.ERROR if severity is Severity.WARNING else severity)
        result[key] = result.get(key, 0) + count
    return result


# ---------------------------------------------------------------------------------------------
# Input: model, proto or path.
# ---------------------------------------------------------------------------------------------


def _onnx_checker_diagnostic(error: Exception, location: str = "model") -> Diagnostic:
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return make(
        "OMNY101",
        f"onnx.checker rejects the model: {first_line}. Fix the graph (or re-export it) "
        "before sharding it.",
        location,
    )


def _as_model(
    model: ModelLike,
    onnx_checker: bool | None,
    diagnostics: list[Diagnostic],
    *,
    verify_data: bool = False,
) -> ir.Model | None:
    if isinstance(model, ir.Model):
        if onnx_checker:
            try:
                onnx.checker.check_model(ir.to_proto(model))
            except Exception as error:  # the checker raises several types
                diagnostics.append(_onnx_checker_diagnostic(error))
        return model
    if isinstance(model, onnx.ModelProto):
        if onnx_checker is not False:
            try:
                onnx.checker.check_model(model)
            except Exception as error:
                diagnostics.append(_onnx_checker_diagnostic(error))
        return _from_proto(model, diagnostics)
    if isinstance(model, (str, os.PathLike)):
        return _load_path(os.fspath(model), onnx_checker, diagnostics, verify_data=verify_data)
    raise TypeError(
        f"check() takes an onnx_ir.Model, an onnx.ModelProto or a path, not {type(model).__name__}"
    )


#: Proto fields that onnx-ir drops, which :func:`~onnx_ir_multidevice.load` refuses.
_DROPPED_FIELDS = {
    "training_info": "training information (TrainingInfoProto)",
    "graph.sparse_initializer": "sparse initializers",
}


def _refused_content(error: OmnyFormatError) -> Diagnostic:
    """``OMNY106``: what :func:`~onnx_ir_multidevice.load` refused in a proto.

    The other commands exit 2 on such a file (``load()`` raises), so ``omny check`` does too
    (:data:`~onnx_ir_multidevice.checker.diagnostics.UNREADABLE_CODES`). The rest of the
    model is still checked, as onnx-ir reads it: an empty ``configuration_id`` or
    ``tensor_name`` is then also ``OMNY201`` / ``OMNY205``.
    """
    if error.path in _DROPPED_FIELDS:
        reason = (
            f"the model holds {_DROPPED_FIELDS[error.path]}, which onnx-ir does not keep: this "
            "package refuses to load it (to annotate, split or run it) rather than drop them "
            "silently; remove them or convert the model first"
        )
    else:
        reason = f"this package refuses to load the model: {error.reason}"
    return make("OMNY106", reason, error.path or "model")


def _from_proto(proto: onnx.ModelProto, diagnostics: list[Diagnostic]) -> ir.Model | None:
    """Convert ``proto`` as :func:`~onnx_ir_multidevice.load` does.

    What that refuses is reported, and the proto converted leniently (with onnx-ir's own
    reader) to check the rest.
    """
    try:
        return from_proto(proto)
    except OmnyFormatError as error:
        diagnostics.append(_refused_content(error))
    except Exception:  # onnx-ir's own reader, below, says what is wrong
        pass
    try:
        return ir.from_proto(proto)
    except Exception as error:  # onnx-ir raises several types on malformed protos
        if not find_unrepresentable(proto):  # else valid ONNX, and OMNY106 said what and why
            diagnostics.append(make("OMNY101", f"onnx-ir cannot read the model: {error}", "model"))
        return None


def _external_data_diagnostic(problem: ExternalDataProblem) -> Diagnostic:
    where = f"metadata_props[{DATA_RECORD_KEY}]" if problem.code == "OMNY109" else None
    advice = (
        "save the model again with its own data file (onnx_ir_multidevice.save)"
        if problem.code == "OMNY109"
        else "keep the data as a regular file inside the model's folder and re-save the model"
    )
    return make(problem.code, f"{problem}; {advice}", where or f"value:{problem.tensor}")


def _load_path(
    path: str,
    onnx_checker: bool | None,
    diagnostics: list[Diagnostic],
    *,
    verify_data: bool = False,
) -> ir.Model | None:
    if os.path.isdir(path):
        raise OmnyIOError(
            f"{path}: is a directory, not a model file; give the path of a .onnx or .omny "
            "model file"
        )
    if not os.path.exists(path):
        raise OmnyIOError(f"{path}: no such file; give the path of a .onnx or .omny model")
    require_regular(path)  # a FIFO or a device: refused before anything is read
    model: ir.Model | None
    try:
        model = _io.load(path, verify_data=verify_data)
    except ExternalDataError as error:  # OMNY108 / OMNY109: one diagnostic per tensor or file
        diagnostics.extend(_external_data_diagnostic(p) for p in error.problems)
        return None
    except OmnyContainerError as error:  # a v2 container's header, manifest or model
        diagnostics.append(make("OMNY101", str(error), error.path))
        return None
    except OmnyIOError as error:
        if not os.access(path, os.R_OK):
            raise
        diagnostics.append(
            make("OMNY101", f"the file cannot be read as an ONNX model: {error}", "model")
        )
        return None
    except OmnyFormatError as error:  # content load() refuses: report it, check the rest
        diagnostics.append(_refused_content(error))
        model = _load_leniently(path, diagnostics)
        if model is None:
            return None
    if onnx_checker is not False:
        container = model.meta.get(CONTAINER_META_KEY)
        try:  # a v2 container: the model it embeds
            onnx.checker.check_model(
                container.model_proto() if isinstance(container, Container) else path
            )
        except Exception as error:
            diagnostics.append(_onnx_checker_diagnostic(error))
    return model


def _load_leniently(path: str, diagnostics: list[Diagnostic]) -> ir.Model | None:
    """Read ``path`` with onnx-ir's own reader (external data left in place)."""
    proto = None
    try:
        proto = onnx.load_model(path, load_external_data=False)
        model = ir.from_proto(proto)
    except Exception as error:  # onnx and onnx-ir raise several types on malformed files
        if proto is not None and find_unrepresentable(proto):
            return None  # valid ONNX: OMNY106 said what onnx-ir cannot represent
        diagnostics.append(
            make("OMNY101", f"the file cannot be read as an ONNX model: {error}", "model")
        )
        return None
    ir.external_data.set_base_dir(model.graph, os.path.dirname(os.path.abspath(path)))
    return model
