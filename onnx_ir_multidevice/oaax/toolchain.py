"""The OAAX toolchain: convert a model into one ``.omny`` artifact for a multi-device pipeline.

``omny-oaax-toolchain INPUT OUTDIR`` (also ``omny oaax-convert INPUT OUTDIR``) runs
:func:`convert`, whose steps each add one entry to the conversion log:

1. **read** -- the input: a model file, or an archive with one model and a ``config.json``
   (:mod:`~onnx_ir_multidevice.oaax.inputs`); archives are extracted into a private folder
   inside ``OUTDIR`` (``.oaax-input.omny-<pid>-<hex>.tmp``, locked by this run), removed at
   the end; one left by a killed run is removed by the next run into ``OUTDIR`` (any
   writer's clean-up of the folder: :func:`~onnx_ir_multidevice._proto.atomic.remove_stale`);
2. **load** -- the model (``.onnx``, v1 ``.omny`` or a v2 container);
3. **validate** -- the ONNX checker, element types OAAX tensors can carry, and an
   onnxruntime session of the whole model (operator support);
4. **plan** -- the configuration: the ``.omny`` input's one configuration (or the one with
   the configured ``shards``) when it fits the configured ``devices``, else a plan for
   ``shards`` (default: one per device, else 2) stages on those devices; an input annotated
   for IR v11 loses its ``omny/`` annotations (those of the configurations not chosen would
   contradict the plan, and the plan says the rest), listed in the log, and gets the lowest IR
   version its content needs, so that onnxruntime 1.20 to 1.22 (which refuse IR 11, and which
   OAAX runtimes bundle) load the artifact;
5. **check** -- the checker, with the plan in the model (no error allowed, except the spec
   departures of :data:`SPEC_DEPARTURES`, which run correctly here);
6. **split** -- the stage models;
7. **verify** -- the chained stages against the whole model on onnxruntime, with the
   tolerance rule of :func:`~onnx_ir_multidevice.runtime.verify` (``rtol`` and ``atol`` by
   the model's arithmetic, :func:`~onnx_ir_multidevice.analysis.default_tolerance`: 1e-4
   for fp32, 1e-2 for fp16 and quantized models; small outputs compared at their scale);
8. **write** -- the artifact ``OUTDIR/<model name>.omny``: the input model (its input and
   output names and shapes unchanged) with a plan of exactly the chosen configuration. Any
   ONNX runtime loads it as a whole model; :class:`~onnx_ir_multidevice.oaax.OaaxRuntime`
   loads it as a pipeline. Written atomically, as one file (no external data).

The log (``logs.json`` and ``conversion-log.json``, same bytes) is written last, also on
failure; a failure's entry carries an error code of
:data:`~onnx_ir_multidevice.oaax.codes.ERROR_CODES`. Exit status 0 on success, 1 when the
content cannot be converted, 2 when the input cannot be read or the usage is wrong. A failed
run writes no artifact; files of ``OUTDIR`` other than the artifact and the log are never
touched. Nothing here uses the network or needs root.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "ARTIFACT_MIME_TYPE",
    "DEFAULT_SHARDS",
    "SPEC_DEPARTURES",
    "SUCCESS_MESSAGE",
    "TOOLCHAIN_NAME",
    "ConversionResult",
    "convert",
]

import collections
import contextlib
import dataclasses
import hashlib
import os
import shutil
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import (
    OmnyFormatError,
    OmnyIOError,
    PlanError,
    SplitError,
    VerifyError,
)
from onnx_ir_multidevice._proto import atomic
from onnx_ir_multidevice._proto.files import EXTERNAL_DATA_TOTAL_BYTES, load, save
from onnx_ir_multidevice._split import split
from onnx_ir_multidevice._util import plural
from onnx_ir_multidevice.binding.naming import OMNY_CONFIGURATION_PREFIX
from onnx_ir_multidevice.checker.core import run_check
from onnx_ir_multidevice.graph.dtypes import dtype_name
from onnx_ir_multidevice.oaax.codes import ERROR_CODES, ConversionError, ErrorCode
from onnx_ir_multidevice.oaax.inputs import ToolchainConfig, ToolchainInput, read_input
from onnx_ir_multidevice.oaax.log import LOG_FILE_NAMES, ConversionLog
from onnx_ir_multidevice.oaax.tensors import oaax_data_type
from onnx_ir_multidevice.omny import OmnyMetadata, read_planning_dims, write_planning_dims
from onnx_ir_multidevice.omny.container import CONTAINER_META_KEY, Container
from onnx_ir_multidevice.passes.strip import StripAnnotationsPass
from onnx_ir_multidevice.planner.devices import parse_size
from onnx_ir_multidevice.planner.memory import DEFAULT_HEADROOM, format_bytes, usable_bytes
from onnx_ir_multidevice.planner.options import PlanOptions
from onnx_ir_multidevice.planner.planning import plan_model
from onnx_ir_multidevice.runtime.sessions import ModelSession
from onnx_ir_multidevice.runtime.verification import verify_stages

TOOLCHAIN_NAME = "omny-oaax-toolchain"
"""The console script's name."""

