"""The engines a :class:`~onnx_ir_multidevice.runtime.Pipeline` can run on, by name."""

from __future__ import annotations

__all__ = ["engines", "get_engine", "register_engine"]

import threading

from onnx_ir_multidevice._errors import PipelineError
from onnx_ir_multidevice.runtime.engines.protocol import EngineFactory

_ENGINES: dict[str, EngineFactory] = {}
_LOCK = threading.Lock()


def register_engine(name: str, factory: EngineFactory, *, replace: bool = False) -> None:
    """Make an engine available as ``Pipeline(backend=name)`` and ``omny run --backend name``.

    Example::

        class MyEngine:                       # see Engine for the contract
            def __init__(self, chain, devices, threads, recorder, on_done, *, spinning): ...
            def submit(self, request, env): ...
            def close(self, timeout): ...

        register_engine("mine", MyEngine)

    Args:
        name: The backend name.
        factory: The engine class, or any callable with the signature of
            :class:`~onnx_ir_multidevice.runtime.engines.EngineFactory`.
        replace: Replace an engine already registered under ``name``.

    Raises:
        ValueError: ``name`` is empty, or taken by another factory and ``replace`` is false.
        TypeError: ``factory`` is not callable.

    .. versionadded:: 0.1
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"an engine name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise TypeError(f"engine {name!r}: the factory must be callable, got {factory!r}")
    with _LOCK:
        current = _ENGINES.get(name)
        if current is not None and current is not factory and not replace:
            raise ValueError(
                f"an engine named {name!r} is already registered ({current!r}); pass "
                "replace=True to replace it, or choose another name"
            )
        _ENGINES[name] = factory


def get_engine(name: str) -> EngineFactory:
    """The factory registered under ``name``.

    Raises:
        PipelineError: No engine has that name (the message lists the registered ones).
    """
    with _LOCK:
        factory = _ENGINES.get(name)
    if factory is None:
        known = ", ".join(repr(n) for n in engines())
        raise PipelineError(
            f"unknown backend {name!r}: the registered engines are {known} "
            "(add one with onnx_ir_multidevice.register_engine)"
        )
    return factory


def engines() -> tuple[str, ...]:
    """The names of the registered engines, sorted."""
    with _LOCK:
        return tuple(sorted(_ENGINES))
