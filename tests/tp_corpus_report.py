"""Regions found on the corpus transformers at degree 2 and 4, each checked by the oracle.

Run: PYTHONPATH=$PWD python tests/tp_corpus_report.py [model names...]
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import onnx_ir as ir

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from tp_oracle import check_region, whole_values  # noqa: E402

from onnx_ir_multidevice.analysis.tensor_parallel import find_regions  # noqa: E402

CORPUS = pathlib.Path(__file__).parent / "corpus"
MODELS = (
    "gpt2_dynamo", "gpt2_torchscript", "llama_gqa_dynamo", "bert_dynamo", "bert_torchscript",
    "vit_dynamo", "vit_torchscript", "albert_torchscript",
)  # fmt: skip
# Output of this report (oracle max |diff| at degree 2 / 4):
#   gpt2_dynamo 4 / 4 regions (1.9e-08 / 2.1e-08); gpt2_torchscript 4 / 4 (1.9e-08 / 2.1e-08)
#   bert_dynamo 4 / 4 (2.2e-08); bert_torchscript 4 / 4 (2.2e-08)
#   vit_dynamo 4 / 4 (3.0e-08); vit_torchscript 4 / 4 (3.0e-08)
#   albert_torchscript 8 / 8 (1.9e-08)
DIMS = {"batch": 2, "seq": 5}


def feeds_for(model: ir.Model, dims: dict[str, int]) -> dict[str, np.ndarray]:
    """Random inputs at ``dims``: token ids below the smallest embedding table, masks of ones."""
    rng = np.random.default_rng(0)
    tables = [
        n.inputs[0].const_value.shape[0]  # type: ignore[union-attr]
        for n in model.graph
        if n.op_type == "Gather"
        and n.inputs[0] is not None
        and n.inputs[0].const_value is not None
        and len(n.inputs[0].const_value.shape) == 2  # type: ignore[union-attr]
    ]
    vocab = min(tables) if tables else 2
    feeds = {}
    for value in model.graph.inputs:
        shape = [d if isinstance(d, int) else dims.get(str(d), 1) for d in value.shape.dims]  # type: ignore[union-attr]
        dtype = value.dtype.numpy()  # type: ignore[union-attr]
        if "mask" in value.name:
            feeds[value.name] = np.ones(shape, dtype)
        elif dtype.kind in "iu":
            feeds[value.name] = rng.integers(0, vocab, shape).astype(dtype)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def report(name: str, dims: dict[str, int] = DIMS) -> list[tuple[int, int, float]]:
    model = ir.load(CORPUS / f"{name}.onnx")
    whole = whole_values(model, feeds_for(model, dims))
    rows = []
    for degree in (2, 4):
        regions = find_regions(model, degree, dims=dims)
        worst = max((check_region(model, r, whole) for r in regions), default=0.0)
        rows.append((degree, len(regions), worst))
    return rows


if __name__ == "__main__":
    for name in sys.argv[1:] or MODELS:
        try:
            rows = report(name)
        except Exception as error:  # noqa: BLE001  # a report line per model
            print(f"{name:20s} FAILED: {type(error).__name__}: {str(error)[:300]}")
            continue
        for degree, count, worst in rows:
            print(f"{name:20s} degree {degree}: {count:2d} regions, oracle max |diff| {worst:.2e}")
