"""Decode attention per layer against the context length, on the cuda backend:
``python tools/attention_bench.py [--ctx 128,1024,4096,16384] [--ts 1] [--heads 8b,smollm2]``.

A research tool, not part of the package (it drives the cuda backend's private modules, like
tools/mmq_bench.py, whose graph timing it reuses); run it from the repository root with
``PYTHONPATH=$PWD:$PWD/tools``. ``--only VARIANT`` times one variant alone (no comparison): the
launches a profiler sees are then that variant's (.ci/h200's ncu-attention stage).

Shapes: Llama-3.1-8B's heads (32 query heads, 8 kv heads, head_dim 128) and SmolLM2's (9 / 3, 64); every
token attends the whole cache (p = ctx - 1), or its first ``--keys`` (the launch still sized for the
cache, as a model's is). Variants (rows):

- ``old``: the single-pass kernel before split-K (tools/attention_bench_old.cuh: a block per (token,
  kv head, share of its query heads) walks every key), f32 cache;
- ``one``: today's kernel with the split forced off (S = 1: a block walks every segment of its row and
  merges them in registers; the path of T > 8), f32 cache;
- ``split``: today's kernel as the backend launches it (``_launch.attention_launch``: S blocks a row),
  f32 cache; ``split f16``: the same over an f16 cache (``attention_f16``).

A figure is one launch's device time: a CUDA graph of 20 launches over L2-cold cache copies (together at
least 256 MB, as a decode step's weights flush L2 between layers), timed with CUDA events, the median
of 5 replays (2 more left out), / 20. Columns: us, GB/s of the k and v bytes read (against the H200's
4.8 TB/s), S (split-K blocks a row), and old/this. Before timing, each variant's output is compared
with ``old``'s (max |diff| / max |old|: split-K's other summation order, ~1e-6; the f16 cache's
rounding, ~1e-3; a broken kernel shows up as NaN or ~1).
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np

from gemv_variants import graph_replay_ms
from xinfer_async.hal._commands import CopyCmd, DispatchCmd

HEADS = {"8b": (32, 8, 128), "smollm2": (9, 3, 64)}
VARIANTS = ("old", "one", "split", "split f16")
LAUNCHES = 20
OLD_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention_bench_old.cuh")


def load_old(be):
    """The baseline kernel (entries ``""``, ``_d4``, ``_d8``), compiled from tools/attention_bench_old.cuh
    with today's shared headers."""
    from xinfer_async.backends.cuda import CUDAKernel, _nvrtc
    from xinfer_async.backends.cuda._driver import check, ffi
    from xinfer_async.backends.cuda._driver import load as load_driver
    from xinfer_async.backends.cuda._kernel import _shader_inputs

    _, _, headers, options = _shader_inputs("attention", be.stage_max)
    headers = {k: v for k, v in headers.items() if k != "xi_attention.cuh"}
    with open(OLD_SOURCE) as f:
        headers["attention_bench_old.cuh"] = f.read()
    cubin = _nvrtc.compile_cubin('#include "attention_bench_old.cuh"\n', "attention_old.cu", be.arch, headers, options,
                                 be.driver_version)
    lib = load_driver()
    mod = ffi.new("CUmodule *")
    check(lib.cuModuleLoadData(mod, cubin), "cuModuleLoadData")
    entries = {}
    for sfx in ("", "_d4", "_d8"):
        fn = ffi.new("CUfunction *")
        check(lib.cuModuleGetFunction(fn, mod[0], f"attention{sfx}".encode()), f"attention{sfx}")
        entries[sfx] = fn[0]
    return CUDAKernel("attention_old", mod[0], entries[""], 256, lambda c: (1, 1, 1), entries=entries, pdl=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctx", default="128,1024,4096,16384", help="context lengths (default: 128,1024,4096,16384)")
    ap.add_argument("--ts", default="1", help="tokens a launch, each over the whole cache (default: 1)")
    ap.add_argument("--keys", type=int, default=None,
                    help="keys each token attends, at most the context (default: the whole context); the launch "
                         "stays sized for --ctx, as a model's is for its cache (e.g. --ctx 2048 --keys 64: a short "
                         "row in a default-sized cache)")
    ap.add_argument("--heads", default="8b,smollm2", help=f"head shapes of {sorted(HEADS)} (default: both)")
    ap.add_argument("--only", choices=VARIANTS, default=None,
                    help="time that variant alone, no comparison (e.g. for a profiler: its launches alone)")
    args = ap.parse_args(argv)
    if args.keys is not None and args.keys < 1:
        ap.error(f"--keys must be >= 1, got {args.keys}")

    from xinfer_async.backends.cuda import CUDABackend
    from xinfer_async.backends.cuda import _launch
    from xinfer_async.backends.cuda._kernel import LaunchGrid
    from xinfer_async.ops import kernel_spec
    from xinfer_async.ops._attention_split import count_ints, workspace_floats

    be = CUDABackend()
    q = be.create_queue()
    sms = be.multiprocessors
    rng = np.random.default_rng(2026)
    old = load_old(be)
    new = {"f32": be.load_kernel("attention"), "f16": be.load_kernel("attention_f16")}
    e0, e1 = be.create_timestamp(), be.create_timestamp()
    print(f"device {getattr(be, 'description', '')}, {sms} SMs; a figure: one launch's device time (us), median of 5 "
          f"graph replays of {LAUNCHES} launches over L2-cold cache copies; GB/s of k and v bytes read")
    rc = 0
    for hname in args.heads.split(","):
        nh, nkv, hd = HEADS[hname]
        for T in [int(t) for t in args.ts.split(",")]:
            print(f"\n{hname}: {nh} q heads, {nkv} kv heads, head_dim {hd}, T = {T}"
                  + (f", rows of {args.keys} keys (at most the context)" if args.keys else ""))
            print(f"  {'ctx':>6} " + " ".join(f"{v:>22}" for v in ("old", "one", "split", "split f16"))
                  + "   max |diff| / max |old|: one, split, split f16")
            for ctx in [int(c) for c in args.ctx.split(",")]:
                c = dict(T=T, n_head=nh, n_kv=nkv, head_dim=hd, ctx=ctx, q_stride=nh * hd, scale=1 / math.sqrt(hd),
                         window=0)
                packed = kernel_spec("attention").pack(c)[0]
                qv = rng.standard_normal(T * nh * hd).astype(np.float32)
                kv32 = rng.standard_normal(2 * ctx * nkv * hd).astype(np.float32)
                keys = min(ctx, args.keys or ctx)
                pos = np.full(T, keys - 1, np.int32)
                bufs = {}
                for name, arr in (("q", qv), ("pos", pos)):
                    bufs[name] = be.alloc(arr.nbytes)
                    be.write(bufs[name], arr.view(np.uint8))
                out = be.alloc(T * nh * hd * 4)
                part = be.alloc(max(4, 4 * workspace_floats(T, nh, hd)))
                count = be.alloc(max(4, 4 * count_ints(T, nh)))
                be.write(count, np.zeros(max(1, count_ints(T, nh)), np.int32).view(np.uint8))
                caches = {}
                for dt, arr in (("f32", kv32), ("f16", kv32.astype(np.float16))):
                    nb = arr.nbytes // 2  # one of k, v
                    stride = -(-nb // 256) * 256
                    copies = int(min(LAUNCHES, max(2, math.ceil(256e6 / (2 * stride)))))
                    big = be.alloc(2 * stride * copies)
                    be.write(big, arr[: arr.size // 2].view(np.uint8))
                    be.write(big + stride, arr[arr.size // 2:].view(np.uint8))
                    for i in range(1, copies):
                        be._enqueue(q.stream, CopyCmd(big + 2 * i * stride, big, 2 * stride))
                    q.synchronize()
                    caches[dt] = (big, stride, copies, nb)
                suffix = next(s for d, s in ((64, ""), (128, "_d4"), (256, "_d8")) if hd <= d)
                group = nh // nkv

                def launches(variant):
                    """(kernel, grid, cache type, S) of a variant."""
                    if variant == "old":
                        z = -(-group // 4) if T * nkv >= sms else group
                        return old, LaunchGrid((T, nkv, z), (256, 1, 1), 0, old.entries[suffix]), "f32", 1
                    dt = "f16" if variant == "split f16" else "f32"
                    k = new[dt]
                    if variant == "one":
                        z = -(-group // 4) if T * nkv >= sms else group
                        return k, LaunchGrid((T, nkv, z), (256, 1, 1), 0, k.entries[suffix]), dt, 1
                    g = k.launch_grid(c)
                    return k, g, dt, g[1] // nkv

                def cmd(variant, i):
                    k, g, dt, _ = launches(variant)
                    big, stride, copies, _ = caches[dt]
                    kb = big + 2 * (i % copies) * stride
                    addrs = [bufs["q"], kb, kb + stride, bufs["pos"], out]
                    if variant != "old":
                        addrs += [part, count]
                    return DispatchCmd(k, g, addrs, packed)

                results, cells = {}, []
                for variant in (args.only,) if args.only else VARIANTS:
                    be._enqueue(q.stream, cmd(variant, 0))
                    q.synchronize()
                    o = np.empty(T * nh * hd, np.float32)
                    be.read(out, o.view(np.uint8))
                    results[variant] = o
                    graph = [cmd(variant, i) for i in range(LAUNCHES)]
                    us = graph_replay_ms(be, q, (e0, e1), graph, reps=7) * 1e3 / LAUNCHES
                    _, _, dt, S = launches(variant)
                    gbs = 2 * caches[dt][3] * keys / ctx / us / 1e3  # the keys' k and v bytes
                    results[variant + " us"] = us
                    cells.append(f"{us:8.1f} {gbs:6.0f} S={S:<3}")
                if args.only:
                    print(f"  {ctx:>6} {args.only}: {cells[0]}", flush=True)
                else:
                    ref = results["old"]
                    diffs = []
                    for variant in ("one", "split", "split f16"):
                        d = float(np.max(np.abs(results[variant] - ref)) / max(1e-30, float(np.max(np.abs(ref)))))
                        diffs.append(d)
                        if not math.isfinite(d) or d > (1e-2 if "f16" in variant else 1e-4):
                            rc = 1
                    speed = results["old us"] / results["split us"]
                    print(f"  {ctx:>6} " + " ".join(f"{cell:>22}" for cell in cells)
                          + "   " + ", ".join(f"{d:.1e}" for d in diffs) + f"   old/split {speed:.2f}x", flush=True)
                for p in (*bufs.values(), out, part, count, *(v[0] for v in caches.values())):
                    be.free(p)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
