"""Example files bundled with the package.

* ``bert_tiny.omny`` (:data:`EXAMPLE`, the default of ``omny demo``) -- a 6-layer BERT encoder
  (:func:`onnx_ir_multidevice.testing.zoo.bert`, hidden size 96, sequence 32, about 3 MB) planned by
  :func:`onnx_ir_multidevice.planner.planning` for 2, 3 and 4 shards. Its cuts are strict (only the
  cut tensor crosses each one), so ``omny check`` reports no error.
* ``gpt_tiny.omny`` -- a 4-layer GPT (:func:`onnx_ir_multidevice.testing.zoo.gpt`, hidden size 64,
  tied embeddings, about 1 MB) with three hand-placed *relaxed* cut points at the layer
  boundaries (the causal mask and two shape vectors cross them too) and 2- and 4-shard
  configurations: it checks clean only with ``omny check --relaxed``, and the documentation
  uses it to show relaxed cuts.
* ``spec_example.json`` -- the metadata JSON example of the ``.omny`` specification, verbatim.

Regenerate the ``.omny`` files with ``python scripts/make_example.py`` (deterministic;
``--check`` compares).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["BERT_TINY", "EXAMPLE", "GPT_TINY", "SPEC_EXAMPLE_JSON", "example_path"]

from pathlib import Path

_HERE = Path(__file__).resolve().parent

BERT_TINY = _HERE / "bert_tiny.omny"
"""Path of the bundled BERT ``.omny`` example, planned with strict cuts."""

EXAMPLE = BERT_TINY
"""Path of the default bundled example (what ``omny demo`` runs on)."""

GPT_TINY = _HERE / "gpt_tiny.omny"
"""Path of the bundled GPT ``.omny`` example with relaxed cuts (check it with ``--relaxed``)."""

SPEC_EXAMPLE_JSON = _HERE / "spec_example.json"
"""Path of the ``.omny`` specification's example metadata JSON."""


def example_path(name: str = EXAMPLE.name) -> Path:
    """Return the path of a bundled example file.

    Args:
        name: File name inside the examples folder (default: the default example,
            ``bert_tiny.omny``).

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
