"""How accurate is the memory model: predicted vs measured memory of every stage of every plan.

For each model of ``tests/corpus/`` (and the 1.1B Llama decoder with ``--llm PATH``):

1. load it (``onnx_ir_multidevice.load``) and plan it for 2, 3 and 4 shards, one count at a
   time (``plan_model(model, shards=[n], dims=...)`` at the manifest's ``suggested_dims``;
   strict cuts first, relaxed cuts when strict ones give no plan);
2. split each plan into stage files (``save_split``, weights as external data);
3. measure each stage (``runtime.measure.measure_stages``): a fresh child process per stage
   creates an onnxruntime CPU session from the stage file and runs it once on the tensors the
   pipeline would give it (generated graph inputs at the planning dims, earlier stages'
   outputs), once with onnxruntime's CPU arena on (``enable_cpu_mem_arena=True``, its
   default) and once with it off; the figure is the peak resident-memory growth over the
   child's baseline with onnxruntime imported;
4. compare with the planner's prediction for that stage
   (``PlanResult.partitions[0].memory[k]``: ``StageMemory.total_bytes``, headroom excluded).

A model (or a shard count) the tool cannot plan, split or run yet is listed under ``skipped``
with the reason. The results go to ``docs/_static/memory_accuracy.json`` (``--out``), which the
docs page ``docs/memory_accuracy.md`` renders; the run prints the worst ratios against the goal
(every stage within +-20 % of measured, never under-predicted by more than 10 %).

``--repredict`` keeps the measurements of ``--out`` and recomputes the predictions with the
current memory model (each plan made again; a row whose plan now cuts elsewhere is marked
``stale``, to be measured again).

``--derive`` instead re-derives the runtime constants of ``planner/memory.py``
(:data:`~onnx_ir_multidevice.planner.memory.RUNTIME_OVERHEAD_BYTES`) from sessions of a model
with no weights (see ``derive_constants``).

Usage::

    python benchmarks/memory_accuracy.py [--models bert_dynamo,resnet_dynamo] [--shards 2,3,4]
        [--llm /work/llm-data/tinyllama-1.1b-kv.onnx] [--scratch DIR] [--out FILE] [--derive]
        [--zoo] [--repredict]
    python benchmarks/memory_accuracy.py --tensor-parallel 2,4 [--models gpt2_dynamo,...]

``--tensor-parallel 2,4`` measures tensor-parallel ranks instead: the corpus transformers
(:data:`TP_MODELS`) and two decoders of ``testing/llama.py`` (TINY at seq 16, a 4-layer
512-wide one at seq 128), split at each degree (``split_tensor_parallel``, one stage). Each
rank's segments are loaded as onnxruntime sessions in one child process and run once in
order (``measure_sessions``), on the values the split computes in process; the prediction is
:func:`~onnx_ir_multidevice.planner.tensor_parallel.rank_resident_bytes`. The rows go to
``docs/_static/memory_accuracy_tp.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from onnx_ir_multidevice import load, save_split
from onnx_ir_multidevice.planner.memory import MIB
from onnx_ir_multidevice.planner.planning import plan_model
from onnx_ir_multidevice.runtime.measure import measure_memory, measure_stages
from onnx_ir_multidevice.runtime.verification import make_inputs

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
OUT = ROOT / "docs" / "_static" / "memory_accuracy.json"
TP_OUT = ROOT / "docs" / "_static" / "memory_accuracy_tp.json"


def _small_llama():
    from onnx_ir_multidevice.testing import llama

    return llama.LlamaConfig(layers=4, hidden=512, intermediate=1408, heads=8, kv_heads=2,
                             vocab=8000, max_positions=512, kv_cache=True)  # fmt: skip


LLM_DIMS = {"batch": 1, "seq": 128, "past_seq": 1, "total_seq": 129}
"""Planning dims of the 1.1B decoder: a 128-token prefill after one cached token."""


def _short(error: BaseException) -> str:
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= 300 else text[:297] + "..."


def plans_for(model: ir.Model, shards: int, dims: dict[str, int]):
    """The plans for ``shards``: with strict cuts and with relaxed cuts (when they differ).

    Returns:
        ``[(result, relaxed)]``, empty with the error when neither plans.
    """
    found, errors, seen = [], [], set()
    for relaxed in (False, True):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = plan_model(
                    model, shards=[shards], dims=dims, relaxed=relaxed, assign_names=True
                )
        except Exception as error:  # a PlanError, or a planner bug another issue fixes
            errors.append(error)
            continue
        cuts = tuple(c.value.name for c in result.partitions[0].cuts)
        if cuts not in seen:
            seen.add(cuts)
            found.append((result, relaxed))
    return found, (errors[-1] if errors else None)


def predicted_terms(stage) -> dict:
    """The prediction of one stage and its terms, in bytes."""
    return {
        "predicted_bytes": stage.resident_bytes,
        "total_bytes": stage.total_bytes,
        "weights_bytes": stage.weights_bytes,
        "activations_bytes": stage.activations_bytes,
        "io_bytes": stage.io_bytes,
        "prepack_bytes": stage.prepack_bytes,
        "runtime_bytes": stage.runtime_bytes,
        "mapped_bytes": stage.mapped_bytes,
        "workspace_bytes": stage.workspace_bytes,
        "reordered_bytes": stage.reordered_bytes,
        "upcast_bytes": stage.upcast_bytes,
        "unknown": list(stage.unknown),
    }


def stage_row(name, shards, relaxed, k, stage, measured_on, measured_off, dims, ops):
    """One row of the table: the prediction's terms and both measurements, in bytes."""
    return {
        "nodes": len(ops),
        "op_types": len(set(ops)),
        "model": name,
        "shards": shards,
        "relaxed": relaxed,
        "stage": k,
        "dims": dims,
        **predicted_terms(stage),
        "measured_bytes": measured_on.peak_bytes,
        "measured_no_arena_bytes": measured_off.peak_bytes,
        "steady_bytes": measured_on.steady_bytes,
        "session_bytes": measured_on.session_bytes,
        "session_peak_bytes": measured_on.session_peak_bytes,
        "anon_bytes": measured_on.anon_bytes,
        "file_bytes": measured_on.file_bytes,
        "input_bytes": measured_on.input_bytes,
        "output_bytes": measured_on.output_bytes,
        "create_seconds": round(measured_on.create_seconds, 4),
        "run_seconds": round(measured_on.run_seconds, 4),
    }


