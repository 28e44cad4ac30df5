"""The .omny v2 container through the file API and the CLI: load, convert, save, every command."""

from __future__ import annotations

import json
import shutil
import struct
import warnings
from pathlib import Path

import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_container import _BASES, HOSTILE, _mutate  # the hostile table and the fuzz mutator

import onnx_ir_multidevice as omd
from onnx_ir_multidevice import _cli, omny
from onnx_ir_multidevice._errors import OmnyIOError
from onnx_ir_multidevice._proto.container_files import (
    ContainerWarning,
    convert_container,
    save_container,
)
from onnx_ir_multidevice.omny import container as c
from onnx_ir_multidevice.omny.container import CONTAINER_META_KEY, OmnyContainerError

DATA = Path(__file__).parent / "data" / "omny-v2"
V1 = DATA / "tiny_v1.omny"
UPGRADED = DATA / "tiny_v2_upgrade.omny"
EXPORTED = DATA / "tiny_v2_export.omny"


def _cli_run(capsys, *argv: str) -> tuple[int, str, str]:
    code = _cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- load


def test_load_reads_the_upgrade_fixture_with_its_plan():
    model = omd.load(UPGRADED)
    container = model.meta[CONTAINER_META_KEY]
    assert isinstance(container, c.Container)
    assert container.manifest["version"] == "2.0"
    metadata = omny.read(model)
    assert metadata is not None
    assert [cfg.num_shards for cfg in metadata.sharding.configurations] == [2]
    assert metadata == omny.read(omd.load(V1))  # the plan is the v1 file's
    assert [v.name for v in model.graph.inputs] == ["input_ids", "attention_mask"]


def test_load_reads_the_export_fixture_with_its_full_manifest_and_no_plan():
    model = omd.load(EXPORTED)
    assert omny.read(model) is None
    container = model.meta[CONTAINER_META_KEY]
    assert container.manifest["processor"] == {
        "processor_type": "native",
        "processor_id": "semantic",
        "processor_version": None,
    }
    assert container.manifest["preprocess"]["resize"] == [224, 224]
    assert container.manifest["postprocess"]["labels"] == ["a", "b"]
    assert c.serialize_container(container) == EXPORTED.read_bytes()  # lossless


def test_a_v1_file_has_no_container():
    assert CONTAINER_META_KEY not in omd.load(V1).meta


@pytest.mark.parametrize(
    ("data", "path", "fragment"),
    [case[1:] for case in HOSTILE if case[1][:4] == b"OMNY" or case[0] == "three-bytes-of-magic"],
    ids=[
        case[0] for case in HOSTILE if case[1][:4] == b"OMNY" or case[0] == "three-bytes-of-magic"
    ],
)
def test_hostile_headers_through_load_raise_the_typed_error(tmp_path, data, path, fragment):
    file = tmp_path / "hostile.omny"
    file.write_bytes(data)
    if data[:4] != b"OMNY":  # not the magic: a (damaged) v1 file
        with pytest.raises(OmnyIOError):
            omd.load(file)
        return
    with pytest.raises(OmnyContainerError) as caught:
        omd.load(file)
    assert caught.value.path == path
    assert str(caught.value).startswith(f"{file}: {path}: ")
    assert fragment.replace("2**63", str(2**63)) in str(caught.value)


def test_hostile_header_is_exit_2_naming_the_field_for_every_command(capsys, tmp_path):
    file = tmp_path / "hostile.omny"
    data = bytearray(UPGRADED.read_bytes())
    struct.pack_into("<I", data, 4, 3)  # version 3
    file.write_bytes(bytes(data))
    for argv in (
        ["inspect", str(file)],
        ["plan", str(file), "-o", str(tmp_path / "p.omny")],
        ["annotate", str(file), str(tmp_path / "a.onnx")],
        ["split", str(file), str(tmp_path / "s"), "--shards", "2"],
        ["verify", str(file)],
        ["run", str(file), "--shards", "2"],
        ["convert", str(file), str(tmp_path / "c.omny"), "--container", "v1"],
        ["check", str(file)],
    ):
        code, _, err = _cli_run(capsys, *argv)
        assert code == 2, (argv, err)
        assert "header.version" in err or argv[0] == "check", (argv, err)
        assert "version 3" in err or argv[0] == "check", (argv, err)
        assert "Traceback" not in err
    code, out, _ = _cli_run(capsys, "check", str(file), "--json")
    document = json.loads(out)["result"]
    assert code == 2
    [diagnostic] = document["diagnostics"]
    assert diagnostic["code"] == "OMNY101" and diagnostic["location"] == "header.version"
    assert "version 3" in diagnostic["message"]


@settings(max_examples=1000, deadline=None)
@given(st.integers(0, len(_BASES) - 1), st.binary(max_size=48))
def test_fuzzed_containers_through_load_only_raise_typed_errors(tmp_path_factory, base, program):
    # The 10,000-example fuzz of the parser is in test_container.py; this runs the same
    # mutations through load(), which must add no other exception type.
    data = _mutate(_BASES[base], program)
    file = tmp_path_factory.getbasetemp() / "fuzz.omny"
    file.write_bytes(data)
    try:
        model = omd.load(file)
    except (OmnyContainerError, OmnyIOError):
        return
    if data[:4] == b"OMNY":
        assert c.serialize_container(model.meta[CONTAINER_META_KEY]) == data


