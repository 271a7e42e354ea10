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
    """Llama forward in float64 with explicit loops over heads and positions."""
    c = model.config
    W = {k: t.dequantize().astype(np.float64) for k, t in model.tensors.items()}
    hd = c.head_dim

    def norm(x, w):
        return x / np.sqrt(np.mean(x * x) + c.rms_eps) * w

    def rot(v, pos):
        out = v.copy()
        for i in range(hd // 2):
            a = pos * c.rope_theta ** (-2.0 * i / hd)
            x0, x1 = v[2 * i], v[2 * i + 1]
            out[2 * i] = x0 * np.cos(a) - x1 * np.sin(a)
            out[2 * i + 1] = x0 * np.sin(a) + x1 * np.cos(a)
        return out

    T = len(ids)
    x = np.stack([W["token_embd.weight"][i] for i in ids])
    for layer in range(c.n_layer):
        b = f"blk.{layer}."
        new = np.empty_like(x)
        ks = [[None] * T for _ in range(c.n_kv_head)]
        vs = [[None] * T for _ in range(c.n_kv_head)]
        qs = [[None] * T for _ in range(c.n_head)]
        for t in range(T):
            n = norm(x[t], W[b + "attn_norm.weight"])
            q, k, v = W[b + "attn_q.weight"] @ n, W[b + "attn_k.weight"] @ n, W[b + "attn_v.weight"] @ n
            for h in range(c.n_head):
                qs[h][t] = rot(q[h * hd:(h + 1) * hd], t)
            for h in range(c.n_kv_head):
                ks[h][t] = rot(k[h * hd:(h + 1) * hd], t)
                vs[h][t] = v[h * hd:(h + 1) * hd]
        for t in range(T):
            heads = []
            for h in range(c.n_head):
                kvh = h // (c.n_head // c.n_kv_head)
                s = np.array([qs[h][t] @ ks[kvh][j] for j in range(t + 1)]) / np.sqrt(hd)
                p = np.exp(s - s.max())
                p /= p.sum()
                heads.append(sum(p[j] * vs[kvh][j] for j in range(t + 1)))
            hcur = x[t] + W[b + "attn_output.weight"] @ np.concatenate(heads)
            n = norm(hcur, W[b + "ffn_norm.weight"])
            g, u = W[b + "ffn_gate.weight"] @ n, W[b + "ffn_up.weight"] @ n
            new[t] = hcur + W[b + "ffn_down.weight"] @ (g / (1 + np.exp(-g)) * u)
        x = new
    out = W["token_embd.weight"] if c.tied_embeddings else W["output.weight"]
    return np.stack([out @ norm(x[t], W["output_norm.weight"]) for t in range(T)])


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


def test_rope_rotates_adjacent_pairs():
    rng = np.random.default_rng()
    x = rng.standard_normal((5, 3, 8)).astype(np.float32)
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
