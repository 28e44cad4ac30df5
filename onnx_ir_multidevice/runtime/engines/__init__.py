"""Execution engines of :class:`~onnx_ir_multidevice.runtime.Pipeline`."""