def measure_model(name, path, dims, shard_counts, scratch, log):
    """Rows of every stage of every feasible plan of one model, and the counts skipped."""
    rows, skipped = [], []
    model = load(path)
    inputs = make_inputs(model, dims=dims)
    for shards in shard_counts:
        plans, error = plans_for(model, shards, dims)
        if not plans:
            skipped.append(
                {"model": name, "shards": shards, "step": "plan", "reason": _short(error)}
            )
        for result, relaxed in plans:
            rows += measure_plan(name, model, inputs, result, relaxed, dims, scratch, log, skipped)
    return rows, skipped


def measure_plan(name, model, inputs, result, relaxed, dims, scratch, log, skipped):
    """Rows of the stages of one plan (or a ``skipped`` entry)."""
    rows = []
    found = result.partitions[0]
    shards = found.num_stages
    if True:
        folder = Path(scratch) / f"{name}-{shards}"
        try:
            save_split(model, folder, shards, metadata=result.metadata, force=True)
            ops = [
                [
                    n.op_type
                    for n in onnx.load(
                        folder / f"stage_{k}.onnx", load_external_data=False
                    ).graph.node
                ]
                for k in range(shards)
            ]
            on = measure_stages(folder, inputs, arena=True)
            off = measure_stages(folder, inputs, arena=False)
        except Exception as error:
            step = "split" if not folder.exists() else "measure"
            skipped.append({"model": name, "shards": shards, "relaxed": relaxed, "step": step,
                            "reason": _short(error)})  # fmt: skip
            return rows
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        for k, stage in enumerate(found.memory):
            row = stage_row(name, shards, relaxed, k, stage, on[k], off[k], dims, ops[k])
            i, j = found.segments[k]
            memory = result.memory
            nodes = memory.analysis.order[memory.starts[i] : memory.ends[j - 1]]
            row["planned_nodes"] = len(nodes)
            row["cuts"] = [c.value.name for c in found.cuts]
            row["outputs_bytes"] = sum(
                memory.sizes.nbytes(v) or 0 for node in nodes for v in node.outputs
            )
            rows.append(row)
            kind = " relaxed" if relaxed else ""
            log(
                f"{name:28} {shards} shards{kind} stage {k}: predicted "
                f"{row['predicted_bytes'] / MIB:9.1f} MiB, measured "
                f"{row['measured_bytes'] / MIB:9.1f} MiB (arena off "
                f"{row['measured_no_arena_bytes'] / MIB:9.1f}), ratio "
                f"{row['predicted_bytes'] / max(row['measured_bytes'], 1):.2f}"
            )
    return rows


