"""Small, real model architectures built with onnx-ir, for tests, docs and benchmarks.

Every builder returns a fresh :class:`onnx_ir.Model` (opset 18, IR version 10) whose weights
are float32 random numbers drawn from a seeded :class:`numpy.random.Generator`, so the same
arguments always give the same model. The models run in onnxruntime as they are.

Naming follows the PyTorch module paths of the architecture:

* weights are ``<module>.weight`` / ``<module>.bias`` (``layer.1.attn.q_proj.weight``);
* a node and the value it produces share one name (``layer.1.attn.q_proj``,
  ``layer.1.out``): the output of residual block / layer ``i`` is ``layer.<i>.out``, which is
  where a pipeline naturally cuts.

The first dimension of every graph input and output is the symbolic ``"batch"``; all other
dimensions are fixed. Every value in the main graph carries its dtype and shape.

Architectures:

* :func:`mlp` -- a stack of ``MatMul`` + ``Add`` + ``Relu`` layers (every op has an ARK
  counterpart: the model ``omny export ark --ops translate`` writes completely).
* :func:`resnet` -- residual CNN (convolutions with folded batch norm, ReLU, a strided stage).
* :func:`bert` -- encoder with token ids, an ``attention_mask`` input, LayerNorm, masked
  attention and a GELU feed-forward.
* :func:`gpt` -- decoder with a causal mask built TorchScript-style from ``Shape`` of an
  activation (so small side activations cross every layer) and an LM head tied to the token
  embedding (one weight used by the first and the last layer).
* :func:`vit` -- vision transformer with a patch convolution, class token and classifier.
* :func:`control_flow` -- an ``If`` and a ``Loop`` whose bodies read outer-scope values.
* :func:`synthetic_chain` -- a long chain with residual connections, built in linear time,
  for benchmarks (50 000 nodes in a few seconds).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "OPSET",
    "bert",
    "control_flow",
    "gpt",
    "mlp",
    "resnet",
    "synthetic_chain",
    "synthetic_transformer",
    "vit",
]

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

OPSET = 18
"""ONNX default-domain opset of every zoo model."""

_IR_VERSION = 10
_BATCH = "batch"
_F32 = ir.DataType.FLOAT
_I64 = ir.DataType.INT64
_BOOL = ir.DataType.BOOL

Dim = int | str


class _Builder:
    """Records the nodes and initializers of one graph on an :class:`onnx_ir.tape.Tape`.

    Every name is claimed once (a duplicate raises). Every op produces one value whose name
    equals the node name; the caller gives its dtype and shape (known statically for these
    architectures), so the graph is fully typed without running shape inference.
    """

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.tape = ir.tape.Tape()
        self._names: set[str] = set()

    def _claim(self, name: str) -> str:
        if name in self._names:
            raise ValueError(f"zoo builder: duplicate value name {name!r}")
        self._names.add(name)
        return name

    def value(self, name: str, dtype: ir.DataType, shape: Sequence[Dim]) -> ir.Value:
        """Return a new typed value named ``name`` (a graph or body input, or a node output)."""
        return ir.Value(name=self._claim(name), type=ir.TensorType(dtype), shape=ir.Shape(shape))

    def input(self, name: str, dtype: ir.DataType, shape: Sequence[Dim]) -> ir.Value:
        return self.value(name, dtype, shape)

    def tensor(self, name: str, array: np.ndarray) -> ir.Value:
        """Add an initializer holding ``array`` (kept with its numpy dtype)."""
        tensor = ir.Tensor(np.asarray(array, order="C"), name=self._claim(name))
        return self.tape.initializer(tensor)

    def weight(self, name: str, shape: Sequence[int], std: float = 0.02) -> ir.Value:
        """Add a float32 weight drawn from N(0, std²)."""
        data = (self.rng.standard_normal(tuple(shape)) * std).astype(np.float32)
        return self.tensor(name, data)

    def ones(self, name: str, shape: Sequence[int]) -> ir.Value:
        return self.tensor(name, np.ones(tuple(shape), dtype=np.float32))

    def zeros(self, name: str, shape: Sequence[int]) -> ir.Value:
        return self.tensor(name, np.zeros(tuple(shape), dtype=np.float32))

    def ints(self, name: str, values: Sequence[int]) -> ir.Value:
        return self.tensor(name, np.asarray(values, dtype=np.int64))

    def scalar(self, name: str, value: float) -> ir.Value:
        return self.tensor(name, np.asarray(value, dtype=np.float32))

    def constant(self, name: str, array: np.ndarray) -> ir.Value:
        """Add a ``Constant`` node (how TorchScript exports small literals)."""
        tensor = ir.Tensor(np.asarray(array, order="C"), name=name)
        return self.op("Constant", [], {"value": tensor}, name=name, dtype=tensor.dtype,
                       shape=array.shape)  # fmt: skip

    def op(
        self,
        op_type: str,
        inputs: Sequence[ir.Value | None],
        attributes: Mapping[str, Any] | None = None,
        *,
        name: str,
        dtype: ir.DataType,
        shape: Sequence[Dim],
        tape: ir.tape.Tape | None = None,
    ) -> ir.Value:
        """Record a node ``name`` whose one output, also ``name``, has ``dtype`` and ``shape``.

        Args:
            op_type: The operator (default domain).
            inputs: Its inputs.
            attributes: Its attributes, as :meth:`onnx_ir.tape.Tape.op` takes them (a graph
                for a body).
            name: Name of the node and of its output.
            dtype: Data type of the output.
            shape: Shape of the output.
            tape: Where to record the node (a body's tape); default: the main graph's.
        """
        output = self.value(name, dtype, shape)
        return (tape or self.tape).op(op_type, inputs, attributes or None, name=name, output=output)

    def model(
        self,
        name: str,
        inputs: Sequence[ir.Value],
        outputs: Sequence[ir.Value],
        doc: str,
    ) -> ir.Model:
        graph = ir.Graph(
            inputs,
            outputs,
            nodes=self.tape.nodes,
            initializers=self.tape.initializers,
            opset_imports={"": OPSET},
            name=name,
        )
        return ir.Model(
            graph,
            ir_version=_IR_VERSION,
            producer_name="onnx-ir-multidevice.zoo",
            doc_string=doc,
        )


# ---------------------------------------------------------------------------------------------
# Shared layers


def _linear(
    b: _Builder,
    x: ir.Value,
    prefix: str,
    n_in: int,
    n_out: int,
    lead: Sequence[Dim],
    out_name: str | None = None,
) -> ir.Value:
    """``x @ W + bias`` on the last axis (PyTorch ``nn.Linear``, weight stored transposed)."""
    w = b.weight(f"{prefix}.weight", (n_in, n_out))
    bias = b.zeros(f"{prefix}.bias", (n_out,))
    shape = (*lead, n_out)
    y = b.op("MatMul", [x, w], name=f"{prefix}.matmul", dtype=_F32, shape=shape)
    return b.op("Add", [y, bias], name=out_name or prefix, dtype=_F32, shape=shape)


def _layer_norm(
    b: _Builder, x: ir.Value, prefix: str, hidden: int, shape: Sequence[Dim]
) -> ir.Value:
    scale = b.ones(f"{prefix}.weight", (hidden,))
    bias = b.zeros(f"{prefix}.bias", (hidden,))
    return b.op(
        "LayerNormalization",
        [x, scale, bias],
        {"axis": -1, "epsilon": 1e-5},
        name=prefix,
        dtype=_F32,
        shape=shape,
    )


def _gelu(b: _Builder, x: ir.Value, prefix: str, shape: Sequence[Dim]) -> ir.Value:
    """Exact GELU, ``x * 0.5 * (1 + erf(x / sqrt(2)))`` (opset 18 has no Gelu op)."""
    sqrt2 = b.scalar(f"{prefix}.sqrt2", math.sqrt(2.0))
    one = b.scalar(f"{prefix}.one", 1.0)
    half = b.scalar(f"{prefix}.half", 0.5)
    t = b.op("Div", [x, sqrt2], name=f"{prefix}.div", dtype=_F32, shape=shape)
    t = b.op("Erf", [t], name=f"{prefix}.erf", dtype=_F32, shape=shape)
    t = b.op("Add", [t, one], name=f"{prefix}.add_one", dtype=_F32, shape=shape)
    t = b.op("Mul", [x, t], name=f"{prefix}.mul_x", dtype=_F32, shape=shape)
    return b.op("Mul", [t, half], name=prefix, dtype=_F32, shape=shape)


def _mlp(b: _Builder, x: ir.Value, prefix: str, hidden: int, lead: Sequence[Dim]) -> ir.Value:
    h = _linear(b, x, f"{prefix}.fc1", hidden, 4 * hidden, lead)
    h = _gelu(b, h, f"{prefix}.act", (*lead, 4 * hidden))
    return _linear(b, h, f"{prefix}.fc2", 4 * hidden, hidden, lead)


def _split_heads_shape(b: _Builder, prefix: str, seq: int, heads: int, head_dim: int) -> ir.Value:
    return b.ints(f"{prefix}.split_heads_shape", (0, seq, heads, head_dim))


def _attention(
    b: _Builder,
    x: ir.Value,
    prefix: str,
    *,
    hidden: int,
    heads: int,
    seq: int,
    split_shape: ir.Value,
    merge_shape: ir.Value,
    additive_mask: ir.Value | None = None,
    causal_future: ir.Value | None = None,
) -> ir.Value:
    """Multi-head self-attention on ``x`` of shape ``[batch, seq, hidden]``.

    ``split_shape`` / ``merge_shape`` are the Reshape targets to ``[batch, seq, heads, hd]``
    and back to ``[batch, seq, hidden]``. ``additive_mask`` (``[batch, 1, 1, seq]``) is added
    to the scores; ``causal_future`` (bool ``[seq, seq]``, true above the diagonal) masks them
    with ``Where``.
    """
    hd = hidden // heads
    lead = (_BATCH, seq)
    q = _linear(b, x, f"{prefix}.q_proj", hidden, hidden, lead)
    k = _linear(b, x, f"{prefix}.k_proj", hidden, hidden, lead)
    v = _linear(b, x, f"{prefix}.v_proj", hidden, hidden, lead)
    split = (_BATCH, seq, heads, hd)
    q = b.op("Reshape", [q, split_shape], name=f"{prefix}.q_split", dtype=_F32, shape=split)
    k = b.op("Reshape", [k, split_shape], name=f"{prefix}.k_split", dtype=_F32, shape=split)
    v = b.op("Reshape", [v, split_shape], name=f"{prefix}.v_split", dtype=_F32, shape=split)
    bhsd = (_BATCH, heads, seq, hd)
    q = b.op("Transpose", [q], {"perm": [0, 2, 1, 3]}, name=f"{prefix}.q_heads", dtype=_F32,
             shape=bhsd)  # fmt: skip
    k = b.op("Transpose", [k], {"perm": [0, 2, 3, 1]}, name=f"{prefix}.k_heads", dtype=_F32,
             shape=(_BATCH, heads, hd, seq))  # fmt: skip
    v = b.op("Transpose", [v], {"perm": [0, 2, 1, 3]}, name=f"{prefix}.v_heads", dtype=_F32,
             shape=bhsd)  # fmt: skip
    scores_shape = (_BATCH, heads, seq, seq)
    s = b.op("MatMul", [q, k], name=f"{prefix}.scores", dtype=_F32, shape=scores_shape)
    scale = b.scalar(f"{prefix}.scale", 1.0 / math.sqrt(hd))
    s = b.op("Mul", [s, scale], name=f"{prefix}.scaled", dtype=_F32, shape=scores_shape)
    if additive_mask is not None:
        s = b.op("Add", [s, additive_mask], name=f"{prefix}.masked", dtype=_F32,
                 shape=scores_shape)  # fmt: skip
    if causal_future is not None:
        neg = b.scalar(f"{prefix}.mask_value", -1e9)
        s = b.op("Where", [causal_future, neg, s], name=f"{prefix}.causal", dtype=_F32,
                 shape=scores_shape)  # fmt: skip
    p = b.op("Softmax", [s], {"axis": -1}, name=f"{prefix}.probs", dtype=_F32,
             shape=scores_shape)  # fmt: skip
    ctx = b.op("MatMul", [p, v], name=f"{prefix}.context", dtype=_F32, shape=bhsd)
    ctx = b.op("Transpose", [ctx], {"perm": [0, 2, 1, 3]}, name=f"{prefix}.context_t",
               dtype=_F32, shape=split)  # fmt: skip
    ctx = b.op("Reshape", [ctx, merge_shape], name=f"{prefix}.merge_heads", dtype=_F32,
               shape=(*lead, hidden))  # fmt: skip
    return _linear(b, ctx, f"{prefix}.out", hidden, hidden, lead)


def _check_heads(hidden: int, heads: int) -> None:
    if hidden % heads:
        raise ValueError(f"hidden={hidden} must be a multiple of heads={heads}")


# ---------------------------------------------------------------------------------------------
# Architectures


def mlp(
    layers: int = 4,
    width: int = 32,
    *,
    features: int = 16,
    num_classes: int = 10,
    seed: int = 0,
) -> ir.Model:
    """A multilayer perceptron: ``layers`` hidden layers ``relu(x @ W + b)``, then a classifier.

    Every node is a ``MatMul``, an ``Add`` or a ``Relu`` on float32 tensors of at most two
    dimensions; each hidden layer's output ``layer.<i>.out`` is a single-tensor cut point.

    Args:
        layers: Number of hidden layers (at least 1).
        width: Width of the hidden layers.
        features: Size of the input ``x`` ``[batch, features]``.
        num_classes: Size of the output ``logits`` ``[batch, num_classes]``.
        seed: Seed of the weights.

    Returns:
        The model, input ``x`` (float32), output ``logits`` (float32).
    """
    if layers < 1 or width < 1 or features < 1 or num_classes < 1:
        raise ValueError("mlp needs layers, width, features and num_classes >= 1")
    b = _Builder(seed)
    x = b.input("x", _F32, (_BATCH, features))
    h, size = x, features
    for i in range(layers):
        h = _linear(b, h, f"layer.{i}.fc", size, width, (_BATCH,))
        h = b.op("Relu", [h], name=f"layer.{i}.out", dtype=_F32, shape=(_BATCH, width))
        size = width
    logits = _linear(b, h, "head", size, num_classes, (_BATCH,), out_name="logits")
    return b.model("mlp", [x], [logits], doc=f"zoo.mlp(layers={layers}, width={width})")


def resnet(
    depth_blocks: int = 4,
    channels: int = 16,
    image: int = 32,
    *,
    num_classes: int = 10,
    seed: int = 0,
) -> ir.Model:
    """A ResNet-style CNN: stem, ``depth_blocks`` basic residual blocks, pooling, classifier.

    Batch norm is folded into the convolutions (as exporters do for inference). The block at
    index ``depth_blocks // 2`` (when > 0) halves the resolution and doubles the channels, with
    a 1x1 projection on its shortcut; the others keep the shape, so their outputs
    ``layer.<i>.out`` are single-tensor cut points.

    Args:
        depth_blocks: Number of residual blocks (each two 3x3 convolutions).
        channels: Channels of the stem and the first blocks.
        image: Height and width of the square input ``image`` ``[batch, 3, image, image]``.
        num_classes: Size of the output ``logits`` ``[batch, num_classes]``.
        seed: Seed of the weights.

    Returns:
        The model, inputs ``image`` (float32), outputs ``logits`` (float32).
    """
    if depth_blocks < 1 or channels < 1 or image < 4:
        raise ValueError("resnet needs depth_blocks >= 1, channels >= 1 and image >= 4")
    b = _Builder(seed)
    x = b.input("image", _F32, (_BATCH, 3, image, image))

    def conv(
        x: ir.Value, prefix: str, c_in: int, c_out: int, k: int, stride: int, size: int
    ) -> tuple[ir.Value, int]:
        fan_in = c_in * k * k
        w = b.weight(f"{prefix}.weight", (c_out, c_in, k, k), std=math.sqrt(2.0 / fan_in))
        bias = b.zeros(f"{prefix}.bias", (c_out,))
        pad = k // 2
        out = (size + 2 * pad - k) // stride + 1
        y = b.op(
            "Conv",
            [x, w, bias],
            {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4},
            name=prefix,
            dtype=_F32,
            shape=(_BATCH, c_out, out, out),
        )
        return y, out

    h, size = conv(x, "stem.conv", 3, channels, 3, 1, image)
    h = b.op("Relu", [h], name="stem.relu", dtype=_F32, shape=(_BATCH, channels, size, size))
    c = channels
    for i in range(depth_blocks):
        p = f"layer.{i}"
        down = depth_blocks > 1 and i == depth_blocks // 2
        c_out, stride = (2 * c, 2) if down else (c, 1)
        y, out = conv(h, f"{p}.conv1", c, c_out, 3, stride, size)
        shape = (_BATCH, c_out, out, out)
        y = b.op("Relu", [y], name=f"{p}.relu1", dtype=_F32, shape=shape)
        y, _ = conv(y, f"{p}.conv2", c_out, c_out, 3, 1, out)
        shortcut = h
        if down:
            shortcut, _ = conv(h, f"{p}.downsample", c, c_out, 1, stride, size)
        y = b.op("Add", [y, shortcut], name=f"{p}.residual", dtype=_F32, shape=shape)
        h = b.op("Relu", [y], name=f"{p}.out", dtype=_F32, shape=shape)
        c, size = c_out, out
    h = b.op("GlobalAveragePool", [h], name="pool", dtype=_F32, shape=(_BATCH, c, 1, 1))
    h = b.op("Flatten", [h], {"axis": 1}, name="flatten", dtype=_F32, shape=(_BATCH, c))
    w = b.weight("fc.weight", (num_classes, c), std=1.0 / math.sqrt(c))
    bias = b.zeros("fc.bias", (num_classes,))
    logits = b.op("Gemm", [h, w, bias], {"transB": 1}, name="logits", dtype=_F32,
                  shape=(_BATCH, num_classes))  # fmt: skip
    return b.model("resnet", [x], [logits], doc=f"zoo.resnet(depth_blocks={depth_blocks})")


def bert(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    seq: int = 16,
    vocab: int = 100,
    *,
    seed: int = 0,
) -> ir.Model:
    """A BERT-style encoder (post-LayerNorm) with a padding attention mask.

    The token embedding is a ``Gather`` from ``embeddings.word.weight`` by the int64
    ``input_ids``; position embeddings are added, then LayerNorm. The int64
    ``attention_mask`` (1 = attend, 0 = padding) becomes an additive ``[batch, 1, 1, seq]``
    float mask shared by every layer. Each layer: attention, residual, LayerNorm, GELU
    feed-forward, residual, LayerNorm; its output is ``layer.<i>.out``.

    Args:
        layers: Number of encoder layers.
        hidden: Hidden size.
        heads: Attention heads (``hidden`` must be a multiple).
        seq: Sequence length (fixed).
        vocab: Vocabulary size.
        seed: Seed of the weights.

    Returns:
        The model, inputs ``input_ids`` and ``attention_mask`` (int64 ``[batch, seq]``),
        output ``last_hidden_state`` (float32 ``[batch, seq, hidden]``).
    """
    _check_heads(hidden, heads)
    b = _Builder(seed)
    lead = (_BATCH, seq)
    hs = (*lead, hidden)
    ids = b.input("input_ids", _I64, lead)
    mask = b.input("attention_mask", _I64, lead)

    word = b.weight("embeddings.word.weight", (vocab, hidden))
    pos = b.weight("embeddings.position.weight", (seq, hidden))
    h = b.op("Gather", [word, ids], {"axis": 0}, name="embeddings.word", dtype=_F32, shape=hs)
    h = b.op("Add", [h, pos], name="embeddings.add_position", dtype=_F32, shape=hs)
    h = _layer_norm(b, h, "embeddings.norm", hidden, hs)

    m_shape = (_BATCH, 1, 1, seq)
    m = b.op("Unsqueeze", [mask, b.ints("mask.axes", (1, 2))], name="mask.unsqueeze",
             dtype=_I64, shape=m_shape)  # fmt: skip
    m = b.op("Cast", [m], {"to": _F32}, name="mask.float", dtype=_F32, shape=m_shape)
    m = b.op("Sub", [b.scalar("mask.one", 1.0), m], name="mask.inverted", dtype=_F32,
             shape=m_shape)  # fmt: skip
    m = b.op("Mul", [m, b.scalar("mask.min", -10000.0)], name="mask.additive", dtype=_F32,
             shape=m_shape)  # fmt: skip
    split_shape = _split_heads_shape(b, "attention", seq, heads, hidden // heads)
    merge_shape = b.ints("attention.merge_heads_shape", (0, seq, hidden))

    for i in range(layers):
        p = f"layer.{i}"
        a = _attention(b, h, f"{p}.attn", hidden=hidden, heads=heads, seq=seq,
                       split_shape=split_shape, merge_shape=merge_shape,
                       additive_mask=m)  # fmt: skip
        a = b.op("Add", [h, a], name=f"{p}.attn.residual", dtype=_F32, shape=hs)
        h = _layer_norm(b, a, f"{p}.attn.norm", hidden, hs)
        f = _mlp(b, h, f"{p}.mlp", hidden, lead)
        f = b.op("Add", [h, f], name=f"{p}.mlp.residual", dtype=_F32, shape=hs)
        h = _layer_norm(b, f, f"{p}.out", hidden, hs)
    out = b.op("Identity", [h], name="last_hidden_state", dtype=_F32, shape=hs)
    return b.model("bert", [ids, mask], [out], doc=f"zoo.bert(layers={layers})")


def gpt(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    seq: int = 16,
    vocab: int = 100,
    tie_embeddings: bool = True,
    *,
    seed: int = 0,
) -> ir.Model:
    """A GPT-2-style decoder (pre-LayerNorm) shaped like a TorchScript export.

    As in TorchScript GPT-2 exports, the shape vector ``hidden_shape = Shape(embeddings)``
    (int64 ``[3]``) is computed once after the embedding and read by every layer; it is a proven
    shape read (the dims of ``input_ids`` and a static hidden size), so every stage recomputes
    it. The causal mask is sliced from the float32 ``attn.bias`` buffer (``tril(ones(seq,
    seq))``, as transformers 2.x GPT-2 registers it) to the sequence length read from
    ``hidden_shape``, and compared with ``0.5`` (``causal.future``, bool ``[seq, seq]``): it reads
    a large constant (``seq * seq * 4`` bytes, 1 KiB or more from ``seq = 16``), so it is an
    activation computed once and read by every layer, a small *side activation* that crosses
    every layer boundary (strict cuts between layers fail; relaxed cuts carry it). Position ids
    come from ``Shape(input_ids)`` (cheap, input-derived). With ``tie_embeddings`` the LM head
    multiplies by ``Transpose(wte.weight)``, so the token embedding weight is used by the first
    and the last layer.

    Args:
        layers: Number of decoder layers; layer ``i`` ends in ``layer.<i>.out``.
        hidden: Hidden size.
        heads: Attention heads (``hidden`` must be a multiple).
        seq: Sequence length (fixed in the input shape).
        vocab: Vocabulary size.
        tie_embeddings: Share the token embedding with the LM head.
        seed: Seed of the weights.

    Returns:
        The model, input ``input_ids`` (int64 ``[batch, seq]``), output ``logits``
        (float32 ``[batch, seq, vocab]``).
    """
    _check_heads(hidden, heads)
    b = _Builder(seed)
    lead = (_BATCH, seq)
    hs = (*lead, hidden)
    ids = b.input("input_ids", _I64, lead)

    # Position ids from the input's shape (TorchScript: torch.arange(0, input_shape[-1])).
    ids_shape = b.op("Shape", [ids], name="input_shape", dtype=_I64, shape=(2,))
    zero = b.constant("const.zero", np.asarray(0, dtype=np.int64))
    one = b.constant("const.one", np.asarray(1, dtype=np.int64))
    ids_len = b.op("Gather", [ids_shape, one], {"axis": 0}, name="input_length", dtype=_I64,
                   shape=())  # fmt: skip
    pos_ids = b.op("Range", [zero, ids_len, one], name="position_ids", dtype=_I64, shape=(seq,))

    wte = b.weight("wte.weight", (vocab, hidden))
    wpe = b.weight("wpe.weight", (seq, hidden))
    tok = b.op("Gather", [wte, ids], {"axis": 0}, name="wte", dtype=_F32, shape=hs)
    pos = b.op("Gather", [wpe, pos_ids], {"axis": 0}, name="wpe", dtype=_F32, shape=(seq, hidden))
    h = b.op("Add", [tok, pos], name="embeddings", dtype=_F32, shape=hs)

    # Shape of an activation (a proven shape read), and the causal mask sliced from the
    # float32 bias buffer to the length it gives: the mask reads a large constant, so it is a
    # side activation.
    hidden_shape = b.op("Shape", [h], name="hidden_shape", dtype=_I64, shape=(3,))
    length = b.op("Slice", [hidden_shape, b.constant("causal.len_start", np.asarray([1])),
                            b.constant("causal.len_end", np.asarray([2]))],
                  name="causal.length", dtype=_I64, shape=(1,))  # fmt: skip
    ends = b.op("Concat", [length, length], {"axis": 0}, name="causal.ends", dtype=_I64,
                shape=(2,))  # fmt: skip
    bias = b.tensor("attn.bias", np.tril(np.ones((seq, seq), dtype=np.float32)))
    window = b.op("Slice", [bias, b.constant("causal.starts", np.asarray([0, 0])), ends,
                            b.constant("causal.axes", np.asarray([0, 1]))],
                  name="causal.window", dtype=_F32, shape=(seq, seq))  # fmt: skip
    future = b.op("Less", [window, b.constant("causal.half", np.asarray(0.5, np.float32))],
                  name="causal.future", dtype=_BOOL, shape=(seq, seq))  # fmt: skip
    batch_len = b.op("Slice", [hidden_shape, b.constant("const.start0", np.asarray([0])),
                               b.constant("const.end2", np.asarray([2]))],
                     name="hidden_shape.batch_seq", dtype=_I64, shape=(2,))  # fmt: skip
    hd = hidden // heads
    heads_dims = b.constant("const.heads_dims", np.asarray([heads, hd], dtype=np.int64))
    split_shape = b.op("Concat", [batch_len, heads_dims], {"axis": 0},
                       name="split_heads_shape", dtype=_I64, shape=(4,))  # fmt: skip

    for i in range(layers):
        p = f"layer.{i}"
        a = _layer_norm(b, h, f"{p}.ln_1", hidden, hs)
        a = _attention(b, a, f"{p}.attn", hidden=hidden, heads=heads, seq=seq,
                       split_shape=split_shape, merge_shape=hidden_shape,
                       causal_future=future)  # fmt: skip
        h = b.op("Add", [h, a], name=f"{p}.attn.residual", dtype=_F32, shape=hs)
        f = _layer_norm(b, h, f"{p}.ln_2", hidden, hs)
        f = _mlp(b, f, f"{p}.mlp", hidden, lead)
        h = b.op("Add", [h, f], name=f"{p}.out", dtype=_F32, shape=hs)

    h = _layer_norm(b, h, "ln_f", hidden, hs)
    if tie_embeddings:
        head = b.op("Transpose", [wte], {"perm": [1, 0]}, name="lm_head.tied_weight",
                    dtype=_F32, shape=(hidden, vocab))  # fmt: skip
    else:
        head = b.weight("lm_head.weight", (hidden, vocab))
    logits = b.op("MatMul", [h, head], name="logits", dtype=_F32, shape=(*lead, vocab))
    return b.model("gpt", [ids], [logits], doc=f"zoo.gpt(layers={layers})")


def vit(
    layers: int = 2,
    hidden: int = 64,
    patch: int = 8,
    image: int = 32,
    *,
    heads: int = 4,
    num_classes: int = 10,
    seed: int = 0,
) -> ir.Model:
    """A ViT-style image classifier (pre-LayerNorm) with a class token.

    A ``patch`` x ``patch`` strided convolution embeds the patches; a learned class token is
    expanded to the batch and concatenated in front; position embeddings are added. Layer
    ``i`` ends in ``layer.<i>.out``; the classifier reads the final class token.

    Args:
        layers: Number of encoder layers.
        hidden: Hidden size.
        patch: Patch size (``image`` must be a multiple).
        image: Height and width of the input ``pixel_values`` ``[batch, 3, image, image]``.
        heads: Attention heads (``hidden`` must be a multiple).
        num_classes: Size of the output ``logits`` ``[batch, num_classes]``.
        seed: Seed of the weights.

    Returns:
        The model, input ``pixel_values`` (float32), output ``logits`` (float32).
    """
    _check_heads(hidden, heads)
    if image % patch:
        raise ValueError(f"image={image} must be a multiple of patch={patch}")
    b = _Builder(seed)
    grid = image // patch
    n = grid * grid
    seq = n + 1
    lead = (_BATCH, seq)
    hs = (*lead, hidden)
    x = b.input("pixel_values", _F32, (_BATCH, 3, image, image))

    w = b.weight("patch_embed.weight", (hidden, 3, patch, patch))
    bias = b.zeros("patch_embed.bias", (hidden,))
    p = b.op("Conv", [x, w, bias], {"kernel_shape": [patch, patch], "strides": [patch, patch]},
             name="patch_embed", dtype=_F32, shape=(_BATCH, hidden, grid, grid))  # fmt: skip
    p = b.op("Reshape", [p, b.ints("patch_embed.flat_shape", (0, hidden, n))],
             name="patch_embed.flatten", dtype=_F32, shape=(_BATCH, hidden, n))  # fmt: skip
    p = b.op("Transpose", [p], {"perm": [0, 2, 1]}, name="patch_embed.tokens", dtype=_F32,
             shape=(_BATCH, n, hidden))  # fmt: skip

    cls = b.weight("cls_token", (1, 1, hidden))
    x_shape = b.op("Shape", [x], {"start": 0, "end": 1}, name="batch_size", dtype=_I64,
                   shape=(1,))  # fmt: skip
    cls_shape = b.op("Concat", [x_shape, b.ints("cls_token.tail_shape", (1, hidden))],
                     {"axis": 0}, name="cls_token.shape", dtype=_I64, shape=(3,))  # fmt: skip
    c = b.op("Expand", [cls, cls_shape], name="cls_token.expand", dtype=_F32,
             shape=(_BATCH, 1, hidden))  # fmt: skip
    h = b.op("Concat", [c, p], {"axis": 1}, name="tokens", dtype=_F32, shape=hs)
    pos = b.weight("pos_embed", (1, seq, hidden))
    h = b.op("Add", [h, pos], name="embeddings", dtype=_F32, shape=hs)

    split_shape = _split_heads_shape(b, "attention", seq, heads, hidden // heads)
    merge_shape = b.ints("attention.merge_heads_shape", (0, seq, hidden))
    for i in range(layers):
        pre = f"layer.{i}"
        a = _layer_norm(b, h, f"{pre}.norm1", hidden, hs)
        a = _attention(b, a, f"{pre}.attn", hidden=hidden, heads=heads, seq=seq,
                       split_shape=split_shape, merge_shape=merge_shape)  # fmt: skip
        h = b.op("Add", [h, a], name=f"{pre}.attn.residual", dtype=_F32, shape=hs)
        f = _layer_norm(b, h, f"{pre}.norm2", hidden, hs)
        f = _mlp(b, f, f"{pre}.mlp", hidden, lead)
        h = b.op("Add", [h, f], name=f"{pre}.out", dtype=_F32, shape=hs)

    h = _layer_norm(b, h, "norm", hidden, hs)
    cls_index = b.tensor("cls_index", np.asarray(0, dtype=np.int64))
    cls_out = b.op("Gather", [h, cls_index], {"axis": 1}, name="cls_output", dtype=_F32,
                   shape=(_BATCH, hidden))  # fmt: skip
    logits = _linear(b, cls_out, "head", hidden, num_classes, (_BATCH,), out_name="logits")
    return b.model("vit", [x], [logits], doc=f"zoo.vit(layers={layers})")


def control_flow(*, width: int = 8, trip_count: int = 3, seed: int = 0) -> ir.Model:
    """A model with an ``If`` and a ``Loop`` whose bodies read outer-scope values.

    ``proj = x @ proj.weight``; ``branch = If(sum(proj) > 0, proj + branch.bias,
    proj - branch.bias)`` (both branches read ``proj`` and ``branch.bias`` from the main
    graph); ``loop`` runs ``trip_count`` times ``acc = tanh(acc @ loop.weight + proj)`` from
    ``acc = branch`` (the body reads ``loop.weight`` and ``proj``); ``output = loop + x``.

    Args:
        width: Feature size of the input ``x`` ``[batch, width]``.
        trip_count: Iterations of the loop.
        seed: Seed of the weights.

    Returns:
        The model, input ``x`` (float32 ``[batch, width]``), output ``output`` (same shape).
    """
    b = _Builder(seed)
    feat = (_BATCH, width)
    x = b.input("x", _F32, feat)
    w = b.weight("proj.weight", (width, width), std=1.0 / math.sqrt(width))
    h = b.op("MatMul", [x, w], name="proj", dtype=_F32, shape=feat)
    s = b.op("ReduceSum", [h], {"keepdims": 0}, name="cond.sum", dtype=_F32, shape=())
    cond = b.op("Greater", [s, b.scalar("cond.zero", 0.0)], name="cond", dtype=_BOOL, shape=())
    bias = b.weight("branch.bias", (width,), std=1.0)

    def branch(op_type: str, label: str) -> ir.Graph:
        body = ir.tape.Tape()
        out = b.op(op_type, [h, bias], name=f"branch.{label}", dtype=_F32, shape=feat, tape=body)
        return ir.Graph([], [out], nodes=body.nodes, name=f"branch_{label}")

    branches = {"then_branch": branch("Add", "then"), "else_branch": branch("Sub", "else")}
    branch_out = b.op("If", [cond], branches, name="branch", dtype=_F32, shape=feat)

    # Loop body: (iteration, cond_in, acc_in) -> (cond_out, acc_out); reads loop.weight, proj.
    w_loop = b.weight("loop.weight", (width, width), std=1.0 / math.sqrt(width))
    it = b.value("loop.body.iteration", _I64, ())
    c_in = b.value("loop.body.cond_in", _BOOL, ())
    acc_in = b.value("loop.body.acc_in", _F32, feat)
    body = ir.tape.Tape()
    t = b.op("MatMul", [acc_in, w_loop], name="loop.body.matmul", dtype=_F32, shape=feat, tape=body)
    t = b.op("Add", [t, h], name="loop.body.add_proj", dtype=_F32, shape=feat, tape=body)
    acc_out = b.op("Tanh", [t], name="loop.body.acc_out", dtype=_F32, shape=feat, tape=body)
    c_out = b.op("Identity", [c_in], name="loop.body.cond_out", dtype=_BOOL, shape=(), tape=body)
    loop_body = ir.Graph([it, c_in, acc_in], [c_out, acc_out], nodes=body.nodes, name="loop_body")

    m = b.tensor("loop.trip_count", np.asarray(trip_count, dtype=np.int64))
    keep_going = b.tensor("loop.cond", np.asarray(True))
    loop_out = b.op(
        "Loop",
        [m, keep_going, branch_out],
        {"body": loop_body},
        name="loop",
        dtype=_F32,
        shape=feat,
    )
    y = b.op("Add", [loop_out, x], name="output", dtype=_F32, shape=feat)
    return b.model("control_flow", [x], [y], doc="zoo.control_flow()")


def synthetic_chain(num_nodes: int, *, width: int = 8, block: int = 4, seed: int = 0) -> ir.Model:
    """A long chain with a residual connection around every ``block`` nodes, for benchmarks.

    Block ``i`` computes ``block.<i>.out = tanh(x @ block.<i>.weight + block.<i>.bias) + x``
    (with ``block=4``: MatMul, Add, Tanh, Add; a longer block repeats Tanh), so every block
    output is a single-tensor cut point and values grow at most linearly along the chain. The
    graph has exactly ``num_nodes`` nodes (a last partial block is truncated) and is built in
    time linear in ``num_nodes``: about 50 000 nodes in a few seconds. Weights take
    ``(width² + width) * 4`` bytes per block.

    Args:
        num_nodes: Number of nodes of the main graph (>= 1).
        width: Feature size of the input ``x`` ``[batch, width]``.
        block: Nodes per residual block (>= 2): MatMul, Add bias, Tanh..., residual Add.
        seed: Seed of the weights.

    Returns:
        The model, input ``x`` (float32 ``[batch, width]``), one output of the same shape.
    """
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
    if block < 2:
        raise ValueError(f"block must be >= 2, got {block}")
    b = _Builder(seed)
    feat = (_BATCH, width)
    x = b.input("x", _F32, feat)
    num_blocks = -(-num_nodes // block)
    weights = (b.rng.standard_normal((num_blocks, width, width)) / math.sqrt(width)).astype(
        np.float32
    )
    biases = (b.rng.standard_normal((num_blocks, width)) * 0.1).astype(np.float32)
    h = x
    count = 0
    for i in range(num_blocks):
        p = f"block.{i}"
        block_in = h
        steps = min(block, num_nodes - count)
        for j in range(steps):
            if j == 0:
                w = b.tensor(f"{p}.weight", weights[i])
                h = b.op("MatMul", [h, w], name=f"{p}.matmul", dtype=_F32, shape=feat)
            elif j == 1 and block > 2:
                bias = b.tensor(f"{p}.bias", biases[i])
                h = b.op("Add", [h, bias], name=f"{p}.add_bias", dtype=_F32, shape=feat)
            elif j == block - 1:
                h = b.op("Add", [h, block_in], name=f"{p}.out", dtype=_F32, shape=feat)
            else:
                h = b.op("Tanh", [h], name=f"{p}.tanh{j}", dtype=_F32, shape=feat)
        count += steps
    return b.model("synthetic_chain", [x], [h], doc=f"zoo.synthetic_chain({num_nodes})")


def synthetic_transformer(
    layers: int = 2,
    *,
    hidden: int = 32,
    heads: int = 2,
    vocab: int = 128,
    max_positions: int = 512,
    seed: int = 0,
) -> ir.Model:
    """A decoder-only transformer shaped like a dynamo export: symbolic dims, no ``value_info``.

    The graph inputs are ``input_ids`` and ``attention_mask`` (int64 ``[batch, seq]``) and the
    output ``logits`` (float32 ``[batch, seq, vocab]``); ``batch`` and ``seq`` are symbolic, and
    no other value of the graph has a type or shape (as ``torch.onnx.export`` writes models
    without ``value_info``), so every tool that needs one must infer it. Position ids come
    from ``Shape(input_ids)``; the attention mask becomes an additive ``[batch, 1, 1, seq]``
    mask read by every layer; each layer is pre-LayerNorm multi-head attention (``Reshape`` to
    ``[0, -1, heads, head_dim]``) and a GELU feed-forward, each with a residual ``Add``; the LM
    head multiplies by ``Transpose(wte.weight)`` (tied embeddings). A layer has 34 nodes, the
    embeddings, mask and head 16: ``layers=380`` gives about 13 000 nodes, ``layers=1530``
    about 52 000, built in linear time. Weights are small (``hidden`` 32 by default), so the
    graph, not the weights, dominates loading.

    Args:
        layers: Number of decoder layers; layer ``i`` ends in ``layer.<i>.out``.
        hidden: Hidden size.
        heads: Attention heads (``hidden`` must be a multiple).
        vocab: Vocabulary size.
        max_positions: Rows of the position embedding (the largest ``seq`` that runs).
        seed: Seed of the weights.

    Returns:
        The model (opset 18, IR version 10).

    .. versionadded:: 0.1
    """
    _check_heads(hidden, heads)
    if layers < 0:
        raise ValueError(f"layers must be >= 0, got {layers}")
    rng = np.random.default_rng(seed)
    nodes: list[ir.Node] = []
    initializers: list[ir.Value] = []

    def tensor(name: str, array: np.ndarray) -> ir.Value:
        data = ir.Tensor(np.asarray(array), name=name)
        value = ir.Value(name=name, const_value=data)
        value.type = ir.TensorType(data.dtype)
        value.shape = ir.Shape(data.shape)
        initializers.append(value)
        return value

    def weight(name: str, shape: tuple[int, ...]) -> ir.Value:
        return tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    def op(op_type: str, inputs: Sequence[ir.Value], name: str, **attributes: Any) -> ir.Value:
        out = ir.Value(name=name)
        attrs = [ir.convenience.convert_attribute(k, v) for k, v in attributes.items()]
        nodes.append(ir.Node("", op_type, inputs, attrs, outputs=[out], name=name))
        return out

    def linear(x: ir.Value, prefix: str, n_in: int, n_out: int) -> ir.Value:
        y = op("MatMul", [x, weight(f"{prefix}.weight", (n_in, n_out))], f"{prefix}.matmul")
        return op("Add", [y, tensor(f"{prefix}.bias", np.zeros(n_out, np.float32))], prefix)

    def layer_norm(x: ir.Value, prefix: str) -> ir.Value:
        scale = tensor(f"{prefix}.weight", np.ones(hidden, np.float32))
        bias = tensor(f"{prefix}.bias", np.zeros(hidden, np.float32))
        return op("LayerNormalization", [x, scale, bias], prefix, axis=-1, epsilon=1e-5)

    def scalar(name: str, value: float) -> ir.Value:
        return tensor(name, np.asarray(value, np.float32))

    hd = hidden // heads
    ids = ir.Value(name="input_ids", type=ir.TensorType(_I64), shape=ir.Shape([_BATCH, "seq"]))
    mask = ir.Value(
        name="attention_mask", type=ir.TensorType(_I64), shape=ir.Shape([_BATCH, "seq"])
    )
    zero = tensor("const.zero", np.asarray(0, np.int64))
    one = tensor("const.one", np.asarray(1, np.int64))
    shape = op("Shape", [ids], "input_shape")
    length = op("Gather", [shape, one], "input_length", axis=0)
    positions = op("Range", [zero, length, one], "position_ids")
    wte = weight("wte.weight", (vocab, hidden))
    h = op("Gather", [wte, ids], "wte", axis=0)
    pos = op("Gather", [weight("wpe.weight", (max_positions, hidden)), positions], "wpe", axis=0)
    h = op("Add", [h, pos], "embeddings")
    m = op("Unsqueeze", [mask, tensor("mask.axes", np.asarray([1, 2], np.int64))], "mask.4d")
    m = op("Cast", [m], "mask.float", to=_F32)
    m = op("Sub", [scalar("mask.one", 1.0), m], "mask.inverted")
    m = op("Mul", [m, scalar("mask.min", -10000.0)], "mask.additive")
    split = tensor("attention.split_shape", np.asarray([0, -1, heads, hd], np.int64))
    merge = tensor("attention.merge_shape", np.asarray([0, -1, hidden], np.int64))
    for i in range(layers):
        p = f"layer.{i}"
        a = layer_norm(h, f"{p}.ln_1")
        q, k, v = (linear(a, f"{p}.attn.{n}_proj", hidden, hidden) for n in "qkv")
        q, k, v = (
            op("Reshape", [t, split], f"{p}.attn.{n}_split")
            for t, n in zip((q, k, v), "qkv", strict=True)
        )
        q = op("Transpose", [q], f"{p}.attn.q_heads", perm=[0, 2, 1, 3])
        k = op("Transpose", [k], f"{p}.attn.k_heads", perm=[0, 2, 3, 1])
        v = op("Transpose", [v], f"{p}.attn.v_heads", perm=[0, 2, 1, 3])
        s = op("MatMul", [q, k], f"{p}.attn.scores")
        s = op("Mul", [s, scalar(f"{p}.attn.scale", 1.0 / math.sqrt(hd))], f"{p}.attn.scaled")
        s = op("Add", [s, m], f"{p}.attn.masked")
        s = op("Softmax", [s], f"{p}.attn.probs", axis=-1)
        c = op("MatMul", [s, v], f"{p}.attn.context")
        c = op("Transpose", [c], f"{p}.attn.context_t", perm=[0, 2, 1, 3])
        c = op("Reshape", [c, merge], f"{p}.attn.merge_heads")
        a = linear(c, f"{p}.attn.out", hidden, hidden)
        h = op("Add", [h, a], f"{p}.attn.residual")
        f = layer_norm(h, f"{p}.ln_2")
        f = linear(f, f"{p}.mlp.fc1", hidden, 4 * hidden)
        g = op("Div", [f, scalar(f"{p}.mlp.act.sqrt2", math.sqrt(2.0))], f"{p}.mlp.act.div")
        g = op("Erf", [g], f"{p}.mlp.act.erf")
        g = op("Add", [g, scalar(f"{p}.mlp.act.one", 1.0)], f"{p}.mlp.act.add_one")
        g = op("Mul", [f, g], f"{p}.mlp.act.mul_x")
        g = op("Mul", [g, scalar(f"{p}.mlp.act.half", 0.5)], f"{p}.mlp.act")
        f = linear(g, f"{p}.mlp.fc2", 4 * hidden, hidden)
        h = op("Add", [h, f], f"{p}.out")
    h = layer_norm(h, "ln_f")
    head = op("Transpose", [wte], "lm_head.tied_weight", perm=[1, 0])
    logits = op("MatMul", [h, head], "logits")
    logits.type = ir.TensorType(_F32)
    logits.shape = ir.Shape([_BATCH, "seq", vocab])
    graph = ir.Graph(
        [ids, mask],
        [logits],
        nodes=nodes,
        initializers=initializers,
        opset_imports={"": OPSET},
        name="synthetic_transformer",
    )
    return ir.Model(
        graph,
        ir_version=_IR_VERSION,
        producer_name="onnx-ir-multidevice.zoo",
        doc_string=f"zoo.synthetic_transformer(layers={layers})",
    )
