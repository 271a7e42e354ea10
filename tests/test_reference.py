"""Tests of xinfer_async/llm/_reference.py: a float64 loop implementation on a tiny random model,
and teacher-forced agreement with llama.cpp on SmolLM2 (golden file)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from _llm_fixtures import TINY, golden, require_model, write_tiny_gguf
from xinfer_async.llm._gguf import load_gguf
from xinfer_async.llm._reference import ReferenceLlama, quantize_q8_blocks, reference_logits, rope, rope_tables


def _naive_forward(model, ids) -> np.ndarray:
    """The decoder in float64 with explicit loops over heads and positions, each family's blocks
    written out from llama.cpp's graphs (src/models/*.cpp), not from the declaration's reader."""
    c = model.config
    W = {k: t.dequantize().astype(np.float64) for k, t in model.tensors.items()}
    hd, arch = c.head_dim, c.arch
    neox = arch in ("qwen2", "qwen3", "gemma3", "phi3")

    def norm(x, w):
        return x / np.sqrt(np.mean(x * x) + c.rms_eps) * w

    ff = W.get("rope_freqs.weight", np.ones(hd // 2))  # Llama 3 rope scaling: frequency i / ff[i]

    def rot(v, pos, theta):
        out = v.copy()
        for i in range(hd // 2):
            a = pos * theta ** (-2.0 * i / hd) / ff[i]
            j0, j1 = (i, i + hd // 2) if neox else (2 * i, 2 * i + 1)
            out[j0] = v[j0] * np.cos(a) - v[j1] * np.sin(a)
            out[j1] = v[j0] * np.sin(a) + v[j1] * np.cos(a)
        return out

    def act(g):
        if arch == "gemma3":
            return 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
        return g / (1 + np.exp(-g))

    T, qd, kvd = len(ids), c.n_head * hd, c.n_kv_head * hd
    x = np.stack([W["token_embd.weight"][i] for i in ids])
    if arch == "gemma3":
        x = x * np.sqrt(c.dim)
    for layer in range(c.n_layer):
        b = f"blk.{layer}."
        local = arch == "gemma3" and c.sliding_window > 0 and layer % c.swa_pattern < c.swa_pattern - 1
        theta = c.rope_theta_swa if local else c.rope_theta
        new = np.empty_like(x)
        ks = [[None] * T for _ in range(c.n_kv_head)]
        vs = [[None] * T for _ in range(c.n_kv_head)]
        qs = [[None] * T for _ in range(c.n_head)]
        for t in range(T):
            n = norm(x[t], W[b + "attn_norm.weight"])
            if arch == "phi3":
                qkv = W[b + "attn_qkv.weight"] @ n
                q, k, v = qkv[:qd], qkv[qd:qd + kvd], qkv[qd + kvd:]
            else:
                q, k, v = W[b + "attn_q.weight"] @ n, W[b + "attn_k.weight"] @ n, W[b + "attn_v.weight"] @ n
            if arch == "qwen2":
                q, k, v = q + W[b + "attn_q.bias"], k + W[b + "attn_k.bias"], v + W[b + "attn_v.bias"]
            for h in range(c.n_head):
                qh = q[h * hd:(h + 1) * hd]
                if arch in ("qwen3", "gemma3"):
                    qh = norm(qh, W[b + "attn_q_norm.weight"])
                qs[h][t] = rot(qh, t, theta)
            for h in range(c.n_kv_head):
                kh = k[h * hd:(h + 1) * hd]
                if arch in ("qwen3", "gemma3"):
                    kh = norm(kh, W[b + "attn_k_norm.weight"])
                ks[h][t] = rot(kh, t, theta)
                vs[h][t] = v[h * hd:(h + 1) * hd]
        for t in range(T):
            heads = []
            j0 = max(0, t - c.sliding_window + 1) if local else 0  # keys t - j < window
            for h in range(c.n_head):
                kvh = h // (c.n_head // c.n_kv_head)
                s = np.array([qs[h][t] @ ks[kvh][j] for j in range(j0, t + 1)]) / np.sqrt(hd)
                p = np.exp(s - s.max())
                p /= p.sum()
                heads.append(sum(p[j - j0] * vs[kvh][j] for j in range(j0, t + 1)))
            o = W[b + "attn_output.weight"] @ np.concatenate(heads)
            if arch == "gemma3":
                o = norm(o, W[b + "post_attention_norm.weight"])
            hcur = x[t] + o
            n = norm(hcur, W[b + "ffn_norm.weight"])
            if arch == "phi3":
                gu = W[b + "ffn_up.weight"] @ n
                g, u = gu[:c.ffn_dim], gu[c.ffn_dim:]
            else:
                g, u = W[b + "ffn_gate.weight"] @ n, W[b + "ffn_up.weight"] @ n
            f = W[b + "ffn_down.weight"] @ (act(g) * u)
            if arch == "gemma3":
                f = norm(f, W[b + "post_ffw_norm.weight"])
            new[t] = hcur + f
        x = new
    out = W["token_embd.weight"] if c.tied_embeddings else W["output.weight"]
    logits = np.stack([out @ norm(x[t], W["output_norm.weight"]) for t in range(T)])
    if c.logit_softcap:
        logits = c.logit_softcap * np.tanh(logits / c.logit_softcap)
    return logits


@pytest.mark.parametrize("qtype", ["F32", "Q4_1"])
@pytest.mark.parametrize("tied", [True, False])
def test_tiny_model_against_float64_loops(tmp_path, qtype, tied):
    rng = np.random.default_rng()
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, rng=rng, qtype=qtype, tied=tied)
    m = load_gguf(path)
    ids = rng.integers(0, TINY["vocab"], size=11)
    got = reference_logits(m, ids)
    assert got.shape == (11, TINY["vocab"]) and got.dtype == np.float32
    want = _naive_forward(m, ids)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * np.abs(want).max())
    # causality: a prefix sees the same logits
    np.testing.assert_allclose(reference_logits(m, ids[:5]), got[:5], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", ["tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3", "tiny-phi3",
                                   "tiny-gemma3-softcap"])
def test_each_family_against_float64_loops(tmp_path, shape):
    """The reference of each family (its declaration read by ReferenceLlama) against the loops above,
    on a tiny synthetic file (f16 weights) of 12 tokens: gemma3's window of 4 keys is crossed."""
    import dataclasses

    from xinfer_async.llm._synthetic import SHAPES, write_synthetic_gguf

    rng = np.random.default_rng()
    cfg = SHAPES[shape.replace("-softcap", "")]
    if shape.endswith("softcap"):
        cfg = dataclasses.replace(cfg, logit_softcap=0.5)  # small: the cap bends every logit
    path = write_synthetic_gguf(tmp_path / "m.gguf", cfg, "f16", seed=int(rng.integers(1 << 30)))
    m = load_gguf(path)
    assert m.config == dataclasses.replace(cfg, rms_eps=m.config.rms_eps)  # eps stored as float32
    assert m.config.rms_eps == pytest.approx(cfg.rms_eps, rel=1e-7)
    ids = rng.integers(0, cfg.vocab_size, size=12)
    got = reference_logits(m, ids)
    want = _naive_forward(m, ids)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * np.abs(want).max())
    np.testing.assert_allclose(reference_logits(m, ids[:5]), got[:5], rtol=1e-4, atol=1e-4)


