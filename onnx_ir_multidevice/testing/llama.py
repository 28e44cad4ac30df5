"""Llama-architecture decoders built with onnx-ir, up to billions of parameters, without a hub.

The graph follows Hugging Face ``LlamaForCausalLM`` (eager attention) op for op, written with
plain opset-18 operators that onnxruntime's CPU provider runs everywhere:

* token embedding: ``Gather`` from ``model.embed_tokens.weight`` by ``input_ids``;
* per layer ``i`` (prefix ``model.layers.<i>``):

  - RMSNorm ``input_layernorm`` as ``Pow``/``ReduceMean``/``Add``/``Sqrt``/``Div``/``Mul``;
  - ``q_proj``/``k_proj``/``v_proj`` as ``MatMul`` with weights stored transposed,
    ``[in, out]`` (no biases);
  - rotary embeddings: ``cos``/``sin`` rows ``Gather``-ed from precomputed
    ``[max_positions, head_dim]`` tables by ``position_ids``, ``rotate_half`` as
    ``Slice``/``Neg``/``Concat``;
  - with a KV cache, the past keys/values ``Concat``-ed before the new ones on the sequence
    axis (these are the ``present.<i>.*`` outputs);
  - grouped-query attention: key/value heads repeated to the query heads with
    ``Unsqueeze``/``Expand``/``Reshape`` (HF ``repeat_kv``), scores scaled by
    ``1/sqrt(head_dim)``, plus the additive mask, ``Softmax``, ``o_proj``, residual ``Add``;
  - RMSNorm ``post_attention_layernorm``, SwiGLU MLP
    ``down_proj(SiLU(gate_proj(x)) * up_proj(x))`` with ``SiLU(x) = x * Sigmoid(x)``,
    residual ``Add`` (value ``model.layers.<i>.out``);

* final RMSNorm ``model.norm`` and an untied LM head ``lm_head.weight``.

The additive mask ``[batch, 1, seq, total_seq]`` is built once from the int64
``attention_mask`` ``[batch, total_seq]`` (1 = attend, 0 = padding) and a causal mask on
cache positions: the query at position ``i`` of the new tokens attends to the keys at
positions ``<= past_seq + i``. Masked scores get the dtype's most negative finite value, as
in HF.

Graph inputs: ``input_ids``, ``attention_mask``, ``position_ids`` (int64) and, with
``kv_cache=True``, ``past_key_values.<i>.key`` / ``.value``
``[batch, kv_heads, past_seq, head_dim]``. Graph outputs: ``logits`` (float32
``[batch, seq, vocab]``) and, with a cache, ``present.<i>.key`` / ``.value``
``[batch, kv_heads, total_seq, head_dim]`` (Optimum's naming). Without a cache there is no
past, so ``attention_mask`` is ``[batch, seq]``.

Weights are random: every weight is drawn from its own :class:`numpy.random.Generator`,
seeded from the configuration's ``seed`` and the weight's name, so a weight does not depend
on the order or the number of the others (layer 0 is the same in a 2-layer and a 22-layer
model). Projections and embeddings are ``N(0, 0.02²)``, RMSNorm weights are ones. The
values are drawn in fixed-size chunks, so :func:`write_llama` streams a model of any size to
an external-data file with bounded memory and :func:`build_llama` gives the same numbers in
memory.

Example::

    import dataclasses
    from onnx_ir_multidevice.testing import llama

    model = llama.build_llama(llama.TINY)  # small, in-memory weights
    llama.write_llama("/tmp/tinyllama.onnx", dataclasses.replace(llama.TINYLLAMA_1_1B,
                      kv_cache=True))  # 4.4 GB of weights in /tmp/tinyllama.onnx.data

This module imports only ``onnx_ir``, ``numpy`` and the standard library.
"""

from __future__ import annotations

__all__ = [
    "OPSET",
    "PRESETS",
    "TINY",
    "TINYLLAMA_1_1B",
    "LlamaConfig",
    "build_llama",
    "write_llama",
]

import dataclasses
import hashlib
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

OPSET = 18
"""ONNX default-domain opset of the generated models."""

