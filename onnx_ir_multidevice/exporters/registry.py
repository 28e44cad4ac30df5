"""The registry of export formats, and :func:`export`, which looks a format up and runs it."""

from __future__ import annotations

__all__ = ["export", "exporters", "get_exporter", "register_exporter", "unregister_exporter"]

import dataclasses
import os
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx_ir as ir

from onnx_ir_multidevice._errors import ExportError
from onnx_ir_multidevice._proto.write_errors import typed_write_errors
from onnx_ir_multidevice._util import require_model
from onnx_ir_multidevice.exporters.ark import ArkExporter
from onnx_ir_multidevice.exporters.protocol import Exporter, ExportResult
from onnx_ir_multidevice.exporters.split_directory import SplitDirectoryExporter
from onnx_ir_multidevice.exporters.tvm_mlf import TvmMlfExporter

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""A format name: what follows ``omny export --format`` (no space, no ``=``)."""

_EXPORTERS: dict[str, Exporter] = {
    "split": SplitDirectoryExporter(),
    "mlf": TvmMlfExporter(),
    "ark": ArkExporter(),
}
"""Registered exporters by name, in registration order (the built-in formats first)."""


def register_exporter(name: str, exporter: Exporter, *, replace: bool = False) -> Exporter:
    """Make ``exporter`` available as the format ``name``.

    :func:`export` and ``omny export --format NAME`` then use it. Register once, at import
    time of the module that defines the exporter.

    Args:
        name: The format's name: letters, digits, ``.``, ``_`` and ``-``, starting with a
            letter or digit (``omny-v2``, ``tvm-mlf``). Usually ``exporter.name``.
        exporter: An object that has the attributes and the method of :class:`Exporter`.
        replace: Replace an exporter already registered under ``name``.

    Returns:
        ``exporter``.

    Raises:
        TypeError: ``exporter`` lacks an attribute or the method of :class:`Exporter`.
        ValueError: ``name`` is not a valid format name, or is taken and ``replace`` is false.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"export format name {name!r}: use letters, digits, '.', '_' and '-', starting "
            "with a letter or digit (e.g. 'omny-v2')"
        )
    if not isinstance(exporter, Exporter) or not callable(exporter.export):
        missing = [
            attribute
            for attribute in ("name", "description", "option_help", "export")
            if not hasattr(exporter, attribute)
        ]
        raise TypeError(
            f"register_exporter({name!r}, ...): {type(exporter).__name__} is not an Exporter"
            + (f" (it has no {', '.join(missing)})" if missing else " (export is not callable)")
        )
    if name in _EXPORTERS and not replace:
        raise ValueError(
            f"export format {name!r} is already registered "
            f"({type(_EXPORTERS[name]).__name__}); pass replace=True to replace it"
        )
    _EXPORTERS[name] = exporter
    return exporter


def unregister_exporter(name: str) -> Exporter:
    """Remove the format ``name`` from the registry and return its exporter.

    Raises:
        ExportError: No format is registered under ``name``.
    """
    exporter = get_exporter(name)
    del _EXPORTERS[name]
    return exporter


def get_exporter(name: str) -> Exporter:
    """Return the exporter registered under ``name``.

    Raises:
        ExportError: No format is registered under ``name`` (the message lists those that
            are).
    """
    try:
        return _EXPORTERS[name]
    except (KeyError, TypeError):
        raise ExportError(
            f"unknown export format {name!r}; registered formats: {', '.join(_EXPORTERS)}"
        ) from None


def exporters() -> Mapping[str, Exporter]:
    """Return the registered exporters by name, in registration order (a read-only copy)."""
    return types.MappingProxyType(dict(_EXPORTERS))


def export(
    model: ir.Model,
    destination: str | os.PathLike,
    format: str,
    *,
    shards: int | None = None,
    force: bool = False,
    **options: Any,
) -> ExportResult:
    """Export ``model`` to ``destination`` in the registered format ``format``.

    .. versionadded:: 0.1

    Args:
        model: The model (not modified): an :class:`onnx_ir.Model`; load a file with
            :func:`~onnx_ir_multidevice.load`.
        destination: The file or directory to write (what the format writes).
        format: A registered format name (:func:`exporters`), e.g. ``"split"``.
        shards: Number of pipeline stages, for a format that splits the model.
        force: Replace an existing ``destination``.
        **options: The format's options (its exporter's
            :attr:`~onnx_ir_multidevice.Exporter.option_help`).

    Returns:
        What was written; ``format`` is the name the exporter was looked up by.

    Raises:
        TypeError: ``model`` is not an :class:`onnx_ir.Model`, or the exporter returned
            something other than an :class:`ExportResult`.
        ExportError: ``format`` is not registered, an option is not one of the format's,
            ``shards`` is not a positive integer, or the format cannot hold the model.
        SplitError: The model cannot be split into ``shards`` stages.
        OmnyIOError: ``destination`` exists (without ``force``) or cannot be written.
    """
    require_model(model, "export")
    exporter = get_exporter(format)
    unknown = sorted(set(options).difference(exporter.option_help))
    if unknown:
        accepted = ", ".join(exporter.option_help) or "none"
        raise ExportError(
            f"format {format!r} has no option {', '.join(map(repr, unknown))} "
            f"(its options: {accepted})"
        )
    if shards is not None and (isinstance(shards, bool) or not isinstance(shards, int)):
        raise ExportError(f"shards must be a positive integer, got {shards!r}")
    if shards is not None and shards < 1:
        raise ExportError(f"shards must be a positive integer, got {shards}")
    with typed_write_errors(destination):  # a full disk: OmnyIOError naming the output
        result = exporter.export(
            model,
            Path(destination).absolute(),
            shards=shards,
            options=types.MappingProxyType(dict(options)),
            force=force,
        )
    if not isinstance(result, ExportResult):
        raise TypeError(
            f"exporter {format!r} ({type(exporter).__name__}) returned "
            f"{type(result).__name__}, not an ExportResult"
        )
    return result if result.format == format else dataclasses.replace(result, format=format)
