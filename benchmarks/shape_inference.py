"""Compare the shape layer with the alternatives on corpus models: time and what each knows.

For each model of ``tests/corpus`` named on the command line (default: a mix of TorchScript,
dynamo, Paddle and Optimum exports), in one process:

* **omny** -- :class:`onnx_ir_multidevice.analysis.shapes.ValueShapes` (stated types, dim
  expressions, the fast propagation or ONNX shape inference on a weightless copy at two
  bindings), every main-graph value looked up;
* **onnx** -- ``onnx.shape_inference.infer_shapes(data_prop=True)`` on the file as it is
  (symbolic inputs);
* **onnx-ir** -- ``onnx_ir.passes.common.ShapeInferencePass`` (the same C++ inference, with a
  full serialization of the model);
* **ort-symbolic** -- onnxruntime's ``SymbolicShapeInference`` (``auto_merge=True``; needs
  sympy), the pass Ultralytics exports go through.

For each it prints the seconds (best of ``--repeat``) and, over the main graph's node
outputs that are used, how many have a known rank, how many have every dim named (a number,
or a name/expression of the input dims: what the size is at any binding), and how many have
a concrete shape at the example dims (what sizes, memory figures and relaxed cuts need; a
name or expression is evaluated there).

Usage: ``python benchmarks/shape_inference.py [--repeat 3] [MODEL ...]``
"""

from __future__ import annotations

import argparse
import gc
import time
import warnings
from pathlib import Path

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

from onnx_ir_multidevice.analysis.dim_expressions import parse_dim
from onnx_ir_multidevice.analysis.shapes import ValueShapes, example_dims

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus"
DEFAULT = [
    "yolo_like_torchscript",
    "rapidocr_det_ppocrv4",
    "rapidocr_cls_mobile_v2",
    "vit_torchscript",
    "gpt2_torchscript",
    "t5_encoder_torchscript",
    "silero_vad",
    "gpt2_merged_optimum",
]


def _used(model: ir.Model) -> list[str]:
    return [v.name for node in model.graph for v in node.outputs if v.uses() or v.is_graph_output()]


def _count_proto(
    proto: onnx.ModelProto, names: list[str], dims: dict[str, int]
) -> tuple[int, int, int]:
    infos = {i.name: i for i in (*proto.graph.value_info, *proto.graph.output)}
    rank = named = concrete = 0
    for name in names:
        info = infos.get(name)
        if info is None or not info.type.tensor_type.HasField("shape"):
            continue
        rank += 1
        shape = info.type.tensor_type.shape.dim
        if all(
            d.HasField("dim_value") or (d.dim_param and not d.dim_param.startswith("unk__"))
            for d in shape
        ):
            named += 1
        values = [
            d.dim_value
            if d.HasField("dim_value")
            else (parse_dim(d.dim_param).evaluate(dims) if parse_dim(d.dim_param) else None)
            for d in shape
        ]
        concrete += None not in values
    return rank, named, concrete


def _best(repeat: int, func):
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        try:
            result = func()
        except Exception as error:  # noqa: BLE001 (reported as the tool's answer)
            return None, f"{type(error).__name__}: {str(error)[:60]}"
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    try:  # optional: only this comparison needs it
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except ImportError:
        SymbolicShapeInference = None  # noqa: N806
    print(
        f"{'model':28} {'values':>6}  {'tool':13} {'seconds':>8} {'rank':>6} {'named':>6} "
        f"{'concrete':>8}"
    )
    for name in args.models:
        path = CORPUS / f"{name}.onnx"
        model = ir.load(path)
        names = _used(model)
        dims = example_dims(model.graph)
        rows = []

        def omny(model: ir.Model = model):
            fresh = ValueShapes(model.graph)
            return {
                v.name: (fresh.symbolic(v), fresh.estimate(v))
                for n in model.graph
                for v in n.outputs
            }

        seconds, found = _best(args.repeat, omny)
        if isinstance(found, dict):
            known = [found[n] for n in names if n in found]
            rank = sum(1 for symbolic, _ in known if symbolic is not None)
            named = sum(1 for symbolic, _ in known if symbolic is not None and None not in symbolic)
            concrete = sum(1 for _, estimate in known if estimate is not None)
            rows.append(("omny", seconds, rank, named, concrete))
        proto = onnx.load(path)
        seconds, out = _best(
            args.repeat, lambda p=proto: onnx.shape_inference.infer_shapes(p, data_prop=True)
        )
        failed = ("-", "-", out)
        rows.append(("onnx", seconds, *(_count_proto(out, names, dims) if seconds else failed)))
        seconds, out = _best(args.repeat, lambda p=path: ShapeInferencePass()(ir.load(p)).model)
        if seconds:
            out = ir.to_proto(out)
        failed = ("-", "-", out)
        rows.append(("onnx-ir", seconds, *(_count_proto(out, names, dims) if seconds else failed)))
        if SymbolicShapeInference is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                seconds, out = _best(
                    args.repeat,
                    lambda p=path: SymbolicShapeInference.infer_shapes(
                        onnx.load(p), auto_merge=True
                    ),
                )
            failed = ("-", "-", out)
            counts = _count_proto(out, names, dims) if seconds else failed
            rows.append(("ort-symbolic", seconds, *counts))
        for tool, seconds, rank, named, concrete in rows:
            shown = f"{seconds:8.3f}" if seconds else "  failed"
            print(
                f"{name:28} {len(names):>6}  {tool:13} {shown} {rank!s:>6} {named!s:>6} "
                f"{concrete!s:>8}"
            )


if __name__ == "__main__":
    main()
