"""The Ray backend on a multi-node cluster: three raylets on this machine (``Cluster``), each
with a custom resource of its own (``box0``, ``box1``, ``box2``) and a small object store."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import onnx_ir as ir
import pytest

ray = pytest.importorskip("ray", reason="the Ray backend needs ray (pip install '.[ray]')")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from test_pipeline import assert_outputs, mlp_stages, request  # noqa: E402

from onnx_ir_multidevice import save_split  # noqa: E402
from onnx_ir_multidevice._errors import PipelineError  # noqa: E402
from onnx_ir_multidevice.runtime import Pipeline  # noqa: E402

pytestmark = pytest.mark.ray

STORE = 100 * 1024 * 1024
BOXES = ["box0", "box1", "box2"]


@pytest.fixture(scope="module")
def cluster():
    """Three nodes; a lost node is declared dead after about 1.5 s (health checks)."""
    try:
        cluster = _start_cluster()
    except Exception as error:  # noqa: BLE001 (the machine, not the package: say why)
        pytest.skip(f"this machine cannot start a 3-node Ray cluster: {error!r}")
    yield cluster
    ray.shutdown()
    cluster[0].shutdown()


def _start_cluster():
    cluster = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "resources": {"box0": 1},
            "object_store_memory": STORE,
            "include_dashboard": False,
            "_system_config": {
                "health_check_initial_delay_ms": 0,
                "health_check_period_ms": 500,
                "health_check_timeout_ms": 500,
                "health_check_failure_threshold": 3,
            },
        },
    )
    try:
        nodes = [
            cluster.add_node(num_cpus=1, resources={box: 1}, object_store_memory=STORE)
            for box in BOXES[1:]
        ]
        cluster.wait_for_nodes()
    except BaseException:
        cluster.shutdown()
        raise
    return cluster, nodes


def test_stages_on_the_nodes_named_by_resource_with_files_shipped(cluster, tmp_path):
    """Pipeline(address=...) connects to the cluster; each stage lands on the node with its
    resource; the stages' files (external data included) travel through the object store."""
    address = cluster[0].address
    paths = []
    for k, model in enumerate(mlp_stages([1, 3])):
        path = tmp_path / f"stage{k}.onnx"
        ir.save(model, path, external_data=f"stage{k}.data", size_threshold_bytes=0)
        paths.append(str(path))
    assert ray.is_initialized() is False
    with Pipeline(
        paths,
        backend="ray",
        address=address,
        placement=BOXES,
        intra_op_num_threads=1,
        outputs=["layer.0.out", "y"],
    ) as pipe:
        requests = [request(k) for k in range(6)]
        for out, r in zip(pipe.map(requests), requests, strict=True):
            assert_outputs(out, r)
        stats = pipe.stats()
        folders = [
            ray.get(actor.__ray_call__.remote(lambda self: self._folder), timeout=60)
            for actor in pipe._engine._actors
        ]
    ids = {box: n["NodeID"] for n in ray.nodes() for box in BOXES if box in n["Resources"]}
    assert [s.node_id for s in stats.stages] == [ids[box] for box in BOXES]
    assert len({s.node_id for s in stats.stages}) == 3
    assert all(s.node_address for s in stats.stages)
    assert "node" in stats.format().splitlines()[1]
    # Bytes between nodes: each stage passes on what later stages read, all [3, 16] float32
    # (192 bytes) but scale ([16], 64 bytes); every hop crosses nodes here.
    sizes = [
        sum(64 if name == "scale" else 192 for name in keep) for keep in pipe.chain.keep_after[:-1]
    ]
    assert [s.out_bytes_mean for s in stats.stages[:-1]] == sizes
    assert stats.between_nodes_bytes == sum(sizes) > 0
    assert stats.to_dict()["between_nodes_bytes"] == sum(sizes)
    assert f"activations between nodes: {sum(sizes):,} bytes per request" in stats.format()
    for folder in folders:  # the shipped copies, not the driver's files, removed by close()
        assert folder is not None and str(tmp_path) not in folder
        assert not os.path.exists(os.path.dirname(folder))


