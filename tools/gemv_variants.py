"""T=1 matmul (matrix-vector) variants on the cuda backend: ``python tools/gemv_variants.py [--quick | --mvp | --mvq]``.

``--mvp``: only the pipelined kernel (shaders/xi_mvp.cuh, entry ``_p``) and its variants against the
old entry and the read ceiling on Llama-3.1-8B / 3.2-1B shapes at T = 1, 2, 4, 8 (``mvp_main``), the
K-quants' (q4_k, q6_k: a Q4_K_M file's) beside q4_1's per byte; ``--dt q4_1,q4_k,q6_k`` keeps the shapes
of those types, ``--t 1`` those token counts, ``--quick`` leaves the variants out:
``python tools/gemv_variants.py --mvp --dt q4_1,q8_0,q4_k,q6_k --t 1``.

``--mvq``: the integer decode kernel (shaders/xi_mvq.cuh, entry ``_pq``) and its (R, S, CG, TT) variants
beside ``_p`` and ``read``, each checked against the numpy model first (tools/gemv_mvq.py):
``python tools/gemv_variants.py --mvq --dt q4_1,q8_0,q4_k,q6_k --t 1,2,4,8 --json $OUT/gemv_mvq.json``.

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
import time

import numpy as np

from xinfer_async.backends.cuda._launch import row_bytes
from xinfer_async.hal._commands import CopyCmd, DispatchCmd, ReplayCmd, TimestampCmd
from xinfer_async.hal._layout import write_in_device_layout

BLOCK = {"q4_1": 20, "q4_0": 18, "q8_0": 34, "f16": None}
ENUM = {"f16": "XI_F16", "q8_0": "XI_Q8_0", "q4_0": "XI_Q4_0", "q4_1": "XI_Q4_1"}
#: the types of xi_kquant.cuh the ``--mvp`` table covers: (enum, elements a block, bytes a block, offsets of
#: the block's f16 scale fields; ggml-common.h)
KQUANT = {"q4_k": ("XI_Q4_K", 256, 144, (0, 2)), "q5_k": ("XI_Q5_K", 256, 176, (0, 2)),
          "q6_k": ("XI_Q6_K", 256, 210, (208,)), "q5_0": ("XI_Q5_0", 32, 22, (0,))}
MVP_ENUM = {**ENUM, **{dt: v[0] for dt, v in KQUANT.items()}}
PEAK = 4300.0  # GB/s, the issue's reference


def wbytes_of(dt, N, K):
    return N * row_bytes(dt, K)


def kquant_raw(rng, dt, N, K):
    """Random blocks of a KQUANT type for an (N, K) weight: every byte random (every field of the block
    exercised), the f16 scale fields 0.002..0.02 of either sign. uint8 (N, row bytes)."""
    _, qk, bs, offs = KQUANT[dt]
    nb = N * K // qk
    raw = rng.integers(0, 256, (nb, bs), dtype=np.uint8)
    for off in offs:
        raw[:, off:off + 2] = (rng.uniform(0.002, 0.02, nb) * rng.choice([-1, 1], nb)).astype(np.float16) \
            .view(np.uint8).reshape(nb, 2)
    return raw.reshape(N, -1)


def make_weights(rng, dt, N, K):
    """(raw uint8 bytes, float64 values (N, K)); the KQUANT types' values from gguf.quants.dequantize."""
    if dt in KQUANT:
        import gguf

        raw = kquant_raw(rng, dt, N, K)
        qt = getattr(gguf.GGMLQuantizationType, dt.upper())
        return raw.reshape(-1), gguf.quants.dequantize(raw, qt).astype(np.float64).reshape(N, K)
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


def write_weight(be, address, dt, raw):
    """``be.write`` of a weight's GGUF bytes ``raw`` of type ``dt`` to ``address``, in the backend's
    device layout of ``dt`` where it keeps one (``Backend.device_layouts``: q6_k rotated on cuda)."""
    write_in_device_layout(be, dt, address, raw)


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
    write_weight(be, big, dt, raw)
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
            f'const long long n16 = (long long)XiQ<{MVP_ENUM[dt]}>::row_bytes(c.K) * c.N / 16, '
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