_IR_VERSION = 10
_PRODUCER = "onnx-ir-multidevice.llama"
_F32 = ir.DataType.FLOAT
_I64 = ir.DataType.INT64
_BOOL = ir.DataType.BOOL
_DTYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
_STD = 0.02
# Elements drawn per generator call; part of the weight definition (chunked draws of a numpy
# Generator give the same stream as one draw, but keep it fixed anyway).
_CHUNK = 1 << 22

Dim = int | str


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Hyper-parameters of a Llama decoder.

    Use :func:`dataclasses.replace` to derive variants, e.g.
    ``dataclasses.replace(TINY, kv_cache=True)``.

    Attributes:
        layers: Number of decoder layers.
        hidden: Hidden size (multiple of ``heads``).
        intermediate: Size of the SwiGLU MLP.
        heads: Query heads.
        kv_heads: Key/value heads (``heads`` must be a multiple, grouped-query attention).
        vocab: Vocabulary size.
        max_positions: Rows of the rotary ``cos``/``sin`` tables (largest position + 1).
        rms_eps: Epsilon of every RMSNorm.
        rope_theta: Base of the rotary frequencies.
        kv_cache: Whether the model takes ``past_key_values.*`` and returns ``present.*``.
        seed: Seed of the weights.
        dtype: Data type of weights, activations and the KV cache (FLOAT, FLOAT16 or
            BFLOAT16). RMSNorm and Softmax run in float32 and ``logits`` are float32 for
            every dtype, as in HF.
    """

    layers: int = 2
    hidden: int = 64
    intermediate: int = 128
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 256
    max_positions: int = 128
    rms_eps: float = 1e-5
    rope_theta: float = 10000.0
    kv_cache: bool = False
    seed: int = 0
    dtype: ir.DataType = ir.DataType.FLOAT

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "intermediate", "heads", "kv_heads", "vocab"):
            if getattr(self, field) < 1:
                raise ValueError(f"LlamaConfig.{field} must be >= 1, got {getattr(self, field)}")
        if self.max_positions < 1:
            raise ValueError(f"LlamaConfig.max_positions must be >= 1, got {self.max_positions}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} must be a multiple of heads={self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads={self.heads} must be a multiple of kv_heads={self.kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for rotary embeddings")
        if ir.DataType(self.dtype) not in _DTYPES:
            raise ValueError(f"dtype must be one of {[d.name for d in _DTYPES]}, got {self.dtype}")

    @property
    def head_dim(self) -> int:
        """Size of one attention head, ``hidden // heads``."""
        return self.hidden // self.heads

    @property
    def num_parameters(self) -> int:
        """Number of trainable parameters (rotary tables excluded)."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        per_layer = 2 * h * h + 2 * h * kv + 3 * h * self.intermediate + 2 * h
        return self.layers * per_layer + 2 * self.vocab * h + h

    @property
    def num_bytes(self) -> int:
        """Bytes of all weights and rotary tables in :attr:`dtype`."""
        tables = 2 * self.max_positions * self.head_dim
        return (self.num_parameters + tables) * (ir.DataType(self.dtype).bitwidth // 8)


TINYLLAMA_1_1B = LlamaConfig(
    layers=22,
    hidden=2048,
    intermediate=5632,
    heads=32,
    kv_heads=4,
    vocab=32000,
    max_positions=2048,
    rms_eps=1e-5,
    rope_theta=10000.0,
)
"""The shape of TinyLlama-1.1B (~1.1 B parameters, ~4.4 GB in float32)."""

TINY = LlamaConfig(
    layers=2, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=256, max_positions=128
)
"""A 2-layer toy configuration for tests and CI (~0.1 M parameters)."""

PRESETS: dict[str, LlamaConfig] = {"tinyllama-1.1b": TINYLLAMA_1_1B, "tiny": TINY}
"""The named configurations, by name."""


# ---------------------------------------------------------------------------------------------
# Weights


@dataclasses.dataclass(frozen=True)
class _WeightSpec:
    name: str
    shape: tuple[int, ...]
    kind: str  # "normal", "ones", "cos" or "sin"


def _generator(seed: int, name: str) -> np.random.Generator:
    """A generator that depends only on the model seed and the weight name."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=16).digest()
    words = np.frombuffer(digest, dtype="<u4").tolist()
    return np.random.default_rng(np.random.SeedSequence([seed, *words]))


