"""llm/_synthetic.py: random-weight GGUF files of named shapes (every family of llm/_arch.py), and
``load("synthetic:...")``."""

from __future__ import annotations

import dataclasses
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
    # SmolLM2-135M: 134.5 M parameters; Llama-3.2-1B: 1.236 G (both with tied embeddings); Gemma 3
    # 270M: 268.1 M (the real file's tensors: 167.8 M of them the tied embedding)
    assert _params("smollm2-135m") == 134_515_008
    assert _params("llama-3.2-1b") == 1_235_814_400
    assert _params("gemma3-270m") == 268_098_176
    c = SHAPES["llama-3.2-1b"]
    assert (c.n_layer, c.dim, c.n_head, c.n_kv_head, c.head_dim, c.ffn_dim, c.vocab_size, c.rope_theta) == \
        (16, 2048, 32, 8, 64, 8192, 128256, 500000.0)


def test_7b_and_8b_shapes_have_the_models_sizes_and_pass_validation():
    # Llama-3.1-8B: 8,030,261,248 parameters (untied output); Qwen2.5-7B: 7,615,616,512 less its
    # q/k/v biases (28 x (3584 + 512 + 512) = 129,024), which the llama architecture has not
    assert _params("llama-3.1-8b") == 8_030_261_248
    assert _params("qwen2.5-7b") == 7_615_616_512 - 129_024
    fields = lambda c: (c.n_layer, c.dim, c.n_head, c.n_kv_head, c.head_dim, c.ffn_dim, c.vocab_size,  # noqa: E731
                        c.rope_theta, c.tied_embeddings)
    assert fields(SHAPES["llama-3.1-8b"]) == (32, 4096, 32, 8, 128, 14336, 128256, 500000.0, False)
    assert fields(SHAPES["qwen2.5-7b"]) == (28, 3584, 28, 4, 128, 18944, 152064, 1000000.0, False)
    for name in ("llama-3.1-8b", "qwen2.5-7b"):
        c = _synthetic.shape_config(name)
        assert "output.weight" in llama_tensor_shapes(c)
        for dtype in _synthetic.DTYPES:  # every row length is a multiple of 256: no fallback types
            types = _synthetic.tensor_types(c, dtype)
            assert set(types.values()) <= {"f32", "q8_0", "f16", "q6_k", dtype, _synthetic.MIXES.get(dtype)}, dtype
        assert _synthetic.tensor_types(c, "q4_k_m")["output.weight"] == "q6_k"