# --------------------------------------------------------------------------- convert


def test_convert_v1_to_v2_is_byte_identical_to_upstream_upgrade(tmp_path):
    result = convert_container(V1, tmp_path / "out.omny", container="v2")
    assert (tmp_path / "out.omny").read_bytes() == UPGRADED.read_bytes()
    assert (result.source_container, result.container, result.dropped) == ("v1", "v2", ())


@pytest.mark.parametrize("fixture", [UPGRADED, EXPORTED], ids=["upgrade", "export"])
def test_convert_v2_to_v2_is_byte_identical(tmp_path, fixture):
    convert_container(fixture, tmp_path / "out.omny", container="v2")
    assert (tmp_path / "out.omny").read_bytes() == fixture.read_bytes()


def test_convert_v2_to_v1_gives_the_embedded_model_and_warns_what_is_dropped(tmp_path):
    with pytest.warns(ContainerWarning, match="processor.processor_id") as caught:
        result = convert_container(EXPORTED, tmp_path / "v1.onnx", container="v1")
    assert "preprocess" in result.dropped and "postprocess" in result.dropped
    assert len(caught) == 1
    proto = onnx.load(tmp_path / "v1.onnx")
    assert proto.SerializeToString() == c.read_container(EXPORTED).model_bytes
    # The upgrade fixture's manifest is all derived from the plan: nothing dropped.
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContainerWarning)
        result = convert_container(UPGRADED, tmp_path / "back.omny", container="v1")
    assert result.dropped == ()
    assert (tmp_path / "back.omny").read_bytes() == V1.read_bytes()


def test_cli_convert_round_trip_and_dropped_keys_on_stderr(capsys, tmp_path):
    code, out, err = _cli_run(
        capsys, "convert", str(V1), str(tmp_path / "v2.omny"), "--container", "v2"
    )
    assert code == 0, err
    assert (tmp_path / "v2.omny").read_bytes() == UPGRADED.read_bytes()
    assert "(v1)" in out and "(v2)" in out
    code, out, err = _cli_run(
        capsys, "convert", str(EXPORTED), str(tmp_path / "v1.omny"), "--container", "v1"
    )
    assert code == 0
    assert err.startswith("omny: warning: ")
    assert "dropped: " in err and "processor.processor_type" in err and "postprocess" in err
    code, out, _ = _cli_run(
        capsys, "convert", str(EXPORTED), str(tmp_path / "e.omny"), "--container", "v2", "--json"
    )
    document = json.loads(out)["result"]
    assert code == 0 and document["from"] == document["to"] == "v2"
    assert (tmp_path / "e.omny").read_bytes() == EXPORTED.read_bytes()
    code, _, err = _cli_run(capsys, "convert", str(V1), str(tmp_path / "x.omny"))
    assert code == 2 and "--container" in err  # writing v2 is explicit


def test_convert_refuses_a_model_without_a_plan_before_touching_the_destination(tmp_path):
    destination = tmp_path / "out.omny"
    destination.write_bytes(b"keep me")
    with pytest.raises(OmnyContainerError, match="plan it first"):
        convert_container(DATA / "tiny_plain.onnx", destination, container="v2")
    assert destination.read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.omny"]


def test_convert_refuses_external_data_before_touching_the_destination(tmp_path):
    model = omd.load(V1)
    omd.save(model, tmp_path / "ext.omny", external_data=True, size_threshold_bytes=0)
    assert (tmp_path / "ext.omny.data").exists()
    destination = tmp_path / "out.omny"
    destination.write_bytes(b"keep me")
    with pytest.raises(OmnyContainerError, match="external data"):
        convert_container(tmp_path / "ext.omny", destination, container="v2")
    with pytest.raises(OmnyContainerError, match="external data"):
        save_container(omd.load(tmp_path / "ext.omny"), destination)
    assert destination.read_bytes() == b"keep me"
    # v1 -> v1 keeps a model with external data valid elsewhere.
    (tmp_path / "copy").mkdir()
    convert_container(tmp_path / "ext.omny", tmp_path / "copy" / "m.omny", container="v1")
    assert omny.read(omd.load(tmp_path / "copy" / "m.omny")) == omny.read(model)


def test_convert_refuses_a_v1_file_of_2_gib_from_its_size(tmp_path):
    big = tmp_path / "big.omny"
    with open(big, "wb") as file:  # sparse: never read
        file.truncate(2**31)
    destination = tmp_path / "out.omny"
    with pytest.raises(OmnyContainerError, match="2 GiB"):
        convert_container(big, destination, container="v2")
    assert not destination.exists()


