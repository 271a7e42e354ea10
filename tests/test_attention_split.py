"""Split-K attention (ops/_attention_split.py, shaders/xi_attention.cuh, backends/cuda/_launch.py) and the
f16 KV cache (attention_f16, attention_batched_f16, rope_kv_store[_ff]_f16):

* the segmentation rule and the launch rule (no device): segments depend on p only, the launch
  spreads them over at most as many blocks as the longest row has segments;
* on each device present, long rows (several segments) against a numpy float64 reference, and the
  numerics contract: a row's bits do not depend on the other rows of its launch nor on how many blocks
  a row is spread over (T <= 8 splits on cuda, T = 12 runs a row in one block, T = 1 alone);
* the f16 cache kernels: on cuda attention_f16 is attention over the cache's values converted to f32,
  bit for bit; on cpu it has llama.cpp's numerics (q and the probabilities rounded to f16), within a
  derived bound of their float64 model (_kernel_refs.attention_f16_cache_ref); on both the batched
  kernel gives the single-sequence kernel's bits; rope_kv_store_f16 stores rope_kv_store's f32 rows
  rounded to nearest even (numpy's float16).
"""

import os
import re
import sys

import numpy as np
import pytest
from _kernel_refs import att_workspace, attention_f16_cache_ref, attention_ref
from _nvrtc_marks import needs_nvrtc

from xinfer_async.backends.cuda._kernel import compile_shader
from xinfer_async.backends.cuda._launch import (ATT_SPLIT_BLOCKS_PER_SM, ATT_STATIC_SHARED, FAMILIES, PQ_STAGE_MAX,
                                                att_vstage, attention_entries, attention_grid, attention_launch,
                                                attention_split, pq_stage_max_for)
from xinfer_async.ops import kernel_spec
from xinfer_async.ops._attention_split import (SEG_KEYS, SEGS_MAX, SPLIT_T_MAX, count_ints, segment_keys, segments,
                                               workspace_floats)

RTOL = 1e-5

SHADERS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shaders")


@pytest.fixture(autouse=True)
def _default_attention_knobs(monkeypatch):
    """The rule's launches unless a test sets a knob: an exported XINFER_ATT_* of the caller's shell
    (a measuring session) is not this file's."""
    for name in ("XINFER_ATT_VSTAGE_MAX", "XINFER_ATT_BLOCK_HEADS", "XINFER_ATT_DEEP"):
        monkeypatch.delenv(name, raising=False)


# -- the rules (no device) ---------------------------------------------------------------------------
def test_segments_cover_the_keys_in_at_most_segs_max_segments():
    S = SEG_KEYS
    assert [segments(p) for p in (-1, 0, S - 1, S, 2 * S - 1, 2 * S, 32 * S - 1, 32 * S, 64 * S - 1, 256 * S - 1)] == \
        [0, 1, 1, 2, 2, 3, 32, 17, 32, 32]
    for p in list(range(0, 20000, 7)) + [2**20 - 1, 2**24 + 5]:
        seg, n = segment_keys(p), segments(p)
        assert seg % SEG_KEYS == 0 and 1 <= n <= SEGS_MAX
        assert (n - 1) * seg <= p < n * seg  # every key in a segment, the last segment not empty


def test_shader_mirrors_the_split_constants():
    src = open(os.path.join(SHADERS, "xi_attention.cuh")).read()
    got = {k: int(v) for k, v in re.findall(r"#define XI_ATT_(SEG_KEYS|SEGS_MAX|SPLIT_T_MAX) (\d+)", src)}
    assert got == {"SEG_KEYS": SEG_KEYS, "SEGS_MAX": SEGS_MAX, "SPLIT_T_MAX": SPLIT_T_MAX}


def _c(T, ctx, n_head=32, n_kv=8, hd=128, window=0):
    return dict(T=T, n_head=n_head, n_kv=n_kv, head_dim=hd, ctx=ctx, q_stride=n_head * hd, scale=0.1, window=window)


