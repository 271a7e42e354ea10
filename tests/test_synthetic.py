"""llm/_synthetic.py: random-weight Llama GGUF files of named shapes, and ``load("synthetic:...")``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import trio

from xinfer_async import llm
from xinfer_async.llm import _synthetic
from xinfer_async.llm._gguf import load_gguf
from xinfer_async.llm._synthetic import SHAPES, llama_tensor_shapes, synthetic_model, write_synthetic_gguf


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XINFER_CACHE_DIR", str(tmp_path / "cache"))


def _params(shape: str) -> int:
    return sum(math.prod(s) for s in llama_tensor_shapes(SHAPES[shape]).values())


def test_named_shapes_have_the_models_parameter_counts():
    # SmolLM2-135M: 134.5 M parameters; Llama-3.2-1B: 1.236 G (both with tied embeddings)
    assert _params("smollm2-135m") == 134_515_008
    assert _params("llama-3.2-1b") == 1_235_814_400
    c = SHAPES["llama-3.2-1b"]
    assert (c.n_layer, c.dim, c.n_head, c.n_kv_head, c.head_dim, c.ffn_dim, c.vocab_size, c.rope_theta) == \
        (16, 2048, 32, 8, 64, 8192, 128256, 500000.0)


@pytest.mark.parametrize("dtype", ["q4_1", "q8_0", "f16"])
def test_tiny_file_loads_with_its_shape_and_scaled_weights(tmp_path, dtype):
    p = write_synthetic_gguf(tmp_path / "t.gguf", "tiny", dtype, seed=3)
    m = load_gguf(p)
    c = SHAPES["tiny"]
    assert m.config.n_layer == c.n_layer and m.config.dim == c.dim and m.config.n_kv_head == c.n_kv_head
    assert m.config.tied_embeddings and m.config.rms_eps == pytest.approx(1e-5)
    assert m.tensors["blk.0.attn_q.weight"].dtype == dtype
    assert m.tensors["token_embd.weight"].dtype == ("f16" if dtype == "f16" else "q8_0")
    w = m.tensors["blk.1.ffn_down.weight"].dequantize()
    assert w.shape == (c.dim, c.ffn_dim) and abs(w.std() - 0.02) < 0.003 and abs(w.mean()) < 0.002
    norm = m.tensors["blk.0.attn_norm.weight"].dequantize()
    assert abs(norm.mean() - 1.0) < 0.05
    assert m.metadata["tokenizer.ggml.bos_token_id"] == 256 and "tokenizer.ggml.eos_token_id" not in m.metadata


def test_file_depends_on_seed_only_not_on_threads_or_chunking(tmp_path, monkeypatch):
    monkeypatch.setattr(_synthetic, "_CHUNK_ELEMS", 64 * 40)  # several chunks a matrix
    a = write_synthetic_gguf(tmp_path / "a.gguf", "tiny", seed=1, threads=1).read_bytes()
    b = write_synthetic_gguf(tmp_path / "b.gguf", "tiny", seed=1, threads=3).read_bytes()
    c = write_synthetic_gguf(tmp_path / "c.gguf", "tiny", seed=2).read_bytes()
    assert a == b and a != c


def test_chunked_quantization_is_bit_exact_with_whole_tensor_quantization(rng):
    import gguf

    x = (0.02 * rng.standard_normal((96, 128))).astype(np.float32)
    for dtype in ("q4_1", "q8_0"):
        whole, qt = _synthetic.encode_tensor(x, dtype)
        parts = np.concatenate([_synthetic.encode_tensor(x[i:i + 40], dtype)[0] for i in range(0, 96, 40)])
        assert np.array_equal(whole, parts)
        back = gguf.quants.dequantize(whole, qt)
        assert back.shape == x.shape and np.abs(back - x).max() < 0.01


def test_tokenizer_encodes_any_text_and_every_token_decodes():
    path = synthetic_model("tiny")
    m = load_gguf(path)
    tok = llm.Tokenizer.from_gguf(m.metadata)
    text = "hello, wörld 42!"
    ids = tok.encode(text)
    assert tok.decode(ids) == text and len(ids) < len(text.encode())  # the letter pairs merge
    assert all(tok.decode([i]) for i in range(300, 512))  # fillers: printable text
    assert path.name == "tiny-q4_1-seed0-v1.gguf"


def test_synthetic_model_is_cached_and_validated(tmp_path):
    p = synthetic_model("synthetic:tiny:q8_0", seed=5)
    assert p.name == "tiny-q8_0-seed5-v1.gguf" and p.parent.name == "synthetic"
    mtime = p.stat().st_mtime_ns
    assert synthetic_model("synthetic:tiny:q8_0", seed=5) == p and p.stat().st_mtime_ns == mtime
    assert not list(p.parent.glob("*.part"))
    with pytest.raises(ValueError, match=r"^unknown synthetic shape 'nope'; known shapes: smollm2-135m, llama-3.2-1b, tiny$"):
        llm.resolve_model("synthetic:nope")
    with pytest.raises(ValueError, match=r"^dtype must be one of q4_1, q8_0, f16, got 'q5_0'$"):
        synthetic_model("synthetic:tiny:q5_0")


async def test_load_synthetic_generates_to_max_tokens_with_finite_logits():
    model = await llm.load("synthetic:tiny", device="cpu", slots=2, ctx=64)
    try:
        assert model.config.vocab_size == 512 and model.stop_ids == set()
        results = []

        async def one(prompt):
            results.append(await model.complete(prompt, max_tokens=12))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "hello world")
            nursery.start_soon(one, [5, 6, 7, 300, 301])
        assert [(r.finish_reason, len(r.token_ids)) for r in results] == [("length", 12)] * 2
        logits = await model.logits([1, 2, 3, 400])
        assert logits.shape == (4, 512) and np.isfinite(logits).all() and logits.std() > 0
    finally:
        await model.aclose()