SUCCESS_MESSAGE = "Successful Conversion"
"""The last log message of a successful conversion (what OAAX's conformance checks read)."""

ARTIFACT_MIME_TYPE = "application/x-omnynet-model"
"""MIME type of the artifact in the log: the one the ``.omny`` specification names (the
artifact is always an ``.omny`` file)."""

DEFAULT_SHARDS = 2
"""Pipeline stages when neither the configuration nor an ``.omny`` input says."""

SPEC_DEPARTURES = frozenset({"OMNY114"})
"""Checker codes that do not stop a conversion: departures from the ``.omny`` spec that run
correctly on this runtime (a dynamic non-batch dim at a cut: the spec forbids it because its
runtime allocates fixed buffers; the pipeline here does not, and the verify step proves the
outputs). They are logged under ``"Spec departures"``."""


@dataclasses.dataclass(frozen=True)
class ConversionResult:
    """What :func:`convert` did."""

    exit_status: int
    """0 success, 1 content that cannot be converted, 2 unreadable input or output folder."""

    artifact: Path | None
    """The artifact written (``None`` on failure)."""

    log: tuple[dict[str, Any], ...]
    """The log's entries."""

    log_files: tuple[Path, ...]
    """The log files written (empty when ``OUTDIR`` could not be written)."""

    error: ErrorCode | None = None
    """The failure's code (``None`` on success)."""

    @property
    def ok(self) -> bool:
        """Whether the conversion succeeded."""
        return self.exit_status == 0


def _io(values: Any) -> list[dict[str, Any]]:
    out = []
    for value in values:
        shape = None if value.shape is None else [
            d if isinstance(d, int) else d.value for d in value.shape
        ]  # fmt: skip
        dtype = None if value.dtype is None else dtype_name(value.dtype)
        out.append({"name": value.name, "dtype": dtype, "shape": shape})
    return out


def _is_ours(configuration: ir.ModelConfiguration) -> bool:
    return configuration.name.startswith(OMNY_CONFIGURATION_PREFIX)


