"""Write ``notebooks/01_omny_format.ipynb`` (without outputs) from the cells below.

Edit the cells here and rerun ``python scripts/make_notebook_01.py``, then
``python scripts/run_notebooks.py --write notebooks/01_omny_format.ipynb``: the notebook is
committed with its outputs, and executed by ``scripts/run_notebooks.py`` in CI.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

OUT = Path(__file__).resolve().parent.parent / "notebooks" / "01_omny_format.ipynb"

CELLS = [
    (
        "md",
        """# The `.omny` format

An `.omny` file is an ordinary ONNX model whose `metadata_props` carry two entries:
`omnynet_version` and `omnynet_metadata`, a JSON document that says where the model can be cut
(*cut points*) and how to shard it over 2, 4... devices (*shard configurations*).

This notebook reads the example bundled with the package (a 4-layer GPT), looks at its cut
points, renames a tensor to show that the plan follows the graph, and checks that saving the
model gives back the same bytes. It then builds a plan from scratch, round-trips and diffs
protos, looks at bound objects and unresolved references, and ends with the checker, the
verifier and the error types, each triggered by a real bad input.""",
    ),
    (
        "code",
        """from onnx_ir_multidevice import omny
from onnx_ir_multidevice import load
from onnx_ir_multidevice.examples import GPT_TINY

model = load(GPT_TINY)           # an onnx_ir.Model
metadata = omny.read(model)      # an OmnyMetadata (frozen dataclasses), None for plain ONNX
print(GPT_TINY.name, f"{GPT_TINY.stat().st_size:,} bytes")
print(metadata.model)
print("inputs: ", [(t.name, t.shape, t.dtype) for t in metadata.inputs])
print("outputs:", [(t.name, t.shape, t.dtype) for t in metadata.outputs])""",
    ),
    (
        "md",
        """The two properties are plain strings in the model; any ONNX tool keeps them.""",
    ),
    (
        "code",
        """print(model.metadata_props["omnynet_version"])
print(model.metadata_props["omnynet_metadata"][:300], "...")""",
    ),
    (
        "md",
        """## Cut points

Each cut point names the node after which to cut and the tensor that crosses the cut, with
the memory of the stage that ends there. A shard configuration picks `N - 1` cut points for
`N` shards.""",
    ),
    (
        "code",
        """for cut in metadata.cut_points:
    print(f"{cut.id}: after {cut.after_node!r}, tensor {cut.tensor_name!r} "
          f"{list(cut.shape)} {cut.dtype}, stage {cut.shard_memory_mb} MiB, "
          f"cumulative {cut.cumulative_memory_mb} MiB")
for config in metadata.sharding.configurations:
    print(f"{config.num_shards} shards: cuts {list(config.cut_point_ids)}, "
          f"MiB per shard {list(config.memory_per_shard_mb)}")""",
    ),
    (
        "md",
        """## Binding the plan to the graph

`bind` resolves every name of the file to an object of the graph: a cut point holds the
`ir.Node` it comes after and the `ir.Value` it cuts. A name that does not resolve is kept as
an unresolved reference (and the checker reports it).""",
    ),
    (
        "code",
        """from onnx_ir_multidevice import bind

plan = bind(model, metadata)
for cut in plan.cut_points:
    consumers = sorted(use.node.name for use in cut.value.uses())
    print(f"{cut.id}: {cut.node.op_type} node {cut.node.name!r} -> {cut.value.name!r} "
          f"{cut.value.shape}, read by {consumers}")
print("unresolved:", plan.unresolved)""",
    ),
    (
        "md",
        """## Rename a tensor: the plan follows

Names are derived from the IR objects when the plan is written back, so renaming the value in
the graph renames it in the metadata too. Unchanged parts are written back exactly as they
were read.""",
    ),
    (
        "code",
        """cut = plan.cut_point("cut_2")