# ---- the pipelined kernel (shaders/xi_mvp.cuh, entry ``_p``) against the kernels it replaces -------
#: (kind, dt, N output rows, K): Llama-3.1-8B's (wo, qkv, down, gate+up, output), Llama-3.2-1B's,
#: a few other types, and a SmolLM2-135M-sized one (below MVP_MIN_BYTES: the old kernel stays)
MVP_SHAPES = [("matmul", "q4_1", 4096, 4096), ("rmsnorm_matmul", "q4_1", 6144, 4096), ("matmul", "q4_1", 4096, 14336),
              ("rmsnorm_matmul_swiglu", "q4_1", 14336, 4096), ("rmsnorm_matmul", "q8_0", 128256, 4096),
              ("matmul", "q4_1", 2048, 2048), ("rmsnorm_matmul", "q4_1", 3072, 2048), ("matmul", "q4_1", 2048, 8192),
              ("rmsnorm_matmul_swiglu", "q4_1", 8192, 2048), ("rmsnorm_matmul", "q8_0", 128256, 2048),
              ("matmul", "q4_0", 4096, 4096), ("matmul", "q8_0", 4096, 4096), ("matmul", "f16", 4096, 4096),
              ("rmsnorm_matmul_swiglu", "q8_0", 14336, 4096), ("matmul", "q4_1", 576, 1536)] + [
    # a Llama-3.1-8B Q4_K_M file's: q4_k but for the output and some layers' ffn_down (q6_k); and each
    # 8B shape in the other type too, for the ratio a byte against q4_1 on the same shape
    (kind, dt, N, K) for dt in ("q4_k", "q6_k") for kind, N, K in (
        ("matmul", 4096, 4096), ("rmsnorm_matmul", 6144, 4096), ("matmul", 4096, 14336),
        ("rmsnorm_matmul_swiglu", 14336, 4096), ("rmsnorm_matmul", 128256, 4096))] + [
    ("rmsnorm_matmul", "q4_1", 128256, 4096), ("matmul", "q5_k", 4096, 14336), ("matmul", "q5_0", 4096, 4096)]
MVP_T = (1, 2, 4, 8)
EPS = 1e-5


#: the types of xi_mvp.cuh's SC variants (scales after the code dots, xi_kquant.cuh's XiMvS)
MVP_SC_TYPES = ("q4_k", "q5_k", "q6_k")


def mvp_variants(dt, glu):
    """(R, S, CG, SC) of the pipelined kernel to time besides the default (``_launch.mvp_params``): rows
    a warp, stages, groups a chunk (CG scaled with the default's for the type); for MVP_SC_TYPES also
    SC (the sub-block scales after the code dots) at the default (R, S, CG) and at R = 1."""
    from xinfer_async.backends.cuda import _launch

    r0, s0, cg = _launch.mvp_params(dt, glu)
    v = [(1, 2, cg), (1, 4, cg), (2, 2, cg)] if glu else [(1, 3, cg), (2, 2, cg), (2, 4, cg), (4, 2, cg), (2, 2, 2 * cg)]
    v = [x + (False,) for x in v if x != (r0, s0, cg)]
    if dt in MVP_SC_TYPES:
        v += [(r0, s0, cg, True)] + ([] if glu else [(1, s0, cg, True)])
    return v


def mvp_label(r, st, cg, sc):
    """A variant's label and entry-name suffix: ``R2S3C8``, ``R2S3C8sc``."""
    return f"R{r}S{st}C{cg}" + ("sc" if sc else "")


