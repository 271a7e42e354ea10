"""Tests of xinfer_async/llm/_gguf.py: loading, dequantization, and every GGUFError path."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from _llm_fixtures import TINY, require_model, write_tiny_gguf
from xinfer_async.hal._errors import GGUFError
from xinfer_async.llm._gguf import LlamaConfig, load_gguf


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.mark.parametrize("qtype,dtype,tol", [
    ("F32", "f32", 0.0), ("F16", "f16", 1e-3), ("Q8_0", "q8_0", 0.01), ("Q4_0", "q4_0", 0.12),
    ("Q4_1", "q4_1", 0.08),
])
def test_load_tiny_each_type(tmp_path, rng, qtype, dtype, tol):
    path = tmp_path / "tiny.gguf"
    written = write_tiny_gguf(path, rng=rng, qtype=qtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = load_gguf(path)
    c = m.config
    assert c == LlamaConfig(n_layer=2, dim=64, n_head=4, n_kv_head=2, head_dim=16, ffn_dim=96,
                            vocab_size=40, rope_theta=10000.0, rms_eps=pytest.approx(1e-5),
                            context_length=128, tied_embeddings=True)
    q = m.tensors["blk.0.attn_q.weight"]
    assert q.dtype == dtype and q.shape == (64, 64)
    k = m.tensors["blk.1.attn_k.weight"]
    assert k.shape == (32, 64)
    assert m.tensors["blk.0.ffn_down.weight"].shape == (64, 96)
    assert m.tensors["output_norm.weight"].shape == (64,) and m.tensors["output_norm.weight"].dtype == "f32"
    for name, x in written.items():
        t = m.tensors[name]
        d = t.dequantize()
        assert d.dtype == np.float32 and d.shape == x.shape == t.shape
        err = np.abs(d - x).max()
        assert err <= tol * max(1.0, np.abs(x).max()), (name, err)
        assert t.nbytes == t.data.nbytes
    # data is a view of the mapped file, not a copy
    assert isinstance(q.data.base, np.ndarray) or isinstance(q.data, np.memmap)
    assert m.metadata["general.architecture"] == "llama"
    assert m.metadata["tokenizer.ggml.tokens"][:2] == ["A", "B"]


def test_missing_file(tmp_path):
    p = tmp_path / "nope.gguf"
    with pytest.raises(GGUFError, match=f"^{re.escape(str(p))}: no such file$"):
        load_gguf(p)


def test_bad_magic(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"GGML" + bytes(100))
    with pytest.raises(GGUFError, match=re.escape("not a GGUF file (magic b'GGML', expected b'GGUF')")):
        load_gguf(p)


def test_empty_file(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"")
    with pytest.raises(GGUFError, match=re.escape("not a GGUF file (magic b'', expected b'GGUF')")):
        load_gguf(p)


def test_truncated_names_first_tensor_that_does_not_fit(tmp_path, rng):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng)
    import gguf

    r = gguf.GGUFReader(p)
    # cut inside the data of the 5th tensor: the message must name it
    victim = r.tensors[4]
    cut = int(victim.data_offset) + int(victim.n_bytes) // 2
    del r
    data = p.read_bytes()
    t = tmp_path / "trunc.gguf"
    t.write_bytes(data[:cut])
    with pytest.raises(GGUFError, match=re.escape(f"truncated file: tensor {victim.name!r} needs bytes")):
        load_gguf(t)


def test_truncated_header(tmp_path, rng):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng)
    t = tmp_path / "trunc.gguf"
    t.write_bytes(p.read_bytes()[:200])
    with pytest.raises(GGUFError, match=re.escape("truncated file or corrupt tensor count: 20 entries need at least "
                                                  "480 bytes but the file has 200")):
        load_gguf(t)
    t.write_bytes(p.read_bytes()[:1000])  # cut inside the metadata
    with pytest.raises(GGUFError, match=r"truncated file: .* needs \d+ bytes at offset \d+ but the file has 1000 bytes"):
        load_gguf(t)


def test_unsupported_tensor_type(tmp_path, rng):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng, raw_types={"blk.1.ffn_up.weight": "Q8_1"})
    with pytest.raises(GGUFError, match=re.escape(
            "unsupported: 1 tensor of type Q8_1 (e.g. 'blk.1.ffn_up.weight'); supported tensor types: F32, F16, "
            "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, BF16")):
        load_gguf(p)


def test_everything_unsupported_is_listed_at_once(tmp_path, rng):
    """Architecture, tokenizer model, each unsupported tensor type with its count, a quantized norm:
    one message, before the config (whose checks would stop at the first problem) or any weight."""
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng, arch="gemma2", override={"tokenizer.ggml.model": ("string", "bert"),
                                                         "gemma2.rope.scaling.type": ("string", "yarn")},
                    raw_types={"blk.0.attn_q.weight": "Q8_1", "blk.1.attn_q.weight": "Q8_1",
                               "blk.0.ffn_up.weight": "MXFP4", "blk.0.attn_norm.weight": "Q8_0"})
    with pytest.raises(GGUFError) as e:
        load_gguf(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: unsupported: architecture 'gemma2' (supported: llama, qwen2, qwen3, gemma3, phi3); "
                          "rope scaling 'yarn' (supported: none); tokenizer.ggml.model 'bert' "
                          "(supported: gpt2, llama); 1 tensor of type MXFP4 (e.g. 'blk.0.ffn_up.weight'); 2 tensors of type "
                          "Q8_1 (e.g. 'blk.0.attn_q.weight'); 1 vector of type Q8_0 (e.g. 'blk.0.attn_norm.weight'; "
                          "a norm must be F32 or F16); supported tensor types: F32, F16, "), msg


def test_unknown_tensor_type_id(tmp_path, rng):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng)
    import gguf

    r = gguf.GGUFReader(p)
    t = r.tensors[3]
    n_dims = len(t.shape)
    type_at = t.field.offset + 8 + len(t.name.encode()) + 4 + 8 * n_dims
    name = t.name
    del r, t
    data = bytearray(p.read_bytes())
    assert int.from_bytes(data[type_at:type_at + 4], "little") in (0, 3, 8)  # F32 / Q4_1 / Q8_0
    data[type_at:type_at + 4] = (99).to_bytes(4, "little")
    p.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match=re.escape(f"tensor {name!r} has unknown ggml type id 99")):
        load_gguf(p)


@pytest.mark.parametrize("key", ["llama.block_count", "llama.embedding_length",
                                 "llama.attention.head_count", "llama.feed_forward_length",
                                 "tokenizer.ggml.tokens"])
def test_missing_required_key(tmp_path, rng, key):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng, drop_keys=(key,))
    with pytest.raises(GGUFError, match=re.escape(f"missing required metadata key {key!r}")):
        load_gguf(p)


@pytest.mark.parametrize("key,default,field", [
    ("llama.rope.freq_base", 10000.0, "rope_theta"),
    ("llama.attention.layer_norm_rms_epsilon", 1e-5, "rms_eps"),
    ("llama.attention.head_count_kv", 4, "n_kv_head"),
    ("llama.context_length", 2048, "context_length"),
])
def test_missing_optional_key_warns_and_defaults(tmp_path, rng, key, default, field):
    p = tmp_path / "tiny.gguf"
    shapes = None
    if field == "n_kv_head":  # default = head_count, so k/v must be full width
        shapes = {f"blk.{i}.attn_{x}.weight": (64, 64) for i in range(2) for x in "kv"}
    write_tiny_gguf(p, rng=rng, drop_keys=(key,), shapes=shapes)
    with pytest.warns(UserWarning, match=re.escape(f"metadata key {key!r} missing, using default {default!r}")):
        m = load_gguf(p)
    assert getattr(m.config, field) == default


def test_other_architecture(tmp_path, rng):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng, arch="gpt2")
    with pytest.raises(GGUFError, match=re.escape("unsupported: architecture 'gpt2' (supported: llama, qwen2, qwen3, gemma3, phi3)")):
        load_gguf(p)


def test_wrong_attn_q_shape(tmp_path, rng):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng, shapes={"blk.1.attn_q.weight": (32, 64)})
    with pytest.raises(GGUFError, match=re.escape(
            "tensor 'blk.1.attn_q.weight' has shape (32, 64), expected (64, 64)")):
        load_gguf(p)


def test_missing_block_tensor(tmp_path, rng):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng, drop_tensors=("blk.1.ffn_gate.weight",))
    with pytest.raises(GGUFError, match=re.escape("missing tensor 'blk.1.ffn_gate.weight'")):
        load_gguf(p)


def test_dim_not_divisible_by_heads(tmp_path, rng):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng, override={"llama.attention.head_count": ("uint32", 5)})
    with pytest.raises(GGUFError, match=re.escape("embedding_length 64 is not divisible by head_count 5")):
        load_gguf(p)


def test_untied_output(tmp_path, rng):
    p = tmp_path / "tiny.gguf"
    write_tiny_gguf(p, rng=rng, tied=False)
    m = load_gguf(p)
    assert m.config.tied_embeddings is False
    assert m.tensors["output.weight"].shape == (TINY["vocab"], TINY["dim"])


@pytest.mark.model
def test_smollm2():
    m = load_gguf(require_model())
    c = m.config
    assert c == LlamaConfig(n_layer=30, dim=576, n_head=9, n_kv_head=3, head_dim=64, ffn_dim=1536,
                            vocab_size=49152, rope_theta=100000.0, rms_eps=pytest.approx(1e-5),
                            context_length=8192, tied_embeddings=True)
    e = m.tensors["token_embd.weight"]
    assert (e.dtype, e.shape, e.data.shape, e.data.dtype) == ("q8_0", (49152, 576), (49152, 612), np.uint8)
    q = m.tensors["blk.29.attn_q.weight"]
    assert (q.dtype, q.shape, q.nbytes) == ("q4_1", (576, 576), 207360)
    assert m.tensors["blk.0.attn_k.weight"].shape == (192, 576)
    assert m.tensors["blk.0.ffn_down.weight"].shape == (576, 1536)
    assert m.tensors["output_norm.weight"].dtype == "f32"
    assert "output.weight" not in m.tensors
    assert len(m.tensors) == 272
    d = q.dequantize()
    assert d.shape == (576, 576) and d.dtype == np.float32 and np.isfinite(d).all() and d.std() > 0
    md = m.metadata
    assert md["tokenizer.ggml.pre"] == "smollm" and md["tokenizer.ggml.bos_token_id"] == 1
    assert md["tokenizer.ggml.add_bos_token"] is False
    assert len(md["tokenizer.ggml.tokens"]) == 49152 and len(md["tokenizer.ggml.merges"]) == 48900
    assert md["tokenizer.ggml.token_type"][:3] == [3, 3, 3]
    assert md["tokenizer.chat_template"].startswith("{% for message in messages %}")