before = cut.spec.tensor_name
cut.value.name = "hidden_states_after_layer_1"
updated = plan.to_metadata()
print(before, "->", updated.cut_point("cut_2").tensor_name)
print("after_node unchanged:", updated.cut_point("cut_2").after_node)
assert updated.cut_point("cut_2").tensor_name == "hidden_states_after_layer_1"

# Undo the rename: the metadata is again the original document, byte for byte.
cut.value.name = before
assert plan.to_metadata().to_json() == metadata.to_json()""",
    ),
    (
        "md",
        """## Round trip, byte for byte

Loading and saving a model changes nothing: the proto, the multi-device fields and the
`.omny` JSON come back identical.""",
    ),
    (
        "code",
        """import tempfile
from pathlib import Path

from onnx_ir_multidevice import save

original = GPT_TINY.read_bytes()
with tempfile.TemporaryDirectory() as tmp:
    copy = Path(tmp) / "copy.omny"
    save(load(GPT_TINY), copy)
    print("byte-identical:", copy.read_bytes() == original)
    assert copy.read_bytes() == original""",
    ),
    (
        "md",
        """The JSON layer is lossless on its own too: the example document of the `.omny`
specification parses and is written back unchanged, and keys it does not know are kept.""",
    ),
    (
        "code",
        """import json

from onnx_ir_multidevice import OmnyMetadata
from onnx_ir_multidevice.examples import SPEC_EXAMPLE_JSON

text = SPEC_EXAMPLE_JSON.read_text()
spec_metadata = OmnyMetadata.from_json(text)
print(spec_metadata.model.name, [c.num_shards for c in spec_metadata.sharding.configurations])
print("same document:", json.loads(spec_metadata.to_json()) == json.loads(text))

document = json.loads(text)
document["model"]["vendor_note"] = "kept"
again = OmnyMetadata.from_json(json.dumps(document))
print("unknown key kept:", json.loads(again.to_json())["model"]["vendor_note"])""",
    ),
    (
        "md",
        """## Build a plan from scratch

Every object of the document is a frozen dataclass: `ModelInfo`, `TensorInfo` for inputs and
outputs, `CutPoint`, `ShardConfiguration` inside `Sharding`, and `ExportInfo`, all under
`OmnyMetadata`. Fields not given take the defaults of the reference writer. Here is a plan for
a small two-layer MLP, cut after its first layer.""",
    ),
    (
        "code",
        """import numpy as np
import onnx_ir as ir

import onnx_ir_multidevice as omd


def mlp(activation="Relu", domain=""):
    \"\"\"Return x[batch, 8] -> fc1 (MatMul) -> h1 -> act -> a1 -> fc2 (MatMul) -> y.\"\"\"
    float32 = ir.TensorType(ir.DataType.FLOAT)

    def value(name, width):
        return ir.Value(name=name, shape=ir.Shape(["batch", width]), type=float32)

    rng = np.random.default_rng(0)
    w1 = ir.Value(name="w1", const_value=ir.tensor(rng.standard_normal((8, 16), np.float32)))
    w2 = ir.Value(name="w2", const_value=ir.tensor(rng.standard_normal((16, 8), np.float32)))
    x = value("x", 8)
    fc1 = ir.Node("", "MatMul", [x, w1], outputs=[value("h1", 16)], name="fc1")
    act = ir.Node(domain, activation, fc1.outputs, outputs=[value("a1", 16)], name="act")
    fc2 = ir.Node("", "MatMul", [act.outputs[0], w2], outputs=[value("y", 8)], name="fc2")
    opsets = {"": 18, **({domain: 1} if domain else {})}
    graph = ir.Graph([x], fc2.outputs, nodes=[fc1, act, fc2], initializers=[w1, w2],
                     opset_imports=opsets, name="mlp")
    return ir.Model(graph, ir_version=10)


