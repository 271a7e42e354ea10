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
    with pytest.raises(ValueError, match=r"^dtype must be one of q4_1, q8_0, f16, q4_0, q5_0, q5_1, q4_k, q5_k, q6_k, "
                                         r"iq4_nl, bf16, q4_k_m, q5_k_m, got 'q3_k'$"):
        synthetic_model("synthetic:tiny:q3_k")


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


#: 8 layers (use_more_bits: 0, 3, 6, 7), dim 256 (a multiple of 256), ffn 384 (not one: ffn_down
#: falls back), untied output
KMIX = _synthetic.LlamaConfig(n_layer=8, dim=256, n_head=4, n_kv_head=2, head_dim=64, ffn_dim=384, vocab_size=300,
                              rope_theta=10000.0, rms_eps=1e-5, context_length=64, tied_embeddings=False)


def test_use_more_bits_is_llama_cpps():
    # llama.cpp llama-quant.cpp: i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2
    assert [i for i in range(8) if _synthetic.use_more_bits(i, 8)] == [0, 3, 6, 7]
    assert [i for i in range(30) if _synthetic.use_more_bits(i, 30)] == [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27,
                                                                       28, 29]


@pytest.mark.parametrize("mix,base,fb", [("q4_k_m", "q4_k", "q5_0"), ("q5_k_m", "q5_k", "q5_1")])
def test_mix_types_follow_llama_cpp(mix, base, fb):
    t = _synthetic.tensor_types(KMIX, mix)
    assert t["output.weight"] == "q6_k" and t["token_embd.weight"] == base and t["output_norm.weight"] == "f32"
    for i in range(8):
        more = i in (0, 3, 6, 7)
        assert t[f"blk.{i}.attn_v.weight"] == ("q6_k" if more else base), i
        assert t[f"blk.{i}.ffn_down.weight"] == ("q8_0" if more else fb), i  # K = 384: the fallbacks
        assert t[f"blk.{i}.attn_q.weight"] == t[f"blk.{i}.ffn_gate.weight"] == base
    # dim not a multiple of 256 (SmolLM2, tied): the output/embedding is q8_0, everything with K = 576 falls back
    s = _synthetic.tensor_types(SHAPES["smollm2-135m"], mix)
    assert s["token_embd.weight"] == "q8_0" and s["blk.1.attn_q.weight"] == fb and s["blk.0.attn_v.weight"] == "q8_0"
    assert s["blk.0.ffn_down.weight"] == "q6_k" and s["blk.3.ffn_down.weight"] == base  # K = 1536 = 6 x 256


@pytest.mark.parametrize("dt", ["q4_k", "q5_k", "q6_k", "iq4_nl", "q5_0", "q5_1", "bf16"])
def test_new_types_encode_chunked_and_decode(rng, dt):
    import gguf

    x = (0.02 * rng.standard_normal((24, 512))).astype(np.float32)
    whole, qt = _synthetic.encode_tensor(x, dt)
    parts = np.concatenate([_synthetic.encode_tensor(x[i:i + 10], dt)[0] for i in range(0, 24, 10)])
    assert np.array_equal(whole, parts)
    back = gguf.quants.dequantize(whole, qt).reshape(x.shape)
    rel = np.sqrt(((back - x) ** 2).mean()) / np.sqrt((x ** 2).mean())
    print(f"{dt}: relative rms error {rel:.4f}")
    assert rel < {"q4_k": 0.1, "iq4_nl": 0.1, "q5_0": 0.05, "q5_1": 0.05, "q5_k": 0.05, "q6_k": 0.025, "bf16": 0.005}[dt]


def test_q4_k_m_file_runs_on_cpu_like_the_float64_reference(tmp_path):
    """A Q4_K_M synthetic Llama (q4_k, q6_k, q5_0 and q8_0 tensors, mixed q/k/v types) loaded on the
    cpu: its logits against the numpy float64 reference model of the same dequantized weights."""
    from xinfer_async.llm._reference import reference_logits

    p = write_synthetic_gguf(tmp_path / "m.gguf", KMIX, "q4_k_m", seed=5)
    m = load_gguf(p)
    types = {t.dtype for t in m.tensors.values()}
    assert types == {"f32", "q4_k", "q6_k", "q5_0", "q8_0"}, types
    assert m.metadata["general.file_type"] == 15  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    ids = [256, 65, 300 - 1, 7, 120, 33, 250, 9, 1, 42]

    async def run():
        model = await llm.load(p, device="cpu", slots=1, ctx=32)
        try:
            return await model.logits(ids)
        finally:
            await model.aclose()

    got = trio.run(run)
    ref = reference_logits(m, ids)
    err = np.abs(got - ref).max()
    print(f"q4_k_m logits: max |got - ref| {err:.3g}, max |ref| {np.abs(ref).max():.3g}")
    assert got.shape == ref.shape == (len(ids), KMIX.vocab_size)
    # every matrix of the file runs through int8 activations on cpu (llama.cpp's numerics: q8_0 and
    # q5_0 with x rounded per block of 32 to amax/127 steps, native/kernels/q8dot.c; q4_k and q6_k
    # per block of 256, q8kdot.c), each product within its activation bound (bit-exact models:
    # tests/test_q8dot.py); through 8 layers of random weights the logits move by up to ~1/70 of
    # the largest (measured: 0.015 of 1.07; 0.0023 when only q8_0 rounded x)
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=np.abs(ref).max() / 50)
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.9


@pytest.mark.parametrize("tensor,word", [("blk.1.attn_q.weight", 0), ("blk.0.attn_v.weight", 104),
                                         ("blk.1.ffn_down.weight", 0)])  # q4_k d, q6_k d, q5_0 d
def test_non_finite_block_scales_of_the_new_types_are_refused(tmp_path, tensor, word):
    import gguf

    from xinfer_async.hal._errors import GGUFError

    p = write_synthetic_gguf(tmp_path / "m.gguf", KMIX, "q4_k_m", seed=1)
    r = gguf.GGUFReader(p)
    off = int(next(t for t in r.tensors if t.name == tensor).data_offset)
    del r
    data = bytearray(p.read_bytes())
    data[off + 2 * word: off + 2 * word + 2] = (0x7C00).to_bytes(2, "little")  # +inf
    p.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match=f"tensor '{tensor}' holds NaN or inf in its block scales"):
        load_gguf(p)
