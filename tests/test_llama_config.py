"""Tests of xinfer_async/llm/_llama_config.py: every hyperparameter, tensor and tokenizer check of
``validate_llama`` (through ``load_gguf``), message pinned; and that ``llm.load`` raises them before any
weight reaches a device."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from _llm_fixtures import write_tiny_gguf
from xinfer_async import llm
from xinfer_async.hal._errors import GGUFError
from xinfer_async.llm._gguf import load_gguf
from xinfer_async.llm._gguf_reader import read_gguf


@pytest.fixture
def rng():
    return np.random.default_rng()


def _fails(tmp_path, rng, msg, **kw):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng, **kw)
    with pytest.raises(GGUFError, match=re.escape(msg)):
        load_gguf(p)
    return p


EPS = "llama.attention.layer_norm_rms_epsilon"
THETA = "llama.rope.freq_base"


@pytest.mark.parametrize("key", [EPS, THETA])
@pytest.mark.parametrize("kind,value", [("float32", math.nan), ("float32", math.inf), ("float32", -1e-5),
                                        ("float32", 0.0), ("float64", 1e-50), ("float64", 1e39)])
def test_bad_float_hyperparameters(tmp_path, rng, key, kind, value):
    _fails(tmp_path, rng, f"metadata key {key!r} = {float(np.float32(value)) if kind == 'float32' else value!r} "
                          f"must be finite and > 0 (in float32)", override={key: (kind, value)})


@pytest.mark.parametrize("key,kind,value,msg", [
    ("llama.embedding_length", "string", "64", "must be an integer, got string '64'"),
    ("llama.embedding_length", "array", [64], "must be an integer, got array[int32] 1 elements"),
    ("llama.block_count", "float32", 2.0, "must be an integer, got float32 2.0"),
    ("llama.block_count", "bool", True, "must be an integer, got bool True"),
    (EPS, "string", "1e-5", "must be a number, got string '1e-5'"),
])
def test_numeric_key_of_another_type(tmp_path, rng, key, kind, value, msg):
    _fails(tmp_path, rng, f"metadata key {key!r} {msg}", override={key: (kind, value)})


@pytest.mark.parametrize("key,value", [("llama.block_count", 0), ("llama.attention.head_count", 2**31),
                                       ("llama.context_length", 2**40), ("llama.feed_forward_length", -1)])
def test_sizes_out_of_range(tmp_path, rng, key, value):
    kind = "int64" if value < 0 or value >= 2**32 else "uint32"
    _fails(tmp_path, rng, f"metadata key {key!r} = {value} is out of range [1, 2147483647]",
           override={key: (kind, value)})


def test_block_count_bounded_by_tensors_before_any_loop(tmp_path, rng):
    _fails(tmp_path, rng, "llama.block_count = 2147483647 but the file has only 20 tensors (9 per block)",
           override={"llama.block_count": ("uint32", 2**31 - 1)})


def test_block_count_below_the_tensors_present(tmp_path, rng):
    _fails(tmp_path, rng, "unexpected tensor 'blk.1.attn_norm.weight' (not part of a llama of block_count 1)",
           override={"llama.block_count": ("uint32", 1)})


def test_odd_head_dim(tmp_path, rng):
    _fails(tmp_path, rng, "head dim 1 (embedding_length 64 / head_count 64) must be even for rope",
           override={"llama.attention.head_count": ("uint32", 64)})


def test_kv_heads_must_divide(tmp_path, rng):
    _fails(tmp_path, rng, "head_count 4 is not divisible by head_count_kv 3",
           override={"llama.attention.head_count_kv": ("uint32", 3)})


@pytest.mark.parametrize("key", ["bos", "eos", "padding"])
@pytest.mark.parametrize("value", [40, 2**32 - 1])
def test_token_id_outside_vocabulary(tmp_path, rng, key, value):
    k = f"tokenizer.ggml.{key}_token_id"
    _fails(tmp_path, rng, f"metadata key {k!r} = {value} is out of range [0, 39]", override={k: ("uint32", value)})


def test_token_arrays_must_match_the_vocabulary(tmp_path, rng):
    _fails(tmp_path, rng, "metadata key 'tokenizer.ggml.token_type' has 39 entries for 40 tokens",
           override={"tokenizer.ggml.token_type": ("array", [1] * 39)})
    _fails(tmp_path, rng, "metadata key 'tokenizer.ggml.scores' must be an array of floats, got array[string]",
           override={"tokenizer.ggml.scores": ("array", ["0"] * 40)})
    _fails(tmp_path, rng, "metadata key 'tokenizer.ggml.merges' must be an array of strings, got array[int32]",
           override={"tokenizer.ggml.merges": ("array", [1, 2])})
    _fails(tmp_path, rng, "metadata key 'tokenizer.ggml.add_bos_token' must be a bool, got uint32 1",
           override={"tokenizer.ggml.add_bos_token": ("uint32", 1)})


def test_unexpected_and_unsupported_tensors(tmp_path, rng):
    _fails(tmp_path, rng, "unexpected tensor 'blk.0.attn_qkv.weight' (not part of a llama of block_count 2)",
           shapes={"blk.0.attn_qkv.weight": (32,)})
    # a llama may carry Llama 3's rope_freqs, of head_dim / 2 factors
    _fails(tmp_path, rng, "tensor 'rope_freqs.weight' has shape (32,), expected (8,)", shapes={"rope_freqs.weight": (32,)})
    _fails(tmp_path, rng, "tensor 'blk.0.ffn_norm.weight' has type Q8_0, a norm or bias must be F32 or F16",
           raw_types={"blk.0.ffn_norm.weight": "Q8_0"}, shapes={"blk.0.ffn_norm.weight": (1, 64)})


def _patch(path, name, index_bytes: int, value: bytes):
    f = read_gguf(path)
    t = next(t for t in f.tensors if t.name == name)
    at = t.offset + index_bytes
    del f, t
    data = bytearray(path.read_bytes())
    data[at:at + len(value)] = value
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name,at,value,msg", [
    ("output_norm.weight", 4 * 7, np.float32(np.nan).tobytes(), "tensor 'output_norm.weight' holds NaN or inf"),
    ("blk.1.attn_norm.weight", 0, np.float32(-np.inf).tobytes(), "tensor 'blk.1.attn_norm.weight' holds NaN or inf"),
    ("blk.0.attn_q.weight", 20 * 5, np.float16(np.inf).tobytes(),  # q4_1 block 5: its d
     "tensor 'blk.0.attn_q.weight' holds NaN or inf in its block scales"),
    ("blk.1.ffn_up.weight", 20 * 3 + 2, np.float16(np.nan).tobytes(),  # q4_1 block 3: its m
     "tensor 'blk.1.ffn_up.weight' holds NaN or inf in its block scales"),
    ("token_embd.weight", 34 * 11, np.float16(np.nan).tobytes(),  # q8_0 block 11: its d
     "tensor 'token_embd.weight' holds NaN or inf in its block scales"),
])
def test_non_finite_weights(tmp_path, rng, name, at, value, msg):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng)
    load_gguf(p)
    _patch(p, name, at, value)
    with pytest.raises(GGUFError, match=re.escape(msg)):
        load_gguf(p)


def test_non_finite_f16_weight(tmp_path, rng):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng, qtype="F16")
    _patch(p, "blk.0.ffn_down.weight", 2 * 100, np.float16(np.inf).tobytes())
    with pytest.raises(GGUFError, match=re.escape("tensor 'blk.0.ffn_down.weight' holds NaN or inf")):
        load_gguf(p)


def test_tokenizers_failure_is_a_gguf_error():
    from xinfer_async.llm._tokenizer import Tokenizer

    with pytest.raises(GGUFError, match=r"^tokenizer.ggml.tokens/merges do not make a BPE model: "):
        Tokenizer(["a", "b", "ab"], ["a c"])


class _NoDevice:
    """A device that fails the test if anything reaches it."""

    def __getattr__(self, name):
        raise AssertionError(f"the device was used ({name}) before the file was validated")


async def test_load_raises_before_the_device(tmp_path, monkeypatch):
    from xinfer_async.llm import _load
    from xinfer_async.llm._synthetic import write_synthetic_gguf

    p = write_synthetic_gguf(tmp_path / "tiny.gguf", "tiny", "q8_0", threads=1)
    # a merge of unknown tokens: only the tokenizers library sees it; still a GGUFError, before the device
    data = p.read_bytes()
    key = b"tokenizer.ggml.merges"
    i = data.index(key) + len(key) + 4 + 4 + 8 + 8  # type, element type, count, first length
    assert data[i:i + 3] == b"a a"
    p.write_bytes(data[:i] + b"a \x01" + data[i + 3:])
    opened = []
    monkeypatch.setattr(_load, "open_device", lambda d: opened.append(d) or _NoDevice())
    with pytest.raises(GGUFError, match="tokenizer.ggml.tokens/merges do not make a BPE model"):
        await llm.load(p, device="cpu")
    assert opened == []
