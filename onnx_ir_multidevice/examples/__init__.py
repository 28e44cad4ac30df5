"""Example files bundled with the package.

* ``gpt_tiny.omny`` -- a 4-layer GPT (:func:`onnx_ir_multidevice.zoo.gpt`, hidden size 64,
  tied embeddings, about 1 MB) saved as ``.omny``: three cut points at the layer boundaries
  and 2- and 4-shard configurations. Regenerate it with ``python scripts/make_example.py``.
* ``spec_example.json`` -- the metadata JSON example of the ``.omny`` specification, verbatim.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["GPT_TINY", "SPEC_EXAMPLE_JSON", "example_path"]

from pathlib import Path

_HERE = Path(__file__).resolve().parent

GPT_TINY = _HERE / "gpt_tiny.omny"
"""Path of the bundled ``.omny`` example (the default model of ``omny demo``)."""

SPEC_EXAMPLE_JSON = _HERE / "spec_example.json"
"""Path of the ``.omny`` specification's example metadata JSON."""


def example_path(name: str = "gpt_tiny.omny") -> Path:
    """Return the path of a bundled example file.

    Args:
        name: File name inside the examples folder.

    Returns:
        The absolute path.

    Raises:
        FileNotFoundError: No bundled example has that name; the message lists those that do.
    """
    path = _HERE / name
    if not path.is_file():
        known = sorted(p.name for p in _HERE.iterdir() if p.suffix in {".omny", ".onnx", ".json"})
        raise FileNotFoundError(f"no bundled example {name!r}; available: {', '.join(known)}")
    return path
