"""Pausing Python's cyclic garbage collector around bulk work (one shared helper)."""

from __future__ import annotations

__all__ = ["gc_paused"]

import contextlib
import gc
from collections.abc import Iterator


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
