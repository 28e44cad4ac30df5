"""Node-data overlays for Model Explorer (``onnx_ir_multidevice.view``, ``omny view``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from onnx_ir_multidevice import omny, save
from onnx_ir_multidevice.planner import plan_model
from onnx_ir_multidevice.testing.zoo import synthetic_transformer
from onnx_ir_multidevice.view import node_data, prepare

ROOT = Path(__file__).resolve().parent.parent


def _planned(path: Path, *, tensor_parallel: bool = False) -> Path:
    model = synthetic_transformer(2)
    result = plan_model(model, shards=[2, 3], dims={"batch": 1, "seq": 4})
    omny.write(model, result.metadata)
    if tensor_parallel:
        stages = omny.TensorParallelConfiguration.contiguous(
            "omny/2-shards", [2, 2], result.planning_dims
        )
        omny.write_tensor_parallel(model, omny.TensorParallelRecord((stages,)))
    save(model, path)
    return path


def test_node_data_per_configuration_with_stages_cuts_and_sharding():
    model = synthetic_transformer(2)
    result = plan_model(model, shards=[2, 3], dims={"batch": 1, "seq": 4})
    omny.write(model, result.metadata)
    stages = omny.TensorParallelConfiguration.contiguous(
        "omny/2-shards", [2, 2], result.planning_dims
    )
    omny.write_tensor_parallel(model, omny.TensorParallelRecord((stages,)))
    files = node_data(model)
    assert [(f.configuration, f.num_stages) for f in files] == [
        ("omny/2-shards", 2),
        ("omny/3-shards", 3),
    ]
    for item in files:
        ((graph, data),) = item.data.items()
        assert graph == model.graph.name
        values = [r["value"] for r in data["results"].values()]
        assert len(values) == len(model.graph)
        for stage in range(item.num_stages):
            assert any(v.startswith(f"stage {stage} |") for v in values)
        assert any("cut -> stage" in v for v in values)
    two = files[0].data[model.graph.name]["results"].values()
    assert any("weight split axis" in r["value"] for r in two)
    assert any("devices 2,3" in r["value"] for r in two)


def test_node_data_refuses_an_unplanned_model_and_a_missing_configuration():
    from onnx_ir_multidevice import ViewError

    with pytest.raises(ViewError, match="no plan"):
        node_data(synthetic_transformer(1))
    model = synthetic_transformer(1)
    omny.write(model, plan_model(model, shards=[2], dims={"batch": 1, "seq": 4}).metadata)
    with pytest.raises(ViewError, match="Configuration 5 does not exist"):
        node_data(model, configuration=5)


def test_overlays_load_in_model_explorer_and_key_adapter_node_ids(tmp_path):
    builder = pytest.importorskip(
        "model_explorer.node_data_builder", reason="the view extra is not installed"
    )
    adapter = pytest.importorskip(
        "model_explorer_onnx.main", reason="the view extra is not installed"
    )
    source = _planned(tmp_path / "m.omny", tensor_parallel=True)
    (overlay,) = prepare(source, tmp_path / "out")
    graphs = adapter.ONNXAdapter().convert(str(overlay.model_path), {})["graphs"]
    main = graphs[0]
    ids = {node.id for node in main.nodes}
    assert len(overlay.node_data) == 2
    for item in overlay.node_data:
        document = json.loads(item.path.read_text(encoding="utf-8"))
        ((graph, data),) = document.items()
        assert graph == main.id
        assert set(data["results"]) <= ids
        # the viewer's own builder reads it and writes the same document back
        results = {k: builder.NodeDataResult(**v) for k, v in data["results"].items()}
        fields = {k: v for k, v in data.items() if k != "results"}
        rebuilt = builder.ModelNodeData(
            graphsData={graph: builder.GraphNodeData(results=results, **fields)}
        )
        assert json.loads(rebuilt.to_json_string()) == document
        colours = {r["bgColor"] for r in data["results"].values()}
        assert len(colours) == item.num_stages


def _view_cli(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "onnx_ir_multidevice._cli", "view", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _printed_paths(document: dict) -> list:
    """Every path the ``--json`` document names (the models' and the node-data files')."""
    paths = []
    for model in document["result"]["models"]:
        paths.append(model["model"])
        paths.extend(entry["path"] for entry in model["node_data"])
    return paths


def test_write_only_cli(tmp_path):
    source = _planned(tmp_path / "m.omny")
    result = _view_cli(source, "--write", tmp_path / "w", "--configuration", "1", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    (entry,) = document["result"]["models"][0]["node_data"]
    assert entry["configuration"] == "omny/3-shards"
    assert Path(entry["path"]).is_file()


def test_write_only_cli_names_only_files_it_wrote(tmp_path):
    from onnx_ir_multidevice import save_split

    source = _planned(tmp_path / "m.omny")
    model = synthetic_transformer(2)
    omny.write(model, plan_model(model, shards=[2], dims={"batch": 1, "seq": 4}).metadata)
    save_split(model, tmp_path / "split", 2)
    for given, out in ((source, tmp_path / "w"), (tmp_path / "split", tmp_path / "ws")):
        result = _view_cli(given, "--write", out, "--json")
        assert result.returncode == 0, result.stderr
        document = json.loads(result.stdout)
        # every path printed is a file that exists; --write writes no model for the viewer,
        # and the document says so (null)
        paths = [p for p in _printed_paths(document) if p is not None]
        assert paths
        assert all(Path(p).is_file() for p in paths), paths
        assert all(m["model"] is None for m in document["result"]["models"])
        assert sorted(Path(p).name for p in paths) == sorted(f.name for f in out.iterdir())


def test_overlays_read_no_weights(tmp_path):
    # the viewer reads the graph, not the weights: a plan whose data file is gone is shown
    # (the small integer constants the shapes need stay in the model file)
    model = synthetic_transformer(2)
    omny.write(model, plan_model(model, shards=[2], dims={"batch": 1, "seq": 4}).metadata)
    save(model, tmp_path / "m.omny", external_data=True)
    (data,) = (p for p in tmp_path.iterdir() if p.name != "m.omny")
    data.unlink()
    (overlay,) = prepare(tmp_path / "m.omny", tmp_path / "out", write_model=False)
    (item,) = overlay.node_data
    assert item.path is not None
    results = next(iter(json.loads(item.path.read_text(encoding="utf-8")).values()))["results"]
    assert len(results) == len(model.graph)


def test_split_folder_overlays_each_stage(tmp_path):
    from onnx_ir_multidevice import save_split

    model = synthetic_transformer(2)
    omny.write(model, plan_model(model, shards=[2], dims={"batch": 1, "seq": 4}).metadata)
    save_split(model, tmp_path / "split", 2)
    overlays = prepare(tmp_path / "split", tmp_path / "out")
    assert [o.node_data[0].configuration for o in overlays] == ["stage_0", "stage_1"]
    assert all(o.model_path is not None and o.model_path.is_file() for o in overlays)
    only = prepare(tmp_path / "split", tmp_path / "only", write_model=False)
    assert [o.model_path for o in only] == [None, None]
    assert sorted(p.name for p in (tmp_path / "only").iterdir()) == [
        "stage_0.node_data.json",
        "stage_1.node_data.json",
    ]


def _browser() -> str:
    pytest.importorskip("model_explorer", reason="the view extra is not installed")
    pytest.importorskip("model_explorer_onnx", reason="the view extra is not installed")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no Chromium on PATH (apt-get install chromium)")
    return found


def test_viewer_shows_the_stages_in_headless_chromium(tmp_path):
    chromium = _browser()
    from playwright.sync_api import sync_playwright

    source = _planned(tmp_path / "m.omny")
    port = 18000 + os.getpid() % 1000
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "onnx_ir_multidevice._cli",
            "view",
            str(source),
            "--port",
            str(port),
            "--configuration",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("Model Explorer: http://"), line
        address = line.split()[2]
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://localhost:{port}/", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(address)
            page.get_by_text("omny plan: omny/3-shards").first.wait_for(timeout=60_000)
            page.get_by_text("stage 2 | device 2").first.wait_for(timeout=60_000)
            text = page.inner_text("body")
            for stage in range(3):
                assert f"stage {stage} | device {stage}" in text
            shot = Path(os.environ.get("OMNY_VIEW_SCREENSHOT", tmp_path / "view.png"))
            page.screenshot(path=str(shot))
            browser.close()
        assert shot.stat().st_size > 10_000
    finally:
        proc.terminate()
        proc.wait(timeout=30)
