"""A bounded fuzz of ``.omny`` plans through the checker and every command that reads them.

Plans for a real 4-layer chain (``test_bad_input._chain``): the planned document with its
references, shapes, counts and memory figures changed at random, random documents of the
schema (``test_format.DOCUMENT``), and both mutated as text or structure. Each goes into a real
model file, then through :func:`~onnx_ir_multidevice.check` and every subcommand of
``docs/cli.md``'s exit status table. The promises: no traceback and no exception out of
``check()``; exit status 0, 1 or 2 only, as the table says (2 exactly when the plan cannot be
read, except for ``plan``, which replaces it); ``omny check`` agrees with ``check()``.
(``tests/test_format.py`` fuzzes the JSON parser alone; this extends it to the commands.)
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plain_text import assert_plain
from test_bad_input import LAYERS, WIDTH, _chain, _metadata
from test_format import ANY_VALUE, DOCUMENT, containers, mutated_text

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._errors import OmnyFormatError
from onnx_ir_multidevice._proto.files import load, save
from onnx_ir_multidevice.checker.core import run_check
from onnx_ir_multidevice.checker.diagnostics import CODES

pytest.importorskip("onnxruntime")

NODES = [f"L{i}" for i in range(LAYERS)] + ["nope", ""]
TENSORS = [f"h{i + 1}" for i in range(LAYERS)] + ["x", "w0", "nope", ""]
DIMS = st.sampled_from([-1, 0, 1, WIDTH, 3, 2**31, 2**62, -1])


def _planned_document() -> dict[str, Any]:
    return json.loads(_metadata().to_json())


@st.composite
def changed_plan(draw) -> dict[str, Any]:
    """The chain's plan with references, shapes and numbers changed (valid JSON, mostly valid
    schema): what a user or a buggy exporter writes."""
    document = _planned_document()
    cuts = document["cut_points"]

    def sometimes() -> bool:  # each change in about one case of eight
        return draw(st.integers(0, 7)) == 0

    for cut in cuts:
        if sometimes():
            cut["after_node"] = draw(st.sampled_from(NODES))
        if sometimes():
            cut["tensor_name"] = draw(st.sampled_from(TENSORS))
        if sometimes():
            cut["shape"] = draw(st.lists(DIMS, max_size=3))
        if sometimes():
            cut["dtype"] = draw(st.sampled_from(["float16", "int64", "bogus", "float32"]))
        if sometimes():
            cut["shard_memory_mb"] = draw(st.integers(0, 10**6))
    if sometimes():
        cuts.append(dict(cuts[0], id=draw(st.sampled_from(["cut_0", "cut_9"]))))
    ids = [cut["id"] for cut in cuts] + ["cut_9"]
    sharding = document["sharding"]
    configurations = []
    for _ in range(draw(st.integers(0, 3))):
        num_shards = draw(st.integers(1, LAYERS + 1))
        picked = draw(st.lists(st.sampled_from(ids), max_size=LAYERS))
        if draw(st.booleans()):  # a well-formed one: num_shards - 1 cuts in graph order
            picked = sorted(set(picked))[: num_shards - 1]
        memory = draw(st.lists(st.integers(0, 5000), min_size=num_shards, max_size=num_shards))
        configurations.append(
            {"num_shards": num_shards, "memory_per_shard_mb": memory, "cut_point_ids": picked}
        )
    if draw(st.booleans()):  # else the planned configurations stay
        sharding["configurations"] = configurations
        counts = sorted({c["num_shards"] for c in configurations}) or [2]
        sharding["allowed_shards"] = counts
        sharding["min_shards"], sharding["max_shards"] = counts[0], counts[-1]
    if sometimes():
        sharding["max_shard_size_mb"] = draw(st.integers(0, 10))
    return document


@st.composite
def structurally_mutated(draw, documents: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    document = copy.deepcopy(draw(documents))
    target = draw(st.sampled_from(containers(document, [])))
    keys = list(target) if isinstance(target, dict) else list(range(len(target)))
    if keys and draw(st.booleans()):
        del target[draw(st.sampled_from(keys))]
    elif keys:
        target[draw(st.sampled_from(keys))] = copy.deepcopy(draw(ANY_VALUE))
    return document


def _dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2)


PLAN_TEXT = st.one_of(
    changed_plan().map(_dumps),
    changed_plan().map(_dumps),
    structurally_mutated(changed_plan()).map(_dumps),
    DOCUMENT.map(_dumps),
    mutated_text().map(lambda t: t if isinstance(t, str) else t.decode("utf-8", "replace")),
)
VERSION = st.sampled_from(["1.0", "1.0", "1.0", "2.0", None])

#: Each subcommand on the model file ``F`` (``OUT``: a fresh folder).
COMMANDS = {
    "inspect": ["inspect", "F"],
    "check": ["check", "F"],
    "annotate": ["annotate", "F", "OUT/a.onnx"],
    "plan": ["plan", "F", "-o", "OUT/p.omny", "--shards", "2"],
    "split": ["split", "F", "OUT/stages", "--shards", "2"],
    "export": ["export", "--format", "split", "F", "OUT/exported", "--shards", "2"],
    "convert": ["convert", "F", "OUT/converted.omny", "--container", "v2"],
    "oaax-convert": ["oaax-convert", "F", "OUT/oaax"],
    "verify": ["verify", "F"],
    "run": ["run", "F", "--shards", "2", "--requests", "1", "--warmup", "0"],
    "demo": ["demo", "--model", "F", "--only", "load", "check"],
}


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@settings(
    max_examples=int(os.environ.get("OMNY_FUZZ_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(text=PLAN_TEXT, version=VERSION)
def test_any_plan_goes_through_check_and_every_command_as_documented(text, version):
    model = _chain()
    model.metadata_props["omnynet_metadata"] = text
    if version is not None:
        model.metadata_props["omnynet_version"] = version
    with tempfile.TemporaryDirectory(prefix="omny-fuzz-") as folder:
        path = Path(folder) / "model.omny"
        save(model, path)
        try:
            omny.read(load(path))
            readable = True
        except OmnyFormatError:
            readable = False
        report = run_check(path)  # never raises on content
        assert report.model is not None
        assert all(d.code in CODES for d in report.diagnostics)
        assert report.unreadable == (not readable)
        for name, template in COMMANDS.items():
            out_dir = Path(folder) / f"out_{name}"
            out_dir.mkdir()
            argv = [str(path) if a == "F" else a.replace("OUT", str(out_dir)) for a in template]
            code, out, err = _run(argv)
            assert "Traceback" not in out + err, (name, err)
            assert code in (0, 1, 2), (name, code, err)
            if name == "plan":
                assert code in (0, 1), (name, err)  # replaces the plan, readable or not
            elif name == "convert":
                pass  # carries the plan as the upstream writer does, without reading it
            elif name == "oaax-convert":
                # Its own codes: an input it cannot take (several configurations) is OAAX106.
                assert readable or code == 2, (name, code, err)
            elif not readable:
                assert code == 2, (name, code, err)
            else:
                assert code in (0, 1), (name, code, err)
            if name == "check":
                expected = 2 if not readable else 1 if report.errors else 0
                assert code == expected, (out, err)
            if code == 2:
                last = err.strip().splitlines()[-1]
                assert last.startswith(("omny: error: ", "omny-oaax-toolchain: error: ")), err
            assert_plain(err)
