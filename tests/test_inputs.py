"""One input generator: `omny run` and `omny verify` feed a model the same arrays.

Before runtime/inputs.py, ``Pipeline.example_inputs`` drew integers in {0, 1} and booleans
True, while ``make_inputs`` bounded token ids by the Gather tables and filled masks with ones:
the same model, seed and dims gave two different requests.
"""

from __future__ import annotations

import json
from typing import ClassVar

import numpy as np
import onnx_ir as ir
import pytest

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._errors import PipelineError, VerifyError
from onnx_ir_multidevice._proto.files import load, save
from onnx_ir_multidevice.omny._schema import CutPoint, OmnyMetadata, ShardConfiguration, Sharding
from onnx_ir_multidevice.runtime import Pipeline
from onnx_ir_multidevice.runtime.engines import register_engine
from onnx_ir_multidevice.runtime.inputs import (
    DEFAULT_INT_HIGH,
    TensorSpec,
    generate_inputs,
    index_bound,
    input_specs,
)
from onnx_ir_multidevice.runtime.runner import StageFailure, StageRunner, failure_message
from onnx_ir_multidevice.runtime.verification import make_inputs
from onnx_ir_multidevice.testing import zoo

VOCAB = 11


def planned_bert(tmp_path, layers: int = 2):
    """A BERT with a 2-shard .omny plan, saved; the model and its path."""
    model = zoo.bert(layers=layers, vocab=VOCAB)
    omny.write(
        model,
        OmnyMetadata(
            cut_points=(CutPoint("layer.0.out", "layer.0.out", "layer.0.out", (1,)),),
            sharding=Sharding(configurations=(ShardConfiguration(2, (1, 1), ("layer.0.out",)),)),
        ),
    )
    path = tmp_path / "bert.omny"
    save(model, path)
    return model, path