def test_strict_spread_and_close_removes_the_placement_group(cluster):
    with Pipeline(
        mlp_stages([1, 3]),
        backend="ray",
        placement="strict_spread",
        intra_op_num_threads=1,
        outputs=["layer.0.out", "y"],
    ) as pipe:
        assert_outputs(pipe.run(request(0)), request(0))
        assert len({s.node_id for s in pipe.stats().stages}) == 3
        group = pipe._engine._group
    assert ray.util.placement_group_table(group)["state"] == "REMOVED"


@pytest.mark.parametrize(
    ("placement", "options", "message"),
    [
        (["box0", "nowhere"], None, "no alive node of the Ray cluster has"),
        (None, [{}, {"resources": {"box1": 2}}], "no node of the Ray cluster can host stage 1"),
        ("strict_spread", {"num_cpus": 0.5}, "'strict_spread' needs 4 distinct nodes"),
        ("strict_pack", {"num_cpus": 0.5}, "'strict_pack' needs one node"),
    ],
)
def test_a_stage_no_node_can_host_is_refused_up_front(cluster, placement, options, message):
    stages = mlp_stages([1, 2, 3]) if isinstance(placement, str) else mlp_stages([2])
    with pytest.raises(PipelineError, match=message) as info:
        Pipeline(
            stages,
            backend="ray",
            address=cluster[0].address,
            placement=placement,
            ray_actor_options=options,
            engine_options={"start_timeout": 600},  # refused by the check, not by a timeout
        )
    assert "did not start" not in str(info.value)
    assert ray.util.placement_group_table() == {} or all(
        g["state"] == "REMOVED" for g in ray.util.placement_group_table().values()
    )