def test_split_rule():
    sms = 132
    # Llama-3.1-8B heads, one token: as many blocks as the longest row has segments, up to ~8 an SM
    assert attention_split(_c(1, 16384), sms) == 32 and attention_grid(_c(1, 16384), sms) == (1, 8 * 32, 1)
    assert SEG_KEYS == 256  # the figures below
    assert attention_split(_c(1, 4096), sms) == 16
    assert attention_grid(_c(1, 4096), sms) == (1, 128, 4)  # 128 blocks < the SMs: a query head a block
    assert attention_split(_c(1, 1024), sms) == 4
    # the single-pass kernel where no row can have two segments, or where the tokens fill the device
    assert attention_split(_c(1, SEG_KEYS), sms) == 1 and attention_grid(_c(1, SEG_KEYS), sms) == (1, 8, 4)
    assert attention_split(_c(SPLIT_T_MAX + 1, 16384), sms) == 1
    assert attention_split(_c(1, 16384, window=250), sms) == 1  # a sliding window of 250 keys: one segment
    assert attention_split(_c(1, 16384, window=4096), sms) == 16
    # the batched kernel's cache length is its rows; T tokens share the block budget
    cb = dict(_c(8, 0), rows=64 * 16384)
    del cb["ctx"]
    assert attention_split(cb, sms) == -(-ATT_SPLIT_BLOCKS_PER_SM * sms // (8 * 8))
    for T in range(1, SPLIT_T_MAX + 1):
        for ctx in (513, 1000, 5000, 70000):
            s = attention_split(_c(T, ctx, 9, 3, 64), sms)
            assert 1 <= s <= segments(ctx - 1)


def test_decode_entries_are_launched_for_decode_sized_launches_only(monkeypatch):
    """attention_launch: T <= SPLIT_T_MAX takes the head_dim's decode entry (``_s``, ``_d4s``: the same bits,
    fewer load rounds), unless turned off (XINFER_ATT_DEEP=0, read by the family when a kernel loads)."""
    sms = 132
    assert set(attention_entries()) == {"", "_d4", "_d8", "_s", "_d4s"}
    for T, hd, deep, entry in [(1, 128, True, "_d4s"), (SPLIT_T_MAX, 64, True, "_s"), (SPLIT_T_MAX + 1, 128, True, "_d4"),
                               (1, 256, True, "_d8"), (1, 128, False, "_d4"), (1, 64, False, "")]:
        c = _c(T, 640, 32, 8, hd)
        assert attention_launch(c, sms, deep=deep) == (attention_grid(c, sms), (256, 1, 1), 0, entry)
        staged = {"_s": 8 * 32 * 64 * 4, "_d4s": 8 * 32 * 128 * 4}.get(entry, 0)  # the warps' v rows, f32-sized
        assert attention_launch(c, sms, deep=deep, vstage=att_vstage(PQ_STAGE_MAX)) == (
            attention_grid(c, sms), (256, 1, 1), staged, entry)
    family = FAMILIES["attention"]
    # opted in where the rows fit beside ~42 KB of static shared memory: H200 (227 KB) both decode
    # entries, A100 (163 KB) the head_dim-64 one (128 KB of head_dim-128 rows do not fit beside it), 99 KB
    # devices (sm_86, sm_89, sm_120) none (their kernels read v from memory)
    for optin, staged in [(227 * 1024, {"_s": 65536, "_d4s": 131072}), (163 * 1024, {"_s": 65536}), (99 * 1024, {})]:
        assert family({}, sms=sms, stage_max=0, cc=(9, 0), pq_max=pq_stage_max_for(optin)).opt_in == staged
    assert family({}, sms=sms, stage_max=0, cc=(9, 0)).opt_in == {}
    for env, entry in [(None, "_d4s"), ("1", "_d4s"), ("0", "_d4")]:
        if env is None:
            monkeypatch.delenv("XINFER_ATT_DEEP", raising=False)
        else:
            monkeypatch.setenv("XINFER_ATT_DEEP", env)
        assert family({}, sms=sms, stage_max=0, cc=(9, 0)).launch(_c(1, 640, 32, 8, 128))[3] == entry
    monkeypatch.setenv("XINFER_ATT_DEEP", "yes")
    with pytest.raises(ValueError, match="XINFER_ATT_DEEP"):
        family({}, sms=sms, stage_max=0, cc=(9, 0))


def test_the_measuring_knobs_of_the_attention_launch(monkeypatch):
    """XINFER_ATT_VSTAGE_MAX (the widest decode entry, by its head_dim 64 or 128, that stages v; 128 unset)
    and XINFER_ATT_BLOCK_HEADS (query heads a block below the SMs, any T; 1 unset), read by the family when a
    kernel loads: unset, the launches are the rule's; set, the staged bytes and the grid's z follow
    them (where the blocks fill the SMs the grid keeps ATT_GMAX heads a block); a bad value is refused."""
    sms, family = 132, FAMILIES["attention"]
    h200 = pq_stage_max_for(227 * 1024)
    decode, wide = _c(1, 640, 32, 8, 128), _c(8, 4096, 32, 8, 128)  # 24 blocks a head; 8 * 8 * S >= the SMs
    f = family({}, sms=sms, stage_max=0, cc=(9, 0), pq_max=h200)
    assert f.opt_in == {"_s": 65536, "_d4s": 131072}
    assert f.launch(decode) == (attention_grid(decode, sms), (256, 1, 1), 131072, "_d4s")
    assert attention_grid(decode, sms) == (1, 24, 4) and attention_grid(decode, sms, 2) == (1, 24, 2)
    assert attention_grid(wide, sms, 2) == attention_grid(wide, sms) == (8, 8 * attention_split(wide, sms), 1)
    monkeypatch.setenv("XINFER_ATT_VSTAGE_MAX", "64")
    monkeypatch.setenv("XINFER_ATT_BLOCK_HEADS", "2")
    f = family({}, sms=sms, stage_max=0, cc=(9, 0), pq_max=h200)
    assert f.opt_in == {"_s": 8 * 32 * 64 * 4}
    assert f.launch(decode) == ((1, 24, 2), (256, 1, 1), 0, "_d4s")
    monkeypatch.setenv("XINFER_ATT_VSTAGE_MAX", "0")
    assert family({}, sms=sms, stage_max=0, cc=(9, 0), pq_max=h200).opt_in == {}
    for name, bad in (("VSTAGE_MAX", "257"), ("VSTAGE_MAX", "x"), ("BLOCK_HEADS", "0"), ("BLOCK_HEADS", "5")):
        monkeypatch.setenv("XINFER_ATT_" + name, bad)
        with pytest.raises(ValueError, match=f"XINFER_ATT_{name}='{bad}' is not an integer from"):
            family({}, sms=sms, stage_max=0, cc=(9, 0))
        monkeypatch.delenv("XINFER_ATT_" + name)


@needs_nvrtc
@pytest.mark.parametrize("name", ["attention", "attention_f16", "attention_quantize", "attention_quantize_f16",
                                  "attention_batched", "attention_batched_f16", "attention_batched_quantize",
                                  "attention_batched_quantize_f16"])
def test_static_shared_memory_leaves_room_for_the_staged_v_rows(name):
    """att_vstage opts the decode entries in to their staged v rows where ATT_STATIC_SHARED plus those
    bytes fit a block: every entry's static shared memory (the cubin's .nv.shared.ENTRY) stays within it."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
    import cubin_stats

    secs = cubin_stats.sections(compile_shader(name, "sm_90", 100 * 1024))
    static = {k[len(".nv.shared."):]: v[2] for k, v in secs.items()
              if k.startswith(".nv.shared.") and not k.startswith(".nv.shared.reserved")}
    assert set(static) == {name + e for e in attention_entries()}
    assert 40 * 1024 < max(static.values()) <= ATT_STATIC_SHARED, static


def test_workspace_bindings_are_declared_for_the_split_tokens():
    for name in ("attention", "attention_f16", "attention_batched", "attention_batched_f16"):
        spec = kernel_spec(name)
        part, count = spec.bindings[-2:]
        assert (part.name, count.name) == ("part", "count")
        for T in (1, 5, 8, 9, 64):
            c = dict(T=T, n_head=9, n_kv=3, head_dim=64, ctx=10, rows=10, q_stride=576, scale=1.0, window=0)
            split = T <= SPLIT_T_MAX  # above, no launch splits: no workspace
            assert part.nbytes(c) == 4 * workspace_floats(T, 9, 64) == (4 * T * 9 * SEGS_MAX * 66 if split else 0)
            assert count.nbytes(c) == 4 * count_ints(T, 9) == (4 * T * 9 if split else 0)


# -- the kernels, on each device present ---------------------------------------------------------------
def nan(*shape):
    return np.full(shape, np.nan, np.float32)


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


async def run(dev, name, inputs, out_index, consts):
    """Upload ``inputs`` (binding order), dispatch ``name``, download binding ``out_index``."""
    bufs = [dev.upload(a) for a in inputs]
    ex = dev.executor()
    ex.dispatch(name, bufs, consts)
    rb = ex.download(bufs[out_index])
    await ex.submit_and_wait()
    a = inputs[out_index]
    return rb.numpy(a.shape, a.dtype)


async def attention(dev, q, k, v, pos, nh, nkv, hd, ctx, name="attention", window=0):
    T = len(pos)
    consts = dict(T=T, n_head=nh, n_kv=nkv, head_dim=hd, ctx=ctx, q_stride=nh * hd, scale=1.0 / np.sqrt(hd),
                  window=window)
    return await run(dev, name, [q, k, v, pos, nan(T, nh, hd), *att_workspace(T, nh, hd)], 4, consts)


async def batched(dev, q, k, v, first, last, nh, nkv, hd, rows, name="attention_batched"):
    T = len(first)
    consts = dict(T=T, n_head=nh, n_kv=nkv, head_dim=hd, rows=rows, q_stride=nh * hd, scale=1.0 / np.sqrt(hd), window=0)
    return await run(dev, name, [q, k, v, first, last, nan(T, nh, hd), *att_workspace(T, nh, hd)], 5, consts)


#: (n_head, n_kv, head_dim): SmolLM2, Llama-3.1-8B, a head a block at head_dim 256, MHA at head_dim 66
HEADS = [(9, 3, 64), (32, 8, 128), (4, 2, 256), (4, 4, 66)]


@pytest.mark.parametrize("nh,nkv,hd", HEADS)
async def test_long_rows_match_float64_and_do_not_depend_on_the_launch(devices, rng, nh, nkv, hd):
    """Rows of 1 to 18 segments (p up to 9000; past 16384 keys the segments grow) in a launch of 6 tokens
    (cuda: split over several blocks a row), each within float64 tolerance and bit-identical to the
    same row alone (T = 1: another split) and inside a 12-token batched launch (one block a row)."""
    ctx = 9001
    k, v = f32(rng, ctx, nkv, hd), f32(rng, ctx, nkv, hd)
    pos = np.array([9000, 513, 511, 4099, -1, 1023], np.int32)
    q = f32(rng, len(pos), nh, hd, scale=2.0)
    out = await attention(devices, q, k, v, pos, nh, nkv, hd, ctx)
    ref = attention_ref(q, k, v, pos, nh, nkv, hd, np.float32(1.0 / np.sqrt(hd)))
    # f32 sums over up to 9000 keys: ~sqrt(n) roundings of 2^-24 each, values O(1)
    err = np.abs(out - ref).max()
    print(f"{devices.name} heads {nh}/{nkv} x {hd}: max |out - float64| = {err:.3g}")
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-5)
    np.testing.assert_array_equal(out[4], 0.0)
    for t in (0, 3):
        alone = await attention(devices, np.ascontiguousarray(q[t:t + 1]), k, v, pos[t:t + 1], nh, nkv, hd, ctx)
        np.testing.assert_array_equal(alone[0], out[t], err_msg=f"row {t} alone differs from the 6-token launch")
    # 12 tokens (no split on cuda): the same rows, other rows between them
    T = 12
    qb = f32(rng, T, nh, hd)
    first = np.zeros(T, np.int32)
    last = rng.integers(0, ctx, size=T).astype(np.int32)
    at = [1, 4, 6, 7, 9, 11]
    qb[at] = q
    last[at] = pos
    first[at[4]] = -1  # pos -1: a zero row
    bat = await batched(devices, qb, k, v, first, last, nh, nkv, hd, ctx)
    np.testing.assert_array_equal(bat[at], out, err_msg="12-token batched launch differs from the 6-token launch")


@pytest.mark.cuda
@pytest.mark.parametrize("nh,nkv,hd", [(9, 3, 64), (32, 8, 128)])
async def test_the_decode_knobs_keep_the_bits(cuda_dev, monkeypatch, rng, nh, nkv, hd):
    """XINFER_ATT_VSTAGE_MAX (128, the default: head_dim 128's decode entry stages its v rows too; 0: none does) and
    XINFER_ATT_BLOCK_HEADS (2, 4: fewer decode blocks, their heads in one run or two), on a device opened
    with them, change where a row's loads run and not its bits: rows of 1 to 9 segments, a zero row, 6
    tokens and one alone, bit for bit as the default launch's (where a launch's blocks fill the SMs, as the
    6 tokens' do on an H200, the grid keeps ATT_GMAX heads a block: the token alone is then the one that
    takes BLOCK_HEADS); the knobs' launch (staged bytes, grid) checked against the rule on this device."""
    import xinfer_async

    ctx = 2100
    k, v = f32(rng, ctx, nkv, hd), f32(rng, ctx, nkv, hd)
    pos = np.array([2099, 513, 100, -1, 700, 0], np.int32)
    q = f32(rng, len(pos), nh, hd, scale=2.0)

    async def rows(dev):
        return (await attention(dev, q, k, v, pos, nh, nkv, hd, ctx),
                await attention(dev, np.ascontiguousarray(q[:1]), k, v, pos[:1], nh, nkv, hd, ctx))

    want = await rows(cuda_dev)
    decode = dict(T=1, n_head=nh, n_kv=nkv, head_dim=hd, ctx=ctx, q_stride=nh * hd, scale=1.0, window=0)
    for vmax, heads in (("128", "2"), ("128", "4"), ("0", "1")):
        monkeypatch.setenv("XINFER_ATT_VSTAGE_MAX", vmax)
        monkeypatch.setenv("XINFER_ATT_BLOCK_HEADS", heads)
        dev = xinfer_async.open_device("cuda")
        try:
            got = await rows(dev)
            g = dev.backend.load_kernel("attention").launch_grid(decode)
        finally:
            dev.close()
        what = f"heads {nh}/{nkv} x {hd}, XINFER_ATT_VSTAGE_MAX={vmax} XINFER_ATT_BLOCK_HEADS={heads}"
        sms, entry = cuda_dev.backend.multiprocessors, "_s" if hd <= 64 else "_d4s"
        assert g.shared_bytes == att_vstage(cuda_dev.backend.pq_stage_max, int(vmax)).get(entry, 0) and \
            tuple(g) == attention_grid(decode, sms, int(heads)), f"{what}: launch {tuple(g)} {g.shared_bytes}"
        for a, b in zip(want, got):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"{what}: other bits"


@pytest.mark.parametrize("nh,nkv,hd", [(9, 3, 64), (32, 8, 128)])
async def test_f16_cache_attention(devices, rng, nh, nkv, hd):
    """attention_f16 / attention_batched_f16 over an f16 cache (short and split rows): on cuda ==
    attention over that cache converted to f32, bit for bit (conversion exact, the arithmetic the same);
    on cpu llama.cpp's numerics, within the derived bound of their float64 model, and not the f32
    kernel's bits; the batched kernel == the single-sequence one on both."""
    ctx = 3000
    # k and f16(q): nonzero multiples of 2^-4 below 2 in magnitude, so every partial sum of q16 . k is
    # exact in f32 (multiples of 2^-8 below 2^9) and the model's bound is tight; q itself 2^-13 off
    # f16(q) (relative), which rounds back to it: a kernel that kept q in f32 scores otherwise
    def nice(*shape):
        return (rng.integers(1, 32, shape) * rng.choice([-1, 1], shape) / 16).astype(np.float16)

    k16 = nice(ctx, nkv, hd)
    v16 = rng.standard_normal((ctx, nkv, hd)).astype(np.float16)
    k32, v32 = k16.astype(np.float32), v16.astype(np.float32)
    pos = np.array([2999, 0, 700, -1, 100], np.int32)
    q16 = nice(len(pos), nh, hd)
    q = (q16.astype(np.float64) * (1 + rng.uniform(-1, 1, q16.shape) * 2.0**-13)).astype(np.float32)
    assert np.array_equal(q.astype(np.float16), q16) and not np.array_equal(q, q16.astype(np.float32))
    want = await attention(devices, q, k32, v32, pos, nh, nkv, hd, ctx)
    got = await attention(devices, q, k16, v16, pos, nh, nkv, hd, ctx, name="attention_f16")
    if devices.name == "cpu":
        model, bound = attention_f16_cache_ref(q, k16, v16, pos, nh, nkv, hd, np.float32(1.0 / np.sqrt(hd)),
                                               dots_exact=True)
        err = np.abs(got - model)
        print(f"cpu heads {nh}/{nkv} x {hd}: max |attention_f16 - model| = {err.max():.3g}, "
              f"largest share of its bound {(err / np.maximum(bound, 1e-300)).max():.3g}, "
              f"f32 arithmetic's distance from the model {np.abs(want - model).max():.3g}")
        assert (err <= bound).all()
        assert not (np.abs(want - model) <= bound).all()  # the bound tells f32 arithmetic from llama.cpp's
    else:
        np.testing.assert_array_equal(got, want)
        ref = attention_ref(q, k32, v32, pos, nh, nkv, hd, np.float32(1.0 / np.sqrt(hd)))
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-5)
    first = np.where(pos < 0, -1, 0).astype(np.int32)
    got_b = await batched(devices, q, k16, v16, first, pos, nh, nkv, hd, ctx, name="attention_batched_f16")
    np.testing.assert_array_equal(got_b, got)