def assert_same_arrays(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


class RecordingEngine:
    """Runs each request in the submitting thread and keeps a copy of its inputs."""

    seen: ClassVar[list[dict[str, np.ndarray]]] = []

    def __init__(self, chain, devices, threads, recorder, on_done, *, spinning):
        self._chain = chain
        self._on_done = on_done
        self._runners = [
            StageRunner(s, d, n) for s, d, n in zip(chain.stages, devices, threads, strict=True)
        ]

    def submit(self, request, env):
        RecordingEngine.seen.append({k: v.copy() for k, v in env.items()})
        for i, runner in enumerate(self._runners):
            try:
                env.update(runner.run(env))
            except Exception as exc:
                self._on_done(request, StageFailure(i, failure_message(exc), exc))
                return
        self._on_done(request, {n: env[n] for n in self._chain.graph_outputs})

    def close(self, timeout):
        for runner in self._runners:
            runner.close()


def test_omny_run_sends_what_omny_verify_feeds(tmp_path, capsys):
    _model, path = planned_bert(tmp_path)
    register_engine("test-recording", RecordingEngine, replace=True)
    RecordingEngine.seen = []
    args = ["--shards", "2", "--seed", "5", "--dim", "batch=3", "--json"]
    assert main(["run", str(path), "--backend", "test-recording", "--requests", "2",
                 "--warmup", "1", *args]) == 0  # fmt: skip
    run_report = json.loads(capsys.readouterr().out)["result"]
    assert run_report["seed"] == 5 and run_report["backend"] == "test-recording"
    assert main(["verify", str(path), *args]) == 0
    verify_report = json.loads(capsys.readouterr().out)["result"]

    fed = make_inputs(load(path), dims={"batch": 3}, seed=5)  # what verify feeds
    assert [(i["name"], i["shape"], i["dtype"]) for i in verify_report["results"][0]["inputs"]] == [
        (name, list(array.shape), str(array.dtype)) for name, array in fed.items()
    ]
    # one warm-up, two timed, and one the baseline compares with the whole model (max_abs_diff)
    assert len(RecordingEngine.seen) == 4
    for request in RecordingEngine.seen:
        assert_same_arrays(request, fed)
    # the rules: token ids below the vocabulary, the mask all ones
    assert 1 < fed["input_ids"].max() < VOCAB and (fed["attention_mask"] == 1).all()


@pytest.mark.parametrize("source", ["model", "file", "directory", "stage list"])
def test_example_inputs_equal_make_inputs(tmp_path, source):
    model, path = planned_bert(tmp_path)
    if source == "model":
        pipe = Pipeline(model, 2)
    elif source == "file":
        pipe = Pipeline(path, 2)
    elif source == "directory":
        assert main(["split", str(path), str(tmp_path / "split"), "--shards", "2"]) == 0
        pipe = Pipeline(tmp_path / "split")
    else:
        from onnx_ir_multidevice._split import split

        pipe = Pipeline(split(model, 2))
    with pipe:
        for seed in (0, 7):
            got = pipe.example_inputs({"batch": 4}, seed=seed)
            assert_same_arrays(got, make_inputs(model, dims={"batch": 4}, seed=seed))
        assert pipe.inputs[0].high == VOCAB
        pipe.run(got)  # valid token ids


def _two_lookups() -> tuple[ir.Model, list[ir.Model]]:
    """ids -> Gather(table of 7) -> a; ids -> Cast -> Gather(table of 5) -> b: whole and stages."""

    def table(name: str, rows: int) -> ir.Value:
        return ir.Value(
            name=name,
            type=ir.TensorType(ir.DataType.FLOAT),
            shape=ir.Shape([rows, 2]),
            const_value=ir.tensor(np.ones((rows, 2), np.float32), name=name),
        )

    def graph(with_first: bool, with_second: bool) -> ir.Model:
        ids = ir.Value(name="ids", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(["n"]))
        nodes, outputs, inits = [], [], []
        if with_first:
            t7 = table("t7", 7)
            first = ir.node("Gather", [t7, ids])
            first.outputs[0].name = "a"
            nodes.append(first)
            outputs.append(first.outputs[0])
            inits.append(t7)
        if with_second:
            t5 = table("t5", 5)
            cast = ir.node("Cast", [ids], attributes={"to": ir.DataType.INT32})
            second = ir.node("Gather", [t5, cast.outputs[0]])
            second.outputs[0].name = "b"
            nodes += [cast, second]
            outputs.append(second.outputs[0])
            inits.append(t5)
        for v in outputs:
            v.type = ir.TensorType(ir.DataType.FLOAT)
        g = ir.Graph([ids], outputs, nodes=nodes, initializers=inits, opset_imports={"": 18})
        return ir.Model(g, ir_version=10)

    return graph(True, True), [graph(True, False), graph(False, True)]


def test_bounds_are_the_smallest_table_of_any_stage():
    whole, stages = _two_lookups()
    assert index_bound(whole.graph.inputs[0]) == 5
    assert [input_specs(s)["ids"].high for s in stages] == [7, 5]
    with Pipeline(stages, outputs=["a", "b"]) as pipe:
        assert pipe.inputs == (TensorSpec("ids", ("n",), np.dtype(np.int64), 5),)
        got = pipe.example_inputs({"n": 200}, seed=1)
    assert got["ids"].max() == 4
    assert_same_arrays(got, make_inputs(whole, dims={"n": 200}, seed=1))


def test_generate_inputs_rules_and_errors():
    specs = [
        TensorSpec("x", ("batch", 3), np.dtype(np.float16)),
        TensorSpec("ids", (2, None), np.dtype(np.uint8), 1000),
        TensorSpec("flag", (50,), np.dtype(bool)),
        TensorSpec("Key_Mask", (2,), np.dtype(bool)),
        TensorSpec("n", (), np.dtype(np.int32)),
    ]
    arrays = generate_inputs(specs, {"batch": 2}, seed=3)
    assert arrays["x"].shape == (2, 3) and arrays["x"].dtype == np.float16
    # An unnamed dim takes an example value that looks like data (128 tokens), not 1 (issue 9).
    assert arrays["ids"].shape == (2, 128) and arrays["ids"].dtype == np.uint8
    assert arrays["flag"].any() and not arrays["flag"].all()
    assert arrays["Key_Mask"].all()
    assert 0 <= arrays["n"] < DEFAULT_INT_HIGH
    assert_same_arrays(generate_inputs(specs, {"batch": 2}, seed=3), arrays)
    for bad, text in [
        (TensorSpec("s", (1,), np.dtype(object)), "Cannot generate input 's'"),
        (TensorSpec("u", (1,), None), "no declared element type"),
        (TensorSpec("v", None, np.dtype(np.float32)), "no declared shape"),
    ]:
        with pytest.raises(ValueError, match=text):
            generate_inputs([bad])
    with pytest.raises(ValueError, match="positive integer"):
        generate_inputs(specs, {"batch": 0})


def test_callers_name_their_error_type():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.STRING), shape=ir.Shape([1]))
    y = ir.node("Identity", [x])
    y.outputs[0].name = "y"
    model = ir.Model(ir.Graph([x], y.outputs, nodes=[y], opset_imports={"": 18}), ir_version=10)
    with pytest.raises(VerifyError, match="pass its array in `inputs`"):
        make_inputs(model)
    with Pipeline([model]) as pipe, pytest.raises(PipelineError, match="build the request"):
        pipe.example_inputs()


