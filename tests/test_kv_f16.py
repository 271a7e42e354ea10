"""The f16 KV cache (``kv_dtype="f16"``, ``XINFER_KV_CACHE=f16``: llm/_llama.py) end to end:

* a synthetic model (f32 weights, Llama 3 rope scaling, 700 tokens: rows of up to 2 attention segments)
  against the float64 loops of tests/test_reference.py, with the f32 and the f16 cache on each
  device present; the distances are printed and bounded: the f16 cache's by the rounding of k and v
  (2^-11 relative; on cpu q and the attention probabilities too, llama.cpp's numerics) carried to the
  logits; greedy decoding at 650+ positions (cuda: split-K) agrees
  with a teacher-forced pass wherever the top-1 margin is clear;
* SmolLM2-135M with the f16 cache on the cpu against llama.cpp's golden outputs (the checks of
  tests/test_llm_engine.py: teacher-forced top-1 where llama.cpp's margin > 0.5, >= 95 % overall,
  greedy until a small margin);
* the option itself: the environment variable, the argument, a clear error for another value.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import trio
from _llm_fixtures import golden, load_model_sync
from test_reference import _naive_forward

from xinfer_async import llm
from xinfer_async.llm._gguf import load_gguf
from xinfer_async.llm._llama import kv_cache_dtype
from xinfer_async.llm._synthetic import SHAPES, write_synthetic_gguf

#: relative distance of the logits from float64 (max |got - ref| / max |ref|): f32 arithmetic (measured
#: 1.1e-7 on cpu); with the f16 cache, k and v rounded to 2^-11 = 4.9e-4 relative, which moves the scores
#: by ~2^-11 |q||k| and the outputs by ~2^-11 |v|, carried through 2 layers: bounded by 2 * 2^-11. On cpu
#: (llama.cpp's numerics for an F16 cache) q and the probabilities are rounded to f16 too: a second
#: 2^-11 in each product, 2 * 2 * 2^-11 (measured 8.8e-5 on cpu, 700 tokens)
BOUND_F32 = 1e-5
BOUND_F16 = {"cpu": 4 * 2.0**-11, "cuda": 2 * 2.0**-11}


def test_kv_cache_dtype_option(monkeypatch):
    monkeypatch.delenv("XINFER_KV_CACHE", raising=False)
    assert kv_cache_dtype() == "f32" and kv_cache_dtype("f16") == "f16"
    monkeypatch.setenv("XINFER_KV_CACHE", "F16")
    assert kv_cache_dtype() == "f16" and kv_cache_dtype("f32") == "f32"
    monkeypatch.setenv("XINFER_KV_CACHE", "bf16")
    with pytest.raises(ValueError, match=r"XINFER_KV_CACHE='bf16' is not a KV-cache type; use one of 'f32', 'f16'"):
        kv_cache_dtype()
    with pytest.raises(ValueError, match=r"kv_dtype='q8_0' is not a KV-cache type"):
        kv_cache_dtype("q8_0")


async def test_load_rejects_an_unknown_kv_dtype():
    with pytest.raises(ValueError, match="kv_dtype='int8'"):
        await llm.load("synthetic:tiny", device="cpu", kv_dtype="int8")


async def test_synthetic_model_logits_f32_and_f16_cache_against_float64(devices, tmp_path):
    rng = np.random.default_rng()
    cfg = dataclasses.replace(SHAPES["tiny-llama3"], context_length=1024)
    path = write_synthetic_gguf(tmp_path / "m.gguf", cfg, "f32", seed=int(rng.integers(1 << 30)))
    ids = rng.integers(0, cfg.vocab_size, size=700)
    ref = _naive_forward(load_gguf(path), ids)
    scale = np.abs(ref).max()
    got = {}
    for kv in ("f32", "f16"):
        model = await llm.load(path, device=devices, slots=1, ctx=768, kv_dtype=kv, batching=False)
        try:
            assert model.builder.kv_dtype == kv
            got[kv] = (await model.logits(ids)).astype(np.float64)
            # decode one token at a time at 650+ positions (cuda: split-K, 2 segments a row; twice, so
            # the split's counters are seen reset) against the rows of one teacher-forced pass
            for _ in range(2):
                r = await model.complete(ids[:650].tolist(), max_tokens=8, ignore_eos=True)
                rows = (await model.logits(ids[:650].tolist() + list(r.token_ids)))[649:-1]
                top2 = np.sort(rows, axis=-1)[:, -2:]
                clear = (top2[:, 1] - top2[:, 0]) > 1e-3 * np.abs(rows).max()
                assert (np.array(r.token_ids)[clear] == rows.argmax(-1)[clear]).all()
        finally:
            await model.aclose()
    d32 = np.abs(got["f32"] - ref).max() / scale
    d16 = np.abs(got["f16"] - ref).max() / scale
    print(f"{devices.name}: max |logits - float64| / max |float64| over 700 tokens: f32 cache {d32:.3g}, "
          f"f16 cache {d16:.3g} (bounds {BOUND_F32:g}, {BOUND_F16[devices.name]:g})")
    assert d32 <= BOUND_F32
    assert d16 <= BOUND_F16[devices.name]
    assert d16 > d32  # the cache's rounding shows: the f16 path really stored halves
    # the top-1 token agrees wherever float64's margin exceeds twice the f16 bound
    top2 = np.sort(ref, axis=-1)[:, -2:]
    sure = (top2[:, 1] - top2[:, 0]) > 2 * BOUND_F16[devices.name] * scale
    assert (got["f16"].argmax(-1)[sure] == ref.argmax(-1)[sure]).all()


@pytest.mark.model
def test_smollm2_f16_cache_matches_llamacpp_golden():
    """SmolLM2-135M with the f16 cache on $XINFER_TEST_DEVICE (default cpu): tests/test_llm_engine.py's
    golden checks (teacher-forced top-1, greedy until a small margin)."""
    model = load_model_sync(slots=1, ctx=256, batching=False, kv_dtype="f16")

    async def check():
        agree = total = compared = 0
        misses = []
        for gi, g in enumerate(golden()["generations"]):
            P, greedy = len(g["prompt_ids"]), np.array(g["greedy_ids"])
            logits = await model.logits(g["prompt_ids"] + g["greedy_ids"])
            top = logits[P - 1:P - 1 + greedy.size].argmax(axis=-1)
            ok = top == greedy
            margins = np.array(g["top1_margin"])
            misses += [(gi, int(i)) for i in np.flatnonzero((margins > 0.5) & ~ok)]
            agree += int(ok.sum())
            total += ok.size
            low = np.flatnonzero(margins < 0.5)
            n = int(low[0]) if low.size else margins.size
            if n:
                r = await model.complete(g["prompt_ids"], max_tokens=n)
                assert r.token_ids == g["greedy_ids"][:n], g["prompt"][-60:]
                compared += n
        print(f"f16 cache: teacher-forced top-1 agreement with llama.cpp {agree}/{total}, greedy compared {compared}")
        assert misses == [], f"top-1 differs from llama.cpp where its margin > 0.5 (generation, position): {misses}"
        assert agree >= 0.95 * total and compared >= 20
        await model.aclose()

    trio.run(check)


async def test_batched_f16_cache_requests_equal_each_alone(devices, tmp_path):
    """The batched decode path over an f16 cache (attention_batched_f16, rope_kv_store_ff_f16 into the
    stacked cache): requests decoded together give the tokens each gives alone."""
    rng = np.random.default_rng()
    cfg = dataclasses.replace(SHAPES["tiny-llama3"], context_length=1024)
    path = write_synthetic_gguf(tmp_path / "m.gguf", cfg, "f32", seed=int(rng.integers(1 << 30)))
    prompts = [rng.integers(0, cfg.vocab_size, size=n).tolist() for n in (600, 5, 300)]
    model = await llm.load(path, device=devices, slots=3, ctx=768, kv_dtype="f16", batching=True)
    try:
        alone = [(await model.complete(p, max_tokens=10, ignore_eos=True)).token_ids for p in prompts]
        together = [None] * len(prompts)

        async def one(i):
            together[i] = (await model.complete(prompts[i], max_tokens=10, ignore_eos=True)).token_ids

        async with trio.open_nursery() as nursery:
            for i in range(len(prompts)):
                nursery.start_soon(one, i)
        assert together == alone
    finally:
        await model.aclose()
