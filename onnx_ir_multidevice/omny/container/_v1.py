"""v1 files and v2 containers: :func:`upgrade`, :func:`replace_model`, :func:`downgrade`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import onnx

from onnx_ir_multidevice.omny.container._fit import unfit_model_reason, uses_external_data
from onnx_ir_multidevice.omny.container._layout import (
    MANIFEST_VERSION,
    METADATA_KEY,
    Container,
    OmnyContainerError,
    _graph_names,
    _json_type,
    _parse_model,
)
from onnx_ir_multidevice.omny.container._read import detect
from onnx_ir_multidevice.omny.container._write import build_container, serialize_container

# --------------------------------------------------------------------------- upgrade


# Defaults of the reference writer's v1 dataclasses for keys a v1 document may leave out
# (the same as onnx_ir_multidevice.omny._schema's); None marks a required key.
_V1_MODEL = {
    "name": None,
    "architecture": "unknown",
    "total_params": 0,
    "total_size_mb": 0,
    "inference_memory_mb": 0,
}
_V1_SHARDING = {
    "min_vram_mb": 1500,
    "max_shard_size_mb": 1200,
    "min_shards": 2,
    "max_shards": 8,
    "allowed_shards": [2, 4],
}
_V1_EXPORT_INFO = {"exporter_version": "0.1.0", "source_framework": "pytorch", "onnx_opset": 17}

# What upstream writes for manifest keys that have no counterpart in the v1 metadata.
_NO_V1_HOME_DEFAULTS: dict[tuple[str, ...], Any] = {
    ("model", "task"): "",
    ("processor", "processor_type"): "none",
    ("processor", "processor_id"): None,
    ("processor", "processor_version"): None,
    ("input", "input_type"): "image",
    ("input", "input_format"): "base64",
    ("output", "output_type"): "raw",
    ("output", "output_format"): "json",
}
# Manifest keys whose value the v1 metadata holds (its own copy is the truth).
_V1_HOMES: dict[str, frozenset[str]] = {
    "model": frozenset(_V1_MODEL),
    "input": frozenset({"tensor_names"}),
    "output": frozenset({"tensor_names"}),
    "sharding": frozenset(_V1_SHARDING),
    "export_info": frozenset(_V1_EXPORT_INFO),
}
_MISSING = object()
_OBJECT_SECTIONS = ("model", "processor", "input", "output", "sharding", "export_info")


class _V1Reader:
    """Read fields of the v1 metadata JSON the way upstream's dataclasses see them."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.prefix = f"metadata_props[{METADATA_KEY}]"

    def fail(self, path: str, reason: str) -> OmnyContainerError:
        return OmnyContainerError(f"{self.prefix}.{path}", reason, source=self.source)

    def obj(self, parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
        value = parent.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {_json_type(value)}")
        return value

    def fields(
        self, obj: Mapping[str, Any], defaults: Mapping[str, Any], path: str
    ) -> dict[str, Any]:
        out = {}
        for key, default in defaults.items():
            if key not in obj and default is None:
                raise self.fail(f"{path}.{key}", "missing; upstream cannot upgrade without it")
            out[key] = obj.get(key, default)
        return out

    def names(self, document: Mapping[str, Any], key: str) -> list[Any]:
        items = document.get(key, [])
        if not isinstance(items, list):
            raise self.fail(key, f"expected an array, got {_json_type(items)}")
        names = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise self.fail(f"{key}[{i}]", f"expected an object, got {_json_type(item)}")
            if "name" not in item:
                raise self.fail(f"{key}[{i}].name", "missing; upstream cannot upgrade without it")
            names.append(item["name"])
        return names


def _v1_metadata(proto: onnx.ModelProto, source: str) -> dict[str, Any]:
    # Upstream reads the first omnynet_metadata entry, and only if it is not empty.
    text = next((p.value for p in proto.metadata_props if p.key == METADATA_KEY), "")
    path = f"metadata_props[{METADATA_KEY}]"
    if not text:
        raise OmnyContainerError(
            path,
            "missing or empty; the file is a plain ONNX model, not a v1 .omny: plan it first "
            "(`omny plan`)",
            source=source,
        )
    try:
        document = json.loads(text)
    except RecursionError:
        raise OmnyContainerError(path, "not JSON (nested too deeply)", source=source) from None
    except ValueError as error:
        raise OmnyContainerError(path, f"not JSON ({error})", source=source) from None
    if not isinstance(document, dict):
        raise OmnyContainerError(
            path, f"the JSON is {_json_type(document)}, not an object", source=source
        )
    return document


def _manifest_from_v1(
    document: Mapping[str, Any],
    *,
    task: str,
    processor_type: str,
    processor_id: str | None,
    source: str,
) -> dict[str, Any]:
    read = _V1Reader(source)
    model = read.fields(read.obj(document, "model", "model"), _V1_MODEL, "model")
    sharding = read.fields(read.obj(document, "sharding", "sharding"), _V1_SHARDING, "sharding")
    export_info = read.fields(
        read.obj(document, "export_info", "export_info"), _V1_EXPORT_INFO, "export_info"
    )
    return {
        "version": MANIFEST_VERSION,
        "model": {
            "name": model["name"],
            "architecture": model["architecture"],
            "task": task,
            "total_params": model["total_params"],
            "total_size_mb": model["total_size_mb"],
            "inference_memory_mb": model["inference_memory_mb"],
        },
        "processor": {
            "processor_type": processor_type,
            "processor_id": processor_id,
            "processor_version": None,
        },
        "input": {
            "input_type": "image",
            "input_format": "base64",
            "tensor_names": read.names(document, "inputs"),
        },
        "output": {
            "output_type": "raw",
            "output_format": "json",
            "tensor_names": read.names(document, "outputs"),
        },
        "sharding": sharding,
        "export_info": export_info,
    }


def upgrade(
    v1_model_bytes: bytes,
    *,
    task: str = "",
    processor_type: str = "none",
    processor_id: str | None = None,
    source: str = "<bytes>",
) -> bytes:
    """Convert a v1 ``.omny`` file into a v2 container, exactly as upstream ``upgrade`` does.

    Upstream parses the v1 file with ``onnx.load``, builds the manifest from the
    ``omnynet_metadata`` JSON and writes the model back with ``SerializeToString()``; this
    function does the same, so the result equals upstream's byte for byte:

    * the embedded model is the parsed v1 proto re-serialized: every ``metadata_props``
      entry (the plan included), the producer and the graph are kept as they are. For a
      file written by protobuf itself (any ONNX writer) this is the input, verbatim;
    * the manifest is ``json.dumps(indent=2)`` (ASCII) of, in this order: ``version``
      ``"2.0"``; ``model`` with ``name``, ``architecture``, ``total_params``,
      ``total_size_mb``, ``inference_memory_mb`` copied from the v1 ``model`` object (JSON
      values as they are, not recomputed) and ``task`` from the argument; ``processor``
      from the arguments with ``processor_version`` null; ``input`` / ``output`` with
      upstream's fixed ``"image"``/``"base64"`` and ``"raw"``/``"json"`` (even for a text
      model) and the ``name`` of each v1 ``inputs`` / ``outputs`` entry; ``sharding`` with
      only ``min_vram_mb``, ``max_shard_size_mb``, ``min_shards``, ``max_shards``,
      ``allowed_shards`` (no cut points, no configurations); ``export_info`` with only
      ``exporter_version``, ``source_framework``, ``onnx_opset`` (``exported_at`` and
      ``source_version`` are dropped). No ``preprocess`` / ``postprocess``;
    * a key missing from the v1 document takes the reference writer's v1 default; the
      header has flags 0, no reserved section, zero padding.

    Args:
        v1_model_bytes: The v1 file: an ONNX ``ModelProto`` whose ``metadata_props`` hold
            ``omnynet_metadata``.
        task: ``model.task`` of the manifest (upstream's ``--task``).
        processor_type: ``processor.processor_type`` (``"none"`` or ``"native"``).
        processor_id: ``processor.processor_id`` (a native processor, e.g. ``"clip"``).
        source: What to call the input in messages.

    Returns:
        The v2 container's bytes.

    Raises:
        OmnyContainerError: The input is already a v2 container, is not an ONNX model, has
            no (or unreadable) ``omnynet_metadata``, lacks a key upstream requires
            (``model.name``, the ``name`` of an input or output), keeps tensors in external
            data files, or is too large for a container.
    """
    if detect(v1_model_bytes) == "v2":
        raise OmnyContainerError(
            "header.magic", "already an .omny v2 container; nothing to upgrade", source=source
        )
    proto = _parse_model(bytes(v1_model_bytes), source)
    reason = unfit_model_reason(n_bytes=proto.ByteSize(), external_data=uses_external_data(proto))
    if reason is not None:
        raise OmnyContainerError("model", reason, source=source)
    manifest = _manifest_from_v1(
        _v1_metadata(proto, source),
        task=task,
        processor_type=processor_type,
        processor_id=processor_id,
        source=source,
    )
    return serialize_container(build_container(proto.SerializeToString(), manifest, source=source))


# --------------------------------------------------------------------------- replace


def _merge_section(old: Mapping[str, Any], new: Mapping[str, Any], section: str) -> dict[str, Any]:
    """``old``'s keys in their order, those with a v1 home taken from ``new``; then ``new``'s."""
    merged = {
        sub: new[sub] if _has_v1_home(section, sub) and sub in new else value
        for sub, value in old.items()
    }
    merged.update((sub, value) for sub, value in new.items() if sub not in merged)
    return merged


def _manifest_for(old: Mapping[str, Any], proto: onnx.ModelProto, source: str) -> dict[str, Any]:
    text = next((p.value for p in proto.metadata_props if p.key == METADATA_KEY), "")
    if not text:  # no plan: the old manifest, with the graph's tensor names
        manifest = json.loads(json.dumps(old))
        for side, names in zip(("input", "output"), _graph_names(proto), strict=True):
            if isinstance(manifest.get(side), dict):
                manifest[side]["tensor_names"] = names
        return manifest
    new = _manifest_from_v1(
        _v1_metadata(proto, source), task="", processor_type="none", processor_id=None,
        source=source,
    )  # fmt: skip
    merged: dict[str, Any] = {}
    for key, value in old.items():
        if key not in new:  # preprocess, postprocess, unknown keys: no v1 home, kept
            merged[key] = value
        elif isinstance(value, dict) and isinstance(new[key], dict):
            merged[key] = _merge_section(value, new[key], key)
        else:
            merged[key] = new[key]
    merged.update((key, value) for key, value in new.items() if key not in merged)
    return merged


def replace_model(container: Container, model_bytes: bytes) -> Container:
    """A container like ``container`` that holds another (changed) model.

    What the new model's plan says wins; what only the manifest can hold is kept:

    * with a plan (``omnynet_metadata``) in the new model, the manifest values that have a v1
      counterpart (model figures, tensor names, sharding limits, export info) are derived
      from it as :func:`upgrade` derives them; the others (``model.task``, ``processor``,
      ``input.input_type``... , ``preprocess``, ``postprocess``, unknown keys) keep their
      old values, in the old manifest's key order;
    * without a plan, the old manifest is kept, with ``input.tensor_names`` and
      ``output.tensor_names`` set to the new model's graph inputs and outputs;
    * the header's flags and padding and the reserved section are kept; bytes that no section
      covered (:attr:`Container.unreferenced`) are dropped, the sections laid out again as
      :func:`build_container` lays them out.

    Args:
        container: The container the model was read from.
        model_bytes: The new serialized ``ModelProto``.

    Returns:
        The new container (``container`` itself is not changed).

    Raises:
        OmnyContainerError: The bytes are not an ONNX model, it keeps tensors in external
            data files or is 2 GiB or more, or its plan lacks a key :func:`upgrade` needs.
    """
    source = container.source
    proto = _parse_model(bytes(model_bytes), source)
    reason = unfit_model_reason(n_bytes=len(model_bytes), external_data=uses_external_data(proto))
    if reason is not None:
        raise OmnyContainerError("model", reason, source=source)
    return build_container(
        bytes(model_bytes),
        _manifest_for(container.manifest, proto, source),
        flags=container.flags,
        reserved=container.reserved,
        padding=container.padding,
        source=source,
    )


# --------------------------------------------------------------------------- downgrade


def _embedded_plan(container: Container) -> dict[str, Any] | None:
    """The embedded model's v1 metadata, or ``None`` when absent or unreadable."""
    proto = container.model_proto()
    text = next((p.value for p in proto.metadata_props if p.key == METADATA_KEY), "")
    if not text:
        return None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None


def _has_v1_home(section: str, key: str | None) -> bool:
    return key is not None and key in _V1_HOMES.get(section, frozenset())


def downgrade(container: Container, *, include_defaults: bool = False) -> tuple[bytes, list[str]]:
    """Turn a v2 container back into a v1 file.

    The v1 file is the embedded model, verbatim: its ``metadata_props`` already hold the
    plan (upstream ``upgrade`` keeps them), which is the truth the manifest summarises. A
    container written by upstream ``export-v2`` embeds a model without a plan; its v1 file
    is then a plain ONNX model.

    Args:
        container: The container.
        include_defaults: Also list manifest keys without a v1 counterpart whose value is
            what upstream ``upgrade`` writes by default (``model.task`` ``""``,
            ``processor`` none/null/null, ``input_type`` ``"image"``, ``input_format``
            ``"base64"``, ``output_type`` ``"raw"``, ``output_format`` ``"json"``). Off by
            default, so a v1 → v2 → v1 round trip reports nothing.

    Returns:
        ``(v1_bytes, dropped)``: the v1 file, and the manifest keys whose information the v1
        file cannot hold, as paths (``processor.processor_id``, ``preprocess``), in manifest
        order: keys without a v1 counterpart (``model.task``, ``processor``,
        ``input.input_type``..., ``preprocess``, ``postprocess``, unknown keys), and every
        key but ``version`` when the embedded model has no plan. The caller should warn.
    """
    plan = _embedded_plan(container)
    dropped: list[str] = []
    for key, value in container.manifest.items():
        if key == "version":
            continue
        if key in _OBJECT_SECTIONS and isinstance(value, dict):
            for sub, sub_value in value.items():
                if plan is not None and _has_v1_home(key, sub):
                    continue
                default = _NO_V1_HOME_DEFAULTS.get((key, sub), _MISSING)
                if (
                    not include_defaults
                    and type(sub_value) is type(default)
                    and sub_value == default
                ):
                    continue
                dropped.append(f"{key}.{sub}")
        else:
            dropped.append(key)
    return container.model_bytes, dropped