mlp_plan = omd.OmnyMetadata(
    model=omd.ModelInfo("mlp", architecture="mlp", total_params=256, total_size_mb=1,
                        inference_memory_mb=1),
    inputs=(omd.TensorInfo("x", (-1, 8)),),
    outputs=(omd.TensorInfo("y", (-1, 8)),),
    cut_points=(
        omd.CutPoint("cut_1", after_node="fc1", tensor_name="h1", shape=(-1, 16),
                     cumulative_memory_mb=1, shard_memory_mb=1),
    ),
    sharding=omd.Sharding(min_vram_mb=1, max_shard_size_mb=1, min_shards=2, max_shards=2,
                          allowed_shards=(2,), configurations=(
        omd.ShardConfiguration(num_shards=2, memory_per_shard_mb=(1, 1),
                               cut_point_ids=("cut_1",)),
    )),
    export_info=omd.ExportInfo(exported_at="2026-01-06T12:00:00Z",
                               source_framework="onnx-ir", onnx_opset=18),
)
document = json.loads(mlp_plan.to_json())
for key, value in document.items():   # spec keys only, in spec order
    print(f"{key:12}", list(value) if isinstance(value, dict) else value)
assert "validated" not in document["export_info"]   # written only when set
assert omd.OmnyMetadata.from_json(mlp_plan.to_json()) == mlp_plan""",
    ),
    (
        "md",
        """Written into the model it describes, the plan checks clean and splits: `omny.write` puts
the two `metadata_props` entries in place, and the 2-shard configuration cuts at `h1`.""",
    ),
    (
        "code",
        """mlp_model = mlp()
omny.write(mlp_model, mlp_plan)
print(sorted(mlp_model.metadata_props))
print([d for d in omd.check(mlp_model) if d.is_error])
stages = omd.split(mlp_model, 2)
print([[node.name for node in stage.graph] for stage in stages])""",
    ),
    (
        "md",
        """## Round trip and diff

`omd.roundtrip` passes an `onnx.ModelProto` through onnx-ir and back; `omd.diff` lists the
differences between two protos by field path. The round trip of the GPT example loses
nothing; a planted difference (a renamed node and an edited metadata entry) is found and
located.""",
    ),
    (
        "code",
        """import onnx

proto = onnx.load(GPT_TINY)
back = omd.roundtrip(proto)
print("differences after the round trip:", omd.diff(proto, back))
assert omd.diff(proto, back) == []

planted = onnx.ModelProto()
planted.CopyFrom(back)
planted.graph.node[3].name = "renamed_node"
planted.metadata_props[0].value = "0.9"
for line in omd.diff(proto, planted):
    print(line)
assert len(omd.diff(proto, planted)) == 2""",
    ),
    (
        "md",
        """## Bound objects and unresolved references

`bind` returns a `BoundPlan`: one `BoundCutPoint` per cut point (the spec entry, the node and
value it resolves to, `resolved`) and one `BoundConfiguration` per shard configuration (its
bound cut points, `cut_values()`).

The example document of the specification describes a SAM2 encoder; its 4-shard configuration
names a cut point `cut_3` that `cut_points` does not define. Bound to a graph that has the
names the document uses, everything else resolves and `cut_3` becomes an
`UnresolvedReference`, with its JSON path and what to do.""",
    ),
    (
        "code",
        """import dataclasses


def sam_like():
    \"\"\"Return image -> encoder.layer.12, .24, .36 -> mask_decoder -> masks (spec names).\"\"\"
    image = ir.Value(name="image", shape=ir.Shape([1, 3, 1024, 1024]),
                     type=ir.TensorType(ir.DataType.FLOAT))
    nodes, current = [], image
    for layer in (12, 24, 36):
        node = ir.Node("", "Relu", [current], outputs=[ir.Value(name=f"hidden_states_{layer}")],
                       name=f"encoder.layer.{layer}")
        nodes.append(node)
        current = node.outputs[0]
    nodes.append(ir.Node("", "Sigmoid", [current], outputs=[ir.Value(name="masks")],
                         name="mask_decoder"))
    graph = ir.Graph([image], nodes[-1].outputs, nodes=nodes, opset_imports={"": 18})
    return ir.Model(graph, ir_version=10)


