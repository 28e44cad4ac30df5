"""Write ``notebooks/01_omny_format.ipynb`` (without outputs) from the cells below.

Edit the cells here and rerun ``python scripts/make_notebook_01.py``; the notebook is committed
and executed by ``scripts/run_notebooks.py``.
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
model gives back the same bytes.""",
    ),
    (
        "code",
        """from onnx_ir_multidevice import omny
from onnx_ir_multidevice._io import load
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
        """from onnx_ir_multidevice._binding import bind

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

from onnx_ir_multidevice._io import save

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

from onnx_ir_multidevice._format import OmnyMetadata
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