def raw_weights(rng, dt, rows, K):
    """Random raw bytes of a (rows, K) weight of type dt with finite, moderate scales (no float64 copy)."""
    if dt == "f16":
        return (rng.standard_normal(rows * K).astype(np.float16) * 0.05).view(np.uint8)
    if dt in KQUANT:
        return kquant_raw(rng, dt, rows, K).reshape(-1)
    nb, bs = rows * K // 32, BLOCK[dt]
    raw = rng.integers(0, 256, (nb, bs), dtype=np.uint8)
    raw[:, 0:2] = (rng.uniform(0.002, 0.02, nb) * rng.choice([-1, 1], nb)).astype(np.float16).view(np.uint8).reshape(nb, 2)
    if dt == "q4_1":
        raw[:, 2:4] = rng.uniform(-0.1, 0.1, nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
    return raw.reshape(-1)


def mvp_source(kind, dt, quick=False) -> str:
    """CUDA C of the ``--mvp`` module of (kind, dt): ``read_source(dt)`` and an entry
    ``mvp_<kind>_<dt>_<mvp_label>`` a variant of ``mvp_variants`` (none where ``quick``)."""
    glu, norm = kind == "rmsnorm_matmul_swiglu", kind != "matmul"
    src = ['#include "xi_mvp.cuh"', read_source(dt)]
    cstruct = {"matmul": "xi_matmul_c", "rmsnorm_matmul": "xi_rmsnorm_matmul_c",
               "rmsnorm_matmul_swiglu": "xi_rmsnorm_matmul_swiglu_c"}[kind]
    for r, st, cg, sc in ([] if quick else mvp_variants(dt, glu)):
        nm = f"mvp_{kind}_{dt}_{mvp_label(r, st, cg, sc)}"
        params = ("const uint8_t *__restrict__ w, const float *__restrict__ x, " +
                  ("const float *__restrict__ norm, " if norm else "") + f"float *__restrict__ y, {cstruct} c")
        acc = "c.accumulate" if kind != "rmsnorm_matmul_swiglu" else "0"
        src.append(f'extern "C" __global__ void __launch_bounds__(256, 2) {nm}({params}) {{ '
                   f'const XiMvcArgs a{{w, x, {"norm" if norm else "nullptr"}, y, c.T, c.N, c.K, {acc}, '
                   f'{"c.eps" if norm else "0.0f"}}}; xi_mvp_kernel<{MVP_ENUM[dt]}, {r}, {st}, {cg}, '
                   f'{"true" if norm else "false"}, {"true" if glu else "false"}, {"true" if sc else "false"}>(a); }}')
    return "\n".join(src)


def mvp_selection(argv) -> tuple[list, tuple, bool]:
    """(shapes, token counts, quick) of ``--mvp`` from ``argv``: ``--dt A,B`` keeps the MVP_SHAPES of
    those types (and q4_1's of the same (kind, N, K), the per-byte reference), ``--t 1,8`` those token
    counts of MVP_T, ``--quick`` leaves mvp_variants out.

    Raises:
        ValueError: a type or a token count that the table does not have."""
    def opt(name):
        return argv[argv.index(name) + 1].split(",") if name in argv else None

    shapes, ts = list(MVP_SHAPES), MVP_T
    dts = opt("--dt")
    if dts:
        bad = [d for d in dts if d not in {s[1] for s in MVP_SHAPES}]
        if bad:
            raise ValueError(f"--dt {bad} not among the types of MVP_SHAPES {sorted({s[1] for s in MVP_SHAPES})}")
        keys = {(k, n, kk) for k, d, n, kk in MVP_SHAPES if d in dts}
        shapes = [s for s in MVP_SHAPES if s[1] in dts or (s[1] == "q4_1" and (s[0], s[2], s[3]) in keys)]
    if opt("--t"):
        ts = tuple(int(t) for t in opt("--t"))
        if not set(ts) <= set(MVP_T):
            raise ValueError(f"--t {ts} not within MVP_T {MVP_T}")
    return shapes, ts, "--quick" in argv


def run_entries(be, q, k, ents, bind, packed, py, y0):
    """Each (label, LaunchGrid) of ``ents`` of kernel ``k`` run once with y reset to ``y0`` (T, N) f32
    first (``bind``: its buffers, ``py`` the output): label -> y (T, N) f32 as the device left it."""
    got = {}
    for label, g in ents:
        be.write(py, y0.view(np.uint8))
        be._enqueue(q.stream, DispatchCmd(k, g, bind, packed))
        q.synchronize()
        y = np.empty(y0.shape, np.float32)
        be.read(py, y.view(np.uint8))
        got[label] = y
    return got


def consts(kind, T, N, K, acc):
    """(constants dict, packed bytes) of a matrix kernel's launch: T, N, K, then accumulate (not the
    SwiGLU kind) and eps (the rmsnorm kinds)."""
    c = dict(T=T, N=N, K=K)
    if kind != "rmsnorm_matmul_swiglu":
        c["accumulate"] = acc
    if kind != "matmul":
        c["eps"] = EPS
    packed = struct.pack("<iii", T, N, K) + (struct.pack("<i", acc) if "accumulate" in c else b"") + \
        (struct.pack("<f", EPS) if "eps" in c else b"")
    return c, packed


def variant_modules(be, sources: dict, stem: str) -> dict:
    """key -> loaded CUmodule of each CUDA C source (``sources``: key (kind, dt) -> text, compiled on
    8 threads: cffi releases the GIL in NVRTC; file names ``{stem}_{kind}_{dt}.cu``), with the
    shaders' headers."""
    from concurrent.futures import ThreadPoolExecutor

    from xinfer_async.backends.cuda import _nvrtc
    from xinfer_async.backends.cuda._driver import check, ffi
    from xinfer_async.backends.cuda._kernel import shader_dir

    d = shader_dir()
    headers = {h: open(os.path.join(d, h)).read() for h in sorted(os.listdir(d)) if h.endswith(".cuh")}
    keys = list(sources)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        cubins = dict(zip(keys, pool.map(lambda kd: _nvrtc.compile_cubin(
            sources[kd], f"{stem}_{kd[0]}_{kd[1]}.cu", be.arch, headers, driver_version=be.driver_version), keys)))
    print(f"variants compiled or cached in {time.perf_counter() - t0:.0f} s")
    mods = {}
    for kd in keys:
        be.make_current()
        mod = ffi.new("CUmodule *")
        check(be._lib.cuModuleLoadData(mod, cubins[kd]), "cuModuleLoadData")
        mods[kd] = mod[0]
    return mods


def cu_function(be, mod, nm: str, shared_max: int = 0):
    """The CUfunction ``nm`` of ``mod``, allowed ``shared_max`` dynamic shared bytes past 48 KB."""
    from xinfer_async.backends.cuda import _driver
    from xinfer_async.backends.cuda._driver import check, ffi

    fn = ffi.new("CUfunction *")
    check(be._lib.cuModuleGetFunction(fn, mod, nm.encode()), nm)
    if shared_max > 48 * 1024:
        check(be._lib.cuFuncSetAttribute(fn[0], _driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_max), nm)
    return fn[0]


def mvp_main(argv) -> int:
    """``--mvp``: for each shapes entry and T in ts, the old entry (``""``: xi_mv1 at T == 1,
    the staged xi_mvc at T <= 8, with their grids), the ``_p`` entry (default parameters, mvp_launch)
    and the variants of mvp_variants (compiled here), timed L2-cold in a CUDA graph as above, with
    GB/s and % of ``read`` (the read-only ceiling kernel on the same bytes); ``*`` marks what the
    backend launches. First every one of them is checked bit for bit against the old entry on the
    same inputs (a row's sum order is the same by design; the SC variants, which round otherwise,
    against float64 where small, else within 1e-4 of the old entry), at every T, accumulate 1 for matmul and
    rmsnorm_matmul (y random first), and the old entry against a float64 reference where N K <= 2^26.
    The summary gives each type's ``_p`` GB/s against q4_1's ``_p`` on the same shape (a ratio a byte).
    ``argv``: ``--dt``, ``--t``, ``--quick`` (``mvp_selection``). Results also go to $OUT/gemv_mvp.json.
    Exit status 1 on any mismatch."""
    from xinfer_async.backends.cuda import CUDABackend, _launch
    from xinfer_async.backends.cuda._kernel import CUDAKernel, LaunchGrid
    from xinfer_async.backends.cuda._precompile import device_target, precompile

    shapes, ts, quick = mvp_selection(argv)
    combos = sorted({(kind, dt) for kind, dt, _, _ in shapes})
    t0 = time.perf_counter()
    precompile(device_target(), [f"{kind}_{dt}" for kind, dt in combos])  # the backend's shaders, in parallel
    print(f"shaders compiled or cached in {time.perf_counter() - t0:.0f} s")
    be = CUDABackend()
    q = be.create_queue()
    rng = np.random.default_rng(2026)
    sms, cc, smax = be.multiprocessors, be.compute_capability, be.stage_max
    print(f"device: {sms} SMs, cc {cc}, stage_max {smax}; MVP_MAX_T {_launch.MVP_MAX_T}, MVP_MIN_BYTES {_launch.MVP_MIN_BYTES}")

    # variant entries, one module per (kind, dt)
    mods = variant_modules(be, {kd: mvp_source(*kd, quick) for kd in combos}, "mvp")
    variants = {}  # (kind, dt) -> [(label, params, CUfunction)], read kernel
    for kind, dt in combos:
        mod, glu = mods[(kind, dt)], kind == "rmsnorm_matmul_swiglu"
        lst = [(mvp_label(*v), v[:3], cu_function(be, mod, f"mvp_{kind}_{dt}_{mvp_label(*v)}", smax))
               for v in ([] if quick else mvp_variants(dt, glu))]
        variants[(kind, dt)] = (lst, CUDAKernel("read", mod, cu_function(be, mod, f"mv_{dt}_read"), 256, None, pdl=True))

    def entries_of(kind, dt, T, N, K):
        """[(label, LaunchGrid)]: old, _p (default), the variants; and the backend's choice's label."""
        k = be.load_kernel(f"{kind}_{dt}")
        glu = kind == "rmsnorm_matmul_swiglu"
        c, _ = consts(kind, T, N, K, 0)
        old = _launch._matmul_grid(c, dt) if kind == "matmul" else _launch._fused_grid(c, dt, glu)
        out = [("old", LaunchGrid(old, (256, 1, 1), 0, k.entries[""]))]
        grid, block, shared, _ = _launch.mvp_launch(c, dt, glu, sms, cc)
        out.append(("_p", LaunchGrid(grid, block, shared, k.entries["_p"])))
        for label, params, fn in variants[(kind, dt)][0]:
            grid, block, shared, _ = _launch.mvp_launch(c, dt, glu, sms, cc, params)
            if shared <= smax:
                out.append((label, LaunchGrid(grid, block, shared, fn)))
        chosen = k.launch_grid(c).function
        pick = next((lb for lb, g in out if g.function == chosen), "other")
        return k, out, pick

    fails, results = 0, []
    e0, e1 = be.create_timestamp(), be.create_timestamp()
    kmax, nmax = max(s[3] for s in shapes), max(s[2] for s in shapes)
    px, pn, py = be.alloc(8 * kmax * 4), be.alloc(kmax * 4), be.alloc(8 * nmax * 4)
    for kind, dt, N, K in shapes:
        glu, rows = kind == "rmsnorm_matmul_swiglu", N * (2 if kind == "rmsnorm_matmul_swiglu" else 1)
        wb = wbytes_of(dt, rows, K)
        # ---- correctness: bit for bit against the old entry; the old entry against float64 (small)
        small = rows * K <= 2 ** 26
        if small:
            raw, vals = make_weights(rng, dt, rows, K)
        else:
            raw, vals = raw_weights(rng, dt, rows, K), None
        pw = be.alloc(raw.nbytes + 256)
        write_weight(be, pw, dt, raw)
        norm = rng.uniform(0.5, 1.5, K).astype(np.float32)
        be.write(pn, norm.view(np.uint8))
        for T in ts:
            x = (rng.standard_normal((T, K)) * rng.uniform(0.1, 10, (T, 1))).astype(np.float32)
            be.write(px, x.view(np.uint8))
            acc = 0 if glu else 1
            y0 = rng.standard_normal((T, N)).astype(np.float32)
            k, ents, pick = entries_of(kind, dt, T, N, K)
            _, packed = consts(kind, T, N, K, acc)
            bind = [pw, px, py] if kind == "matmul" else [pw, px, pn, py]
            got = run_entries(be, q, k, ents, bind, packed, py, y0)
            sc_labels = [lb for lb in got if lb.endswith("sc")]  # other roundings: float64 / the old entry, below
            for label, y in got.items():
                if label not in sc_labels and not np.array_equal(y.view(np.uint32), got["old"].view(np.uint32)):
                    fails += 1
                    bad = np.argwhere(y.view(np.uint32) != got["old"].view(np.uint32))
                    print(f"FAIL {kind}_{dt} N={N} K={K} T={T} {label}: {len(bad)} values differ from the old entry "
                          f"(first {tuple(bad[0])}: {y[tuple(bad[0])]!r} vs {got['old'][tuple(bad[0])]!r})")
            if small:
                x64 = x.astype(np.float64)
                if kind != "matmul":
                    x64 = x64 / np.sqrt((x64 ** 2).mean(1, keepdims=True) + EPS) * norm.astype(np.float64)
                if glu:
                    g, u = x64 @ vals[:N].T, x64 @ vals[N:].T
                    ref = g / (1 + np.exp(-g)) * u
                    mag = 1.1 * (np.abs(x64) @ np.abs(vals[:N]).T) * np.abs(u) + np.abs(g) * (np.abs(x64) @ np.abs(vals[N:]).T)
                else:
                    ref = x64 @ vals.T + y0
                    mag = np.abs(x64) @ np.abs(vals).T + np.abs(y0)
                for label in ["old"] + sc_labels:
                    err = np.abs(got[label] - ref)
                    if not (err <= 1e-5 * mag + 1e-30).all():
                        fails += 1
                        print(f"FAIL {kind}_{dt} N={N} K={K} T={T} {label} vs float64: max err/mag "
                              f"{np.max(err / (mag + 1e-30)):.3g}")
            else:  # no float64 copy: the SC variants within 1e-4 of the old entry (of its rms where smaller)
                for label in sc_labels:
                    old_y = got["old"]
                    tol = 1e-4 * (np.abs(old_y) + np.sqrt(np.mean(old_y.astype(np.float64) ** 2)))
                    if not (np.abs(got[label] - old_y) <= tol).all():
                        fails += 1
                        print(f"FAIL {kind}_{dt} N={N} K={K} T={T} {label} vs the old entry: max err/tol "
                              f"{np.max(np.abs(got[label] - old_y) / tol):.3g}")
        be.free(pw)
        # ---- timing
        stride = -(-wb // 256) * 256
        copies = int(min(64, max(8, math.ceil(256e6 / stride))))  # as l2_cold_copies, without a float64 copy
        big = be.alloc(stride * copies)
        write_weight(be, big, dt, raw_weights(rng, dt, rows, K))
        for i in range(1, copies):
            be._enqueue(q.stream, CopyCmd(big + i * stride, big, wb))
        q.synchronize()
        read = variants[(kind, dt)][1]
        rd = [DispatchCmd(read, LaunchGrid(read_grid(dt, rows, K), (256, 1, 1), 0, read.function),
                          [big + i * stride, px, py], struct.pack("<iiii", 1, rows, K, 0)) for i in range(copies)]
        read_us = graph_replay_ms(be, q, (e0, e1), rd) * 1e3 / copies
        print(f"\n{kind}_{dt} N={N} K={K} ({wb / 1e6:.2f} MB, {copies} copies): read {read_us:.2f} us "
              f"{wb / read_us / 1e3:.0f} GB/s")
        table = {}
        for T in ts:
            k, ents, pick = entries_of(kind, dt, T, N, K)
            _, packed = consts(kind, T, N, K, 0)
            for label, g in ents:
                cmds = [DispatchCmd(k, g, ([big + i * stride, px, py] if kind == "matmul" else [big + i * stride, px, pn, py]),
                                    packed) for i in range(copies)]
                us = graph_replay_ms(be, q, (e0, e1), cmds, 7) * 1e3 / copies
                table.setdefault(label, {})[T] = (us, label == pick, g)
                results.append(dict(kind=kind, dt=dt, N=N, K=K, T=T, variant=label, us=us, gbs=wb / us / 1e3,
                                    read_us=read_us, chosen=label == pick, grid=list(g), shared=g.shared_bytes))
        for label, row in table.items():
            g1 = next(iter(row.values()))[2]  # the first T it ran at (a variant past stage_max skips T == 1)
            cells = "  ".join(f"T={T}: {us:7.2f} us {wb / us / 1e3:6.0f} GB/s {100 * read_us / us:4.0f}%{'*' if ch else ' '}"
                              for T, (us, ch, _) in row.items())
            print(f"  {label:10s} grid {g1[0]:5d} shm {g1.shared_bytes:6d}  {cells}")
        be.free(big)
    print("\nsummary, us a launch (GB/s): old entry / _p / the best variant, and the read ceiling")
    for kind, dt, N, K in shapes:
        rs = [r for r in results if (r["kind"], r["dt"], r["N"], r["K"]) == (kind, dt, N, K)]
        cells = []
        for T in ts:
            at = {r["variant"]: r for r in rs if r["T"] == T}
            best = min((r for v, r in at.items() if v != "old"), key=lambda r: r["us"])
            cells.append(f"T={T}: {at['old']['us']:.1f} / {at['_p']['us']:.1f} / {best['variant']} {best['us']:.1f} "
                         f"({at['_p']['gbs']:.0f} GB/s)")
        print(f"  {kind}_{dt} {N}x{K}: read {rs[0]['read_us']:.1f}  " + "  ".join(cells))
    print("\n_p GB/s a byte against q4_1's _p on the same shape (the K-quants' target: >= 0.9 at T = 1)")
    for kind, dt, N, K in shapes:
        ref = [r for r in results if (r["kind"], r["dt"], r["N"], r["K"], r["variant"]) == (kind, "q4_1", N, K, "_p")]
        if dt == "q4_1" or not ref:
            continue
        cells = []
        for T in ts:
            p = next(r for r in results if (r["kind"], r["dt"], r["N"], r["K"], r["T"], r["variant"]) == (kind, dt, N, K, T, "_p"))
            p1 = next(r for r in ref if r["T"] == T)
            cells.append(f"T={T}: {p['us']:.1f} us {p['gbs']:.0f} GB/s vs {p1['us']:.1f} us {p1['gbs']:.0f} GB/s = {p['gbs'] / p1['gbs']:.2f}")
        print(f"  {kind}_{dt} {N}x{K}: " + "  ".join(cells))
    print(f"\ncorrectness: {fails} failures (bit-identity with the old entry at T = {ts}, float64 where small)")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gemv_mvp.json"), "w") as f:
            json.dump(dict(fails=fails, results=results), f, indent=1)
    be.close()
    return 1 if fails else 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:  # before any driver call: a machine without a GPU gets the text
        print(__doc__)
        return 0
    if "--mvp" in argv:
        return mvp_main(argv)
    if "--mvq" in argv:  # the integer decode kernel `_pq` (tools/gemv_mvq.py)
        import gemv_mvq

        return gemv_mvq.main([a for a in argv if a != "--mvq"])
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
