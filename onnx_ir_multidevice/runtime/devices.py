"""Devices of pipeline stages: an onnxruntime execution provider and a device index.

:func:`parse_device` turns a device string (``"cpu"``, ``"cuda:1"``, a provider name) into a
:class:`Device`, which knows the ``providers`` argument onnxruntime takes for it. (The
planner's device list is another thing: the memory sizes it plans for.)
"""

from __future__ import annotations

__all__ = ["Device", "parse_device"]

import dataclasses

# Device kind -> (onnxruntime provider name, whether it takes a device_id option).
_PROVIDERS: dict[str, tuple[str, bool]] = {
    "cpu": ("CPUExecutionProvider", False),
    "cuda": ("CUDAExecutionProvider", True),
    "tensorrt": ("TensorrtExecutionProvider", True),
    "rocm": ("ROCMExecutionProvider", True),
    "migraphx": ("MIGraphXExecutionProvider", True),
    "dml": ("DmlExecutionProvider", True),
    "openvino": ("OpenVINOExecutionProvider", False),
    "coreml": ("CoreMLExecutionProvider", False),
    "qnn": ("QNNExecutionProvider", False),
}
_GPU_KINDS = frozenset({"cuda", "tensorrt", "rocm", "migraphx", "dml"})
_KIND_OF_PROVIDER = {name: kind for kind, (name, _) in _PROVIDERS.items()}


@dataclasses.dataclass(frozen=True)
class Device:
    """Where one stage runs: an onnxruntime execution provider and a device index."""

    kind: str
    """Short provider name: ``"cpu"``, ``"cuda"``, ``"tensorrt"``, ``"rocm"``, ``"dml"``..."""

    index: int | None = None
    """Device index handed to the provider as ``device_id`` (``None``: the provider default)."""

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    @property
    def provider(self) -> str:
        """The onnxruntime execution provider name, e.g. ``"CUDAExecutionProvider"``."""
        return _PROVIDERS[self.kind][0]

    @property
    def is_gpu(self) -> bool:
        """Whether the device is a GPU (Ray requests ``num_gpus=1`` for its actor)."""
        return self.kind in _GPU_KINDS

    def ort_providers(self, *, index: int | None = None) -> list[str | tuple[str, dict[str, str]]]:
        """The ``providers`` argument of :class:`onnxruntime.InferenceSession` for this device.

        Args:
            index: Device index to use instead of :attr:`index` (a Ray actor sees only the
                GPU Ray assigned to it, as index 0).

        Returns:
            The provider, with its ``device_id`` option where it takes one, followed by the
            CPU provider for the operators the accelerator does not implement.
        """
        name, takes_id = _PROVIDERS[self.kind]
        if self.kind == "cpu":
            return [name]
        device_id = self.index if index is None else index
        options = {"device_id": str(device_id)} if takes_id and device_id is not None else {}
        return [(name, options), "CPUExecutionProvider"]


def parse_device(spec: str | Device) -> Device:
    """Parse a device string: ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a provider name.

    Args:
        spec: ``kind`` or ``kind:index`` with ``kind`` one of ``cpu``, ``cuda``, ``tensorrt``,
            ``rocm``, ``migraphx``, ``dml``, ``openvino``, ``coreml``, ``qnn`` (case-insensitive),
            or a full onnxruntime provider name such as ``"CUDAExecutionProvider"``.

    Returns:
        The device.

    Raises:
        ValueError: The string names no known provider or has a bad index.
    """
    if isinstance(spec, Device):
        return spec
    text = str(spec).strip()
    kind_text, sep, index_text = text.partition(":")
    kind = _KIND_OF_PROVIDER.get(kind_text, kind_text.lower())
    if kind not in _PROVIDERS:
        known = ", ".join(sorted(_PROVIDERS))
        raise ValueError(f"unknown device {spec!r}: expected one of {known}, optionally ':<index>'")
    if not sep:
        return Device(kind)
    if not index_text.isdigit():
        raise ValueError(f"bad device index in {spec!r}: expected a non-negative integer")
    if kind == "cpu" and int(index_text) != 0:
        raise ValueError(f"device {spec!r}: the CPU provider has no device index other than 0")
    return Device(kind, int(index_text) if kind != "cpu" else None)