def repredict(document: dict, models, log) -> None:
    """Recompute the predicted terms of ``document``'s rows with the current memory model.

    The measurements are kept: they do not depend on the model. Each row's plan is made
    again (same model, shard count, strict or relaxed cuts); a row whose plan now cuts
    elsewhere (``cuts`` differs) is flagged ``"stale": true``, to be measured again.
    """
    by_plan: dict[tuple, list[dict]] = {}
    for row in document["rows"]:
        by_plan.setdefault((row["model"], row["shards"], row["relaxed"]), []).append(row)
    for name, path, dims in models:
        wanted = {key: rows for key, rows in by_plan.items() if key[0] == name}
        if not wanted:
            continue
        model = load(path)
        for (_, shards, relaxed), rows in wanted.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = plan_model(
                    model, shards=[shards], dims=dims, relaxed=relaxed, assign_names=True
                )
            found = result.partitions[0]
            cuts = [c.value.name for c in found.cuts]
            for row in rows:
                row.update(predicted_terms(found.memory[row["stage"]]))
                if "cuts" in row and row["cuts"] != cuts:
                    row["stale"] = True
        log(f"{name:28} re-predicted")


def zoo_models(scratch: str):
    """Generated models of a few MiB to tens of MiB (the corpus models are all small)."""
    from onnx_ir_multidevice.testing import llama, zoo

    built = {
        "zoo_resnet": (zoo.resnet(depth_blocks=6, channels=64, image=64), {}),
        "zoo_bert": (zoo.bert(layers=4, hidden=256, heads=4, seq=128, vocab=8000), {}),
        "zoo_gpt": (zoo.gpt(layers=4, hidden=256, seq=256, vocab=8000), {}),
        "zoo_vit": (zoo.vit(layers=4, hidden=192, patch=8, image=64), {}),
    }
    for name, (model, dims) in built.items():
        path = Path(scratch) / f"{name}.onnx"
        ir.save(model, path)
        yield name, path, dims
    configs = {
        "llama_tiny_kv": (dataclasses.replace(llama.TINY, kv_cache=True), {"seq": 16}),
        "llama_small_kv": (_small_llama(), {"seq": 128}),
    }
    for name, (config, dims) in configs.items():
        path = llama.write_llama(Path(scratch) / f"{name}.onnx", config)
        yield name, path, {"batch": 1, "past_seq": 1, "total_seq": dims["seq"] + 1, **dims}


def corpus_models(names):
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    for entry in manifest:
        if names and entry["name"] not in names:
            continue
        yield entry["name"], CORPUS / entry["file"], dict(entry.get("suggested_dims") or {})


def derive_constants(scratch: str, repeat: int = 5) -> dict[str, float]:
    """Measure onnxruntime's fixed cost: a session of a model with no weights (one ``Add`` of
    two 4-element inputs), created and run once; the median over ``repeat`` children.

    This is :data:`~onnx_ir_multidevice.planner.memory.RUNTIME_OVERHEAD_BYTES`.
    """
    x = ir.val("x", ir.DataType.FLOAT, ir.Shape([1, 4]))
    y = ir.val("y", ir.DataType.FLOAT, ir.Shape([1, 4]))
    z = ir.val("z", ir.DataType.FLOAT, ir.Shape([1, 4]))
    graph = ir.Graph([x, y], [z], nodes=[ir.node("Add", [x, y], outputs=[z])],
                     opset_imports={"": 18})  # fmt: skip
    path = Path(scratch) / "add.onnx"
    ir.save(ir.Model(graph, ir_version=10), path)
    feeds = {"x": np.ones((1, 4), np.float32), "y": np.ones((1, 4), np.float32)}
    found = {}
    for arena in (True, False):
        peaks = [measure_memory(path, feeds, arena=arena).peak_bytes for _ in range(repeat)]
        found[f"arena_{'on' if arena else 'off'}_peak_bytes"] = float(np.median(peaks))
    return found


