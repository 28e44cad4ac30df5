"""Small helpers shared by every layer: GC, argument checks, module paths, counts for people."""

from __future__ import annotations

__all__ = [
    "ROOT_MODULE",
    "format_bytes",
    "gc_paused",
    "plural",
    "require_model",
    "set_public_module",
]

import contextlib
import gc
import types
from collections.abc import Collection, Iterator, Mapping

import onnx_ir as ir


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the duration of the block.

    Building or analysing a large graph, document or proto allocates many small objects and
    no reference cycles; the collector's repeated full scans of the large, long-lived model
    then find nothing and make the work grow faster than linearly. Reference counting still
    frees everything. A collector the caller had already disabled stays disabled.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def require_model(model: object, function: str) -> None:
    """Raise a ``TypeError`` saying how to get a model when ``model`` is not an ``ir.Model``.

    Args:
        model: What the caller passed.
        function: The public function's name as users call it, e.g. ``"plan"`` or
            ``"omny.read"``.

    Raises:
        TypeError: If ``model`` is not an :class:`onnx_ir.Model`.
    """
    if not isinstance(model, ir.Model):
        raise TypeError(
            f"{function}() takes an onnx_ir.Model, not {type(model).__name__}; load a file "
            "with onnx_ir_multidevice.load(path) (an onnx.ModelProto with "
            "onnx_ir.from_proto(proto))"
        )


ROOT_MODULE = "onnx_ir_multidevice"
"""The package root, the public module of every name it exports."""


def set_public_module(namespace: Mapping[str, object], *, root: Collection[str] = ()) -> None:
    """Show the public classes and functions of a package under its public module path.

    As onnx-ir's ``__set_module``: ``repr``, tracebacks, pickles and the API docs then name
    ``onnx_ir_multidevice.OmnyMetadata`` rather than its implementation module
    ``onnx_ir_multidevice.omny._schema``. Call it at the end of a package's ``__init__``, with
    ``globals()``. Only the classes and functions defined inside the package change (a name it
    re-exports from another package keeps the module that package gives it); constants and
    modules keep theirs. Pickling still finds them: the root imports its names on first use.

    Args:
        namespace: The package's ``globals()``: its ``__name__`` and ``__all__`` are read.
        root: Those of its public names that the package root exports too: their module
            becomes :data:`ROOT_MODULE`; the others get the package's own name.

    Raises:
        ValueError: A name of ``root`` is not in the package's ``__all__``.
    """
    package = str(namespace["__name__"])
    public = list(namespace["__all__"])  # type: ignore[call-overload]  # a module's globals: values untyped
    unknown = set(root).difference(public)
    if unknown:
        raise ValueError(f"{package}: {sorted(unknown)} are not in __all__")
    inside = package + "."
    for name in public:
        obj = namespace[name]
        if not isinstance(obj, (type, types.FunctionType)):
            continue
        if obj.__module__ == package or obj.__module__.startswith(inside):
            obj.__module__ = ROOT_MODULE if name in root else package


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``count`` and ``noun`` in the right number, for messages.

    ``"1 cut point"``, ``"3 cut points"``, ``plural(2, "entry", "entries")``. Messages are read
    by people on the command line and in Python alike, so they never write ``cut point(s)``.
    """
    return f"{count} {noun if count == 1 else plural_form or noun + 's'}"


def format_bytes(nbytes: int) -> str:
    """Format a byte count for people, in binary units: ``"312 B"``, ``"231.5 KiB"``, ``"1.2 GiB"``.

    The one formatter of every message and report (planner, checker, ``omny inspect``): the
    largest unit up to ``PiB`` that keeps the figure under 1024, one decimal.
    """
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} PiB"
