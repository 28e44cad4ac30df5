"""Hostile use of the Python API: annotate's options, pre-existing configurations."""

from __future__ import annotations

import dataclasses

import onnx_ir as ir
import pytest
from test_check import planned

from onnx_ir_multidevice import CheckError, annotate, check, from_proto, omny, to_proto
from onnx_ir_multidevice.checker.diagnostics import Severity
from onnx_ir_multidevice.passes import AnnotatePass, AnnotateStagesPass, StagesToOmnyPass


def _errors(model: ir.Model) -> list[str]:
    return [str(d) for d in check(model) if d.severity is Severity.ERROR]


# --- device_names -----------------------------------------------------------------------------


def test_device_names_as_one_string_is_refused_not_split_into_letters():
    with pytest.raises(TypeError, match=r"device_names.*\['gpu'\]"):
        annotate(planned(), device_names="gpu")


@pytest.mark.parametrize("bad", [[1, 2, 3], [None, None, None], ["a", b"b", "c"]])
def test_device_names_that_are_not_strings_are_refused_at_annotate_time(bad):
    with pytest.raises(TypeError, match=r"device_names\[\d\].*not a string"):
        annotate(planned(), device_names=bad)


def test_device_names_mapping_with_non_string_names_is_refused():
    with pytest.raises(TypeError, match=r"device_names\[3\]\[0\].*not a string"):
        AnnotatePass(device_names={3: [0, 1, 2]})


# --- configurations ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [2, "2", [2.0], [True]])
def test_configurations_that_are_not_shard_counts_are_refused_clearly(bad):
    with pytest.raises(TypeError, match=r"configurations.*shard counts"):
        annotate(planned(), configurations=bad)


def test_pass_constructor_refuses_a_bare_int_for_configurations():
    with pytest.raises(TypeError, match=r"configurations.*\{2\}"):
        AnnotateStagesPass(configurations=2)  # type: ignore[arg-type]


# --- configurations already on the model ------------------------------------------------------


def test_annotate_removes_a_duplicate_omny_configuration_and_checks_clean():
    model = planned()
    model.device_configurations = (
        ir.ModelConfiguration("omny/2-shards", 2),
        ir.ModelConfiguration("omny/2-shards", 5),
    )
    annotate(model)
    assert [c.name for c in model.device_configurations] == ["omny/2-shards", "omny/3-shards"]
    assert _errors(model) == []
    assert not AnnotatePass()(model).modified


def test_annotate_pass_replaces_references_to_an_undeclared_omny_configuration():
    # Another tool dropped the model configuration but left the node entries naming it:
    # loading gives each node a placeholder that is not registered on the model.
    proto = to_proto(annotate(planned()))
    del proto.configuration[0]
    model = from_proto(proto)
    assert AnnotatePass()(model).modified
    assert _errors(model) == []
    assert not AnnotatePass()(model).modified
    fresh = annotate(planned())
    assert sorted(c.name for c in model.device_configurations) == sorted(
        c.name for c in fresh.device_configurations
    )
    for ours, theirs in zip(model.graph, fresh.graph, strict=True):
        assert sorted(
            (e.configuration.name, e.pipeline_stage) for e in ours.device_configurations
        ) == sorted((e.configuration.name, e.pipeline_stage) for e in theirs.device_configurations)


# --- StagesToOmnyPass and check options --------------------------------------------------------


@pytest.mark.parametrize("bad", ["hand", 2, [2]])
def test_reverse_pass_refuses_configurations_that_are_not_a_collection_of_names(bad):
    with pytest.raises(TypeError, match=r"configurations.*names"):
        StagesToOmnyPass(configurations=bad)


@pytest.mark.parametrize("bad", ["3", 2.5, True])
def test_check_refuses_a_max_per_code_that_is_not_an_integer(bad):
    with pytest.raises(TypeError, match=r"max_per_code=.*integer or None"):
        check(planned(), max_per_code=bad)


# --- annotate() repairs an earlier omny/ annotation instead of refusing it ---------------------


@pytest.mark.parametrize("num_devices", [0, -3])
def test_annotate_rewrites_an_omny_configuration_with_a_broken_device_count(num_devices):
    proto = to_proto(annotate(planned()))
    proto.configuration[0].num_devices = num_devices  # OMNY214, and OMNY211 on the cut nodes
    model = annotate(from_proto(proto))
    assert _errors(model) == []


def test_annotate_rewrites_node_entries_naming_an_undeclared_omny_configuration():
    proto = to_proto(annotate(planned()))
    del proto.configuration[0]  # OMNY203 on every node
    model = annotate(from_proto(proto))
    assert _errors(model) == []


def test_annotate_still_blocks_on_a_broken_foreign_configuration():
    proto = to_proto(annotate(planned()))
    proto.configuration[0].name = "theirs"  # nodes now name an undeclared 'omny/2-shards'...
    proto.configuration[0].num_devices = 0  # ... and a foreign configuration is broken
    with pytest.raises(CheckError, match="OMNY214 at configuration:theirs"):
        annotate(from_proto(proto))


# --- extras that omny.write would write and omny.read refuse -----------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"x": 10**40}, r"extra\.x: integer .* signed 64-bit"),
        ({"x": [-(2**63) - 1]}, r"extra\.x\[0\]: integer .* signed 64-bit"),
        ({"x": 10**100_000}, r"extra\.x: integer of 1000\+ bits is outside"),
        ({"x": "\ud800"}, r"extra\.x: .*unpaired UTF-16 surrogate"),
        ({"\udc00": 1}, r"extra: key .*unpaired UTF-16 surrogate"),
    ],
)
def test_an_extra_that_json_cannot_read_back_is_refused_when_set(extra, message):
    model = planned()
    metadata = omny.read(model)
    assert metadata is not None
    first = metadata.sharding.configurations[0]
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(first, extra=extra)
    assert omny.read(model) == metadata  # nothing was written