def test_rope_rotates_adjacent_pairs():
    rng = np.random.default_rng()
    x = rng.standard_normal((5, 3, 8)).astype(np.float32)
    # the pair checked against the formula below (position 3, pair 1) with x0, x1 of opposite signs:
    # x0 cos - x1 sin cannot cancel to ~0, where a relative tolerance fails (about 0.2 % of seeds did)
    x[3, :, 3] = -np.copysign(x[3, :, 3], x[3, :, 2])
    cos, sin = rope_tables(np.arange(5), 8, 10000.0)
    y = rope(x, cos, sin)
    # norms of each pair are preserved; position 0 is the identity
    np.testing.assert_allclose(np.hypot(y[..., 0::2], y[..., 1::2]), np.hypot(x[..., 0::2], x[..., 1::2]), rtol=1e-5)
    np.testing.assert_array_equal(y[0], x[0])
    a = 3 * 10000.0 ** (-2.0 * 1 / 8)
    np.testing.assert_allclose(y[3, :, 2], x[3, :, 2] * np.cos(a) - x[3, :, 3] * np.sin(a), rtol=1e-5)


def test_quantize_q8_blocks():
    rng = np.random.default_rng()
    x = rng.standard_normal((3, 64)).astype(np.float32)
    y = quantize_q8_blocks(x)
    step = (np.abs(x.reshape(-1, 32)).max(1) / np.float32(127)).astype(np.float32)
    step16 = step.astype(np.float16).astype(np.float32)
    # |q*d16 - x| <= |q*d - x| + |q|*|d16 - d| <= d/2 + 127*|d16 - d| (the scale is stored as float16)
    bound = 0.5 * step + 127 * np.abs(step16 - step) + 1e-6 * step
    assert (np.abs(y - x).reshape(-1, 32) <= bound[:, None]).all()
    np.testing.assert_array_equal(quantize_q8_blocks(np.zeros((1, 32), np.float32)), 0)


def test_bad_ids(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, rng=np.random.default_rng())
    m = load_gguf(path)
    with pytest.raises(ValueError, match=r"^token id 40 outside \[0, 40\)$"):
        reference_logits(m, [1, 40])
    with pytest.raises(ValueError, match=r"^token_ids must be a non-empty 1-D sequence, got shape \(0,\)$"):
        reference_logits(m, [])


@functools.lru_cache(maxsize=1)
def _smollm2():
    return load_gguf(require_model())


def _agreement(ref: ReferenceLlama):
    """(agree, total, agree where margin > 0.5, count margin > 0.5, misses at margin > 0.5)."""
    agree = total = agree_m = count_m = 0
    misses = []
    for gi, g in enumerate(golden()["generations"]):
        P, greedy = len(g["prompt_ids"]), np.array(g["greedy_ids"])
        logits = ref.logits(g["prompt_ids"] + g["greedy_ids"])
        top = logits[P - 1:P - 1 + greedy.size].argmax(axis=-1)  # row P+i-1 predicts continuation i
        ok = top == greedy
        margin = np.array(g["top1_margin"]) > 0.5
        agree += int(ok.sum())
        total += ok.size
        agree_m += int((ok & margin).sum())
        count_m += int(margin.sum())
        misses += [(gi, int(i)) for i in np.flatnonzero(margin & ~ok)]
    return agree, total, agree_m, count_m, misses


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("quantize_activations", [False, True])
def test_teacher_forced_top1_matches_llamacpp(quantize_activations):
    ref = ReferenceLlama(_smollm2(), quantize_activations=quantize_activations)
    agree, total, agree_m, count_m, misses = _agreement(ref)
    print(f"\nquantize_activations={quantize_activations}: top-1 agreement {agree}/{total} "
          f"({100 * agree / total:.1f}%), margin>0.5: {agree_m}/{count_m}")
    assert misses == []
    assert agree >= 0.95 * total