sam_model = sam_like()
spec_plan = omd.bind(sam_model, spec_metadata)
assert isinstance(spec_plan, omd.BoundPlan)
for cut in spec_plan.cut_points:
    assert isinstance(cut, omd.BoundCutPoint)
    print(cut.json_path, cut.id, cut.node.name, "->", cut.value.name, "resolved:", cut.resolved)
for config in spec_plan.configurations:
    assert isinstance(config, omd.BoundConfiguration)
    print(config.json_path, config.num_shards, "shards:",
          [c.id if c else None for c in config.cut_points], "resolved:", config.resolved)
for reference in spec_plan.unresolved:
    assert isinstance(reference, omd.UnresolvedReference)
    print(reference.kind, reference.json_path, repr(reference.name))
    print("  ", reference.reason)""",
    ),
    (
        "md",
        """The 2-shard configuration is usable as is; the 4-shard one is not until `cut_3` exists.
Define it (the metadata is immutable: `dataclasses.replace` derives a new document) and the
binding is complete.""",
    ),
    (
        "code",
        """print([v.name for v in spec_plan.configuration_for(2).cut_values()])

cut_3 = omd.CutPoint("cut_3", after_node="encoder.layer.36", tensor_name="hidden_states_36",
                     shape=(1, 64, 64, 768), cumulative_memory_mb=1800, shard_memory_mb=600)
fixed = dataclasses.replace(spec_metadata, cut_points=(*spec_metadata.cut_points, cut_3))
fixed_plan = omd.bind(sam_model, fixed)
print("unresolved:", fixed_plan.unresolved)
print([v.name for v in fixed_plan.configuration_for(4).cut_values()])
assert fixed_plan.unresolved == ()""",
    ),
    (
        "md",
        """## Checking, verifying and errors

`omd.check` returns a list of `Diagnostic`s (code, `Severity`, message, location), errors
first. The GPT example has *relaxed* cuts (the causal mask and shape vectors cross each
boundary besides the cut tensor): errors by default, warnings with `relaxed_cuts=True`.""",
    ),
    (
        "code",
        """from collections import Counter

diagnostics = omd.check(GPT_TINY)
assert all(isinstance(d, omd.Diagnostic) for d in diagnostics)
print(Counter(str(d.severity) for d in diagnostics))
print(diagnostics[0].code, diagnostics[0].severity is omd.Severity.ERROR, diagnostics[0].location)
relaxed = omd.check(GPT_TINY, relaxed_cuts=True)
print(Counter(str(d.severity) for d in relaxed))
assert not any(d.severity is omd.Severity.ERROR for d in relaxed)""",
    ),
    (
        "md",
        """`omd.verify` splits a model, runs the whole model and the chained stages on
onnxruntime with the same inputs, and compares the outputs: a `VerifyReport`. Here the
bundled BERT example (`examples.example_path()`) in 2 shards.""",
    ),
    (
        "code",
        """from onnx_ir_multidevice import examples

bert = omd.load(examples.example_path())
report = omd.verify(bert, 2)
assert isinstance(report, omd.VerifyReport) and report.ok
print(report)
print(report.num_stages, "stages;", [(o.name, o.max_abs_diff) for o in report.outputs])""",
    ),
    (
        "md",
        """Every error the package raises on bad input is an `OmnyError`; each subclass is also the
closest built-in exception (`ValueError`, `OSError`, `RuntimeError`). Each cell below feeds a
real bad input.

**`OmnyFormatError`**: a malformed document; `.path` is the JSON path, `.reason` what is
wrong.""",
    ),
    (
        "code",
        """broken = json.loads(text)
del broken["cut_points"][1]["tensor_name"]
try:
    omd.OmnyMetadata.from_json(json.dumps(broken))
except omd.OmnyFormatError as error:
    print("path:", error.path, "| reason:", error.reason)
    print("also a ValueError:", isinstance(error, ValueError))""",
    ),
    (
        "md",
        """**`OmnyIOError`** (an `OSError`): a missing file, or a save that may not overwrite.""",
    ),
    (
        "code",
        """try:
    omd.load("no_such_model.omny")