def test_rewriting_a_signed_file_warns_that_the_signature_is_stale(capsys, tmp_path):
    target = tmp_path / "m.omny"
    shutil.copy(UPGRADED, target)
    Path(f"{target}.sig").write_bytes(b"OSIG" + bytes(70))
    with pytest.warns(ContainerWarning, match="no longer verifies"):
        result = convert_container(target, target, container="v2")
    assert any("m.omny.sig" in w for w in result.warnings)
    with pytest.warns(ContainerWarning, match="no longer verifies"):
        save_container(omd.load(target), target)
    code, _, err = _cli_run(capsys, "convert", str(V1), str(target), "--container", "v2", "--force")
    assert code == 0 and "no longer verifies" in err
    # A file without a companion: no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContainerWarning)
        convert_container(V1, tmp_path / "other.omny")


# --------------------------------------------------------------------------- save_container


@pytest.mark.parametrize("fixture", [UPGRADED, EXPORTED], ids=["upgrade", "export"])
def test_save_container_of_an_unchanged_model_is_byte_identical(tmp_path, fixture):
    save_container(omd.load(fixture), tmp_path / "out.omny")
    assert (tmp_path / "out.omny").read_bytes() == fixture.read_bytes()


def test_save_container_of_a_v1_model_is_upstream_upgrade(tmp_path):
    save_container(omd.load(V1), tmp_path / "out.omny")
    assert (tmp_path / "out.omny").read_bytes() == UPGRADED.read_bytes()


def test_save_container_of_a_changed_model_keeps_what_only_the_manifest_holds(tmp_path):
    model = omd.load(EXPORTED)
    model.graph.name = "changed"
    built = save_container(model, tmp_path / "out.omny")
    old = c.read_container(EXPORTED)
    assert built.manifest == old.manifest  # no plan: the manifest is kept
    assert built.model_bytes != old.model_bytes
    assert omd.load(tmp_path / "out.omny").graph.name == "changed"
    # With a plan: the plan's figures, the old processor/pre/postprocess.
    planned = omd.load(UPGRADED)
    metadata = omny.read(planned)
    original = c.read_container(EXPORTED)
    planned.meta[CONTAINER_META_KEY] = original
    built = save_container(planned, tmp_path / "planned.omny")
    assert built.manifest["processor"] == original.manifest["processor"]
    assert built.manifest["preprocess"] == original.manifest["preprocess"]
    assert built.manifest["input"]["input_type"] == "tensor"  # kept from the old manifest
    assert built.manifest["sharding"]["allowed_shards"] == list(metadata.sharding.allowed_shards)
    assert list(built.manifest)[:5] == list(original.manifest)[:5]  # the old key order


def test_save_writes_v1_whatever_the_model_was_read_from(tmp_path):
    omd.save(omd.load(UPGRADED), tmp_path / "v1.omny")
    assert (tmp_path / "v1.omny").read_bytes() == V1.read_bytes()


# --------------------------------------------------------------------------- every command


def test_every_command_takes_v2_input(capsys, tmp_path):
    file = str(UPGRADED)
    code, out, err = _cli_run(capsys, "inspect", file)
    assert code == 0, err
    assert "in a v2 container" in out and "container .omny v2" in out and "cut_1" in out
    code, out, _ = _cli_run(capsys, "inspect", file, "--json")
    assert json.loads(out)["result"]["container"]["manifest"]["version"] == "2.0"
    code, out, err = _cli_run(capsys, "check", file)
    assert code == 0 and "0 errors, 0 warnings" in out, out + err
    code, _, err = _cli_run(capsys, "plan", file, "-o", str(tmp_path / "p.omny"), "--shards", "2")
    assert code == 0, err
    assert (tmp_path / "p.omny").read_bytes()[:4] != b"OMNY"  # plan writes v1
    code, _, err = _cli_run(capsys, "annotate", file, str(tmp_path / "a.onnx"))
    assert code == 0, err
    code, _, err = _cli_run(capsys, "split", file, str(tmp_path / "s"), "--shards", "2")
    assert code == 0, err
    assert (tmp_path / "s" / "manifest.json").exists()
    code, out, err = _cli_run(capsys, "verify", file, "--json")
    assert code == 0, err
    assert json.loads(out)["result"]["ok"] is True
    code, out, err = _cli_run(capsys, "run", file, "--shards", "2", "--requests", "3", "--json")
    assert code == 0, err
    assert json.loads(out)["result"]["num_stages"] == 2


def test_check_reports_container_findings_on_the_command_line(capsys, tmp_path):
    base = c.read_container(UPGRADED)
    manifest = json.loads(json.dumps(base.manifest))
    manifest["sharding"]["allowed_shards"] = [4]
    odd = c.build_container(base.model_bytes, manifest, flags=5)
    file = tmp_path / "odd.omny"
    file.write_bytes(c.serialize_container(odd))
    code, out, _ = _cli_run(capsys, "check", str(file), "--json")
    assert code == 0  # warnings only
    found = {d["code"]: d for d in json.loads(out)["result"]["diagnostics"]}
    assert found["OMNY140"]["location"] == "header.flags"
    assert "0x0000000000000005" in found["OMNY140"]["message"]
    assert found["OMNY145"]["location"] == "manifest.sharding.allowed_shards"
