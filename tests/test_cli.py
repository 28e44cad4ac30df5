"""The ``omny`` command line: main(), inspect, demo, error handling."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import onnx_ir as ir
import pytest

from onnx_ir_multidevice import _cli
from onnx_ir_multidevice._cli import _demo_steps as demo_cli
from onnx_ir_multidevice._cli import _inspect_report as inspect_cli
from onnx_ir_multidevice._proto.files import load
from onnx_ir_multidevice.examples import EXAMPLE, GPT_TINY
from onnx_ir_multidevice.testing import zoo

ROOT = Path(__file__).resolve().parent.parent


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = _cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version_and_help(capsys):
    from onnx_ir_multidevice import __version__

    code, out, _ = _run(capsys, "--version")
    assert code == 0
    assert out.strip() == f"omny {__version__}"
    code, out, _ = _run(capsys, "--help")
    assert code == 0
    assert "inspect" in out and "demo" in out


def test_no_command_is_usage_error(capsys):
    code, _, err = _run(capsys)
    assert code == 2
    assert "usage: omny" in err


def test_bad_arguments_exit_2(capsys):
    code, _, err = _run(capsys, "inspect")
    assert code == 2
    assert "required" in err


def test_every_subcommand_is_registered():
    # The list is explicit: each module exists and registers itself (no skip-if-missing).
    parser = _cli.build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(actions[0].choices) == sorted(_cli._SUBCOMMANDS)


def test_omny_error_becomes_one_line_and_exit_2(capsys, tmp_path):
    missing = tmp_path / "nope.omny"
    code, out, err = _run(capsys, "inspect", str(missing))
    assert code == 2
    assert out == ""
    assert err.startswith("omny: error: ")
    assert "nope.omny" in err
    assert "Traceback" not in err
    not_onnx = tmp_path / "garbage.onnx"
    not_onnx.write_bytes(b"\xff\xfe not a protobuf at all")
    code, _, err = _run(capsys, "inspect", str(not_onnx))
    assert code == 2 and err.startswith("omny: error: ")


def test_subcommand_exit_code_is_passed_through(capsys, monkeypatch):
    def register(subparsers: argparse._SubParsersAction) -> None:
        subparsers.add_parser("seven").set_defaults(func=lambda args: 7)

    monkeypatch.setattr(_cli, "_SUBCOMMANDS", ("seven",))
    monkeypatch.setitem(
        sys.modules, "onnx_ir_multidevice._cli.seven", argparse.Namespace(register=register)
    )
    assert _cli.main(["seven"]) == 7


def test_inspect_text_shows_cut_points_and_configurations(capsys):
    code, out, err = _run(capsys, "inspect", str(GPT_TINY))
    assert code == 0, err
    assert "gpt_tiny.omny" in out
    assert "input_ids" in out and "logits" in out
    for cut_id in ("cut_1", "cut_2", "cut_3"):
        assert cut_id in out
    assert "layer.1.out" in out
    assert "configurations (2)" in out
    assert "NO" not in out  # every reference resolves


def test_inspect_json_document(capsys):
    code, out, _ = _run(capsys, "inspect", str(GPT_TINY), "--json")
    assert code == 0
    doc = json.loads(out)["result"]
    assert doc["schema"] == "onnx-ir-multidevice/inspect"
    assert doc["schema_version"] == 1
    assert doc["inputs"] == [{"name": "input_ids", "dtype": "int64", "shape": ["batch", 32]}]
    assert doc["outputs"] == [{"name": "logits", "dtype": "float32", "shape": ["batch", 32, 512]}]
    model = doc["model"]
    assert model["opset_imports"] == {"": 18}
    assert model["num_nodes"] == model["num_nodes_with_subgraphs"] > 100
    assert model["weights_bytes"] == 4 * model["num_parameters"]
    meta = doc["metadata"]
    assert meta["omnynet_version"] == meta["version"] == "1.0"
    assert [c["id"] for c in meta["cut_points"]] == ["cut_1", "cut_2", "cut_3"]
    assert all(c["resolved"] is True for c in meta["cut_points"])
    assert [c["num_shards"] for c in meta["configurations"]] == [2, 4]
    assert [c["resolved"] for c in meta["configurations"]] == [True, True]
    assert meta["unresolved"] == []
    assert meta["export_info"]["validated"] is None


def test_inspect_plain_onnx_and_control_flow(capsys, tmp_path):
    from onnx_ir_multidevice._proto.files import save

    path = tmp_path / "cf.onnx"
    save(zoo.control_flow(), path)
    code, out, _ = _run(capsys, "inspect", str(path), "--json")
    assert code == 0
    doc = json.loads(out)["result"]
    assert doc["metadata"] is None
    assert doc["model"]["num_nodes"] == 6
    assert doc["model"]["num_nodes_with_subgraphs"] > 6
    code, out, _ = _run(capsys, "inspect", str(path))
    assert "plain ONNX" in out


def test_inspect_reports_unresolved_cut_point(capsys, tmp_path):
    from onnx_ir_multidevice import omny
    from onnx_ir_multidevice._proto.files import load, save

    model = load(GPT_TINY)
    node = model.graph.node("layer.1.out")
    node.outputs[0].name = "renamed_behind_the_plans_back"
    path = tmp_path / "stale.omny"
    save(model, path)
    assert omny.read(load(path)) is not None
    code, out, _ = _run(capsys, "inspect", str(path), "--json")
    assert code == 0
    meta = json.loads(out)["result"]["metadata"]
    resolved = {c["id"]: c["resolved"] for c in meta["cut_points"]}
    assert resolved == {"cut_1": True, "cut_2": False, "cut_3": True}
    assert [c["resolved"] for c in meta["configurations"]] == [False, False]
    assert meta["unresolved"]
    code, out, _ = _run(capsys, "inspect", str(path))
    assert "NO" in out and "unresolved references" in out


def test_table_formatting():
    text = inspect_cli.table(["a", "long header"], [[1, None], [[1, 2], True]])
    lines = text.splitlines()
    assert lines[0] == "  a       long header"
    assert lines[1] == "  1       ?"
    assert lines[2] == "  [1, 2]  yes"


def test_shape_and_dtype_helpers():
    value = ir.Value(name="v", type=ir.TensorType(ir.DataType.FLOAT16), shape=ir.Shape(["b", 3]))
    assert inspect_cli._tensor(value) == {"name": "v", "dtype": "float16", "shape": ["b", 3]}
    assert inspect_cli.shape_list(value.shape) == ["b", 3]
    assert inspect_cli.shape_list(None) is None
    assert inspect_cli._tensor(ir.Value(name="u"))["dtype"] is None


def test_demo_runs_every_available_step(capsys):
    code, out, _ = _run(capsys, "demo")
    assert code == 0, out
    assert "bert_tiny.omny" in out.splitlines()[0]
    # load, round trip, strict check of the bundled file
    assert "byte-identical" in out and "DIFFERS" not in out
    assert "tensor_name is now" in out
    assert "bert_tiny.omny: 0 errors" in out
    # plan: the describe() table for 2, 3, 4 shards and the scaled-down device list
    for n in (2, 3, 4):
        assert f"{n} shards: cuts cut_" in out
    assert "same cuts as the plan stored in bert_tiny.omny: yes" in out
    assert "24GiB, 8GiB, 8GiB scaled by 1/" in out and "/ device " in out
    # check and annotate the written plans
    assert "check bert_tiny.planned.omny: 0 errors" in out
    assert "check bert_tiny.annotated.onnx: 0 errors" in out
    assert "omny/4-shards" in out
    # verify every configuration, then the pipeline
    for n in (2, 3, 4):
        assert f"OK: {n} stages vs whole model" in out
    assert "MISMATCH" not in out
    assert "32 requests in" in out and "stage 1 (cpu)" in out
    assert "all within rtol=0.0001, atol=0.0001" in out  # verify's rule for an fp32 model
    assert "FAILED" not in out and "  skipped:" not in out
    assert out.splitlines()[-1] == f"demo: {len(demo_cli.STEPS)} ok, 0 skipped, 0 failed"


def test_demo_json_document(capsys):
    code, out, _ = _run(capsys, "demo", "--json")
    assert code == 0
    doc = json.loads(out)["result"]
    assert doc["schema"] == "onnx-ir-multidevice/demo" and doc["ok"] is True
    steps = {step["name"]: step for step in doc["steps"]}
    assert list(steps) == [s.name for s in demo_cli.STEPS]
    assert {step["status"] for step in steps.values()} == {"ok"}
    assert steps["roundtrip"]["proto_identical"] and steps["roundtrip"]["save_identical"]
    assert [c["num_shards"] for c in steps["plan"]["configurations"]] == [2, 3, 4]
    assert len(steps["plan"]["scaled_devices_bytes"]) == 3
    runs = steps["verify"]["runs"]
    assert [r["num_shards"] for r in runs] == [2, 3, 4, 3]
    for r in runs:
        assert r["ok"] and (r["rtol"], r["atol"]) == (1e-4, 1e-4)  # verify's rule, fp32
        for output in r["outputs"]:
            assert output["max_abs_diff"] <= 1e-4
    pipeline = steps["pipeline"]
    assert pipeline["requests"] == demo_cli.PIPELINE_REQUESTS
    assert len(pipeline["stats"]["stages"]) == 2
    assert all(o["mismatches"] == 0 for o in pipeline["outputs"].values())


def test_demo_only_runs_the_steps_it_needs(capsys):
    code, out, _ = _run(capsys, "demo", "--only", "verify")
    assert code == 0, out
    headings = [line for line in out.splitlines() if line.startswith("[")]
    assert [h.split("] ")[0] for h in headings] == ["[1/3", "[2/3", "[3/3"]
    assert "Load" in headings[0] and "Plan" in headings[1] and "compare" in headings[2]


def test_demo_relaxed_example_fails_the_strict_check(capsys):
    code, out, _ = _run(capsys, "demo", "--model", str(GPT_TINY), "--only", "check")
    assert code == 1
    assert "FAILED: RuntimeError: gpt_tiny.omny: the checker found 4 errors" in out
    assert "demo: FAILED steps: check" in out
    code, out, _ = _run(capsys, "demo", "--model", str(GPT_TINY), "--only", "check", "--relaxed")
    assert code == 0, out


def test_demo_on_a_model_without_a_plan_says_so_once_and_skips_what_needs_it(capsys, tmp_path):
    """Issue 18 item 23: no cascade of failures and no internals (``bind() takes...``)."""
    from onnx_ir_multidevice._proto.files import save

    model = load(EXAMPLE)
    for key in list(model.metadata_props):
        del model.metadata_props[key]
    plain = tmp_path / "plain.onnx"
    save(model, plain)
    code, out, _ = _run(
        capsys, "demo", "--model", str(plain), "--only", "cuts", "rename", "check", "plan"
    )
    assert code == 1, out  # what the file holds stops part of the job (docs/cli.md table)
    assert out.count("no .omny plan") == 1 and demo_cli.NO_PLAN in out
    assert "omny plan" in demo_cli.NO_PLAN and "bundled example" in demo_cli.NO_PLAN
    assert "FAILED" not in out and "Error" not in out, out
    assert out.count("skipped: needs the file's own .omny plan") == 2  # cuts, rename
    assert out.splitlines()[-1] == "demo: 3 ok, 2 skipped, 0 failed"  # load, check, plan
    code, out, _ = _run(capsys, "demo", "--model", str(plain), "--only", "cuts", "--json")
    steps = {s["name"]: s for s in json.loads(out)["result"]["steps"]}
    assert steps["load"]["status"] == "ok" and steps["load"]["plan"] is None
    assert steps["cuts"]["status"] == "skipped"


def test_demo_step_after_a_failed_one_is_skipped(capsys, monkeypatch):
    def boom(ctx):
        raise RuntimeError("no plan")

    steps = [
        demo_cli.Step("plan", "Plans", boom, uses_model=False),
        demo_cli.Step("use", "Uses the plan", lambda ctx: None, uses_model=False, after=("plan",)),
    ]
    monkeypatch.setattr(demo_cli, "STEPS", steps)
    code, out, _ = _run(capsys, "demo")
    assert code == 1
    assert "skipped: needs the results of 'plan'" in out
    assert out.splitlines()[-1] == "demo: 0 ok, 1 skipped, 1 failed"


def test_scaled_devices_is_the_tightest_power_of_two():
    from onnx_ir_multidevice._errors import PlanError
    from onnx_ir_multidevice.planner import plan_model

    model = load(EXAMPLE)
    sizes, divisor, result = demo_cli.scaled_devices(model)
    assert sizes == [24 * 2**30 // divisor, 8 * 2**30 // divisor, 8 * 2**30 // divisor]
    assert result.metadata.sharding.configurations[0].num_shards == 3
    with pytest.raises(PlanError):
        plan_model(model, devices=[size // 2 for size in sizes])


def test_demo_list_and_failure_exit_code(capsys, monkeypatch):
    code, out, _ = _run(capsys, "demo", "--list")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == [s.name for s in demo_cli.STEPS]

    def boom(ctx):
        raise RuntimeError("step exploded")

    steps = [*demo_cli.STEPS[:1], demo_cli.Step("boom", "A failing step", boom, uses_model=False)]
    monkeypatch.setattr(demo_cli, "STEPS", steps)
    code, out, _ = _run(capsys, "demo")
    assert code == 1
    assert "FAILED: RuntimeError: step exploded" in out


def test_demo_missing_model_is_exit_2(capsys, tmp_path):
    code, _, err = _run(capsys, "demo", "--model", str(tmp_path / "missing.omny"))
    assert code == 2
    assert err.startswith("omny: error:")


def test_console_entry_point_runs():
    result = subprocess.run(
        [sys.executable, "-m", "onnx_ir_multidevice._cli", "--version"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0
    assert result.stdout.startswith("omny ")


# ---------------------------------------------------------------------------------------------
# Issue 18 item 24: traps a new user met


def test_plan_counts_the_cut_points_the_file_holds(capsys, tmp_path):
    out_file = tmp_path / "p.omny"
    code, out, err = _run(capsys, "plan", str(EXAMPLE), "-o", str(out_file), "--shards", "2")
    assert code == 0, err
    from onnx_ir_multidevice import omny

    held = len(omny.read(load(out_file)).cut_points)
    assert f": {held} cut point{'s' if held != 1 else ''}, 1 configuration" in out.splitlines()[0]


def test_every_writer_refuses_an_existing_output_without_force(capsys, tmp_path):
    planned = tmp_path / "p.omny"
    assert _run(capsys, "plan", str(EXAMPLE), "-o", str(planned), "--shards", "2")[0] == 0
    for argv, out_path in (
        (["plan", str(EXAMPLE), "-o", "{out}", "--shards", "2"], tmp_path / "again.omny"),
        (["annotate", str(planned), "{out}"], tmp_path / "annotated.onnx"),
        (["convert", str(planned), "{out}", "--container", "v2"], tmp_path / "v2.omny"),
    ):
        out_path.write_bytes(b"keep me")
        words = [str(out_path) if w == "{out}" else w for w in argv]
        code, _, err = _run(capsys, *words)
        assert code == 2, (argv, err)
        assert "exists; choose another path or pass --force" in err and "in Python" not in err
        assert out_path.read_bytes() == b"keep me"  # refused before any work
        code, _, err = _run(capsys, *words, "--force")
        assert code == 0, (argv, err)
        assert out_path.read_bytes() != b"keep me"


def test_split_reads_the_folder_after_one_shard_count(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, "split", str(EXAMPLE), "--shards", "2", "stages")
    assert code == 0, err
    assert (tmp_path / "stages" / "manifest.json").is_file()


def test_export_usage_mistakes_exit_2_in_command_line_words(capsys, tmp_path):
    model = str(EXAMPLE)
    code, _, err = _run(capsys, "export", "mlf", model, str(tmp_path / "a.tar"))
    assert code == 2 and "pass --shards N" in err and "shards=N" not in err, err
    code, _, err = _run(capsys, "export", "mlf", model, str(tmp_path / "b.tar"), "--shards", "2",
                        "--providers", "cpu,cpu,cpu")  # fmt: skip
    assert code == 2 and "3 devices for 2 stages" in err, err
    code, _, err = _run(capsys, "export", "ark", model, str(tmp_path / "c"))
    assert code == 2 and "pass --shards N" in err, err
    # `out/` is a folder, not the archive's name: refused, nothing written
    code, _, err = _run(capsys, "export", "mlf", model, f"{tmp_path / 'out'}/", "--shards", "2")
    assert code == 2 and "the mlf format writes one .tar archive" in err, err
    assert "--per-stage" in err and not (tmp_path / "out").exists()
    (tmp_path / "dir.tar").mkdir()
    code, _, err = _run(capsys, "export", "mlf", model, str(tmp_path / "dir.tar"), "--shards", "2",
                        "--per-stage")  # fmt: skip
    assert code == 2 and "with --per-stage, OUT is a directory" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.tar"]


def test_long_commands_report_progress_on_stderr_when_asked(capsys, tmp_path):
    """split, verify, export and run say what they do on stderr with --progress (as plan
    does); never on stdout, and not at all when stderr is no terminal and it is not asked."""
    model = str(EXAMPLE)
    commands = {
        "split": ["split", model, str(tmp_path / "s"), "--shards", "2"],
        "verify": ["verify", model, "--shards", "2"],
        "export": ["export", "ark", model, str(tmp_path / "a"), "--shards", "2"],
        "run": ["run", model, "--shards", "2", "--requests", "2", "--warmup", "0"],
    }
    for name, argv in commands.items():
        code, out, err = _run(capsys, *argv, "--progress")
        assert code == 0, (name, err)
        lines = err.splitlines()
        assert lines and all(line.startswith(f"omny {name}: ") for line in lines), (name, err)
        assert lines[0].startswith(f"omny {name}: loading ") and lines[0].endswith("s)")
        assert "omny " + name + ":" not in out
    code, _, err = _run(capsys, "verify", model, "--shards", "2")
    assert code == 0 and err == ""


def test_json_is_one_envelope_for_every_command_also_on_error(capsys, tmp_path):
    """Issue 18 item 24: one set of top-level keys; a document on stdout also on error."""
    keys = ["command", "ok", "status", "result", "error"]
    model = str(EXAMPLE)
    good = {
        "inspect": ["inspect", model],
        "check": ["check", model],
        "plan": ["plan", model, "-o", str(tmp_path / "p.omny"), "--shards", "2"],
        "split": ["split", model, str(tmp_path / "s"), "--shards", "2"],
        "verify": ["verify", model, "--shards", "2"],
    }
    for name, argv in good.items():
        code, out, err = _run(capsys, *argv, "--json")
        document = json.loads(out)
        assert list(document) == keys, name
        assert document["command"] == name and document["ok"] is True and code == 0, err
        assert document["status"] == 0 and document["error"] is None
        assert isinstance(document["result"], dict)
    failing = {
        "split": (["split", model, str(tmp_path / "s"), "--shards", "2"], 2, "not empty"),
        "plan": (["plan", model], 2, "-o/--output"),
        "verify": (["verify", str(tmp_path / "missing.omny")], 2, "missing.omny"),
        "export": (["export", "mlf", model, str(tmp_path / "x.tar")], 2, "--shards N"),
    }
    for name, (argv, status, words) in failing.items():
        code, out, err = _run(capsys, *argv, "--json")
        document = json.loads(out)
        assert list(document) == keys and code == status, (name, out)
        assert document["command"] == name and document["ok"] is False
        assert document["status"] == status and document["result"] is None
        assert words in document["error"] and document["error"] in err


class _FakeRay:
    """Enough of the ``ray`` module for the Ray engine to start its actors and refuse them: a
    cluster of ``cpus`` CPUs whose actors never become ready (no Ray instance started)."""

    def __init__(self, cpus: float) -> None:
        self.cpus = cpus

    def is_initialized(self) -> bool:
        return True

    def remote(self, *args, **kwargs):  # ray.remote(cls), cls.remote(...), method.remote()
        return self

    def options(self, **options):
        return self

    def cluster_resources(self):
        return {"CPU": self.cpus}

    def nodes(self):  # one node holding every CPU
        return [{"NodeID": "f" * 56, "Alive": True, "Resources": {"CPU": self.cpus}}]

    def available_resources(self):
        return {"CPU": self.cpus}

    def wait(self, refs, num_returns=1, timeout=None):
        return [], list(refs)

    def kill(self, actor, no_restart=True):
        pass

    def __getattr__(self, name):  # actor.ready / actor.close: a method with .remote()
        return self


def test_command_line_messages_name_flags_not_python_arguments(capsys, tmp_path, monkeypatch):
    """Issue 18 item 27: `force=True in Python`, `intra_op_num_threads`, `max_shard_size_mb`
    and `shards=N` in messages of the command line; `omny run --backend ray` said
    `lower intra_op_num_threads or pass ray_actor_options` for `--threads`, and
    `--threads 1,2,3` for 2 stages `intra_op_num_threads gives 3 values`."""
    import sys

    model = str(EXAMPLE)
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "keep").write_text("x")
    ray = ["run", model, "--shards", "2", "--backend", "ray", "--no-baseline"]
    cases = [
        (["split", model, str(tmp_path / "s"), "--shards", "2"], "pass --force to replace"),
        (["run", model, "--shards", "2", "--threads", "0"], "--threads"),
        (["run", model, "--shards", "2", "--threads", "1,2,3"], "--threads gives 3 values"),
        (["plan", model, "-o", str(tmp_path / "p.omny"), "--max-shard-mb", "0"], "--max-shard-mb"),
        (["export", "split", model, str(tmp_path / "e")], "pass --shards N"),
        ([*ray, "--threads", "2"], "the Ray cluster has 1; lower --threads or start Ray"),
        ([*ray, "--threads", "1"], "did not start within 60.0 s; they ask for"),
    ]
    for argv, flag in cases:
        if "ray" in argv:  # 2 actors of 2 threads on 1 CPU; 2 of 1 on 2 that never start
            monkeypatch.setitem(sys.modules, "ray", _FakeRay(1.0 if "2" in argv[-1] else 2.0))
        code, _, err = _run(capsys, *argv)
        assert code == 2 and flag in err, (argv, err)
        for python in ("in Python", "force=True", "intra_op_num_threads", "max_shard_size_mb"):
            assert python not in err, (argv, err)
        for python in ("shards=N", "ray_actor_options"):
            assert python not in err, (argv, err)
        if "ray" in argv:
            assert "lower --threads or start Ray with more resources" in err, err


def test_run_prints_the_whole_model_baseline_as_the_demo_does(capsys, tmp_path):
    """Issue 18 item 27: `omny run` printed no whole-model baseline."""
    model = str(EXAMPLE)
    argv = ["run", model, "--shards", "2", "--requests", "3", "--warmup", "0", "--threads", "1"]
    code, out, err = _run(capsys, *argv)
    assert code == 0, err
    line = out.splitlines()[-1]
    assert line.startswith("baseline: the whole model in one onnxruntime session"), out
    assert "3 requests in " in line and "the pipeline's throughput is " in line
    code, out, _ = _run(capsys, *argv, "--json")
    baseline = json.loads(out)["result"]["baseline"]
    assert baseline["requests"] == 3 and baseline["wall_s"] > 0 and baseline["throughput"] > 0
    code, out, _ = _run(capsys, *argv, "--no-baseline")
    assert code == 0 and "baseline" not in out
    assert _run(capsys, "split", model, str(tmp_path / "s"), "--shards", "2")[0] == 0
    code, out, _ = _run(capsys, "run", str(tmp_path / "s"), "--requests", "2", "--warmup", "0")
    assert code == 0 and out.splitlines()[-1].startswith("baseline: the 2 stages in one thread")
