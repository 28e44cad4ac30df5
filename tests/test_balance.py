"""Plans worth running (issue 9): compute shares and transfer shown, ``--balance compute``."""

from __future__ import annotations

import json
from pathlib import Path

import onnx_ir as ir
import pytest

from onnx_ir_multidevice import PlanError, PlanOptions, load
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice.planner.flops import node_flops
from onnx_ir_multidevice.planner.planning import describe, plan_model, plan_summary
from onnx_ir_multidevice.testing import zoo

CORPUS = Path(__file__).parent / "corpus"


def _gpt() -> ir.Model:
    # Tied embeddings: the first and last stages both hold the table, so the memory-optimal
    # 2-shard cut leaves the first stage with most of the layers (65 % of the compute).
    return zoo.gpt(layers=4, hidden=64, seq=64, vocab=2000)


def test_compute_balance_evens_the_stages_that_memory_leaves_uneven():
    model = _gpt()
    by_memory = plan_model(model, shards=[2], relaxed=True, balance="memory")
    by_compute = plan_model(model, shards=[2], relaxed=True, balance="compute")
    assert by_memory.balance == "memory" and by_compute.balance == "compute"
    memory_share = max(by_memory.partitions[0].flops_share)
    compute_share = max(by_compute.partitions[0].flops_share)
    assert compute_share < memory_share and compute_share <= 0.55
    # ... at the price of a larger largest stage
    assert by_compute.partitions[0].bottleneck_bytes >= by_memory.partitions[0].bottleneck_bytes
    with pytest.raises(PlanError, match="balance must be one of"):
        PlanOptions(balance="fast")


def test_describe_and_summary_show_compute_shares_and_bytes_sent():
    result = plan_model(_gpt(), shards=[2, 3], relaxed=True)
    text = describe(result)
    assert text.count("% of compute)") == 5 and text.count("sent per request: cut_") == 2
    summary = plan_summary(result)
    assert [c["num_shards"] for c in summary] == [2, 3]
    for config, found in zip(summary, result.partitions, strict=True):
        assert sum(config["stage_flops"]) == int(
            result.memory.flops([0], [result.memory.num_segments])[0]
        )
        assert abs(sum(config["flops_share"]) - 1) < 1e-3
        assert config["transfer_bytes"] == [c.bytes for c in found.cuts]
        assert all(isinstance(n, int) and n > 0 for n in config["transfer_bytes"])
        assert config["flops_estimated"] is False


def test_unbound_dims_give_unknown_transfer_and_estimated_shares():
    model = load(CORPUS / "bert_dynamo.onnx")  # inputs [batch, seq]: seq left unbound
    with pytest.warns(UserWarning, match="lower bounds"):
        result = plan_model(model, shards=[2], balance="compute")
    config = plan_summary(result)[0]
    assert config["transfer_bytes"] == [None] and config["flops_estimated"] is True
    assert "sent per request: cut_1 unknown" in describe(result)
    assert "~" in describe(result) and max(config["flops_share"]) < 0.55
    bound = plan_model(load(CORPUS / "bert_dynamo.onnx"), shards=[2], dims={"seq": 128})
    assert not bound.flops_estimated and plan_summary(bound)[0]["transfer_bytes"] == [128 * 64 * 4]


def test_cli_balance_and_json_fields(tmp_path, capsys):
    source = tmp_path / "gpt.onnx"
    ir.save(_gpt(), source)
    out = tmp_path / "gpt.omny"
    shares = {}
    for balance in ("memory", "compute"):
        args = ["plan", str(source), "-o", str(out), "--shards", "2", "--relaxed", "--json"]
        args.append("--force")  # the first round wrote it
        assert main([*args, "--balance", balance]) == 0
        document = json.loads(capsys.readouterr().out)["result"]  # one document
        assert document["sharding"]["allowed_shards"] == [2]  # the metadata as before
        plan = document["plan"]
        assert plan["balance"] == balance and plan["planning_dims"] == {"batch": 1}
        (config,) = plan["configurations"]
        assert len(config["flops_share"]) == 2 and len(config["transfer_bytes"]) == 1
        shares[balance] = max(config["flops_share"])
    assert shares["compute"] < shares["memory"]
    assert main(["plan", str(source), "-o", str(out), "--shards", "2", "--relaxed", "--force"]) == 0
    text = capsys.readouterr().out
    assert "% of compute)" in text and "sent per request:" in text
    assert main(["plan", str(source), "-o", str(out), "--balance", "fast"]) == 2


def test_corpus_recurrent_and_int8_models_show_their_compute():
    # Defect 9: LSTM FLOPs counted as about zero; an int8 encoder's 2-shard cut came right
    # after the embeddings (stage 0 with almost no compute).
    lstm = load(CORPUS / "lstm_gru_torchscript.onnx")
    result = plan_model(lstm, shards=[2], dims={"seq": 128})
    sizes = result.memory.sizes
    recurrent = sum(
        node_flops(node, sizes) or 0 for node in lstm.graph if node.op_type in ("LSTM", "GRU")
    )
    total = int(result.memory.flops([0], [result.memory.num_segments])[0])
    assert recurrent > 0.8 * total  # the recurrent layers are the model's compute
    int8 = plan_model(
        load(CORPUS / "bert_int8_dynamic.onnx"), shards=[2], dims={"seq": 128}, balance="memory"
    )
    assert min(int8.partitions[0].flops_share) < 0.05  # memory-optimal: embeddings alone
    for balance in ("compute", "speed"):  # the default (issue 17 §7) balances it too
        balanced = plan_model(
            load(CORPUS / "bert_int8_dynamic.onnx"), shards=[2], dims={"seq": 128}, balance=balance
        )
        assert max(balanced.partitions[0].flops_share) <= 0.55