except omd.OmnyIOError as error:
    print(type(error).__name__, "-", str(error).split(";")[0])

with tempfile.TemporaryDirectory() as tmp:
    target = Path(tmp) / "mlp.omny"
    omd.save(mlp_model, target)
    try:
        omd.save(mlp_model, target, overwrite=False)
    except omd.OmnyIOError as error:
        print(type(error).__name__, "- overwrite refused; OSError:", isinstance(error, OSError))""",
    ),
    (
        "md",
        """**`BindingError`**: asking the unresolved 4-shard configuration of the spec example for
its cut tensors.""",
    ),
    (
        "code",
        """try:
    spec_plan.configuration_for(4).cut_values()
except omd.BindingError as error:
    print(error)""",
    ),
    (
        "md",
        """**`CheckError`**: `annotate(check=True)` (the default) refuses a plan with errors,
here the spec example with its undefined `cut_3` written into the model; `.diagnostics` holds the
`Diagnostic`s. `passes.CheckPass` does the same as an onnx-ir pass, here on the GPT example,
whose relaxed cuts are errors unless `relaxed_cuts=True`.""",
    ),
    (
        "code",
        """bad_model = sam_like()
omny.write(bad_model, spec_metadata)
try:
    omd.annotate(bad_model, check=True)
except omd.CheckError as error:
    print([(d.code, d.location) for d in error.diagnostics])

gpt = load(GPT_TINY)
try:
    omd.passes.CheckPass()(gpt)
except omd.CheckError as error:
    print(len(error.diagnostics), "errors, first:", error.diagnostics[0].code)
result = omd.passes.CheckPass(relaxed_cuts=True)(gpt)
print("relaxed_cuts=True: passes, model modified:", result.modified)""",
    ),
    (
        "md",
        """**`SplitError`**: the BERT example is planned for 2, 3 and 4 shards, not 5.""",
    ),
    (
        "code",
        """try:
    omd.split(bert, 5)
except omd.SplitError as error:
    print(error)""",
    ),
    (
        "md",
        """**`VerifyError`** (a `RuntimeError`): the MLP with an activation from a custom domain
that onnxruntime does not know; it splits fine, but cannot run.""",
    ),
    (
        "code",
        """custom = mlp(activation="FancyRelu", domain="com.example")
omny.write(custom, mlp_plan)
print("splits into", len(omd.split(custom, 2)), "stages")
try:
    omd.verify(custom, 2)
except omd.VerifyError as error:
    print(str(error)[:120])""",
    ),
    (
        "md",
        """**`OmnyError`** is the base of them all: one `except` clause catches each of the failures
above.""",
    ),
    (
        "code",
        """failures = {
    "malformed JSON": lambda: omd.OmnyMetadata.from_json("{not json"),
    "missing file": lambda: omd.load("no_such_model.omny"),
    "unresolved configuration": lambda: spec_plan.configuration_for(4).cut_values(),
    "plan with errors": lambda: omd.annotate(bad_model),
    "no 5-shard configuration": lambda: omd.split(bert, 5),
    "unknown operator": lambda: omd.verify(custom, 2),
}
for what, failure in failures.items():
    try:
        failure()
    except omd.OmnyError as error:
        print(f"{what:25} -> {type(error).__name__}")
    else:
        raise AssertionError(f"{what} did not fail")""",
    ),
]


def build() -> nbformat.NotebookNode:
    """Return the notebook."""
    cells = [new_markdown_cell(s) if kind == "md" else new_code_cell(s) for kind, s in CELLS]
    notebook = new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    notebook.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(notebook.cells):
        cell["id"] = f"cell-{i:02d}"
    return notebook


def main() -> None:
    """Write the notebook."""
    OUT.parent.mkdir(exist_ok=True)
    nbformat.write(build(), OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