TP_MODELS = (
    "gpt2_dynamo", "llama_gqa_dynamo", "bert_dynamo", "vit_dynamo", "whisper_encoder_dynamo"
)  # fmt: skip
"""Corpus transformers the tensor-parallel rows are measured on (those not in the corpus
are skipped)."""


def tp_llama_models(scratch: str):
    """testing/llama.py's decoders for the tensor-parallel rows: TINY and a mid-size one."""
    from onnx_ir_multidevice.testing import llama

    configs = {
        "llama_tiny": (llama.TINY, {"batch": 1, "seq": 16}),
        "llama_mid": (_small_llama(), {"batch": 1, "seq": 128}),
    }
    for name, (config, dims) in configs.items():
        no_cache = dataclasses.replace(config, kv_cache=False)
        path = llama.write_llama(Path(scratch) / f"{name}.onnx", no_cache)
        yield name, path, dims


def _rank_envs(split, inputs, folder: Path):
    """Run the split in this process (onnxruntime): every value each rank's segments read."""
    import onnxruntime as ort

    paths = [
        [folder / f"rank{k}_seg{s}.onnx" for s in range(split.num_segments)]
        for k in range(split.degree)
    ]
    for k, segments in enumerate(split.segments):
        for s, segment in enumerate(segments):
            ir.save(segment, paths[k][s], external_data=f"rank{k}_seg{s}.onnx.data",
                    size_threshold_bytes=1024)  # fmt: skip
    envs = [dict(inputs) for _ in range(split.degree)]
    for s in range(split.num_segments):
        for k in range(split.degree):
            options = ort.SessionOptions()
            options.log_severity_level = 3
            session = ort.InferenceSession(str(paths[k][s]), options,
                                           providers=["CPUExecutionProvider"])  # fmt: skip
            names = [i.name for i in session.get_inputs()]
            outs = session.run(None, {n: envs[k][n] for n in names})
            envs[k].update(zip([o.name for o in session.get_outputs()], outs, strict=True))
        for collective in split.steps[s]:
            whole = collective.combine([env[collective.partial] for env in envs])
            for env in envs:
                env[collective.value] = whole
    return paths, envs


