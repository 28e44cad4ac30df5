"""The OAAX runtime adapter over Pipeline: lifecycle, tensors, queue semantics, threads."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from test_oaax_toolchain import _chain

import onnx_ir_multidevice as omd
from onnx_ir_multidevice import omny
from onnx_ir_multidevice.oaax import OaaxRuntime, TensorDataType, TensorsStruct, convert
from onnx_ir_multidevice.oaax.tensors import ir_data_type, oaax_data_type

CORPUS = Path(__file__).parent.parent / "tests" / "corpus"
NAMES = ("input_ids", "attention_mask", "token_type_ids")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    """bert_dynamo converted by the toolchain: one 2-shard configuration."""
    outdir = tmp_path_factory.mktemp("oaax-artifact")
    result = convert(CORPUS / "bert_dynamo.onnx", outdir, echo=lambda line: None)
    assert result.ok, result.log[-1]
    return result.artifact


@pytest.fixture(scope="module")
def whole(artifact):
    return ort.InferenceSession(str(artifact), providers=["CPUExecutionProvider"])


def _request(seed: int, seq: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "input_ids": rng.integers(0, 50, (1, seq)).astype(np.int64),
        "attention_mask": np.ones((1, seq), dtype=np.int64),
        "token_type_ids": np.zeros((1, seq), dtype=np.int64),
    }


def _expected(whole, request):
    names = [o.name for o in whole.get_outputs()]
    return dict(zip(names, whole.run(None, request), strict=True))


def _loaded(artifact: Path, *pairs: tuple[str, object]) -> OaaxRuntime:
    runtime = OaaxRuntime()
    keys = [k for k, _ in pairs]
    values = [v for _, v in pairs]
    assert runtime.runtime_initialization_with_args(len(pairs), keys, values) == 0
    assert runtime.runtime_model_loading(str(artifact)) == 0, runtime.runtime_error_message()
    return runtime


def _receive(runtime: OaaxRuntime, timeout: float = 60.0) -> dict[str, np.ndarray]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out: list[TensorsStruct] = []
        code = runtime.receive_output(out)
        if code == 0:
            return out[0].to_arrays()
        assert "not finished" in runtime.runtime_error_message()
        time.sleep(0.001)
    raise AssertionError("no output within the timeout")


def _stage_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("omny-pipeline-stage-")]


# --------------------------------------------------------------------------- lifecycle


def test_calls_before_initialisation_or_loading_fail_with_a_message(artifact):
    runtime = OaaxRuntime()
    out: list[TensorsStruct] = []
    struct = TensorsStruct.from_arrays(_request(0))
    for call in (
        lambda: runtime.runtime_model_loading(str(artifact)),
        lambda: runtime.send_input(struct),
        lambda: runtime.receive_output(out),
        runtime.runtime_destruction,
    ):
        assert call() != 0
        assert "runtime_initialization() first" in runtime.runtime_error_message()
    assert runtime.runtime_initialization() == 0
    assert runtime.runtime_initialization() != 0  # exactly once
    assert "already initialised" in runtime.runtime_error_message()
    assert runtime.send_input(struct) != 0
    assert "load a model first" in runtime.runtime_error_message()
    assert runtime.receive_output(out) != 0
    assert runtime.runtime_model_loading(str(artifact)) == 0
    assert runtime.runtime_model_loading(str(artifact)) != 0
    assert "one model per runtime instance" in runtime.runtime_error_message()
    assert runtime.runtime_destruction() == 0
    for call in (
        runtime.runtime_initialization,
        lambda: runtime.runtime_model_loading(str(artifact)),
        lambda: runtime.send_input(struct),
        lambda: runtime.receive_output(out),
        runtime.runtime_destruction,
    ):
        assert call() != 0
        assert "destroyed" in runtime.runtime_error_message()
    assert runtime.runtime_name() == "onnx-ir-multidevice-oaax"
    assert runtime.runtime_version() == omd.__version__


def test_init_keys_unknown_ignored_known_checked(artifact, tmp_path):
    log = tmp_path / "runtime.log"
    runtime = OaaxRuntime()
    keys = ["providers", "threads", "max_in_flight", "backend", "log_level", "log_file",
            "num_threads", "no_such_key", b"max_queued"]  # fmt: skip
    values = ["cpu", "1", "3", "thread", "debug", str(log), "1", object(), "8"]
    assert runtime.runtime_initialization_with_args(len(keys), keys, values) == 0
    assert runtime.runtime_model_loading(artifact) == 0, runtime.runtime_error_message()
    assert runtime.send_input(TensorsStruct.from_arrays(_request(0))) == 0
    _receive(runtime)
    assert runtime.runtime_destruction() == 0
    text = log.read_text()
    assert "ignoring unknown init key 'no_such_key'" in text
    assert "loaded" in text and "request 0 queued" in text
    for key, value in (("max_in_flight", "0"), ("threads", "x"), ("num_threads", "-1"),
                       ("send_timeout", "nan"), ("send_timeout", "-1")):  # fmt: skip
        bad = OaaxRuntime()
        assert bad.runtime_initialization_with_args(1, [key], [value]) != 0
        assert key in bad.runtime_error_message()
    short = OaaxRuntime()
    assert short.runtime_initialization_with_args(2, ["a"], ["1"]) != 0


def test_float16_io_is_refused_at_load(tmp_path):
    runtime = OaaxRuntime()
    assert runtime.runtime_initialization() == 0
    model = _chain(tmp_path / "fp16.onnx", fp16=True)
    assert runtime.runtime_model_loading(str(model)) != 0
    message = runtime.runtime_error_message()
    assert "'x16'" in message and "float16" in message
    # A float32 model loads after the refusal (the refused one was not loaded).
    assert runtime.runtime_model_loading(str(_chain(tmp_path / "fp32.onnx"))) == 0
    runtime.runtime_destruction()


def test_log_level_is_the_reference_runtimes_and_bad_values_are_clamped(artifact, tmp_path):
    # The OAAX reference runtime: 0 trace ... 2 info ... 6 off; out-of-range values clamped.
    for value, logged in (("2", True), ("5", False), ("6", False), ("99", False), ("-3", True),
                          ("loud", True), (0, True), ("info", True), ("off", False)):  # fmt: skip
        log = tmp_path / f"level-{value}.log"
        runtime = OaaxRuntime()
        keys, values = ["log_level", "log_file", "num_threads"], [value, str(log), "0"]
        assert runtime.runtime_initialization_with_args(3, keys, values) == 0, (
            value,
            runtime.runtime_error_message(),
        )
        assert runtime.runtime_model_loading(str(artifact)) == 0
        runtime.runtime_destruction()
        text = log.read_text()
        assert ("loaded" in text) is logged, (value, text)  # an info line
        assert ("not a level 0-6" in text) is (value == "loud"), (value, text)


def test_loading_a_non_path_fails_and_a_success_clears_the_error(artifact):
    runtime = OaaxRuntime()
    assert runtime.runtime_initialization() == 0
    for bad in (None, 3, "", "no\x00such"):
        assert runtime.runtime_model_loading(bad) != 0  # not a TypeError
        assert "runtime_model_loading" in runtime.runtime_error_message()
    assert runtime.runtime_model_loading(str(artifact)) == 0
    assert runtime.runtime_error_message() == ""
    assert runtime.send_input("not a struct") != 0
    assert runtime.runtime_error_message()
    assert runtime.send_input(TensorsStruct.from_arrays(_request(0))) == 0
    assert runtime.runtime_error_message() == ""  # the previous message is gone
    assert runtime.receive_output("not a list") != 0
    _receive(runtime)
    assert runtime.runtime_error_message() == ""
    runtime.runtime_destruction()


def test_an_infinite_send_timeout_means_no_limit(artifact, whole):
    runtime = _loaded(artifact, ("send_timeout", "inf"), ("max_in_flight", "1"))
    requests = [_request(seed) for seed in range(3)]
    for request in requests:  # the second and third wait for room: no OverflowError
        assert runtime.send_input(TensorsStruct.from_arrays(request)) == 0, (
            runtime.runtime_error_message()
        )
    for request in requests:
        got = _receive(runtime)
        for name, value in _expected(whole, request).items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)
    runtime.runtime_destruction()


def test_a_split_directory_with_a_float16_output_is_refused_at_load(tmp_path):
    model = omd.load(_chain(tmp_path / "chain.onnx"))
    graph = model.graph
    cast = ir.node("Cast", [graph.outputs[0]], attributes={"to": ir.DataType.FLOAT16})
    graph.append(cast)
    cast.outputs[0].name = "y16"
    cast.outputs[0].dtype = ir.DataType.FLOAT16
    cast.outputs[0].shape = ir.Shape(["batch", 16])
    graph.outputs[0] = cast.outputs[0]
    omny.write(model, omd.plan(model, shards=[2]))
    omd.save_split(model, tmp_path / "split", 2)
    runtime = OaaxRuntime()
    assert runtime.runtime_initialization() == 0
    assert runtime.runtime_model_loading(str(tmp_path / "split")) != 0  # not loaded, then lost
    message = runtime.runtime_error_message()
    assert "'y16'" in message and "FLOAT16" in message, message
    assert not _stage_threads()
    runtime.runtime_destruction()


def test_plain_onnx_and_split_directory_load(tmp_path, artifact, whole):
    omd.save_split(omd.load(artifact), tmp_path / "split", 2)
    for source in (CORPUS / "bert_dynamo.onnx", tmp_path / "split"):
        runtime = _loaded(source)
        request = _request(3)
        assert runtime.send_input(TensorsStruct.from_arrays(request)) == 0
        got = _receive(runtime)
        for name, value in _expected(whole, request).items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)
        runtime.runtime_destruction()


# --------------------------------------------------------------------------- queue


def test_fifty_sends_before_any_receive_come_back_in_order(artifact, whole):
    runtime = _loaded(artifact)
    requests = [_request(seed, seq=4 + seed % 5) for seed in range(50)]
    for request in requests:
        assert runtime.send_input(TensorsStruct.from_arrays(request)) == 0
    for request in requests:
        got = _receive(runtime)
        for name, value in _expected(whole, request).items():
            assert got[name].shape == value.shape
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)
    out: list[TensorsStruct] = []
    assert runtime.receive_output(out) != 0 and out == []
    assert runtime.runtime_destruction() == 0


def test_receive_on_an_empty_or_busy_queue_returns_at_once(artifact):
    """receive_output never waits: with every stage held busy no result can come, so a call
    that waited would never return (the join's bound is a hang guard, not a timing)."""
    runtime = _loaded(artifact)
    out: list[TensorsStruct] = []

    def receive_in_a_thread() -> int:
        codes: list[int] = []
        thread = threading.Thread(target=lambda: codes.append(runtime.receive_output(out)))
        thread.start()
        thread.join(60)
        assert not thread.is_alive(), "receive_output waited for a result"
        return codes[0]

    assert all(receive_in_a_thread() != 0 for _ in range(3))
    assert "no request in flight" in runtime.runtime_error_message()
    locks = runtime._pipeline._engine._stage_locks
    with locks[0], locks[1]:  # nothing finishes meanwhile
        assert runtime.send_input(TensorsStruct.from_arrays(_request(0, seq=64))) == 0
        assert receive_in_a_thread() != 0 and out == []
        assert "not finished" in runtime.runtime_error_message()
    assert _receive(runtime)  # released: the results come
    runtime.runtime_destruction()


def test_a_sender_thread_and_a_polling_receiver(artifact, whole):
    runtime = _loaded(artifact, ("max_in_flight", "4"))
    requests = [_request(seed) for seed in range(200)]
    sent: list[int] = []

    def send() -> None:
        for request in requests:
            sent.append(runtime.send_input(TensorsStruct.from_arrays(request)))

    sender = threading.Thread(target=send)
    sender.start()
    received = []
    deadline = time.monotonic() + 120
    while len(received) < 200 and time.monotonic() < deadline:
        out: list[TensorsStruct] = []
        if runtime.receive_output(out) == 0:
            received.append(out[0].to_arrays())
        else:
            time.sleep(0.0005)
    sender.join()
    assert sent == [0] * 200 and len(received) == 200
    for index in (0, 99, 199):
        for name, value in _expected(whole, requests[index]).items():
            np.testing.assert_allclose(received[index][name], value, rtol=1e-5, atol=1e-6)
    runtime.runtime_destruction()


def test_destruction_with_requests_in_flight_leaves_no_worker_threads(artifact):
    before = set(_stage_threads())
    runtime = _loaded(artifact)
    assert len(set(_stage_threads()) - before) == 2
    for seed in range(30):
        assert runtime.send_input(TensorsStruct.from_arrays(_request(seed, seq=64))) == 0
    assert runtime.runtime_destruction() == 0
    assert set(_stage_threads()) - before == set()


def test_a_bound_on_results_sent_and_not_received(artifact):
    runtime = _loaded(artifact, ("max_queued", "3"))
    struct = TensorsStruct.from_arrays(_request(0))
    assert [runtime.send_input(struct) for _ in range(3)] == [0, 0, 0]
    assert runtime.send_input(struct) != 0
    assert "max_queued 3" in runtime.runtime_error_message()
    _receive(runtime)
    assert runtime.send_input(struct) == 0
    runtime.runtime_destruction()


def test_a_failed_request_names_request_stage_and_device(artifact, whole):
    runtime = _loaded(artifact)
    bad = _request(0)
    bad["input_ids"][0, 0] = 10**9  # an embedding index out of range: Gather fails in stage 0
    good = _request(1)
    assert runtime.send_input(TensorsStruct.from_arrays(good)) == 0
    assert runtime.send_input(TensorsStruct.from_arrays(bad)) == 0
    assert runtime.send_input(TensorsStruct.from_arrays(good)) == 0
    _receive(runtime)
    deadline = time.monotonic() + 30
    code = 2
    while code == 2 and time.monotonic() < deadline:
        code = runtime.receive_output([])
        time.sleep(0.001)
    assert code == 1
    message = runtime.runtime_error_message()
    assert "request 1 failed in stage 0 on cpu" in message
    got = _receive(runtime)  # the next request is unaffected
    np.testing.assert_allclose(
        got["last_hidden_state"], _expected(whole, good)["last_hidden_state"], rtol=1e-5
    )
    runtime.runtime_destruction()


# --------------------------------------------------------------------------- tensors


def _struct(**changes) -> TensorsStruct:
    struct = TensorsStruct.from_arrays(_request(0))
    for field, value in changes.items():
        setattr(struct, field, value)
    return struct


@pytest.mark.parametrize(
    ("struct", "fragment"),
    [
        (lambda: _struct(names=["input_ids", "input_ids", "token_type_ids"]), "appears twice"),
        (
            lambda: TensorsStruct.from_arrays(
                {k: v for k, v in _request(0).items() if k != "attention_mask"}
            ),
            "missing ['attention_mask']",
        ),  # noqa: E501
        (lambda: _struct(names=["input_ids", "attention_mask", "other"]), "unknown ['other']"),
        (lambda: _struct(data_types=[TensorDataType.INT32] * 3), "expects INT64"),
        (lambda: _struct(data_types=[10, 7, 7]), "not an OAAX tensor_data_type"),
        (lambda: _struct(ranks=[3, 2, 2], shapes=[(1, 1, 8), (1, 8), (1, 8)]), "expects rank 2"),
        (lambda: _struct(ranks=[1, 2, 2]), "rank 1 but shape"),
        (lambda: _struct(data=[b"\x00" * 8, b"", b""]), "bytes of data"),
        (lambda: _struct(num_tensors=2), "num_tensors is 2"),
        (lambda: _struct(shapes=[(1, -8), (1, 8), (1, 8)]), "non-negative"),
        (lambda: {"input_ids": np.zeros((1, 8))}, "expected a TensorsStruct"),
    ],
    ids=[
        "duplicate",
        "missing",
        "unknown",
        "dtype",
        "bad-enum",
        "rank",
        "rank-vs-shape",
        "size",
        "count",
        "negative-dim",
        "not-a-struct",
    ],
)
def test_invalid_tensors_are_refused_before_anything_is_queued(artifact, struct, fragment):
    runtime = _loaded(artifact)
    assert runtime.send_input(struct()) != 0
    message = runtime.runtime_error_message()
    assert fragment in message, message
    assert runtime.receive_output([]) == 2
    assert "no request in flight" in runtime.runtime_error_message()  # nothing was queued
    runtime.runtime_destruction()


def test_tensors_struct_round_trips_every_data_type():
    arrays = {}
    for data_type in TensorDataType:
        if data_type is TensorDataType.STRING:
            arrays["s"] = np.array([["a", "bc"], ["", "d"]], dtype=object)
            continue
        dtype = ir_data_type(data_type).numpy()
        arrays[data_type.name] = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    struct = TensorsStruct.from_arrays(arrays)
    assert struct.num_tensors == len(TensorDataType)
    assert [int(t) for t in struct.data_types] == [t.value for t in TensorDataType]
    back = struct.to_arrays()
    for name, value in arrays.items():
        assert back[name].dtype == value.dtype and back[name].shape == value.shape
        assert back[name].tolist() == value.tolist()
    assert oaax_data_type(np.dtype(np.float16)) is None
    with pytest.raises(ValueError, match="float16"):
        TensorsStruct.from_arrays({"h": np.zeros(2, np.float16)})


def test_module_level_functions_in_a_fresh_process(artifact):
    script = f"""
import numpy as np
from onnx_ir_multidevice.oaax import runtime as rt
from onnx_ir_multidevice.oaax import TensorsStruct
assert rt.send_input(None) != 0
assert rt.runtime_initialization() == 0
assert rt.runtime_model_loading({str(artifact)!r}) == 0, rt.runtime_error_message()
feeds = {{n: np.ones((1, 4), np.int64) for n in {NAMES!r}}}
assert rt.send_input(TensorsStruct.from_arrays(feeds)) == 0
out = []
while rt.receive_output(out) != 0:
    pass
assert out[0].names == ["last_hidden_state", "pooler_output"]
assert rt.runtime_destruction() == 0
assert rt.runtime_initialization() != 0 and "destroyed" in rt.runtime_error_message()
print(rt.runtime_name(), rt.runtime_version())
"""
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["onnx-ir-multidevice-oaax", omd.__version__]