def _scaled(name: str, **kw) -> _synthetic.LlamaConfig:
    """``SHAPES[name]`` with fewer layers and narrower widths, same head_dim, GQA ratio and the rest."""
    c = SHAPES[name]
    return dataclasses.replace(c, n_layer=2, n_kv_head=1, n_head=c.n_head // c.n_kv_head,
                               dim=c.n_head // c.n_kv_head * c.head_dim, **kw)


@pytest.mark.parametrize("name,dtype", [("llama-3.1-8b", "q4_1"), ("llama-3.1-8b", "q4_k_m"), ("qwen2.5-7b", "q4_k_m")])
def test_scaled_7b_8b_shapes_write_stream_and_load(tmp_path, monkeypatch, name, dtype):
    """The 8B / 7B write path (untied output, head_dim 128, their GQA ratios and rope bases) on a
    scaled-down config, several chunks a matrix: the file loads with the config written, and each
    matrix holds its chunks in order, each drawn from default_rng([seed, tensor index, chunk]) and
    encoded (what a write of the full shape does, tensor by tensor)."""
    import gguf

    c = _scaled(name, ffn_dim=512, vocab_size=1000)
    monkeypatch.setattr(_synthetic, "_CHUNK_ELEMS", c.dim * 96)  # 96 rows a chunk: several a matrix
    p = write_synthetic_gguf(tmp_path / "s.gguf", c, dtype, seed=11, threads=3)
    m = load_gguf(p)
    assert m.config == dataclasses.replace(c, rms_eps=m.config.rms_eps) and m.config.rms_eps == np.float32(c.rms_eps)
    types = _synthetic.tensor_types(c, dtype)
    reader = gguf.GGUFReader(p)
    assert [t.name for t in reader.tensors] == list(types)
    for index, t in enumerate(reader.tensors):
        if len(t.shape) == 1:
            continue
        n, k = int(t.shape[1]), int(t.shape[0])
        rows = max(1, _synthetic._CHUNK_ELEMS // k)
        want = []
        for ci, start in enumerate(range(0, n, rows)):
            x = np.random.default_rng([11, index, ci]).standard_normal((min(rows, n - start), k), dtype=np.float32)
            want.append(_synthetic.encode_tensor(x * np.float32(0.02), types[t.name])[0])
        data = np.asarray(t.data)
        want = np.concatenate(want)
        assert np.array_equal(data.view(np.uint8).reshape(n, -1), want.view(np.uint8).reshape(n, -1)), t.name


def test_writer_streams_tensors_instead_of_holding_the_file(tmp_path, monkeypatch):
    """Peak memory (tracemalloc: numpy's buffers) while writing stays well under the file's size: the
    writer keeps the tensors in flight (a byte budget, two at least), not every tensor until the end."""
    import tracemalloc

    c = _synthetic.LlamaConfig(n_layer=8, dim=512, n_head=4, n_kv_head=1, head_dim=128, ffn_dim=1024,
                               vocab_size=4096, tied_embeddings=False)
    monkeypatch.setattr(_synthetic, "_CHUNK_ELEMS", 1 << 16)
    monkeypatch.setattr(_synthetic, "_INFLIGHT_BYTES", 1 << 20)  # drawn ahead: 1 MB (or two tensors)
    tracemalloc.start()
    try:
        p = write_synthetic_gguf(tmp_path / "m.gguf", c, "q8_0", threads=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = p.stat().st_size
    largest = max(math.prod(s) for s in llama_tensor_shapes(c).values()) * 34 // 32
    print(f"file {size / 1e6:.1f} MB, peak traced {peak / 1e6:.1f} MB, largest tensor {largest / 1e6:.1f} MB")
    assert size > 20e6 and peak < size / 3


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
    assert path.name == "tiny-q4_1-seed0-v2.gguf"


def test_synthetic_model_is_cached_and_validated(tmp_path):
    p = synthetic_model("synthetic:tiny:q8_0", seed=5)
    assert p.name == "tiny-q8_0-seed5-v2.gguf" and p.parent.name == "synthetic"
    mtime = p.stat().st_mtime_ns
    assert synthetic_model("synthetic:tiny:q8_0", seed=5) == p and p.stat().st_mtime_ns == mtime
    assert not list(p.parent.glob("*.part"))
    with pytest.raises(ValueError, match=r"^unknown synthetic shape 'nope'; known shapes: smollm2-135m, llama-3.2-1b, "
                                         r"llama-3.1-8b, qwen2.5-7b, tiny, gemma3-270m, "
                                         r"tiny-llama3, tiny-qwen2, tiny-qwen3, tiny-gemma3, tiny-phi3$"):
        llm.resolve_model("synthetic:nope")
    with pytest.raises(ValueError, match=r"^dtype must be one of q4_1, q8_0, f16, q4_0, q5_0, q5_1, q4_k, q5_k, q6_k, "
                                         r"iq4_nl, bf16, f32, q4_k_m, q5_k_m, got 'q3_k'$"):
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


def _activation_rounding_effect(m, ids, ref):
    """Twice the largest logit change that rounding every quantized product's activations as
    llama.cpp's cpu does (q8_0 / q8_1 blocks of 32 with f16 scales, q8_K blocks of 256 for the
    K-quants) makes in the numpy reference (``ReferenceLlama(quantize_activations=True)``): the
    cpu's int8 products round the same activations the same way, but float32 sums in another order
    flip some codes, so ours is another draw of that rounding, not the same one; two draws are
    within twice the distance of one from the float reference."""
    from xinfer_async.llm._reference import ReferenceLlama

    return 2 * float(np.abs(ReferenceLlama(m, quantize_activations=True).logits(ids) - ref).max())


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
    # q5_0 per block of 32, q8dot.c; q4_k and q6_k per block of 256, q8kdot.c): the float kernels'
    # 1e-4 plus _activation_rounding_effect
    atol = np.abs(ref).max() * 1e-4 + _activation_rounding_effect(m, ids, ref)
    print(f"q4_k_m atol {atol:.3g}")
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=atol)
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.9


def test_q4_k_m_mixed_qkv_runs_a_product_a_type(tmp_path):
    """The use_more_bits layers' q, k (q4_k) and v (q6_k) stay in their types, a weight each run of one
    type (no f32 copy: 7x a q4_k weight's bytes); the other layers' q, k, v one q4_k weight. The
    logits of a prompt (T > 1: the parts' rows copied into place) and of each token decoded alone
    (T == 1: the parts straight into their columns) agree with the float64 reference above."""
    from xinfer_async.llm._reference import reference_logits

    p = write_synthetic_gguf(tmp_path / "m.gguf", KMIX, "q4_k_m", seed=5)
    m = load_gguf(p)
    ids = [256, 65, 299, 7, 120]

    async def run():
        model = await llm.load(p, device="cpu", slots=1, ctx=32)
        try:
            blocks = model.builder.blocks
            parts = [[(q.wd[1], q.row0, q.n) for q in b.wqkv] for b in blocks]
            r = await model.complete(ids, max_tokens=3)
            return parts, await model.logits(ids), r.token_ids, await model.logits(ids + r.token_ids)
        finally:
            await model.aclose()

    parts, got, greedy, again = trio.run(run)
    qk, kv = KMIX.n_head * KMIX.head_dim + KMIX.n_kv_head * KMIX.head_dim, KMIX.n_kv_head * KMIX.head_dim
    for i, ps in enumerate(parts):
        if _synthetic.use_more_bits(i, KMIX.n_layer):
            assert ps == [("q4_k", 0, qk), ("q6_k", qk, kv)], (i, ps)
        else:
            assert ps == [("q4_k", 0, qk + kv)], (i, ps)
    ref = reference_logits(m, ids + greedy)
    # the cpu's int8 activations (as in the test above): the float kernels' 1e-4 plus their rounding
    atol = np.abs(ref).max() * 1e-4 + _activation_rounding_effect(m, ids + greedy, ref)
    np.testing.assert_allclose(again, ref, rtol=1e-3, atol=atol)
    np.testing.assert_array_equal(got, again[:len(ids)])  # a prompt's rows whatever follows them
    assert greedy == [int(i) for i in ref[len(ids) - 1:-1].argmax(-1)] or \
        (ref[len(ids) - 1:-1].max(-1) - np.sort(ref[len(ids) - 1:-1], -1)[:, -2]).min() < 1e-3


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


FAMILIES = ["tiny", "tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3", "tiny-phi3"]


@pytest.mark.parametrize("shape", FAMILIES)
def test_each_family_writes_its_names_and_keys(tmp_path, shape):
    """``arch=``/the shape's family: general.architecture, {arch}.* keys, the family's tensors only."""
    import gguf

    c = SHAPES[shape]
    p = write_synthetic_gguf(tmp_path / "m.gguf", shape, "q8_0", seed=1)
    r = gguf.GGUFReader(p)
    keys = set(r.fields)
    assert bytes(r.fields["general.architecture"].parts[-1]).decode() == c.arch
    assert {f"{c.arch}.block_count", f"{c.arch}.embedding_length", f"{c.arch}.attention.head_count"} <= keys
    assert (f"{c.arch}.attention.key_length" in keys) == (c.head_dim * c.n_head != c.dim)
    assert (f"{c.arch}.attention.sliding_window" in keys) == (c.sliding_window > 0)
    assert [t.name for t in r.tensors] == list(_synthetic.model_tensor_shapes(c))
    assert ("rope_freqs.weight" in [t.name for t in r.tensors]) == c.rope_freqs
    m = load_gguf(p)
    assert m.config.arch == c.arch and m.config.head_dim == c.head_dim and m.config.sliding_window == c.sliding_window
    # the same shape as another family: that family's names
    if c.rope_freqs:  # rope_freqs belongs to llama only
        return
    q = write_synthetic_gguf(tmp_path / "q.gguf", shape, "q8_0", seed=1, arch="qwen2")
    assert load_gguf(q).config.arch == "qwen2" and "blk.0.attn_q.bias" in load_gguf(q).tensors


@pytest.mark.parametrize("shape", FAMILIES)
@pytest.mark.parametrize("dtype", ["f16", "q4_k_m"])
def test_each_family_runs_like_the_reference(tmp_path, devices, shape, dtype):
    """A tiny file of each family through the device's kernels (the score plan, and greedy decoding on
    the batched path) against the numpy reference of the same dequantized weights. f16: the float
    kernels alone, within 1e-4 of the largest logit (measured on cpu: <= 5.5e-7 of ~1). q4_k_m:
    llama.cpp's mix, which the cpu runs with int8 activations (llama.cpp's numerics: q8dot.c,
    q8kdot.c): plus ``_activation_rounding_effect``."""
    from xinfer_async.llm._reference import reference_logits

    c = SHAPES[shape]
    p = write_synthetic_gguf(tmp_path / "m.gguf", shape, dtype, seed=7)
    m = load_gguf(p)
    rng = np.random.default_rng()
    ids = [int(i) for i in rng.integers(0, c.vocab_size, size=13)]  # > gemma3's window of 4

    async def run():
        model = await llm.load(p, device=devices, slots=2, ctx=32)
        try:
            logits = await model.logits(ids)
            r = await model.complete(ids[:6], max_tokens=6)
            return logits, r.token_ids, await model.logits(ids[:6] + r.token_ids)
        finally:
            await model.aclose()

    got, greedy, again = trio.run(run)
    ref = reference_logits(m, ids)
    err = np.abs(got - ref).max()
    atol = np.abs(ref).max() * 1e-4
    if dtype != "f16" and devices.name == "cpu":
        atol += _activation_rounding_effect(m, ids, ref)
    print(f"{shape} {dtype} {devices.name}: max |got - ref| {err:.3g}, atol {atol:.3g}, max |ref| {np.abs(ref).max():.3g}")
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=atol)
    # decoding (batched plans, one token a step) picks what the score plan ranks first
    assert greedy == [int(i) for i in again[5:11].argmax(-1)]


def test_llama3_rope_factors_are_the_converters():
    """llama.cpp conversion/llama.py for Llama 3.1 8B (theta 500000, head_dim 128): 1 for the 29
    shortest wavelengths (< 8192 / 4), 8 for the 29 longest (> 8192), the smooth blend between."""
    f = _synthetic.llama3_rope_factors(128, 500000.0)
    assert f.shape == (64,) and f.dtype == np.float32
    assert (f[:29] == 1).all() and (f[35:] == 8).all() and ((f[29:35] > 1) & (f[29:35] < 8)).all()
    # the blend at pair 29: wavelength 2 pi 500000^(58/128), smooth = (8192 / wavelength - 1) / 3
    w = 2 * np.pi * 500000.0 ** (58 / 128)
    sm = (8192 / w - 1) / 3
    assert f[29] == pytest.approx(1 / ((1 - sm) / 8 + sm), rel=1e-5)
    assert np.all(np.diff(f) >= 0)