def _graph_inputs(model: ir.Model) -> list[ir.Value]:
    return [v for v in model.graph.inputs if v.name not in model.graph.initializers]


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class _Conversion:
    """The state of one conversion; each ``_step_*`` returns its log entry's figures."""

    def __init__(self, outdir: Path, echo: Callable[[str], None]) -> None:
        self.outdir = outdir
        self.echo = echo
        self.log = ConversionLog()
        self.input: ToolchainInput | None = None
        self.config = ToolchainConfig()
        self.model: ir.Model | None = None
        self.io: dict[str, list[dict[str, Any]]] = {}
        self.shards = 0
        self.dims: dict[str, int] = {}
        self.stages: list[ir.Model] = []
        self.md5 = ""
        self.step = "read"
        self.misfit: str | None = None
        """Why the input's configuration was not kept for the configured devices."""

    def record(self, message: str, data: Mapping[str, Any], started: float) -> None:
        entry = self.log.add(message, {**data, "Seconds": round(time.perf_counter() - started, 3)})
        figures = ", ".join(
            f"{k}: {v}" for k, v in entry.get("Data", {}).items() if not isinstance(v, (list, dict))
        )
        self.echo(f"{TOOLCHAIN_NAME}: {message}" + (f" ({figures})" if figures else ""))

    # -- steps ------------------------------------------------------------------------------

    def step_read(self, source: Path, workdir: Path) -> dict[str, Any]:
        self.input = read_input(source, workdir)
        self.config = self.input.config
        data: dict[str, Any] = {"Input": str(source), "Kind": self.input.kind}
        if self.input.member is not None:
            data["Model member"] = self.input.member
            data["Members extracted"] = self.input.members
            data["Config member"] = self.input.config_member
        data["Config"] = self.config.to_dict()
        return data

    def step_load(self) -> dict[str, Any]:
        assert self.input is not None
        path = self.input.model_path
        try:
            model = load(path)
            metadata = omny.read(model)  # a plan that cannot be read: the input's fault too
        except (OmnyIOError, OmnyFormatError) as error:
            raise ConversionError("OAAX102", "load", f"{path.name}: {error}") from None
        self.model = model
        self.io = {"inputs": _io(_graph_inputs(model)), "outputs": _io(model.graph.outputs)}
        container = model.meta.get(CONTAINER_META_KEY)
        return {
            "Model file": path.name,
            "Container": "v2" if isinstance(container, Container) else "v1",
            "Nodes": len(model.graph),
            "Initializers": len(model.graph.initializers),
            "Has plan": metadata is not None,
            "Inputs": self.io["inputs"],
            "Outputs": self.io["outputs"],
        }

    def step_validate(self) -> dict[str, Any]:
        assert self.model is not None
        assert self.input is not None
        model = self.model
        container = model.meta.get(CONTAINER_META_KEY)
        try:
            onnx.checker.check_model(
                container.model_proto()
                if isinstance(container, Container)
                else str(self.input.model_path)
            )
        except Exception as error:  # the checker raises several types
            raise ConversionError(
                "OAAX107", "validate", f"onnx.checker rejects the model: {_first_line(error)}"
            ) from None
        unsupported = [
            f"{side[:-1]} {t['name']!r} ({t['dtype']})"
            for side, values in (
                ("inputs", _graph_inputs(model)),
                ("outputs", model.graph.outputs),
            )
            for t, v in zip(self.io[side], values, strict=True)
            if oaax_data_type(v.dtype) is None
        ]
        if unsupported:
            raise ConversionError(
                "OAAX202",
                "validate",
                f"{', '.join(unsupported)}: OAAX tensors have no such data type (no float16, "
                "bfloat16 or 8-bit float); cast the model's inputs and outputs to float32",
                {"Unsupported": unsupported},
            )
        try:
            with ModelSession(model) as session:
                providers = list(session.session.get_providers())
        except Exception as error:  # onnxruntime's own error types
            raise ConversionError(
                "OAAX201",
                "validate",
                f"onnxruntime cannot run the whole model: {_first_line(error)}",
            ) from None
        operators = collections.Counter(
            f"{node.domain}::{node.op_type}" if node.domain else node.op_type
            for node in ir.traversal.RecursiveGraphIterator(model.graph)
        )
        return {
            "ONNX checker": "passed",
            "onnxruntime": "session created",
            "Providers": providers,
            "Operators": dict(sorted(operators.items())),
        }

    def _chosen_configuration(self, metadata: OmnyMetadata | None) -> OmnyMetadata | None:
        """The input's configuration to keep, alone, or ``None`` to plan one."""
        if metadata is None or not metadata.sharding.configurations:
            return None
        configurations = metadata.sharding.configurations
        wanted = self.config.shards
        position = metadata.sharding.configuration_index(wanted)
        if position is None and wanted is None:
            counts = [c.num_shards for c in configurations]
            raise ConversionError(
                "OAAX106",
                "plan",
                f"the .omny input has {len(configurations)} configurations ({counts} "
                "shards); the artifact holds one: put the model in an archive with a "
                'config.json such as {"shards": ' + str(counts[0]) + "}",
            )
        if position is None:
            return None
        chosen = configurations[position]
        self.misfit = self._misfit(chosen)
        if self.misfit is not None:
            return None  # plan for the devices instead
        ids = set(chosen.cut_point_ids)
        n = chosen.num_shards
        sharding = dataclasses.replace(
            metadata.sharding,
            configurations=(chosen,),
            allowed_shards=(n,),
            min_shards=n,
            max_shards=n,
        )
        return dataclasses.replace(
            metadata,
            cut_points=tuple(c for c in metadata.cut_points if c.id in ids),
            sharding=sharding,
        )

    def _misfit(self, configuration: Any) -> str | None:
        """Why the input's ``configuration`` does not fit the configured devices (or ``None``).

        Stage ``k`` fits device ``k`` when its ``memory_per_shard_mb`` plus the planner's
        headroom is at most the device's memory, as the planner decides for its own plans.
        """
        devices = self.config.devices
        if devices is None:
            return None
        n = configuration.num_shards
        if len(devices) < n:
            return f"its {n} stages need {n} devices and config.json gives {len(devices)}"
        memory = list(configuration.memory_per_shard_mb)
        for k, (device, mib) in enumerate(zip(devices, memory, strict=False)):
            usable = usable_bytes(parse_size(device), DEFAULT_HEADROOM)
            if mib * 2**20 > usable:
                return (
                    f"stage {k} needs {mib} MiB and device {k} ({device}) leaves "
                    f"{format_bytes(usable)} after the {DEFAULT_HEADROOM:.0%} headroom"
                )
        return None

    def step_plan(self) -> dict[str, Any]:
        assert self.model is not None
        assert self.input is not None
        model = self.model
        self.dims = dict(self.config.dims) or dict(read_planning_dims(model) or {})
        chosen = self._chosen_configuration(omny.read(model))
        caveats: list[str] = []
        if chosen is not None:
            source = "the input's configuration"
            metadata = chosen
        else:
            source = "planned"
            if self.misfit is not None:
                source = f"planned (the input's configuration does not fit: {self.misfit})"
            devices = self.config.devices
            shards = self.config.shards or (len(devices) if devices else DEFAULT_SHARDS)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the caveats go to the log
                    options = PlanOptions(
                        shards=[shards],
                        devices=self.config.devices,
                        dims=self.dims or None,
                        relaxed=self.config.relaxed,
                        name=Path(self.input.member or self.input.model_path.name).stem,
                        assign_names=True,
                    )
                    result = plan_model(model, options)
            except (PlanError, ValueError) as error:
                raise ConversionError(
                    "OAAX301", "plan", f"no {shards}-shard plan: {error}", {"Shards": shards}
                ) from None
            metadata = result.metadata
            caveats = list(result.warnings)
        omny.write(model, metadata)
        if self.config.dims:
            write_planning_dims(model, self.dims)
        removed, ir_version = self._strip_annotations(model)
        configuration = metadata.sharding.configurations[0]
        self.shards = configuration.num_shards
        cuts = {c.id: c for c in metadata.cut_points}
        data: dict[str, Any] = {
            "Source": source,
            "Shards": self.shards,
            "Cut points": [
                {"id": i, "tensor": cuts[i].tensor_name, "after node": cuts[i].after_node}
                for i in configuration.cut_point_ids
                if i in cuts
            ],
            "Memory per shard (MiB)": list(configuration.memory_per_shard_mb),
            "Dims": self.dims,
        }
        if caveats:
            data["Caveats"] = caveats
        if removed:
            data["Annotations removed"] = removed
        if ir_version is not None:
            data["IR version"] = ir_version
        return data

    @staticmethod
    def _strip_annotations(model: ir.Model) -> tuple[list[str], list[int] | None]:
        """Remove an annotated input's ``omny/`` configurations; lower its IR version.

        Returns:
            The names of the configurations removed, and ``[old, new]`` IR versions when the
            version changed (else ``None``).
        """
        removed = [c.name for c in model.device_configurations if _is_ours(c)]
        before = model.ir_version
        StripAnnotationsPass()(model)
        return removed, None if model.ir_version == before else [before, model.ir_version]

    def step_check(self) -> dict[str, Any]:
        assert self.model is not None
        report = run_check(self.model, relaxed_cuts=self.config.relaxed, onnx_checker=False)
        counts = collections.Counter(d.severity.value for d in report.diagnostics)
        codes = collections.Counter(d.code for d in report.diagnostics)
        blocking = [d for d in report.errors if d.code not in SPEC_DEPARTURES]
        data: dict[str, Any] = {
            "Errors": counts["error"],
            "Warnings": counts["warning"],
            "Codes": dict(sorted(codes.items())),
        }
        departures = [str(d) for d in report.errors if d.code in SPEC_DEPARTURES]
        if departures:
            data["Spec departures"] = departures[:10]
        if blocking:
            raise ConversionError(
                "OAAX401",
                "check",
                f"the checker reports {plural(len(blocking), 'error')}; first: {blocking[0]}",
                {**data, "Diagnostics": [str(d) for d in blocking[:10]]},
            )
        return data

    def step_split(self) -> dict[str, Any]:
        assert self.model is not None
        try:
            self.stages = split(self.model, self.shards)
        except SplitError as error:
            raise ConversionError("OAAX402", "split", str(error)) from None
        return {
            "Stages": len(self.stages),
            "Nodes per stage": [len(stage.graph) for stage in self.stages],
            "Stage inputs": [[v.name for v in _graph_inputs(stage)] for stage in self.stages],
        }

    def step_verify(self) -> dict[str, Any]:
        assert self.model is not None
        try:
            report = verify_stages(self.model, self.stages, dims=self.dims or None)
        except VerifyError as error:
            raise ConversionError("OAAX404", "verify", str(error)) from None
        outputs = [
            {
                "name": o.name,
                "max abs diff": o.max_abs_diff if o.max_abs_diff < float("inf") else None,
                "mismatches": o.mismatches,
            }
            for o in report.outputs
        ]
        data = {
            "rtol": report.rtol,
            "atol": report.atol,
            "Inputs": [{"name": n, "shape": list(s), "dtype": d} for n, s, d in report.inputs],
            "Outputs": outputs,
            "Max abs diff": max((o.max_abs_diff for o in report.outputs), default=0.0),
        }
        if report.near_zero_outputs:
            data["Near-zero outputs"] = list(report.near_zero_outputs)
        if not report.ok:
            bad = [o.name for o in report.outputs if not o.ok]
            raise ConversionError(
                "OAAX403",
                "verify",
                f"the stages' outputs {bad} differ from the whole model's beyond "
                f"rtol={report.rtol:g}, atol={report.atol:g}",
                data,
            )
        return data

    def step_write(self) -> tuple[Path, dict[str, Any]]:
        assert self.model is not None
        assert self.input is not None
        model = self.model
        now = {"inputs": _io(_graph_inputs(model)), "outputs": _io(model.graph.outputs)}
        if now != self.io:
            raise ConversionError(
                "OAAX405",
                "write",
                "planning changed the model's inputs or outputs",
                {"Before": self.io, "After": now},
            )
        weights = sum(
            v.const_value.nbytes
            for graph in model.graphs()
            for v in graph.initializers.values()
            if v.const_value is not None
        )
        if weights >= EXTERNAL_DATA_TOTAL_BYTES:
            raise ConversionError(
                "OAAX302",
                "write",
                f"the weights take {weights} bytes; the artifact is one ONNX file, which "
                "protobuf limits to 2 GiB",
            )
        name = Path(self.input.member or self.input.model_path.name).stem + ".omny"
        artifact = self.outdir / name
        if artifact.exists() and os.path.samefile(artifact, self.input.model_path):
            raise ConversionError(
                "OAAX101",
                "write",
                f"{artifact}: is the input; the artifact {name} would replace it: give an "
                "OUTDIR other than the input's folder",
            )
        try:
            save(model, artifact, external_data=False)
        except OmnyIOError as error:
            code = "OAAX302" if "does not fit" in str(error) else "OAAX101"
            raise ConversionError(code, "write", str(error)) from None
        digest = hashlib.md5(usedforsecurity=False)
        with open(artifact, "rb") as file:
            for chunk in iter(lambda: file.read(1 << 20), b""):
                digest.update(chunk)
        self.md5 = digest.hexdigest()
        return artifact, {
            "Output file name": name,
            "Size (bytes)": artifact.stat().st_size,
            "Configuration shards": self.shards,
        }