@pytest.mark.parametrize("ff", [False, True])
async def test_rope_kv_store_f16_rounds_the_f32_rows(devices, rng, ff):
    """rope_kv_store[_ff]_f16: qkv as the f32 kernel leaves it, and the caches' rows that kernel's rows
    rounded to nearest even (numpy's astype(float16)), untouched rows kept; values near the f16 limits
    (subnormal, a tie, past 65504) included."""
    T, nh, nkv, hd, ctx = 4, 4, 2, 32, 8
    stride = (nh + 2 * nkv) * hd
    qkv = f32(rng, T, stride, scale=3.0)
    vcol = (nh + nkv) * hd
    qkv[0, vcol:vcol + 5] = [3e-6, 1.0 + 2.0**-11, 70000.0, -65519.0, 5.96e-8]  # v is stored unrotated
    pos = np.array([3, 0, 7, 100], np.int32)
    row = np.array([5, -1, 0, 2], np.int32)
    name = "rope_kv_store_ff" if ff else "rope_kv_store"
    consts = dict(T=T, n_head=nh, n_kv=nkv, head_dim=hd, row_stride=stride, ctx=ctx, theta=10000.0)
    extra = [rng.uniform(1.0, 8.0, hd // 2).astype(np.float32)] if ff else []
    kc32, vc32 = f32(rng, ctx, nkv * hd), f32(rng, ctx, nkv * hd)
    kc16, vc16 = kc32.astype(np.float16), vc32.astype(np.float16)

    async def go(name, kc, vc):
        bufs = [devices.upload(a) for a in [qkv, pos, row, kc, vc, *extra]]
        ex = devices.executor()
        ex.dispatch(name, bufs, consts)
        rbs = [ex.download(bufs[i]) for i in (0, 3, 4)]
        await ex.submit_and_wait()
        return [rb.numpy(a.shape, a.dtype) for rb, a in zip(rbs, (qkv, kc, vc))]

    q32, k32, v32 = await go(name, kc32, vc32)
    q16, k16, v16 = await go(name + "_f16", kc16, vc16)
    np.testing.assert_array_equal(q16.view(np.uint32), q32.view(np.uint32))
    stored = [0, 2, 5]
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(k16[stored].view(np.uint16), k32[stored].astype(np.float16).view(np.uint16))
        np.testing.assert_array_equal(v16[stored].view(np.uint16), v32[stored].astype(np.float16).view(np.uint16))
    rest = [1, 3, 4, 6, 7]
    np.testing.assert_array_equal(k16[rest].view(np.uint16), kc16[rest].view(np.uint16))
    np.testing.assert_array_equal(v16[rest].view(np.uint16), vc16[rest].view(np.uint16))
    assert np.isinf(v16[5, 2]) and v16[5, 3] == -65504.0  # 70000 overflows; -65519 rounds to the largest
