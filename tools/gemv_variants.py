"""T=1 matmul (matrix-vector) variants on the cuda backend: ``python tools/gemv_variants.py [--quick]``.

A research tool, not part of the package: it drives the cuda backend's private modules (NVRTC,
driver, launch geometry) directly, so it lives outside ``xinfer_async`` and may break when they
change. Run it from the repository root with the package importable (``PYTHONPATH=$PWD``).

Compiles ``xi_matvec_kernel<TYPE, R, U, PF>`` (shaders/xi_quant.cuh) for several R (rows a warp),
U (8-block steps whose raw loads are issued at once) and PF (load hints) through our NVRTC path,
checks every variant against a numpy float64 reference (fresh random inputs, y poisoned with NaN
first, accumulate 0 and 1, odd N, short and long K, unaligned x), then times each on 4096x4096 and
on the model's shapes, L2-cold: as many weight copies as fill 256 MB, one dispatch per copy, all
captured into one CUDA graph (a dispatch through Python costs ~10 us of host time, more than the
kernel, so stream-enqueued timings measure the host). The figure is the graph's time per dispatch,
the ~0.9 us graph node overhead included. ``read`` is the ceiling: a kernel that only reads the
weight's bytes (16 bytes a thread, five loads in flight), launched the same way. ``base`` is the production ``matmul_DT`` as the backend
launches it (shaders/xi_mvc.cuh's xi_mv1 at T == 1, or the tensor-core xi_tc.cuh for the weights
``_launch.tc_weight`` gives it). At T = 1..64 tokens (decode, batched decode, prefill) it times each
entry of ``matmul_DT`` forced: the staged xi_mvc (what T <= 8 launches), the register-tiled xi_mvt
(shaders/xi_mvt.cuh, T > 8: rows by its rule, tokens staged in shared memory) and, for q4_1 and
q8_0, the tensor-core xi_tc, marking the backend's choice. ``--quick`` times fewer T == 1 variants.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys

import numpy as np

from xinfer_async.hal._commands import CopyCmd, DispatchCmd, ReplayCmd, TimestampCmd

BLOCK = {"q4_1": 20, "q4_0": 18, "q8_0": 34, "f16": None}
ENUM = {"f16": "XI_F16", "q8_0": "XI_Q8_0", "q4_0": "XI_Q4_0", "q4_1": "XI_Q4_1"}
PEAK = 4300.0  # GB/s, the issue's reference


def wbytes_of(dt, N, K):
    return N * K * 2 if dt == "f16" else N * (K // 32) * BLOCK[dt]


def make_weights(rng, dt, N, K):
    """(raw uint8 bytes, float64 values (N, K))"""
    if dt == "f16":
        w = rng.standard_normal((N, K)).astype(np.float16)
        return w.view(np.uint8).reshape(-1), w.astype(np.float64)
    nb = N * K // 32
    bs = BLOCK[dt]
    raw = rng.integers(0, 256, (nb, bs), dtype=np.uint8)
    d = (rng.uniform(0.002, 0.02, nb) * rng.choice([-1, 1], nb)).astype(np.float16)
    raw[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
    dd = d.astype(np.float64)[:, None]
    if dt == "q8_0":
        vals = dd * raw[:, 2:].view(np.int8).astype(np.float64)
    elif dt == "q4_0":
        qs = raw[:, 2:]
        vals = dd * (np.concatenate([qs & 15, qs >> 4], 1).astype(np.float64) - 8)
    else:
        m = rng.uniform(-0.1, 0.1, nb).astype(np.float16)
        raw[:, 2:4] = m.view(np.uint8).reshape(nb, 2)
        qs = raw[:, 4:]
        # gguf rounding: d*q then + m, both f32
        q = np.concatenate([qs & 15, qs >> 4], 1).astype(np.float32)
        vals = ((d.astype(np.float32)[:, None] * q) + m.astype(np.float32)[:, None]).astype(np.float64)
    return raw.reshape(-1), vals.reshape(N, K)


def graph_replay_ms(be, q, stamps, cmds, reps=9) -> float:
    """Median ms of one replay of a CUDA graph of ``cmds`` on queue ``q`` between the two timestamps
    ``stamps`` (the first two replays left out)."""
    g = be.capture(cmds)
    ms = []
    for _ in range(reps):
        be._enqueue(q.stream, TimestampCmd(stamps[0]))
        be._enqueue(q.stream, ReplayCmd(g))
        be._enqueue(q.stream, TimestampCmd(stamps[1]))
        q.synchronize()
        ms.append(be.elapsed_ms(*stamps))
    be.destroy_graph(g)
    return float(np.median(ms[2:]))


def l2_cold_copies(be, q, rng, dt, N, K, most):
    """(address, stride, copies): up to ``most`` copies (at least 8) of one random (N, K) weight
    filling ~256 MB, so a graph that reads each once reads them L2-cold."""
    wb = wbytes_of(dt, N, K)
    stride = -(-wb // 256) * 256
    copies = int(min(most, max(8, math.ceil(256e6 / stride))))
    big = be.alloc(stride * copies)
    raw, _ = make_weights(rng, dt, N, K)
    be.write(big, raw)
    for i in range(1, copies):
        be._enqueue(q.stream, CopyCmd(big + i * stride, big, wb))
    q.synchronize()
    return big, stride, copies


def read_source(dt):
    """CUDA C of ``mv_<dt>_read``, the ceiling: a kernel with ``matmul_DT``'s parameters that reads the
    (N, K) weight's bytes once, 16 bytes a thread and 5 loads in flight, and computes nothing (grid
    ``read_grid``)."""
    return (f'extern "C" __global__ void __launch_bounds__(256) mv_{dt}_read(const uint4 *__restrict__ w, '
            f'const float *__restrict__ x, float *__restrict__ y, xi_matmul_c c) {{ xi_grid_begin(); '
            f'const long long n16 = (long long)XiQ<{ENUM[dt]}>::row_bytes(c.K) * c.N / 16, '
            f'i0 = (long long)blockIdx.x * 1280 + threadIdx.x; uint4 v[5]; '
            f'for (int i = 0; i < 5; i++) v[i] = i0 + 256 * i < n16 ? __ldg(w + i0 + 256 * i) : make_uint4(0, 0, 0, 0); '
            f'unsigned a = 0; for (int i = 0; i < 5; i++) a ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w; '
            f'if (a == 0x9e3779b9u) y[0] = x[0]; }}')


def read_grid(dt, N, K):
    """Blocks of ``mv_<dt>_read`` (1280 16-byte loads a block)."""
    return (max(1, -(-wbytes_of(dt, N, K) // 20480)), 1, 1)


def variants(dt, quick):
    """("mv1", R): the production T == 1 block (xi_mvc.cuh's xi_mv1_block: L2 prefetch of its rows,
    the wait for the previous kernel, R rows a warp) at a forced R; (R, U, PF): xi_quant.cuh's
    xi_matvec_kernel; ("mma", ...), ("smem", ...): the tensor-core and smem-staged designs."""
    mv1 = [("mv1", 1, 0, 0), ("mv1", 2, 0, 0), ("mv1", 1, 8, 0), ("mv1", 1, 16, 0), ("mv1", 2, 8, 0)]
    if dt in ("q8_0", "f16"):
        mv1 = [v for v in mv1 if v[1] * v[2] <= 8]  # the raw words of a step within 48 registers
    if dt == "f16":
        v = [(1, 2, 0), (2, 2, 0), ("smem", 1, 16, 0), ("smem", 2, 16, 0)]
    else:
        v = [(1, 4, 0), (2, 4, 0), (1, 8, 1), ("mma", 1, 4, 0), ("smem", 1, 32, 0), ("smem", 2, 32, 0),
             ("smem", 1, 64, 0), ("smem", 2, 64, 0), ("smem", 4, 32, 0)]
    return mv1 if quick else mv1 + v


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    quick = "--quick" in argv
    from xinfer_async.backends.cuda import CUDABackend
    from xinfer_async.backends.cuda import _nvrtc
    from xinfer_async.backends.cuda._backend import CUDAKernel, shader_dir
    from xinfer_async.backends.cuda._driver import check, ffi

    be = CUDABackend()
    q = be.create_queue()
    lib = be._lib
    d = shader_dir()
    headers = {h: open(os.path.join(d, h)).read() for h in sorted(os.listdir(d)) if h.endswith(".cuh")}
    rng = np.random.default_rng(12345)
    out_dir = os.environ.get("OUT")
    results = []

    kernels = {}  # dt -> [(label, kernel)]
    for dt in ENUM:
        src = ['#include "xi_mvc.cuh"']
        names = []
        for v in variants(dt, quick):
            mma, sm, mv1 = v[0] == "mma", v[0] == "smem", v[0] == "mv1"
            R, U, PF = v[1:] if isinstance(v[0], str) else v
            if mv1:
                nm = f"mv_{dt}_mv1_R{R}_U{U}"
                names.append((nm, R))
                src.append(f'extern "C" __global__ void __launch_bounds__(256, 4) {nm}(const uint8_t *__restrict__ w, '
                           f'const float *__restrict__ x, float *__restrict__ y, xi_matmul_c c) '
                           f'{{ const XiMvcArgs a{{w, x, nullptr, y, c.T, c.N, c.K, c.accumulate, 0.0f}}; '
                           f'xi_mv1_block<{ENUM[dt]}, {R}, false, false, {U}>(a); }}')
                continue
            nm = f"mv_{dt}_{'M' if mma else 'S' if sm else 'R'}{R}_U{U}_P{PF}"
            names.append((nm, 16 * R / 8 if mma else R))
            body = (f"xi_matvec_mma_kernel<{ENUM[dt]}, {R}, {U}, {PF}>" if mma else f"xi_matvec_s_kernel<{ENUM[dt]}, {R}, {U}>"
                    if sm else f"xi_matvec_kernel<{ENUM[dt]}, {R}, {U}, {PF}>")
            src.append(f'extern "C" __global__ void __launch_bounds__(256) {nm}(const uint8_t *__restrict__ w, '
                       f'const float *__restrict__ x, float *__restrict__ y, xi_matmul_c c) '
                       f'{{ xi_grid_begin(); {body}(w, x, y, c); }}')
        src.append(read_source(dt))
        cubin = _nvrtc.compile_cubin("\n".join(src), f"gemv_{dt}.cu", be.arch, headers, driver_version=be.driver_version)
        mod = ffi.new("CUmodule *")
        check(lib.cuModuleLoadData(mod, cubin), "cuModuleLoadData")
        lst = [("base", be.load_kernel(f"matmul_{dt}"))]
        for nm, R in names:
            fn = ffi.new("CUfunction *")
            check(lib.cuModuleGetFunction(fn, mod[0], nm.encode()), nm)
            lst.append((nm[3 + len(dt):], CUDAKernel(nm, mod[0], fn[0], 256,
                                                      lambda c, R=R: (max(1, -(-c["N"] // int(8 * R))), 1, 1), pdl=True)))
        fn = ffi.new("CUfunction *")
        check(lib.cuModuleGetFunction(fn, mod[0], f"mv_{dt}_read".encode()), "read")
        lst.append(("read", CUDAKernel("read", mod[0], fn[0], 256, lambda c, dt=dt: read_grid(dt, c["N"], c["K"]), pdl=True)))
        kernels[dt] = lst

    def dispatch(k, w, x, y, N, K, acc=0, T=1):
        c = dict(T=T, N=N, K=K, accumulate=acc)
        return DispatchCmd(k, k.launch_grid(c), [w, x, y], struct.pack("<iiii", T, N, K, acc))

    # ---- correctness ----------------------------------------------------------------------------
    fails = 0
    cases = [(257, 4096, 0, 0), (2049, 576, 1, 0), (1, 32, 0, 0), (7, 96, 1, 0), (960, 576, 0, 0),
             (33, 8192, 1, 0), (300, 1536, 0, 4), (40, 8224, 0, 0), (50, 576, 1, -1)]  # -1: x has a 1e5  # last field: x byte offset (4: the scalar path)
    for dt, lst in kernels.items():
        for N, K, acc, xoff in cases:
            raw, wv = make_weights(rng, dt, N, K)
            x = rng.standard_normal(K).astype(np.float32)
            if xoff < 0:
                x[K // 2] = 1e5
                xoff = 0
            y0 = rng.standard_normal(N).astype(np.float32)
            ref = wv @ x.astype(np.float64) + (y0 if acc else 0)
            bound = 1e-5 * (np.abs(wv) @ np.abs(x.astype(np.float64))) + 1e-6
            pw, px, py = be.alloc(raw.nbytes + 16), be.alloc(K * 4 + 16), be.alloc(N * 4)
            be.write(pw, raw)
            be.write(px + xoff, x.view(np.uint8))
            for label, k in lst:
                if label == "read":  # computes nothing
                    continue
                y_init = y0 if acc else np.full(N, np.nan, np.float32)
                be.write(py, y_init.view(np.uint8))
                be._enqueue(q.stream, dispatch(k, pw, px + xoff, py, N, K, acc))
                q.synchronize()
                y = np.empty(N, np.float32)
                be.read(py, y.view(np.uint8))
                err = np.abs(y - ref)
                ok = bool((err <= bound).all())
                if not ok:
                    fails += 1
                    print(f"FAIL {dt} {label} N={N} K={K} acc={acc} xoff={xoff}: max err {np.nanmax(err):.3g} "
                          f"(bound {bound.min():.3g}), nan {int(np.isnan(y).sum())}")
            for p in (pw, px, py):
                be.free(p)
    print(f"correctness: {fails} failures over {sum(len(v) for v in kernels.values()) * len(cases)} runs")

    # ---- timing -----------------------------------------------------------------------------------
    e0, e1 = be.create_timestamp(), be.create_timestamp()
    px, py = be.alloc(64 * 8192 * 4), be.alloc(64 * 65536 * 4)
    be.write(px, rng.standard_normal(64 * 8192).astype(np.float32).view(np.uint8))

    shapes = [("q4_1", 4096, 4096), ("q4_0", 4096, 4096), ("q8_0", 4096, 4096), ("f16", 4096, 4096),
              ("q4_1", 4096, 8192)]
    for dt in ("q4_1", "q4_0", "q8_0"):
        shapes += [(dt, 960, 576), (dt, 576, 576), (dt, 3072, 576), (dt, 576, 1536)]
    shapes += [("q8_0", 49152, 576)]
    shapes += [("q4_1", 2048, 2048), ("q4_1", 512, 2048), ("q4_1", 2048, 8192)]  # Llama-3.2-1B's
    if quick:
        shapes = shapes[:4] + [("q4_1", 960, 576), ("q4_1", 576, 1536), ("q8_0", 49152, 576)] + shapes[-3:]
    def graph_ms(cmds, reps=9) -> float:
        return graph_replay_ms(be, q, (e0, e1), cmds, reps)

    def weight_copies(dt, N, K, most):
        return l2_cold_copies(be, q, rng, dt, N, K, most)

    table = []
    for dt, N, K in shapes:
        wb = wbytes_of(dt, N, K)
        big, stride, copies = weight_copies(dt, N, K, 512)
        row = []
        for label, k in kernels[dt]:
            us = graph_ms([dispatch(k, big + i * stride, px, py, N, K) for i in range(copies)]) * 1e3 / copies
            gbs = wb / us / 1e3
            row.append((label, us, gbs))
            results.append(dict(dt=dt, N=N, K=K, variant=label, us=us, gbs=gbs, copies=copies))
        be.free(big)
        best = min((r for r in row if r[0] != "read"), key=lambda r: r[1])
        print(f"\n{dt} N={N} K={K} ({wb / 1e6:.2f} MB, {copies} copies)  best {best[0]}")
        for label, us, gbs in row:
            print(f"  {label:14s} {us:8.2f} us {gbs:9.1f} GB/s {100 * gbs / PEAK:5.1f}%{'  *' if label == best[0] else ''}")
        table.append((dt, N, K, row))
    # the matrix kernel's entries at T tokens (their results are checked by tests/test_fused_kernels.py,
    # not here): the staged xi_mvc (``staged``, launched at T <= 8; xi_mv1 at T == 1), the
    # register-tiled xi_mvt (``tiled``, T > 8) and, for q4_1 and q8_0, the tensor-core xi_tc (``tc``),
    # each forced at every T; ``*`` marks the one the backend launches (_launch.matmul_launch)
    from xinfer_async.backends.cuda._backend import LaunchGrid
    from xinfer_async.backends.cuda import _launch

    def entry_cmd(k, which, w, N, K, T, dt):
        c = dict(T=T, N=N, K=K, accumulate=0)
        if which == "staged":
            g = LaunchGrid(_launch._matmul_grid(c, dt), (256, 1, 1), 0, k.entries[""])
        elif which == "tiled":
            g = LaunchGrid(_launch._tiled_grid(c, False), (256, 1, 1), _launch.mvt_stage_bytes(dt, K, be.stage_max),
                           k.entries["_t"])
        else:
            grid, block, shared, suffix = _launch.tc_launch(c, False)
            g = LaunchGrid(grid, block, shared, k.entries[suffix])
        return DispatchCmd(k, g, [w, px, py], struct.pack("<iiii", T, N, K, 0))

    print("\nmatmul_DT at T tokens (L2-cold weights), us a launch: staged xi_mvc / tiled xi_mvt / tensor-core "
          "xi_tc (q4_1, q8_0); * the backend's choice")
    for dt, N, K in [("q4_1", 960, 576), ("q4_1", 576, 576), ("q4_1", 3072, 576), ("q4_1", 576, 1536),
                     ("q4_1", 4096, 4096), ("q8_0", 49152, 576), ("q4_0", 960, 576)]:
        big, stride, copies = weight_copies(dt, N, K, 256 if N * K < 2**24 else 24)
        base = kernels[dt][0][1]
        whichs = ("staged", "tiled") + (("tc",) if dt in _launch.TC_TYPES else ())
        line = []
        for T in (1, 4, 8, 16, 64):
            chosen = base.launch_grid(dict(T=T, N=N, K=K, accumulate=0)).function
            cells = []
            for which in whichs:
                cmds = [entry_cmd(base, which, big + i * stride, N, K, T, dt) for i in range(copies)]
                us = graph_ms(cmds, 7) * 1e3 / copies
                cells.append(f"{us:6.2f}{'*' if cmds[0].grid.function == chosen else ' '}")
                results.append(dict(dt=dt, N=N, K=K, variant=f"{which}_T{T}", us=us,
                                    gbs=wbytes_of(dt, N, K) / us / 1e3, copies=copies))
            line.append(f"T={T}: " + " / ".join(cells))
        be.free(big)
        print(f"  {dt} N={N:5d} K={K:5d}  " + "  ".join(line))
    # an empty graph node, for the per-dispatch floor
    aff = be.load_kernel("affine")
    node_ms = graph_ms([DispatchCmd(aff, (1, 1, 1), [px, px], struct.pack("<iff", 1, 1.0, 0.0))] * 256)
    print(f"\nempty graph node: {node_ms * 1e3 / 256:.2f} us")
    if out_dir:
        with open(os.path.join(out_dir, "gemv_variants.json"), "w") as f:
            json.dump(dict(fails=fails, results=results), f, indent=1)
    be.close()
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