# --------------------------------------------------------------------------- bounds (issue 18)


def test_generated_inputs_are_bounded_before_anything_is_allocated(monkeypatch):
    specs = [
        TensorSpec("x", ("batch", 8), np.dtype(np.float32)),
        TensorSpec("ids", ("batch", "seq"), np.dtype(np.int64), 50),
    ]
    small = generate_inputs(specs, {"batch": 2, "seq": 4})
    assert small["x"].shape == (2, 8) and small["ids"].shape == (2, 4)
    # 2**40 rows would need 32 TiB: refused at once, naming the inputs and the dims used.
    for dims in ({"batch": 2**22, "seq": 4}, {"batch": 2**40, "seq": 2**40}):
        with pytest.raises(ValueError, match="over the bound") as info:
            generate_inputs(specs, dims)
        message = str(info.value)
        assert f"batch={dims['batch']}" in message and "'x'" in message
        assert "OMNY_MAX_INPUT_BYTES" in message and "--dim" in message
    # Overridable per call and by the environment; bad overrides are refused by name.
    big = {"batch": 2**19, "seq": 1}  # 16 MiB + 4 MiB
    assert generate_inputs(specs, big)["x"].shape == (2**19, 8)
    with pytest.raises(ValueError, match="over the bound of 1048576 bytes"):
        generate_inputs(specs, big, max_bytes=2**20)
    monkeypatch.setenv("OMNY_MAX_INPUT_BYTES", str(2**20))
    with pytest.raises(ValueError, match="over the bound of 1048576 bytes"):
        generate_inputs(specs, big)
    assert generate_inputs(specs, big, max_bytes=2**25)["ids"].shape == (2**19, 1)
    monkeypatch.setenv("OMNY_MAX_INPUT_BYTES", "lots")
    with pytest.raises(ValueError, match="OMNY_MAX_INPUT_BYTES='lots' is not a byte count"):
        generate_inputs(specs, big)
    with pytest.raises(ValueError, match="max_bytes must be a positive byte count"):
        generate_inputs(specs, big, max_bytes=0)


def test_large_recorded_planning_dims_give_verify_and_run_a_clear_error(tmp_path, capsys):
    model, path = planned_bert(tmp_path)
    omny.write_planning_dims(model, {"batch": 2**30})  # 2 x 2**34 int64 ids: 256 GiB
    save(model, path, overwrite=True)
    with pytest.raises(VerifyError, match=r"at batch=1073741824\).*over the bound|over the bound"):
        make_inputs(load(path))
    with Pipeline(load(path), 2) as pipe, pytest.raises(PipelineError, match="over the bound"):
        pipe.example_inputs()
    for command, status in (("verify", 1), ("run", 2)):  # verify: a failed check; run: usage
        assert main([command, str(path), "--shards", "2"]) == status
        captured = capsys.readouterr()
        text = captured.out + captured.err
        assert "over the bound" in text and "batch=1073741824" in text, text
        assert "Traceback" not in text
    # The same file runs at dims the user gives.
    assert main(["verify", str(path), "--shards", "2", "--dim", "batch=2"]) == 0