def _rotary_rows(config: LlamaConfig, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start:stop`` of the cos/sin tables, computed in float32 like HF Llama."""
    d = config.head_dim
    inv_freq = 1.0 / (np.float32(config.rope_theta) ** (np.arange(0, d, 2, dtype=np.float32) / d))
    freqs = np.arange(start, stop, dtype=np.float32)[:, None] * inv_freq.astype(np.float32)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def _weight_chunks(config: LlamaConfig, spec: _WeightSpec) -> Iterator[np.ndarray]:
    """The values of one weight as C-order chunks of at most ``_CHUNK`` elements."""
    np_dtype = ir.DataType(config.dtype).numpy()
    size = math.prod(spec.shape)
    if spec.kind == "normal":
        rng = _generator(config.seed, spec.name)
        for start in range(0, size, _CHUNK):
            chunk = rng.standard_normal(min(_CHUNK, size - start), dtype=np.float32)
            chunk *= np.float32(_STD)
            yield chunk.astype(np_dtype, copy=False)
    elif spec.kind == "ones":
        for start in range(0, size, _CHUNK):
            yield np.ones(min(_CHUNK, size - start), dtype=np_dtype)
    elif spec.kind in ("cos", "sin"):
        rows = max(1, _CHUNK // config.head_dim)
        for start in range(0, config.max_positions, rows):
            cos, sin = _rotary_rows(config, start, min(start + rows, config.max_positions))
            yield (cos if spec.kind == "cos" else sin).astype(np_dtype).reshape(-1)
    else:  # pragma: no cover - internal
        raise AssertionError(spec.kind)


def _in_memory_tensor(config: LlamaConfig, spec: _WeightSpec) -> ir.TensorProtocol:
    data = np.concatenate(list(_weight_chunks(config, spec))).reshape(spec.shape)
    return ir.Tensor(data, name=spec.name)


class _ExternalDataWriter:
    """Appends weights chunk by chunk to one file and returns :class:`ir.ExternalTensor` s."""

    def __init__(self, config: LlamaConfig, data_path: Path, alignment: int) -> None:
        self._config = config
        self._file = open(data_path, "wb")  # noqa: SIM115 - closed by close()
        self._location = data_path.name
        self._base_dir = os.fspath(data_path.parent)
        self._alignment = alignment

    def __call__(self, spec: _WeightSpec) -> ir.TensorProtocol:
        file = self._file
        position = file.tell()
        padding = -position % self._alignment
        if padding:
            file.write(b"\0" * padding)
        offset = position + padding
        for chunk in _weight_chunks(self._config, spec):
            file.write(np.ascontiguousarray(chunk).view(np.uint8).data)
        length = file.tell() - offset
        return ir.ExternalTensor(
            self._location,
            offset,
            length,
            ir.DataType(self._config.dtype),
            shape=ir.Shape(spec.shape),
            name=spec.name,
            base_dir=self._base_dir,
        )

    def close(self) -> None:
        self._file.close()


# ---------------------------------------------------------------------------------------------
# Graph


class _GraphBuilder:
    """Records the nodes and initializers of the decoder on an :class:`onnx_ir.tape.Tape`.

    Every node and its single output share one name. Graph inputs, outputs and initializers
    always carry dtype and shape; intermediate values only when ``value_info`` is true.
    """

    def __init__(
        self,
        config: LlamaConfig,
        value_info: bool,
        make_weight: Callable[[_WeightSpec], ir.TensorProtocol],
    ) -> None:
        self.config = config
        self.dtype = ir.DataType(config.dtype)
        self.value_info = value_info
        self.make_weight = make_weight
        self.tape = ir.tape.Tape()
        self._names: set[str] = set()
        self._constants: dict[tuple, ir.Value] = {}

    def _claim(self, name: str) -> str:
        if name in self._names:
            raise AssertionError(f"llama builder: duplicate value name {name!r}")
        self._names.add(name)
        return name

    def input(self, name: str, dtype: ir.DataType, shape: Sequence[Dim]) -> ir.Value:
        return ir.val(self._claim(name), dtype=dtype, shape=ir.Shape(shape))

    def op(
        self,
        op_type: str,
        inputs: Sequence[ir.Value | None],
        attributes: Mapping[str, Any] | None = None,
        *,
        name: str,
        dtype: ir.DataType,
        shape: Sequence[Dim],
        typed: bool = False,
    ) -> ir.Value:
        """Add a node; its output is typed when ``value_info`` or ``typed`` is true."""
        value = self.tape.op(op_type, inputs, attributes, name=self._claim(name))
        value.name = name
        if self.value_info or typed:
            value.dtype = dtype
            value.shape = ir.Shape(shape)
        return value

    def weight(self, name: str, shape: Sequence[int], kind: str = "normal") -> ir.Value:
        spec = _WeightSpec(self._claim(name), tuple(shape), kind)
        return self.tape.initializer(self.make_weight(spec), name=name)

    def constant(self, name: str, array: np.ndarray) -> ir.Value:
        """A small initializer, created once per name and value."""
        array = np.asarray(array)
        key = (name, array.dtype.str, array.shape, array.tobytes())
        if key not in self._constants:
            self._constants[key] = self.tape.initializer(
                ir.Tensor(array, name=self._claim(name)), name=name
            )
        return self._constants[key]

    def ints(self, name: str, values: Sequence[int]) -> ir.Value:
        return self.constant(name, np.asarray(values, dtype=np.int64))

    def scalar(self, name: str, value: float, dtype: ir.DataType) -> ir.Value:
        return self.constant(name, np.asarray(value, dtype=dtype.numpy()))

    # -- layers ---------------------------------------------------------------------------------

    def linear(
        self, x: ir.Value, name: str, n_in: int, n_out: int, lead: Sequence[Dim]
    ) -> ir.Value:
        w = self.weight(f"{name}.weight", (n_in, n_out))
        return self.op("MatMul", [x, w], name=name, dtype=self.dtype, shape=(*lead, n_out))

    def rms_norm(self, x: ir.Value, name: str, shape: Sequence[Dim]) -> ir.Value:
        """HF ``LlamaRMSNorm``: ``weight * x / sqrt(mean(x²) + eps)``, computed in float32."""
        c = self.config
        w = self.weight(f"{name}.weight", (c.hidden,), kind="ones")
        if self.dtype != _F32:
            x = self.op("Cast", [x], {"to": _F32}, name=f"{name}.to_float", dtype=_F32,
                        shape=shape)  # fmt: skip
        reduced = (*shape[:-1], 1)
        two = self.scalar("const.two", 2.0, _F32)
        eps = self.scalar(f"const.rms_eps.{c.rms_eps!r}", c.rms_eps, _F32)
        axes = self.ints("const.axes_last", [-1])
        sq = self.op("Pow", [x, two], name=f"{name}.pow", dtype=_F32, shape=shape)
        var = self.op("ReduceMean", [sq, axes], {"keepdims": 1}, name=f"{name}.variance",
                      dtype=_F32, shape=reduced)  # fmt: skip
        var = self.op("Add", [var, eps], name=f"{name}.add_eps", dtype=_F32, shape=reduced)
        std = self.op("Sqrt", [var], name=f"{name}.sqrt", dtype=_F32, shape=reduced)
        y = self.op("Div", [x, std], name=f"{name}.normalized", dtype=_F32, shape=shape)
        if self.dtype != _F32:
            y = self.op("Cast", [y], {"to": self.dtype}, name=f"{name}.to_dtype",
                        dtype=self.dtype, shape=shape)  # fmt: skip
        return self.op("Mul", [y, w], name=name, dtype=self.dtype, shape=shape)

    def rotary(
        self, x: ir.Value, name: str, cos: ir.Value, sin: ir.Value, shape: Sequence[Dim]
    ) -> ir.Value:
        """``x * cos + rotate_half(x) * sin`` on ``[batch, heads, seq, head_dim]``."""
        half = self.config.head_dim // 2
        half_shape = (*shape[:-1], half)
        axes = self.ints("const.axes_last", [-1])
        zero = self.ints("const.zero", [0])
        mid = self.ints("const.half_head_dim", [half])
        end = self.ints("const.head_dim", [self.config.head_dim])
        dt = self.dtype
        x1 = self.op("Slice", [x, zero, mid, axes], name=f"{name}.x1", dtype=dt, shape=half_shape)
        x2 = self.op("Slice", [x, mid, end, axes], name=f"{name}.x2", dtype=dt, shape=half_shape)
        neg = self.op("Neg", [x2], name=f"{name}.neg_x2", dtype=dt, shape=half_shape)
        rot = self.op("Concat", [neg, x1], {"axis": -1}, name=f"{name}.rotate_half", dtype=dt,
                      shape=shape)  # fmt: skip
        a = self.op("Mul", [x, cos], name=f"{name}.mul_cos", dtype=dt, shape=shape)
        b = self.op("Mul", [rot, sin], name=f"{name}.mul_sin", dtype=dt, shape=shape)
        return self.op("Add", [a, b], name=name, dtype=dt, shape=shape)

    def repeat_kv(self, x: ir.Value, name: str, total: Dim) -> ir.Value:
        """HF ``repeat_kv``: ``[b, kv_heads, t, d]`` to ``[b, heads, t, d]``."""
        c = self.config
        n_rep = c.heads // c.kv_heads
        if n_rep == 1:
            return x
        d, dt = c.head_dim, self.dtype
        u = self.op("Unsqueeze", [x, self.ints("const.axes_2", [2])], name=f"{name}.unsqueeze",
                    dtype=dt, shape=("batch", c.kv_heads, 1, total, d))  # fmt: skip
        e = self.op("Expand", [u, self.ints("const.repeat_kv", [1, 1, n_rep, 1, 1])],
                    name=f"{name}.expand", dtype=dt,
                    shape=("batch", c.kv_heads, n_rep, total, d))  # fmt: skip
        return self.op("Reshape", [e, self.ints("const.repeat_kv_shape", [0, c.heads, -1, d])],
                       name=name, dtype=dt, shape=("batch", c.heads, total, d))  # fmt: skip

    def attention(
        self,
        x: ir.Value,
        name: str,
        *,
        cos: ir.Value,
        sin: ir.Value,
        mask: ir.Value,
        layer: int,
        graph_inputs: list[ir.Value],
        graph_outputs: list[ir.Value],
    ) -> ir.Value:
        c = self.config
        d, dt = c.head_dim, self.dtype
        lead = ("batch", "seq")
        total = "total_seq" if c.kv_cache else "seq"
        q = self.linear(x, f"{name}.q_proj", c.hidden, c.hidden, lead)
        k = self.linear(x, f"{name}.k_proj", c.hidden, c.kv_heads * d, lead)
        v = self.linear(x, f"{name}.v_proj", c.hidden, c.kv_heads * d, lead)

        q_split = self.ints("const.q_split_shape", [0, 0, c.heads, d])
        kv_split = self.ints("const.kv_split_shape", [0, 0, c.kv_heads, d])
        perm = {"perm": [0, 2, 1, 3]}
        q = self.op("Reshape", [q, q_split], name=f"{name}.q_split", dtype=dt,
                    shape=(*lead, c.heads, d))  # fmt: skip
        k = self.op("Reshape", [k, kv_split], name=f"{name}.k_split", dtype=dt,
                    shape=(*lead, c.kv_heads, d))  # fmt: skip
        v = self.op("Reshape", [v, kv_split], name=f"{name}.v_split", dtype=dt,
                    shape=(*lead, c.kv_heads, d))  # fmt: skip
        q_shape = ("batch", c.heads, "seq", d)
        kv_shape = ("batch", c.kv_heads, "seq", d)
        q = self.op("Transpose", [q], perm, name=f"{name}.q_heads", dtype=dt, shape=q_shape)
        k = self.op("Transpose", [k], perm, name=f"{name}.k_heads", dtype=dt, shape=kv_shape)
        v = self.op("Transpose", [v], perm, name=f"{name}.v_heads", dtype=dt, shape=kv_shape)
        q = self.rotary(q, f"{name}.q_rot", cos, sin, q_shape)
        k = self.rotary(k, f"{name}.k_rot", cos, sin, kv_shape)

        if c.kv_cache:
            past_shape = ("batch", c.kv_heads, "past_seq", d)
            present_shape = ("batch", c.kv_heads, "total_seq", d)
            past_k = self.input(f"past_key_values.{layer}.key", dt, past_shape)
            past_v = self.input(f"past_key_values.{layer}.value", dt, past_shape)
            graph_inputs += [past_k, past_v]
            k = self.op("Concat", [past_k, k], {"axis": 2}, name=f"present.{layer}.key",
                        dtype=dt, shape=present_shape, typed=True)  # fmt: skip
            v = self.op("Concat", [past_v, v], {"axis": 2}, name=f"present.{layer}.value",
                        dtype=dt, shape=present_shape, typed=True)  # fmt: skip
            graph_outputs += [k, v]
        k = self.repeat_kv(k, f"{name}.k_repeat", total)
        v = self.repeat_kv(v, f"{name}.v_repeat", total)

        kt = self.op("Transpose", [k], {"perm": [0, 1, 3, 2]}, name=f"{name}.k_transposed",
                     dtype=dt, shape=("batch", c.heads, d, total))  # fmt: skip
        s_shape = ("batch", c.heads, "seq", total)
        s = self.op("MatMul", [q, kt], name=f"{name}.scores", dtype=dt, shape=s_shape)
        scale = self.scalar("const.attn_scale", 1.0 / math.sqrt(d), dt)
        s = self.op("Mul", [s, scale], name=f"{name}.scaled", dtype=dt, shape=s_shape)
        if dt != _F32:
            s = self.op("Cast", [s], {"to": _F32}, name=f"{name}.scores_float", dtype=_F32,
                        shape=s_shape)  # fmt: skip
        s = self.op("Add", [s, mask], name=f"{name}.masked", dtype=_F32, shape=s_shape)
        p = self.op("Softmax", [s], {"axis": -1}, name=f"{name}.probs", dtype=_F32,
                    shape=s_shape)  # fmt: skip
        if dt != _F32:
            p = self.op("Cast", [p], {"to": dt}, name=f"{name}.probs_dtype", dtype=dt,
                        shape=s_shape)  # fmt: skip
        ctx = self.op("MatMul", [p, v], name=f"{name}.context", dtype=dt, shape=q_shape)
        ctx = self.op("Transpose", [ctx], perm, name=f"{name}.context_t", dtype=dt,
                      shape=(*lead, c.heads, d))  # fmt: skip
        ctx = self.op("Reshape", [ctx, self.ints("const.merge_heads_shape", [0, 0, c.hidden])],
                      name=f"{name}.merge_heads", dtype=dt, shape=(*lead, c.hidden))  # fmt: skip
        return self.linear(ctx, f"{name}.o_proj", c.hidden, c.hidden, lead)

    def mlp(self, x: ir.Value, name: str) -> ir.Value:
        c, dt = self.config, self.dtype
        lead = ("batch", "seq")
        inter = (*lead, c.intermediate)
        gate = self.linear(x, f"{name}.gate_proj", c.hidden, c.intermediate, lead)
        up = self.linear(x, f"{name}.up_proj", c.hidden, c.intermediate, lead)
        sig = self.op("Sigmoid", [gate], name=f"{name}.sigmoid", dtype=dt, shape=inter)
        act = self.op("Mul", [gate, sig], name=f"{name}.act_fn", dtype=dt, shape=inter)
        h = self.op("Mul", [act, up], name=f"{name}.gated", dtype=dt, shape=inter)
        return self.linear(h, f"{name}.down_proj", c.intermediate, c.hidden, lead)

    def attention_mask(self, input_ids: ir.Value, attention_mask: ir.Value) -> ir.Value:
        """The additive float32 mask ``[batch, 1, seq, total_seq]`` shared by all layers."""
        c = self.config
        total = "total_seq" if c.kv_cache else "seq"
        i64 = _I64
        seq_len = self.op("Shape", [input_ids], {"start": 1, "end": 2}, name="mask.seq_len",
                          dtype=i64, shape=(1,))  # fmt: skip
        zero = self.scalar("const.zero_scalar", 0, i64)
        one = self.scalar("const.one_scalar", 1, i64)
        if c.kv_cache:
            total_len = self.op("Shape", [attention_mask], {"start": 1, "end": 2},
                                name="mask.total_seq_len", dtype=i64, shape=(1,))  # fmt: skip
            past_len = self.op("Sub", [total_len, seq_len], name="mask.past_seq_len",
                               dtype=i64, shape=(1,))  # fmt: skip
            total_s = self.op("Squeeze", [total_len], name="mask.total_seq_len_scalar",
                              dtype=i64, shape=())  # fmt: skip
            past_s = self.op("Squeeze", [past_len], name="mask.past_seq_len_scalar",
                             dtype=i64, shape=())  # fmt: skip
            key_pos = self.op("Range", [zero, total_s, one], name="mask.key_positions",
                              dtype=i64, shape=(total,))  # fmt: skip
            query_pos = self.op("Range", [past_s, total_s, one], name="mask.cache_positions",
                                dtype=i64, shape=("seq",))  # fmt: skip
        else:
            seq_s = self.op("Squeeze", [seq_len], name="mask.seq_len_scalar", dtype=i64,
                            shape=())  # fmt: skip
            key_pos = self.op("Range", [zero, seq_s, one], name="mask.key_positions",
                              dtype=i64, shape=(total,))  # fmt: skip
            query_pos = key_pos
        key_row = self.op("Unsqueeze", [key_pos, self.ints("const.axes_0", [0])],
                          name="mask.key_row", dtype=i64, shape=(1, total))  # fmt: skip
        query_col = self.op("Unsqueeze", [query_pos, self.ints("const.axes_1", [1])],
                            name="mask.query_column", dtype=i64, shape=("seq", 1))  # fmt: skip
        causal = self.op("LessOrEqual", [key_row, query_col], name="mask.causal", dtype=_BOOL,
                         shape=("seq", total))  # fmt: skip
        padding = self.op("Cast", [attention_mask], {"to": _BOOL}, name="mask.padding",
                          dtype=_BOOL, shape=("batch", total))  # fmt: skip
        padding = self.op("Unsqueeze", [padding, self.ints("const.axes_1_2", [1, 2])],
                          name="mask.padding_4d", dtype=_BOOL,
                          shape=("batch", 1, 1, total))  # fmt: skip
        allowed = self.op("And", [causal, padding], name="mask.allowed", dtype=_BOOL,
                          shape=("batch", 1, "seq", total))  # fmt: skip
        zero_f = self.scalar("const.mask_zero", 0.0, _F32)
        min_f = self.scalar("const.mask_min", float(np.finfo(np.float32).min), _F32)
        return self.op("Where", [allowed, zero_f, min_f], name="mask.additive", dtype=_F32,
                       shape=("batch", 1, "seq", total))  # fmt: skip

    def model(self) -> ir.Model:
        c, dt = self.config, self.dtype
        total = "total_seq" if c.kv_cache else "seq"
        lead = ("batch", "seq")
        hs = (*lead, c.hidden)
        input_ids = self.input("input_ids", _I64, lead)
        attention_mask = self.input("attention_mask", _I64, ("batch", total))
        position_ids = self.input("position_ids", _I64, lead)
        inputs = [input_ids, attention_mask, position_ids]
        outputs: list[ir.Value] = []

        embed = self.weight("model.embed_tokens.weight", (c.vocab, c.hidden))
        h = self.op("Gather", [embed, input_ids], {"axis": 0}, name="model.embed_tokens",
                    dtype=dt, shape=hs)  # fmt: skip

        table_shape = (c.max_positions, c.head_dim)
        cos_table = self.weight("model.rotary_emb.cos_table", table_shape, kind="cos")
        sin_table = self.weight("model.rotary_emb.sin_table", table_shape, kind="sin")
        rows = (*lead, c.head_dim)
        cos = self.op("Gather", [cos_table, position_ids], {"axis": 0},
                      name="model.rotary_emb.cos_rows", dtype=dt, shape=rows)  # fmt: skip
        sin = self.op("Gather", [sin_table, position_ids], {"axis": 0},
                      name="model.rotary_emb.sin_rows", dtype=dt, shape=rows)  # fmt: skip
        axes_1 = self.ints("const.axes_1", [1])
        cos = self.op("Unsqueeze", [cos, axes_1], name="model.rotary_emb.cos", dtype=dt,
                      shape=("batch", 1, "seq", c.head_dim))  # fmt: skip
        sin = self.op("Unsqueeze", [sin, axes_1], name="model.rotary_emb.sin", dtype=dt,
                      shape=("batch", 1, "seq", c.head_dim))  # fmt: skip
        mask = self.attention_mask(input_ids, attention_mask)

        for i in range(c.layers):
            p = f"model.layers.{i}"
            x = self.rms_norm(h, f"{p}.input_layernorm", hs)
            a = self.attention(x, f"{p}.self_attn", cos=cos, sin=sin, mask=mask, layer=i,
                               graph_inputs=inputs, graph_outputs=outputs)  # fmt: skip
            h = self.op("Add", [h, a], name=f"{p}.attn_residual", dtype=dt, shape=hs)
            x = self.rms_norm(h, f"{p}.post_attention_layernorm", hs)
            m = self.mlp(x, f"{p}.mlp")
            h = self.op("Add", [h, m], name=f"{p}.out", dtype=dt, shape=hs)

        h = self.rms_norm(h, "model.norm", hs)
        lm_head = self.weight("lm_head.weight", (c.hidden, c.vocab))
        logits_shape = (*lead, c.vocab)
        if dt == _F32:
            logits = self.op("MatMul", [h, lm_head], name="logits", dtype=_F32,
                             shape=logits_shape, typed=True)  # fmt: skip
        else:
            logits = self.op("MatMul", [h, lm_head], name="lm_head", dtype=dt,
                             shape=logits_shape)  # fmt: skip
            logits = self.op("Cast", [logits], {"to": _F32}, name="logits", dtype=_F32,
                             shape=logits_shape, typed=True)  # fmt: skip
        outputs.insert(0, logits)

        graph = ir.Graph(
            inputs,
            outputs,
            nodes=self.tape.nodes,
            initializers=self.tape.initializers,
            opset_imports={"": OPSET},
            name="llama",
        )
        return ir.Model(
            graph,
            ir_version=_IR_VERSION,
            producer_name=_PRODUCER,
            doc_string=f"{_PRODUCER}: {_config_repr(c)}",
        )


def _config_repr(config: LlamaConfig) -> str:
    """A one-line description of ``config`` (dtype by name), stored in the model doc string."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    fields["dtype"] = ir.DataType(config.dtype).name
    return "LlamaConfig(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"


# ---------------------------------------------------------------------------------------------
# Public builders


def build_llama(config: LlamaConfig = TINY, *, value_info: bool = True) -> ir.Model:
    """Build a Llama decoder with its weights in memory (for small configurations).

    Args:
        config: The hyper-parameters; see :class:`LlamaConfig`.
        value_info: Whether every intermediate value carries its dtype and shape (symbolic
            ``batch``, ``seq``, ``past_seq``, ``total_seq`` where dynamic). When false, only
            graph inputs, outputs and initializers are typed, as in TorchScript exports.

    Returns:
        The model (opset 18, IR version 10); initializers are :class:`onnx_ir.Tensor` s.
    """
    return _GraphBuilder(config, value_info, lambda spec: _in_memory_tensor(config, spec)).model()


def write_llama(
    path: str | os.PathLike,
    config: LlamaConfig,
    *,
    value_info: bool = True,
    alignment: int = 4096,
) -> Path:
    """Write a Llama decoder to ``path`` with its weights streamed to ``<path>.data``.

    Each weight is generated in chunks and appended to the data file, then referenced from
    the model as an :class:`onnx_ir.ExternalTensor` (location relative to the model's
    folder); no weight is ever held whole in memory, so memory stays bounded whatever the
    size of the model. Weights start at offsets that are multiples of ``alignment`` (so
    runtimes can memory-map them); small constants (shape vectors, scalars) stay inside the
    model file. The numbers are the same as :func:`build_llama` gives for ``config``.

    Args:
        path: The ``.onnx`` file to write; its folder must exist. Existing files at ``path``
            and ``<path>.data`` are replaced.
        config: The hyper-parameters; see :class:`LlamaConfig` and :data:`PRESETS`.
        value_info: Whether intermediate values carry dtype and shape; see
            :func:`build_llama`.
        alignment: Alignment in bytes of each weight's offset in the data file (>= 1).

    Returns:
        ``path`` as a :class:`pathlib.Path`.
    """
    if alignment < 1:
        raise ValueError(f"alignment must be >= 1, got {alignment}")
    path = Path(path)
    data_path = path.with_name(path.name + ".data")
    writer = _ExternalDataWriter(config, data_path, alignment)
    try:
        model = _GraphBuilder(config, value_info, writer).model()
    finally:
        writer.close()
    # The model only references the data file: serializing it reads no tensor data.
    ir.save(model, path)
    return path