def test_tensor_parallel_stages_run_on_their_nodes_with_files_shipped_once(
    cluster, tmp_path, monkeypatch
):
    """A split folder whose two stages are tensor-parallel (degree 2): each stage is one actor
    on its node holding both ranks; every file of a stage travels once (a rank's segments
    share its data file), in chunks (made small here: files of any size travel so); the
    copies are byte for byte the folder's; the outputs equal the thread engine's."""
    from onnx_ir_multidevice.runtime.engines import ray as ray_engine

    monkeypatch.setattr(ray_engine, "SHIP_CHUNK_BYTES", 4096)
    from test_tensor_parallel_folder import _planned_transformer  # the same fixture model

    def listing(actor):  # nested: Ray pickles it by value (this module is not on the nodes)
        import hashlib  # runs in the actor's process
        import os  # as hashlib

        found = {}
        for root, _, names in os.walk(actor._folder):
            for name in names:
                with open(os.path.join(root, name), "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                found[os.path.relpath(os.path.join(root, name), actor._folder)] = digest
        return found

    model, _ = _planned_transformer(tmp_path)
    manifest = save_split(model, tmp_path / "out", 2)
    assert [s.tensor_parallel.degree for s in manifest.stages] == [2, 2]
    with Pipeline(tmp_path / "out", backend="thread", intra_op_num_threads=1) as local:
        requests = [local.example_inputs(dims={"batch": 1, "seq": 16}, seed=k) for k in range(3)]
        expected = list(local.map(requests))
    with Pipeline(
        tmp_path / "out",
        backend="ray",
        address=cluster[0].address,
        placement=["box1", "box2"],
        intra_op_num_threads=1,
        ray_actor_options={"num_cpus": 0.5},  # a 1-CPU node hosts both ranks of a stage
    ) as pipe:
        got = list(pipe.map(requests))
        stats = pipe.stats()
        folders = [
            ray.get(actor.__ray_call__.remote(listing), timeout=60)
            for actor in pipe._engine._actors
        ]
    for out, want in zip(got, expected, strict=True):
        assert out.keys() == want.keys()
        for name in want:
            np.testing.assert_allclose(out[name], want[name], rtol=1e-5, atol=1e-6)
    ids = {box: n["NodeID"] for n in ray.nodes() for box in BOXES if box in n["Resources"]}
    assert [s.node_id for s in stats.stages] == [ids["box1"], ids["box2"]]
    for entry, files in zip(manifest.stages, folders, strict=True):
        ranks = entry.tensor_parallel.ranks
        wanted = {f for rank in ranks for f in (*rank.segments, *rank.external_data)}
        assert set(files) == wanted  # each file once, no second copy in a subfolder
        assert max((tmp_path / "out" / f).stat().st_size for f in wanted) > 4 * 4096
        for name, digest in files.items():
            assert digest == hashlib.sha256((tmp_path / "out" / name).read_bytes()).hexdigest()


def _stream_until_failure(pipe, stage, kill):
    inputs = {"x": np.ones((400, 400), np.float32), "scale": np.ones(400, np.float32)}
    for _ in range(6):
        pipe.send_input(inputs, timeout=60)
    kill()
    failures = []
    for _ in range(6):
        try:
            pipe.receive_output(timeout=60)
        except PipelineError as exc:
            failures.append(exc)
    assert failures, "no request failed after the stage's actor went away"
    for exc in failures:
        assert exc.stage == stage
        assert "Ray actor on node" in str(exc) and "died" in str(exc)
    with pytest.raises(PipelineError, match=r"broken|can run no more"):
        pipe.run(inputs, timeout=60)


def test_actor_killed_mid_stream_then_a_new_pipeline_runs(cluster, tmp_path):
    paths = []  # files with external data: shipped to the actors, which write them out
    for k, model in enumerate(mlp_stages([2], width=400)):
        paths.append(str(tmp_path / f"stage{k}.onnx"))
        ir.save(model, paths[-1], external_data=f"stage{k}.data", size_threshold_bytes=0)
    pipe = Pipeline(
        paths,
        backend="ray",
        placement=["box1", "box2"],
        intra_op_num_threads=1,
        max_in_flight=6,
    )
    with pipe:
        where = pipe._engine.where(1)
        folders = [
            ray.get(actor.__ray_call__.remote(lambda self: self._folder), timeout=60)
            for actor in pipe._engine._actors
        ]
        assert all(folder and os.listdir(folder) for folder in folders)  # the shipped files
        _stream_until_failure(pipe, 1, lambda: ray.kill(pipe._engine._actors[1], no_restart=True))
        assert where.startswith("node ")
    # close() removed the killed actor's files too (a task on its node), and its folder
    for folder in folders:
        assert not os.path.exists(folder) and not os.path.exists(os.path.dirname(folder))
    assert pipe._engine.pipeline_id in folders[0]
    with Pipeline(mlp_stages([2]), backend="ray", placement=["box1", "box2"]) as again:
        assert_outputs(again.run(request(1)), request(1))


def test_node_removed_mid_stream_fails_in_flight_requests_naming_the_node(cluster):
    """Last test of the module: it removes the node of ``box2``."""
    _, nodes = cluster
    pipe = Pipeline(
        mlp_stages([2], width=400),
        backend="ray",
        placement=["box0", "box2"],
        intra_op_num_threads=1,
        max_in_flight=6,
    )
    with pipe:
        node_id = pipe.stats().stages[1].node_id
        assert node_id == nodes[1].node_id
        _stream_until_failure(
            pipe, 1, lambda: cluster[0].remove_node(nodes[1], allow_graceful=False)
        )
    with pytest.raises(PipelineError, match="no alive node"):
        Pipeline(mlp_stages([2]), backend="ray", placement=["box0", "box2"])
    with Pipeline(mlp_stages([2]), backend="ray", placement=["box0", "box1"]) as again:
        assert_outputs(again.run(request(2)), request(2))
