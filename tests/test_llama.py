"""The Llama generator against a NumPy reference, with and without a KV cache, in memory and
streamed to external data."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnx_ir_multidevice.testing import llama

ort = pytest.importorskip("onnxruntime")

TINY = llama.TINY
TINY_KV = dataclasses.replace(TINY, kv_cache=True)


# ---------------------------------------------------------------------------------------------
# NumPy reference (HF LlamaForCausalLM, eager attention), in float64


def reference(config, weights, input_ids, attention_mask, position_ids, past=None):
    """Logits and present (key, value) per layer; ``past`` is a list of (key, value).

    ``weights`` maps names to arrays (or lazily loaded tensors); each is converted to float64
    only when used, so this also runs on the 1.1B model.
    """
    c = config

    class Float64:
        def __getitem__(self, name):
            return np.asarray(weights[name], dtype=np.float64)

    w = Float64()
    b, s = input_ids.shape
    d, n_rep = c.head_dim, c.heads // c.kv_heads

    inv_freq = 1.0 / c.rope_theta ** (np.arange(0, d, 2) / d)
    freqs = position_ids[..., None].astype(np.float64) * inv_freq
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None], np.sin(emb)[:, None]  # [b, 1, s, d]

    past_len = 0 if past is None else past[0][0].shape[2]
    causal = np.arange(past_len + s)[None, :] <= (past_len + np.arange(s))[:, None]
    allowed = causal[None, None] & (attention_mask[:, None, None, :] != 0)
    mask = np.where(allowed, 0.0, np.finfo(np.float32).min)

    def rms(x, weight):
        return weight * x / np.sqrt((x**2).mean(-1, keepdims=True) + c.rms_eps)

    def rotate_half(x):
        return np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], axis=-1)

    def heads(x, n):
        return x.reshape(b, s, n, d).transpose(0, 2, 1, 3)

    h = np.asarray(weights["model.embed_tokens.weight"])[input_ids].astype(np.float64)
    presents = []
    for i in range(c.layers):
        p = f"model.layers.{i}"
        x = rms(h, w[f"{p}.input_layernorm.weight"])
        q = heads(x @ w[f"{p}.self_attn.q_proj.weight"], c.heads)
        k = heads(x @ w[f"{p}.self_attn.k_proj.weight"], c.kv_heads)
        v = heads(x @ w[f"{p}.self_attn.v_proj.weight"], c.kv_heads)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if past is not None:
            k = np.concatenate([past[i][0], k], axis=2)
            v = np.concatenate([past[i][1], v], axis=2)
        presents.append((k, v))
        k, v = np.repeat(k, n_rep, axis=1), np.repeat(v, n_rep, axis=1)
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + mask
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, c.hidden)
        h = h + ctx @ w[f"{p}.self_attn.o_proj.weight"]
        x = rms(h, w[f"{p}.post_attention_layernorm.weight"])
        gate = x @ w[f"{p}.mlp.gate_proj.weight"]
        act = gate / (1.0 + np.exp(-gate)) * (x @ w[f"{p}.mlp.up_proj.weight"])
        h = h + act @ w[f"{p}.mlp.down_proj.weight"]
    logits = rms(h, w["model.norm.weight"]) @ w["lm_head.weight"]
    return logits, presents


# ---------------------------------------------------------------------------------------------
# Helpers


def weights_of(model):
    return {v.name: v.const_value.numpy() for v in model.graph.initializers.values()}


def session(model_or_path):
    source = model_or_path
    if isinstance(model_or_path, ir.Model):
        source = ir.to_proto(model_or_path).SerializeToString()
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"])


def run(sess, config, input_ids, attention_mask, position_ids, past=None):
    feeds = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
    if config.kv_cache:
        if past is None:
            empty = np.zeros((input_ids.shape[0], config.kv_heads, 0, config.head_dim), np.float32)
            past = [(empty, empty)] * config.layers
        for i, (k, v) in enumerate(past):
            feeds[f"past_key_values.{i}.key"] = k
            feeds[f"past_key_values.{i}.value"] = v
    out = sess.run(None, feeds)
    presents = [(out[1 + 2 * i], out[2 + 2 * i]) for i in range(config.layers)] if past else []
    return out[0], presents


def batch(seq=7, vocab=TINY.vocab, pad=3, seed=1):
    """Two rows: one full, one left-padded by ``pad``; HF-style position ids."""
    rng = np.random.default_rng(seed)
    input_ids = rng.integers(0, vocab, size=(2, seq), dtype=np.int64)
    mask = np.ones((2, seq), dtype=np.int64)
    mask[1, :pad] = 0
    positions = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
    return input_ids, mask, positions


@pytest.fixture(scope="module")
def tiny_sessions():
    models = {kv: llama.build_llama(dataclasses.replace(TINY, kv_cache=kv)) for kv in (0, 1)}
    return {kv: (m, session(m)) for kv, m in models.items()}


# ---------------------------------------------------------------------------------------------
# Numerics


@pytest.mark.parametrize("kv_cache", [False, True])
def test_logits_match_numpy_reference(tiny_sessions, kv_cache):
    config = TINY_KV if kv_cache else TINY
    model, sess = tiny_sessions[int(kv_cache)]
    ids, mask, pos = batch()
    logits, presents = run(sess, config, ids, mask, pos)
    expected, expected_presents = reference(config, weights_of(model), ids, mask, pos)
    assert logits.dtype == np.float32 and logits.shape == (2, 7, config.vocab)
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0)
    for (k, v), (ek, ev) in zip(presents, expected_presents, strict=False):
        np.testing.assert_allclose(k, ek, atol=1e-5, rtol=0)
        np.testing.assert_allclose(v, ev, atol=1e-5, rtol=0)
    assert np.abs(expected).max() > 1e-2  # not a trivially small output


def test_kv_cache_prefill_then_decode_matches_full_sequence(tiny_sessions):
    full_model, full_sess = tiny_sessions[0]
    _, kv_sess = tiny_sessions[1]
    ids, mask, pos = batch(seq=9)
    full, _ = run(full_sess, TINY, ids, mask, pos)

    # Prefill 7 tokens, then decode 2 steps one token at a time with the returned presents.
    logits, past = run(kv_sess, TINY_KV, ids[:, :7], mask[:, :7], pos[:, :7])
    # Padding queries attend to nothing (uniform over all keys, which differ): skip them.
    real = mask[:, :7] == 1
    np.testing.assert_allclose(logits[real], full[:, :7][real], atol=1e-5, rtol=0)
    for t in (7, 8):
        assert past[0][0].shape == (2, TINY.kv_heads, t, TINY.head_dim)
        logits, past = run(kv_sess, TINY_KV, ids[:, t : t + 1], mask[:, : t + 1],
                           pos[:, t : t + 1], past)  # fmt: skip
        assert logits.shape == (2, 1, TINY.vocab)
        np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-5, rtol=0)

    # The decode step with a past also matches the reference fed the same past.
    ref_past = [(k.astype(np.float64), v.astype(np.float64)) for k, v in past]
    ref, _ = reference(TINY_KV, weights_of(full_model), ids[:, 8:9] * 0 + 5,
                       np.ones((2, 10), np.int64), np.full((2, 1), 9), ref_past)  # fmt: skip
    got, _ = run(kv_sess, TINY_KV, ids[:, 8:9] * 0 + 5, np.ones((2, 10), np.int64),
                 np.full((2, 1), 9), past)  # fmt: skip
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)


def test_float16_variant_runs_close_to_float32():
    config = dataclasses.replace(TINY, dtype=ir.DataType.FLOAT16)
    model = llama.build_llama(config)
    assert all(v.dtype == ir.DataType.FLOAT16 for v in model.graph.initializers.values()
               if v.name.startswith(("model.layers", "lm_head")))  # fmt: skip
    ids, mask, pos = batch()
    logits, _ = run(session(model), config, ids, mask, pos)
    expected, _ = reference(TINY, weights_of(llama.build_llama(TINY)), ids, mask, pos)
    assert logits.dtype == np.float32
    np.testing.assert_allclose(logits, expected, atol=2e-2, rtol=0)


# ---------------------------------------------------------------------------------------------
# Graph structure


@pytest.mark.parametrize("kv_cache", [False, True])
@pytest.mark.parametrize("value_info", [True, False])
def test_check_model_full_check(kv_cache, value_info):
    model = llama.build_llama(dataclasses.replace(TINY, kv_cache=kv_cache), value_info=value_info)
    onnx.checker.check_model(ir.to_proto(model), full_check=True)


def test_inputs_outputs_and_symbolic_dims():
    model = llama.build_llama(TINY_KV)
    g = model.graph
    shapes = {v.name: [str(d) for d in v.shape] for v in (*g.inputs, *g.outputs)}
    kv, d = str(TINY.kv_heads), str(TINY.head_dim)
    assert shapes["input_ids"] == ["batch", "seq"]
    assert shapes["attention_mask"] == ["batch", "total_seq"]
    assert shapes["position_ids"] == ["batch", "seq"]
    assert shapes["logits"] == ["batch", "seq", str(TINY.vocab)]
    assert [v.name for v in g.inputs][3:5] == ["past_key_values.0.key", "past_key_values.0.value"]
    assert [v.name for v in g.outputs][:3] == ["logits", "present.0.key", "present.0.value"]
    assert shapes["past_key_values.1.value"] == ["batch", kv, "past_seq", d]
    assert shapes["present.1.value"] == ["batch", kv, "total_seq", d]
    assert len(g.inputs) == 3 + 2 * TINY.layers and len(g.outputs) == 1 + 2 * TINY.layers
    no_cache = llama.build_llama(TINY).graph
    assert [v.name for v in no_cache.inputs] == ["input_ids", "attention_mask", "position_ids"]
    assert [v.name for v in no_cache.outputs] == ["logits"]


@pytest.mark.parametrize("value_info", [True, False])
def test_value_info(value_info):
    model = llama.build_llama(TINY_KV, value_info=value_info)
    graph_outputs = set(model.graph.outputs)
    for node in model.graph:
        for out in node.outputs:
            typed = out.dtype is not None and out.shape is not None
            assert typed == (value_info or out in graph_outputs), out
    for v in (*model.graph.inputs, *model.graph.initializers.values()):
        assert v.dtype is not None and v.shape is not None
    if value_info:
        dims = {str(d) for n in model.graph for o in n.outputs for d in o.shape}
        assert {"batch", "seq", "total_seq"} <= dims


def test_weights_depend_on_seed_and_name_only():
    small = weights_of(llama.build_llama(dataclasses.replace(TINY, layers=1)))
    big = weights_of(llama.build_llama(dataclasses.replace(TINY, layers=3)))
    other = weights_of(llama.build_llama(dataclasses.replace(TINY, seed=1)))
    name = "model.layers.0.self_attn.q_proj.weight"
    np.testing.assert_array_equal(small[name], big[name])
    np.testing.assert_array_equal(small["lm_head.weight"], big["lm_head.weight"])
    assert not np.array_equal(small[name], other[name])
    assert not np.array_equal(big[name], big["model.layers.1.self_attn.q_proj.weight"])
    assert abs(big["model.embed_tokens.weight"].std() - 0.02) < 1e-3
    np.testing.assert_array_equal(big["model.layers.2.post_attention_layernorm.weight"], 1.0)
    assert big[name].shape == (TINY.hidden, TINY.hidden)  # [in, out]
    assert big["model.layers.0.self_attn.k_proj.weight"].shape == (64, 2 * 16)
    assert big["model.layers.0.mlp.down_proj.weight"].shape == (TINY.intermediate, TINY.hidden)


def test_num_bytes_is_an_int():
    # found by mypy: DataType.itemsize is a float, so num_bytes was 443648.0
    for config in (TINY, dataclasses.replace(TINY, dtype=ir.DataType.FLOAT16)):
        nbytes = config.num_bytes
        assert type(nbytes) is int
        tables = 2 * config.max_positions * config.head_dim
        assert nbytes == (config.num_parameters + tables) * ir.DataType(config.dtype).bitwidth // 8


def test_config_presets_and_validation():
    assert llama.TINYLLAMA_1_1B.num_parameters == 1_100_048_384  # as HF counts TinyLlama-1.1B
    assert 4.3e9 < llama.TINYLLAMA_1_1B.num_bytes < 4.5e9
    assert llama.PRESETS["tiny"] is TINY
    with pytest.raises(ValueError, match="kv_heads"):
        llama.LlamaConfig(heads=4, kv_heads=3)
    with pytest.raises(ValueError, match="heads"):
        llama.LlamaConfig(hidden=65)
    with pytest.raises(ValueError, match="dtype"):
        llama.LlamaConfig(dtype=ir.DataType.INT8)


# ---------------------------------------------------------------------------------------------
# Streaming to external data


@pytest.mark.parametrize("kv_cache", [False, True])
def test_write_llama_external_data_loads_lazily_and_runs(tmp_path, kv_cache):
    config = dataclasses.replace(TINY, kv_cache=kv_cache, layers=3)
    path = llama.write_llama(tmp_path / "model.onnx", config, value_info=not kv_cache)
    data = tmp_path / "model.onnx.data"
    assert path == tmp_path / "model.onnx" and path.is_file() and data.is_file()
    assert data.stat().st_size >= config.num_bytes
    assert path.stat().st_size < 64 * 1024  # only references and small constants

    loaded = ir.load(path)
    external = {
        v.name: v.const_value
        for v in loaded.graph.initializers.values()
        if isinstance(v.const_value, ir.ExternalTensor)
    }
    assert "lm_head.weight" in external and "model.layers.2.mlp.up_proj.weight" in external
    assert len(external) == 5 + 9 * config.layers  # embed, lm_head, norm, cos, sin + layers
    for tensor in external.values():
        assert tensor.location == "model.onnx.data" and tensor.offset % 4096 == 0
        assert tensor.length == tensor.nbytes
    in_memory = weights_of(llama.build_llama(config))
    for name, tensor in external.items():
        np.testing.assert_array_equal(tensor.numpy(), in_memory[name])

    ids, mask, pos = batch()
    logits, _ = run(session(str(path)), config, ids, mask, pos)
    expected, _ = reference(config, in_memory, ids, mask, pos)
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0)
