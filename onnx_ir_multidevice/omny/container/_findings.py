"""What a checker should report about a container: :func:`container_findings`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from onnx_ir_multidevice._util import plural
from onnx_ir_multidevice.omny.container._layout import (
    _FIELDS,
    MANIFEST_VERSION,
    Container,
    ContainerFinding,
    _graph_names,
)
from onnx_ir_multidevice.omny.container._v1 import _MISSING, _embedded_plan

# --------------------------------------------------------------------------- findings


def _brief(value: Any, limit: int = 120) -> str:
    """``repr`` of a JSON value for a message, cut at ``limit`` characters."""
    try:
        text = repr(value)
    except RecursionError:
        return "<a deeply nested value>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _plan_sharding(plan: Any) -> tuple[Any, list[Any] | None]:
    """``(allowed_shards, [num_shards of each configuration])`` of a plan, where readable.

    ``plan`` is the v1 JSON document (a mapping) or an object with ``sharding.allowed_shards``
    and ``sharding.configurations[i].num_shards`` attributes (``_format.OmnyMetadata``).
    """
    if isinstance(plan, Mapping):
        sharding = plan.get("sharding")
        if not isinstance(sharding, Mapping):
            return None, None
        allowed = sharding.get("allowed_shards")
        configurations = sharding.get("configurations")
        if not isinstance(configurations, list):
            return allowed, None
        nums = [c.get("num_shards") if isinstance(c, Mapping) else None for c in configurations]
        return allowed, nums
    sharding = getattr(plan, "sharding", None)
    allowed = getattr(sharding, "allowed_shards", None)
    configurations = getattr(sharding, "configurations", None)
    if configurations is None:
        return allowed, None
    return allowed, [getattr(c, "num_shards", None) for c in configurations]


def _manifest_get(manifest: Mapping[str, Any], *keys: str) -> Any:
    value: Any = manifest
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _names_finding(
    manifest: Mapping[str, Any], side: str, graph_names: list[str]
) -> ContainerFinding | None:
    location = f"manifest.{side}.tensor_names"
    names = _manifest_get(manifest, side, "tensor_names")
    if names is _MISSING:
        return ContainerFinding(
            f"manifest-{side}s",
            "warning",
            f"the manifest has no {side}.tensor_names; the model's graph {side}s are "
            f"{_brief(graph_names)}",
            location,
        )
    if names == graph_names:
        return None
    if isinstance(names, list) and sorted(map(str, names)) == sorted(graph_names):
        detail = "the same names in another order"
    else:
        detail = "different names"
    return ContainerFinding(
        f"manifest-{side}s",
        "warning",
        f"the manifest lists {side} tensors {_brief(names)} but the model's graph {side}s are "
        f"{_brief(graph_names)} ({detail}); the embedded model is the truth: regenerate the "
        "manifest",
        location,
    )


def container_findings(
    container: Container, plan_metadata: Mapping[str, Any] | Any | None = None
) -> list[ContainerFinding]:
    """What a checker should report about a container: oddities kept, disagreements found.

    Args:
        container: The container.
        plan_metadata: The plan to compare the manifest with: the v1 metadata JSON (a
            mapping) or a parsed ``OmnyMetadata``. ``None`` reads it from the embedded
            model's ``omnynet_metadata`` (no plan comparison when absent or unreadable).

    Returns:
        Findings in a stable order: ``flags-nonzero``, ``reserved-section``,
        ``padding-nonzero``, ``unreferenced-bytes`` (header and layout; all warnings, the
        bytes are kept), ``manifest-version``, ``manifest-inputs``, ``manifest-outputs``
        (manifest vs the model's graph inputs, initializers excluded, and outputs),
        ``manifest-allowed-shards`` (manifest vs the plan's ``allowed_shards``),
        ``manifest-configurations`` (a plan configuration's ``num_shards`` the manifest's
        ``allowed_shards`` does not allow).
    """
    return [*_layout_findings(container), *_manifest_findings(container, plan_metadata)]


def _layout_findings(container: Container) -> list[ContainerFinding]:
    """Header and layout oddities kept as read: flags, reserved section, padding, gaps."""
    findings: list[ContainerFinding] = []
    if container.flags:
        findings.append(
            ContainerFinding(
                "flags-nonzero",
                "warning",
                f"header flags are 0x{container.flags:016x}; no flag is defined (upstream "
                "writes 0 and ignores them), so they are kept but not understood",
                "header.flags",
            )
        )
    if container.reserved_size or container.reserved_offset:
        findings.append(
            ContainerFinding(
                "reserved-section",
                "warning",
                f"the reserved section holds {container.reserved_size} bytes at offset "
                f"{container.reserved_offset} (upstream writes offset 0, size 0; it once held "
                "a bundled processor); kept, not interpreted",
                "header.reserved_offset",
            )
        )
    nonzero = [i for i, byte in enumerate(container.padding) if byte]
    if nonzero:
        findings.append(
            ContainerFinding(
                "padding-nonzero",
                "warning",
                f"{plural(len(nonzero), 'padding byte')} of the header "
                f"{'is' if len(nonzero) == 1 else 'are'} not zero (first at offset "
                f"{_FIELDS.size + nonzero[0]}); kept as they are",
                "header.padding",
            )
        )
    for offset, data in container.unreferenced:
        findings.append(
            ContainerFinding(
                "unreferenced-bytes",
                "warning",
                f"{len(data)} bytes at offset {offset} belong to no section (a gap or trailing "
                "data); kept as they are",
                f"file[{offset}:{offset + len(data)}]",
            )
        )
    return findings


def _manifest_findings(
    container: Container, plan_metadata: Mapping[str, Any] | Any | None
) -> list[ContainerFinding]:
    """The manifest against its version, the embedded graph and the plan."""
    findings: list[ContainerFinding] = []
    manifest = container.manifest
    version = manifest.get("version", _MISSING)
    if version != MANIFEST_VERSION:
        shown = "missing" if version is _MISSING else _brief(version)
        findings.append(
            ContainerFinding(
                "manifest-version",
                "warning",
                f"the manifest version is {shown}, not {MANIFEST_VERSION!r}",
                "manifest.version",
            )
        )
    proto = container.model_proto()
    graph_inputs, graph_outputs = _graph_names(proto)
    for side, names in (("input", graph_inputs), ("output", graph_outputs)):
        finding = _names_finding(manifest, side, names)
        if finding is not None:
            findings.append(finding)
    if plan_metadata is None:
        plan_metadata = _embedded_plan(container)
    if plan_metadata is not None:
        findings.extend(_sharding_findings(manifest, plan_metadata))
    return findings


def _sharding_findings(manifest: Mapping[str, Any], plan: Any) -> list[ContainerFinding]:
    findings = []
    location = "manifest.sharding.allowed_shards"
    manifest_allowed = _manifest_get(manifest, "sharding", "allowed_shards")
    plan_allowed, nums = _plan_sharding(plan)
    if plan_allowed is not None and not isinstance(plan_allowed, list):
        plan_allowed = list(plan_allowed)  # a tuple from OmnyMetadata
    if manifest_allowed is _MISSING:
        findings.append(
            ContainerFinding(
                "manifest-allowed-shards",
                "warning",
                "the manifest has no sharding.allowed_shards; the plan allows "
                f"{_brief(plan_allowed)}",
                location,
            )
        )
        return findings
    if plan_allowed is not None and manifest_allowed != plan_allowed:
        findings.append(
            ContainerFinding(
                "manifest-allowed-shards",
                "warning",
                f"the manifest allows {_brief(manifest_allowed)} shards but the plan allows "
                f"{_brief(plan_allowed)}; the plan is the truth: regenerate the manifest",
                location,
            )
        )
    if nums is not None and isinstance(manifest_allowed, list):
        missing = [n for n in nums if n not in manifest_allowed]
        if missing:
            findings.append(
                ContainerFinding(
                    "manifest-configurations",
                    "warning",
                    f"the plan has configurations of {_brief(missing)} shards that the manifest's "
                    f"allowed_shards {_brief(manifest_allowed)} does not allow; readers that trust "
                    "the manifest will not offer them",
                    location,
                )
            )
    return findings