def measure_tensor_parallel(name, path, dims, degrees, scratch, log):
    """Rows of every rank of the degree-``d`` split of one model (one stage), and the skips."""
    from onnx_ir_multidevice._split.tensor_parallel import split_tensor_parallel
    from onnx_ir_multidevice.planner.tensor_parallel import rank_resident_bytes
    from onnx_ir_multidevice.runtime.measure import measure_sessions

    rows, skipped = [], []
    model = load(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = plan_model(model, shards=[2], dims=dims, assign_names=True)
    memory = result.memory
    whole = memory.whole()
    sizes = memory.sizes
    inputs = make_inputs(model, dims=dims)
    for degree in degrees:
        try:
            split = split_tensor_parallel(model, degree, dims=dims)
        except Exception as error:
            skipped.append({"model": name, "degree": degree, "step": "split",
                            "reason": _short(error)})  # fmt: skip
            continue
        if split.degree == 1:
            skipped.append({"model": name, "degree": degree, "step": "regions",
                            "reason": _short(ValueError(split.reason))})  # fmt: skip
            continue
        folder = Path(scratch) / f"{name}-tp{degree}"
        folder.mkdir(parents=True, exist_ok=True)
        try:
            paths, envs = _rank_envs(split, inputs, folder)
            segments = [[n.op_type for n in segment.graph] for segment in split.segments[0]]
            nodes = list(model.graph)
            predicted = rank_resident_bytes(
                whole, degree, split.regions, sizes, nodes=nodes, segments=segments
            )
            naive = rank_resident_bytes(whole, degree, split.regions, sizes)
            for k in range(degree):
                archive = folder / f"env{k}.npz"
                np.savez(archive, **envs[k])
                on = measure_sessions(paths[k], archive, arena=True)
                off = measure_sessions(paths[k], archive, arena=False)
                row = {
                    "model": name, "degree": degree, "rank": k, "dims": dims,
                    "segments": split.num_segments, "regions": len(split.regions),
                    "predicted_bytes": predicted,
                    "sliced_only_bytes": naive,
                    "whole_predicted_bytes": whole.resident_bytes,
                    "measured_bytes": on.peak_bytes,
                    "measured_no_arena_bytes": off.peak_bytes,
                    "session_bytes": on.session_bytes,
                    "steady_bytes": on.steady_bytes,
                    "input_bytes": on.input_bytes,
                }  # fmt: skip
                rows.append(row)
                log(
                    f"{name:24} degree {degree} rank {k} ({split.num_segments} segments): "
                    f"predicted {row['predicted_bytes'] / MIB:8.1f} MiB, measured "
                    f"{row['measured_bytes'] / MIB:8.1f} MiB (arena off "
                    f"{row['measured_no_arena_bytes'] / MIB:8.1f}), ratio "
                    f"{row['predicted_bytes'] / max(row['measured_bytes'], 1):.2f}"
                )
        except Exception as error:
            traceback.print_exc(limit=3, file=sys.stderr)
            skipped.append({"model": name, "degree": degree, "step": "measure",
                            "reason": _short(error)})  # fmt: skip
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return rows, skipped


def summary(rows) -> list[str]:
    lines = []
    if not rows:
        return ["no stage measured"]
    for key, label in (("measured_bytes", "arena on"), ("measured_no_arena_bytes", "arena off")):
        ratios = [r["predicted_bytes"] / r[key] for r in rows]
        within = sum(0.8 <= q <= 1.2 for q in ratios)
        under = [r for r, q in zip(rows, ratios, strict=True) if q < 0.9]
        worst_low = min(range(len(rows)), key=lambda i: ratios[i])
        worst_high = max(range(len(rows)), key=lambda i: ratios[i])
        lo, hi = rows[worst_low], rows[worst_high]
        lines.append(
            f"{label}: {len(rows)} stages, {within} within +-20 % of measured; "
            f"{len(under)} under-predicted by more than 10 %; predicted/measured from "
            f"{ratios[worst_low]:.2f} ({lo['model']} {lo['shards']} shards stage {lo['stage']}) "
            f"to {ratios[worst_high]:.2f} ({hi['model']} {hi['shards']} shards stage "
            f"{hi['stage']})"
        )
    return lines


def tp_summary(rows) -> list[str]:
    """The worst ratios of the tensor-parallel rows against the goal."""
    if not rows:
        return ["no rank measured"]
    ratios = [r["predicted_bytes"] / r["measured_bytes"] for r in rows]
    within = sum(0.9 <= q <= 1.2 for q in ratios)
    lo, hi = rows[ratios.index(min(ratios))], rows[ratios.index(max(ratios))]
    line = (
        f"tensor parallel: {len(rows)} ranks, {within} within -10 %/+20 % of measured; "
        f"predicted/measured from {min(ratios):.2f} ({lo['model']} degree {lo['degree']} "
        f"rank {lo['rank']}) to {max(ratios):.2f} ({hi['model']} degree {hi['degree']} "
        f"rank {hi['rank']})"
    )
    return [line]


def main_tensor_parallel(args, scratch: str) -> None:
    """``--tensor-parallel``: the rows of every rank, written to ``--out``."""
    import onnxruntime

    degrees = [int(d) for d in args.tensor_parallel.split(",")]
    names = set(args.models.split(",")) if args.models else set(TP_MODELS)
    models = [] if args.no_corpus else list(corpus_models(names))
    models += [m for m in tp_llama_models(scratch) if not args.models or m[0] in names]
    if args.llm:
        dims = {"batch": 1, "seq": 128, "past_seq": 1, "total_seq": 129}  # as llm.py
        models.append((Path(args.llm).stem, Path(args.llm), dims))
    rows, skipped = [], []
    start = time.perf_counter()
    for name, path, dims in models:
        found, missed = measure_tensor_parallel(name, path, dims, degrees, scratch, print)
        rows += found
        skipped += missed
        for miss in missed:
            print(f"{name:24} degree {miss['degree']}: skipped at {miss['step']}: "
                  f"{miss['reason'][:120]}")  # fmt: skip
    document = {
        "command": " ".join(["python", "benchmarks/memory_accuracy.py", *sys.argv[1:]]),
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "onnxruntime": onnxruntime.__version__,
        "measure": "peak resident growth of one fresh child process holding all the sessions "
        "of one rank (one per segment), each run once in order at the planning dims "
        "(runtime.measure.measure_sessions); arena on (measured_bytes) and off",
        "predicted": "planner.tensor_parallel.rank_resident_bytes (predicted_bytes); "
        "sliced_only_bytes: the whole stage's resident bytes with only the sliced weights "
        "divided",
        "seconds": round(time.perf_counter() - start, 1),
        "rows": rows,
        "skipped": skipped,
    }
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    for line in tp_summary(rows):
        print(line)
    print(f"{len(skipped)} split(s) skipped; wrote {args.out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated corpus model names (default: all)")
    parser.add_argument("--shards", default="2,3,4")
    parser.add_argument("--llm", help="also measure this Llama model (e.g. tinyllama-1.1b-kv)")
    parser.add_argument("--no-corpus", action="store_true")
    parser.add_argument("--zoo", action="store_true", help="also generated zoo and Llama models")
    parser.add_argument("--scratch", help="folder for stage files (default: a temporary one)")
    parser.add_argument("--out", help=f"results file (default {OUT.name}, {TP_OUT.name})")
    parser.add_argument(
        "--tensor-parallel",
        help="comma-separated degrees: measure every rank of the tensor-parallel splits of "
        "the corpus transformers and the built Llama decoders instead (e.g. 2,4)",
    )
    parser.add_argument("--derive", action="store_true", help="re-derive the runtime constants")
    parser.add_argument(
        "--repredict",
        action="store_true",
        help="keep the measurements of --out, recompute the predictions (after a model change)",
    )
    args = parser.parse_args()
    args.out = args.out or str(TP_OUT if args.tensor_parallel else OUT)
    scratch = tempfile.mkdtemp(prefix="omny-accuracy-", dir=args.scratch)
    try:
        if args.tensor_parallel:
            main_tensor_parallel(args, scratch)
            return
        if args.derive:
            print(json.dumps(derive_constants(scratch), indent=2))
            return
        counts = [int(n) for n in args.shards.split(",")]
        names = set(args.models.split(",")) if args.models else None
        models = [] if args.no_corpus else list(corpus_models(names))
        if args.zoo:
            models += list(zoo_models(scratch))
        if args.llm:
            models.append((Path(args.llm).stem, Path(args.llm), dict(LLM_DIMS)))
        if args.repredict:
            document = json.loads(Path(args.out).read_text())
            repredict(document, models, print)
            document["repredicted"] = datetime.date.today().isoformat()
            Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
            for line in summary(document["rows"]):
                print(line)
            return
        rows, skipped = [], []
        start = time.perf_counter()
        for name, path, dims in models:
            try:
                found, missed = measure_model(name, path, dims, counts, scratch, print)
            except Exception as error:
                traceback.print_exc(limit=2, file=sys.stderr)
                found, missed = [], [{"model": name, "shards": None, "step": "load",
                                      "reason": _short(error)}]  # fmt: skip
            rows += found
            skipped += missed
            for miss in missed:
                print(f"{name:28} {miss['shards']} shards: skipped at {miss['step']}: "
                      f"{miss['reason'][:120]}")  # fmt: skip
        import onnxruntime

        document = {
            "command": " ".join(["python", "benchmarks/memory_accuracy.py", *sys.argv[1:]]),
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
            "onnxruntime": onnxruntime.__version__,
            "session": "CPUExecutionProvider, onnxruntime default options "
            "(graph optimization ORT_ENABLE_ALL, memory pattern on, default threads); "
            "enable_cpu_mem_arena on (measured_bytes) and off (measured_no_arena_bytes)",
            "measure": "peak resident growth (VmHWM after session creation and one run, "
            "minus VmRSS with onnxruntime imported) in a fresh child process per stage",
            "seconds": round(time.perf_counter() - start, 1),
            "rows": rows,
            "skipped": skipped,
        }
        Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
        for line in summary(rows):
            print(line)
        print(f"{len(skipped)} plan(s) skipped; wrote {args.out}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