def test_one_dims_validator_numpy_integers_everywhere(tmp_path):
    """verify accepted numpy.int64 dims and plan refused them (issue 17 section 6)."""
    from onnx_ir_multidevice import plan
    from onnx_ir_multidevice.analysis.sizes import check_dims
    from onnx_ir_multidevice.oaax.inputs import parse_config
    from onnx_ir_multidevice.runtime import inputs as runtime_inputs
    from onnx_ir_multidevice.runtime.verification import verify

    assert runtime_inputs.check_dims is check_dims  # one validator, re-exported
    checked = check_dims({"batch": np.int64(1), "seq": np.int32(8)})
    assert checked == {"batch": 1, "seq": 8} and all(type(v) is int for v in checked.values())
    dims = {"batch": np.int64(2)}
    model = zoo.bert(layers=2, vocab=VOCAB)
    metadata = plan(model, shards=[2], dims=dims)
    omny.write(model, metadata)
    assert verify(model, 2, dims=dims).ok
    for bad in ({"batch": np.float64(8)}, {"batch": 0}, {"batch": True}, {"batch": 2**41}, {3: 1}):
        with pytest.raises(ValueError, match="planning dim"):
            check_dims(bad)
        with pytest.raises(ValueError, match="planning dim"):
            plan(model, shards=[2], dims=bad)
        with pytest.raises(VerifyError):
            verify(model, 2, dims=bad)
    with pytest.raises(Exception, match="dims: planning dim 'seq' is 2199023255552"):
        parse_config(b'{"dims": {"seq": 2199023255552}}', "config.json")


def _baked_seq_model() -> ir.Model:
    """x[batch, seq, 4] -> MatMul -> Reshape to a baked [1, 16, 4] (as TorchScript exports do)."""
    import onnx.helper as oh
    import onnx.numpy_helper as nh

    from onnx_ir_multidevice import from_proto, plan

    rng = np.random.default_rng(0)
    weights = [
        nh.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w0"),
        nh.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w1"),
        nh.from_array(np.array([1, 16, 4], np.int64), "baked"),
    ]
    nodes = [
        oh.make_node("MatMul", ["x", "w0"], ["h0"], name="mm0"),
        oh.make_node("Relu", ["h0"], ["r0"], name="relu0"),
        oh.make_node("Reshape", ["r0", "baked"], ["h1"], name="reshape"),
        oh.make_node("MatMul", ["h1", "w1"], ["h2"], name="mm1"),
        oh.make_node("Relu", ["h2"], ["y"], name="relu1"),
    ]
    graph = oh.make_graph(
        nodes,
        "baked",
        [oh.make_tensor_value_info("x", 1, ["batch", "seq", 4])],
        [oh.make_tensor_value_info("y", 1, [1, 16, 4])],
        weights,
    )
    model = from_proto(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]))
    omny.write(model, plan(model, shards=[2], dims={"batch": 1}))
    return model


def test_a_failure_at_generated_inputs_names_the_dims_and_the_flag(tmp_path, capsys):
    """Issue 17 section 6: a decoder that baked seq=16 failed without naming the dims."""
    from onnx_ir_multidevice.runtime.verification import verify

    model = _baked_seq_model()
    with pytest.raises(VerifyError) as info:
        verify(model, 2)
    message = str(info.value)
    assert "Reshape" in message  # onnxruntime's own words stay
    assert "generated at batch=1, seq=128 (x[1, 128, 4])" in message, message
    assert "--dim seq=N" in message and "dims={'seq': N}" in message
    assert verify(model, 2, dims={"seq": 16}).ok  # the dims it runs at
    path = tmp_path / "baked.omny"
    save(model, path)
    assert main(["run", str(path), "--shards", "2", "--requests", "1", "--warmup", "0"]) == 1
    err = capsys.readouterr().err
    assert "generated at batch=1, seq=128" in err and "--dim seq=N" in err, err
    assert main(["run", str(path), "--shards", "2", "--requests", "1", "--dim", "seq=16"]) == 0