def _failure(log: ConversionLog, error: ConversionError) -> dict[str, Any]:
    code = error.code
    return log.add(
        "Conversion failed",
        {
            "Error code": code.code,
            "Category": code.category,
            "Step": error.step,
            "Error": error.message,
            "Exit status": code.exit_status,
            **error.data,
        },
    )


def _echo(line: str) -> None:
    print(line, flush=True)


_WORKDIR_NAME = "oaax-input"
"""The extraction folder is ``OUTDIR/.oaax-input.omny-<pid>-<hex>.tmp`` (a staging name)."""


def convert(
    input_path: str | os.PathLike,
    outdir: str | os.PathLike,
    *,
    echo: Callable[[str], None] | None = None,
) -> ConversionResult:
    """Convert ``input_path`` into an ``.omny`` artifact and a conversion log in ``outdir``.

    Never raises for what the input contains: every failure is an entry of the log with an
    error code (:data:`~onnx_ir_multidevice.oaax.codes.ERROR_CODES`) and the exit status.

    Args:
        input_path: A model file (``.onnx``, ``.omny`` v1 or v2) or an archive (``.zip``,
            ``.tar.gz``) with one model and an optional ``config.json``.
        outdir: The output folder, created if missing.
        echo: Where progress lines go (default: stdout).

    Returns:
        The result: exit status, artifact, log.

    .. versionadded:: 0.1
    """
    echo = echo or _echo
    outdir = Path(outdir)
    run = _Conversion(outdir, echo)
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        atomic.remove_stale(outdir)  # what killed runs (and other writers) left
        workdir = atomic.make_staging(outdir, _WORKDIR_NAME)
    except OSError as error:
        message = f"{outdir}: the output directory cannot be created or written ({error})"
        print(f"{TOOLCHAIN_NAME}: error: OAAX101 (input): {message}", file=sys.stderr)
        return ConversionResult(2, None, (), (), ERROR_CODES["OAAX101"])
    artifact: Path | None = None
    error_code: ErrorCode | None = None
    try:
        steps: list[tuple[str, str, Callable[[], Mapping[str, Any]]]] = [
            ("read", "Read input", lambda: run.step_read(Path(input_path), workdir)),
            ("load", "Loaded model", run.step_load),
            ("validate", "Validated model", run.step_validate),
            ("plan", "Planned configuration", run.step_plan),
            ("check", "Checked plan", run.step_check),
            ("split", "Split into stages", run.step_split),
            ("verify", "Verified stages against the whole model", run.step_verify),
        ]
        for name, message, step in steps:
            run.step = name
            started = time.perf_counter()
            run.record(message, step(), started)
        run.step = "write"
        started = time.perf_counter()
        artifact, data = run.step_write()
        run.record("Wrote artifact", data, started)
        run.log.add(
            SUCCESS_MESSAGE,
            {
                "Output Directory": str(outdir),
                "Output file name": artifact.name,
                "MIME type": ARTIFACT_MIME_TYPE,
                "Output file MD5": run.md5,
                "Logs file name": LOG_FILE_NAMES[0],
            },
        )
        echo(f"{TOOLCHAIN_NAME}: {SUCCESS_MESSAGE}: {artifact}")
    except ConversionError as error:
        error_code = error.code
        _failure(run.log, error)
    except Exception as error:  # a bug of ours: logged with its code, never a traceback
        error_code = ERROR_CODES["OAAX501"]
        _failure(run.log, _internal(error, run.step))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        atomic.release(workdir)
    if error_code is not None:
        print(
            f"{TOOLCHAIN_NAME}: error: {error_code.code} ({error_code.category}): "
            f"{run.log.entries[-1]['Data']['Error']}",
            file=sys.stderr,
        )
    try:
        log_files = run.log.write(outdir)
    except OmnyIOError as error:
        if artifact is not None:  # a success without its log is not a success
            with contextlib.suppress(OSError):
                artifact.unlink()
        print(f"{TOOLCHAIN_NAME}: error: OAAX101 (input): cannot write the log: {error}",
              file=sys.stderr)  # fmt: skip
        return ConversionResult(2, None, tuple(run.log.entries), (), ERROR_CODES["OAAX101"])
    status = 0 if error_code is None else error_code.exit_status
    return ConversionResult(
        status,
        artifact if error_code is None else None,
        tuple(run.log.entries),
        tuple(log_files),
        error_code,
    )


def _internal(error: BaseException, step: str) -> ConversionError:
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    return ConversionError(
        "OAAX501",
        step,
        f"{type(error).__name__}: {_first_line(error)}",
        {"Where": where},
    )
