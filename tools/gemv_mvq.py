"""The integer decode matrix kernel (shaders/xi_mvq.cuh, entry ``_pq``) timed beside the f32 pipelined
``_p`` and the read ceiling: ``python tools/gemv_variants.py --mvq [--dt q4_1,q6_k] [--t 1,8] [--quick]
[--occupancy N] [--json PATH]`` (or ``python tools/gemv_mvq.py ...``).

For each shape of MVQ_SHAPES (Llama-3.1-8B's and Llama-3.2-1B's products of a q4_1 file with its q8_0
output, and the 8B shapes in q4_k and q6_k, a Q4_K_M file's types) and T of MVQ_T: the ``_pq`` entry as
the backend launches it (``_launch.mvq_launch``), variants of (R rows a warp, S stages, CG groups a
chunk) compiled here (``xi_mvq_kernel<TYPE, R, S, CG, NORM, GLU>``) at every token tile TT (grid.y =
ceil(T / TT)) whose shared bytes fit the device's opt-in limit (past 100 KB: one CTA an SM), ``_p``
(the f32 entry, where the type has one), and ``read`` (a kernel that only reads the weight's bytes).
First every variant is checked: bit for bit against the ``_pq`` entry (all rows: a row's sums do not
depend on R, S, CG or TT) and the entry against the numpy model (tests/_mmq_model.py ``mvq_matmul``, on
128 sampled rows; SwiGLU to 2e-6 for the device's expf), accumulate 1 where the kind has it. Timing is
L2-cold in one CUDA graph (tools/gemv_variants.py ``graph_replay_ms``), us a launch and GB/s of the
weight bytes; ``*`` marks the backend's choice. ``--occupancy N`` compiles the variants for N CTAs an
SM (``__launch_bounds__(256, N)``: 65536 / (256 N) registers a thread) and launches up to N an SM where
their shared bytes fit (the entries keep 2). JSON to ``--json PATH`` (default $OUT/gemv_mvq.json).
Exit status 1 on any mismatch. A research tool (the cuda backend's private modules), run from the
repository root with ``PYTHONPATH=$PWD``."""

from __future__ import annotations

import json
import math
import os
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from gemv_variants import (EPS, MVP_ENUM, consts, cu_function, graph_replay_ms, raw_weights, read_grid,  # noqa: E402
                           read_source, run_entries, variant_modules, wbytes_of, write_weight)

from xinfer_async.hal._commands import CopyCmd, DispatchCmd  # noqa: E402

#: (kind, dt, N output rows, K): Llama-3.1-8B's (wo, qkv, down, gate+up, output) and Llama-3.2-1B's of
#: the q4_1 file (q8_0 output), then the 8B shapes in q4_k and q6_k (a Q4_K_M file's types; the output
#: also in q4_1, the per-byte reference)
MVQ_SHAPES = [("matmul", "q4_1", 4096, 4096), ("rmsnorm_matmul", "q4_1", 6144, 4096), ("matmul", "q4_1", 4096, 14336),
              ("rmsnorm_matmul_swiglu", "q4_1", 14336, 4096), ("rmsnorm_matmul", "q8_0", 128256, 4096),
              ("matmul", "q4_1", 2048, 2048), ("rmsnorm_matmul", "q4_1", 3072, 2048), ("matmul", "q4_1", 2048, 8192),
              ("rmsnorm_matmul_swiglu", "q4_1", 8192, 2048), ("rmsnorm_matmul", "q8_0", 128256, 2048),
              ("rmsnorm_matmul", "q4_1", 128256, 4096)] + [
    (kind, dt, N, K) for dt in ("q4_k", "q6_k") for kind, N, K in (
        ("matmul", 4096, 4096), ("rmsnorm_matmul", 6144, 4096), ("matmul", 4096, 14336),
        ("rmsnorm_matmul_swiglu", 14336, 4096), ("rmsnorm_matmul", 128256, 4096))]
MVQ_T = (1, 2, 4, 8)
TTS = (1, 2, 4, 8)


def mvq_variants(dt, glu, quick=False, norm=True):
    """(R, S, CG) of ``_pq`` to time besides the kind's default (``_launch.mvq_params(dt, glu, norm)``;
    ``norm`` False for matmul): rows a warp, stages, groups a chunk (CG a multiple of 4: a warp step is
    32 blocks; q6_k's a multiple of 8)."""
    from xinfer_async.backends.cuda import _launch

    d = _launch.mvq_params(dt, glu, norm)
    if quick:
        return []
    cg = d[2]
    v = [(1, 2, cg), (1, 3, cg), (1, 4, cg), (2, 2, cg)] if glu else \
        [(1, 3, cg), (2, 2, cg), (2, 3, cg), (2, 4, cg), (4, 2, cg), (4, 3, cg), (2, 2, 2 * cg), (1, 4, 2 * cg)]
    return [x for x in dict.fromkeys(v) if x != d]


def label(r, s, cg):
    return f"R{r}S{s}C{cg}"


def mvq_source(kind, dt, quick=False, occupancy=2) -> str:
    """CUDA C of the module of (kind, dt): ``read_source(dt)`` and an entry ``mvq_<kind>_<dt>_<label>``
    a variant of ``mvq_variants``, each compiled for ``occupancy`` CTAs an SM."""
    glu, norm = kind == "rmsnorm_matmul_swiglu", kind != "matmul"
    src = ['#include "xi_mvq.cuh"', read_source(dt)]
    cstruct = {"matmul": "xi_matmul_c", "rmsnorm_matmul": "xi_rmsnorm_matmul_c",
               "rmsnorm_matmul_swiglu": "xi_rmsnorm_matmul_swiglu_c"}[kind]
    params = ("const uint8_t *__restrict__ w, const float *__restrict__ x, " +
              ("const float *__restrict__ norm, " if norm else "") + f"float *__restrict__ y, {cstruct} c")
    acc = "c.accumulate" if not glu else "0"
    for r, s, cg in mvq_variants(dt, glu, quick, norm):
        src.append(f'extern "C" __global__ void __launch_bounds__(256, {occupancy}) mvq_{kind}_{dt}_{label(r, s, cg)}({params}) {{ '
                   f'const XiMvcArgs a{{w, x, {"norm" if norm else "nullptr"}, y, c.T, c.N, c.K, {acc}, '
                   f'{"c.eps" if norm else "0.0f"}}}; xi_mvq_kernel<{MVP_ENUM[dt]}, {r}, {s}, {cg}, '
                   f'{"true" if norm else "false"}, {"true" if glu else "false"}>(a); }}')
    return "\n".join(src)


def selection(argv) -> tuple[list, tuple, bool, str | None, int]:
    """(shapes, token counts, quick, json path, occupancy) from ``argv``: ``--dt A,B`` keeps the
    MVQ_SHAPES of those types (and q4_1's of the same (kind, N, K)), ``--t 1,8`` those token counts of
    MVQ_T, ``--quick`` no variants, ``--json PATH``, ``--occupancy N`` (1..8, default 2).

    Raises:
        ValueError: a type or a token count that the table does not have, --json without a path, or
            an occupancy outside 1..8."""
    def opt(name):
        if name not in argv:
            return None
        i = argv.index(name) + 1
        if i >= len(argv):
            raise ValueError(f"{name} needs a value")
        return argv[i]

    shapes, ts = list(MVQ_SHAPES), MVQ_T
    if opt("--dt"):
        dts = opt("--dt").split(",")
        known = {s[1] for s in MVQ_SHAPES}
        bad = [d for d in dts if d not in known]
        if bad:
            raise ValueError(f"--dt {bad} not among the types of MVQ_SHAPES {sorted(known)}")
        keys = {(k, n, kk) for k, d, n, kk in MVQ_SHAPES if d in dts}  # and q4_1's on them: the per-byte reference
        shapes = [s for s in MVQ_SHAPES if s[1] in dts or (s[1] == "q4_1" and (s[0], s[2], s[3]) in keys)]
    if opt("--t"):
        ts = tuple(int(t) for t in opt("--t").split(","))
        if not set(ts) <= set(MVQ_T):
            raise ValueError(f"--t {ts} not within MVQ_T {MVQ_T}")
    path = opt("--json") or (os.path.join(os.environ["OUT"], "gemv_mvq.json") if os.environ.get("OUT") else None)
    occupancy = int(opt("--occupancy") or 2)
    if not 1 <= occupancy <= 8:
        raise ValueError(f"--occupancy {occupancy} not within 1..8 (CTAs of 256 threads an SM)")
    return shapes, ts, "--quick" in argv, path, occupancy


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:  # before any driver call
        print(__doc__)
        return 0
    shapes, ts, quick, path, occupancy = selection(argv)
    from _mmq_model import mvq_matmul, mvq_swiglu, rmsnorm_h, rmsnorm_inv_cta

    from xinfer_async.backends.cuda import CUDABackend, _launch
    from xinfer_async.backends.cuda._kernel import CUDAKernel, LaunchGrid
    from xinfer_async.backends.cuda._precompile import device_target, precompile

    combos = sorted({(kind, dt) for kind, dt, _, _ in shapes})
    t0 = time.perf_counter()
    precompile(device_target(), [f"{kind}_{dt}" for kind, dt in combos])
    print(f"shaders compiled or cached in {time.perf_counter() - t0:.0f} s")
    be = CUDABackend()
    q = be.create_queue()
    rng = np.random.default_rng(2026)
    sms, cc, smax = be.multiprocessors, be.compute_capability, be.stage_max
    optin = be.pq_stage_max  # _pq's limit as the backend sets it (the opt-in less 1 KB), not stage_max
    print(f"device: {sms} SMs, cc {cc}, stage_max {smax}, opt-in {optin}; PQ_MAX_T {_launch.PQ_MAX_T}; "
          f"XINFER_MVQ={os.environ.get('XINFER_MVQ', '')!r}; variants for {occupancy} CTAs an SM")
    loaded = variant_modules(be, {kd: mvq_source(*kd, quick, occupancy) for kd in combos}, f"mvq{occupancy}")
    mods = {}
    for kind, dt in combos:
        mod, glu = loaded[(kind, dt)], kind == "rmsnorm_matmul_swiglu"
        mods[(kind, dt)] = ([(v, cu_function(be, mod, f"mvq_{kind}_{dt}_{label(*v)}", optin))
                             for v in mvq_variants(dt, glu, quick, kind != "matmul")],
                            CUDAKernel("read", mod, cu_function(be, mod, f"mv_{dt}_read"), 256, None, pdl=True))

    def entries_of(kind, dt, T, N, K):
        """[(label, LaunchGrid)]: _pq (as the backend launches it), _p (f32, where the type has it), the
        variants at every TT that fits; and the backend's choice's label."""
        k = be.load_kernel(f"{kind}_{dt}")
        glu = kind == "rmsnorm_matmul_swiglu"
        c, _ = consts(kind, T, N, K, 0)
        out = []
        norm = kind != "matmul"
        if _launch.mvq_weight(dt, N, K, T, glu, optin, cc, norm=norm):
            grid, block, shared, _ = _launch.mvq_launch(c, dt, glu, sms, cc, optin, norm=norm)
            out.append(("_pq", LaunchGrid(grid, block, shared, k.entries["_pq"])))
        if "_p" in k.entries:
            grid, block, shared, _ = _launch.mvp_launch(c, dt, glu, sms, cc)
            if shared <= smax:
                out.append(("_p", LaunchGrid(grid, block, shared, k.entries["_p"])))
        for v, fn in mods[(kind, dt)][0]:
            for tt in TTS:
                if tt > 1 and tt >= 2 * T:
                    continue
                grid, block, shared, _ = _launch.mvq_launch(c, dt, glu, sms, cc, optin, params=v, tt=tt, norm=norm,
                                                            ctas_per_sm=occupancy)
                if shared <= optin:
                    out.append((f"{label(*v)}T{tt}", LaunchGrid(grid, block, shared, fn)))
        chosen = k.launch_grid(c).function
        pick = next((lb for lb, g in out if g.function == chosen), "other")
        return k, out, pick

    fails, results = 0, []
    e0, e1 = be.create_timestamp(), be.create_timestamp()
    kmax, nmax = max(s[3] for s in shapes), max(s[2] for s in shapes)
    px, pn, py = be.alloc(8 * kmax * 4), be.alloc(kmax * 4), be.alloc(8 * nmax * 4)
    for kind, dt, N, K in shapes:
        glu = kind == "rmsnorm_matmul_swiglu"
        rows = N * (2 if glu else 1)
        wb = wbytes_of(dt, rows, K)
        raw = raw_weights(rng, dt, rows, K)
        pw = be.alloc(raw.nbytes + 256)
        write_weight(be, pw, dt, raw)
        norm = rng.uniform(0.5, 1.5, K).astype(np.float32)
        be.write(pn, norm.view(np.uint8))
        sample = np.unique(np.r_[0:64, N - 64:N, rng.integers(0, N, 64)])
        rb = raw.size // rows
        w2 = raw.reshape(rows, rb)
        wsel = (np.concatenate([w2[sample], w2[N + sample]]) if glu else w2[sample]).reshape(-1)
        # ---- correctness: the entry against the model (sampled rows); every variant against the entry
        for T in ts:
            x = (rng.standard_normal((T, K)) * rng.uniform(0.1, 10, (T, 1))).astype(np.float32)
            be.write(px, x.view(np.uint8))
            acc = 0 if glu else 1
            y0 = rng.standard_normal((T, N)).astype(np.float32)
            k, ents, pick = entries_of(kind, dt, T, N, K)
            _, packed = consts(kind, T, N, K, acc)
            bind = [pw, px, py] if kind == "matmul" else [pw, px, pn, py]
            got = run_entries(be, q, k, ents, bind, packed, py, y0)
            if "_pq" not in got:
                print(f"  {kind}_{dt} N={N} K={K} T={T}: _pq does not run here (mvq_weight)")
                continue
            h = x if kind == "matmul" else rmsnorm_h(x, norm, EPS, rmsnorm_inv_cta)
            ref = mvq_swiglu(wsel, dt, h, len(sample)) if glu else mvq_matmul(wsel, dt, h, y0[:, sample])
            ys = got["_pq"][:, sample]
            ok = np.allclose(ys, ref, rtol=2e-6, atol=1e-30) if glu else np.array_equal(ys.view(np.uint32), ref.view(np.uint32))
            if not ok or np.isnan(got["_pq"]).any():
                fails += 1
                print(f"FAIL {kind}_{dt} N={N} K={K} T={T} _pq vs the model: {np.sum(ys != ref)} of {ys.size} differ, "
                      f"{np.isnan(got['_pq']).sum()} NaN")
            for lb, y in got.items():
                if lb != "_p" and not np.array_equal(y.view(np.uint32), got["_pq"].view(np.uint32)):
                    fails += 1
                    bad = np.argwhere(y.view(np.uint32) != got["_pq"].view(np.uint32))
                    print(f"FAIL {kind}_{dt} N={N} K={K} T={T} {lb}: {len(bad)} values differ from _pq "
                          f"(first {tuple(bad[0])}: {y[tuple(bad[0])]!r} vs {got['_pq'][tuple(bad[0])]!r})")
            if "_p" in got:  # the f32 entry: the same product, other roundings (printed, not a failure)
                rel = np.abs(got["_p"] - got["_pq"]).max() / max(1e-30, float(np.abs(got["_p"]).max()))
                print(f"  {kind}_{dt} N={N} K={K} T={T}: max |_pq - _p| / max |_p| = {rel:.2e}")
        be.free(pw)
        # ---- timing
        stride = -(-wb // 256) * 256
        copies = int(min(64, max(8, math.ceil(256e6 / stride))))
        big = be.alloc(stride * copies)
        write_weight(be, big, dt, raw)
        for i in range(1, copies):
            be._enqueue(q.stream, CopyCmd(big + i * stride, big, wb))
        q.synchronize()
        read = mods[(kind, dt)][1]
        rd = [DispatchCmd(read, LaunchGrid(read_grid(dt, rows, K), (256, 1, 1), 0, read.function),
                          [big + i * stride, px, py], struct.pack("<iiii", 1, rows, K, 0)) for i in range(copies)]
        read_us = graph_replay_ms(be, q, (e0, e1), rd) * 1e3 / copies
        print(f"\n{kind}_{dt} N={N} K={K} ({wb / 1e6:.2f} MB, {copies} copies): read {read_us:.2f} us "
              f"{wb / read_us / 1e3:.0f} GB/s")
        for T in ts:
            k, ents, pick = entries_of(kind, dt, T, N, K)
            _, packed = consts(kind, T, N, K, 0)
            row = []
            for lb, g in ents:
                cmds = [DispatchCmd(k, g, ([big + i * stride, px, py] if kind == "matmul" else
                                           [big + i * stride, px, pn, py]), packed) for i in range(copies)]
                us = graph_replay_ms(be, q, (e0, e1), cmds, 7) * 1e3 / copies
                row.append((us, lb, g))
                results.append(dict(kind=kind, dt=dt, N=N, K=K, T=T, variant=lb, us=us, gbs=wb / us / 1e3,
                                    read_us=read_us, chosen=lb == pick, grid=list(g), shared=g.shared_bytes))
            row.sort(key=lambda r: r[0])
            named = {lb: us for us, lb, _ in row}
            print(f"  T={T}: " + "  ".join(f"{lb} {named[lb]:.2f} us {wb / named[lb] / 1e3:.0f} GB/s" + ("*" if lb == pick else "")
                                           for lb in ("_pq", "_p") if lb in named) +
                  "  best: " + ", ".join(f"{lb} {us:.2f} (grid {g[0]}x{g[1]}, shm {g.shared_bytes})" for us, lb, g in row[:3]))
        be.free(big)
    print("\nsummary, us a launch (GB/s; % of read): _pq / _p / the best variant")
    for kind, dt, N, K in shapes:
        rs = [r for r in results if (r["kind"], r["dt"], r["N"], r["K"]) == (kind, dt, N, K)]
        if not rs:
            continue
        cells = []
        for T in ts:
            at = {r["variant"]: r for r in rs if r["T"] == T}
            if "_pq" not in at:
                continue
            best = min(at.values(), key=lambda r: r["us"])
            p = at.get("_p")
            cells.append(f"T={T}: {at['_pq']['us']:.1f} ({at['_pq']['gbs']:.0f}; {100 * rs[0]['read_us'] / at['_pq']['us']:.0f}%) / "
                         + (f"{p['us']:.1f}" if p else "-") + f" / {best['variant']} {best['us']:.1f}")
        print(f"  {kind}_{dt} {N}x{K}: read {rs[0]['read_us']:.1f}  " + "  ".join(cells))
    print("\n_pq GB/s a byte against q4_1's _pq on the same shape (#17's target for the K-quants: >= 0.9 at T = 1)")
    for kind, dt, N, K in shapes:
        for T in ts:
            p = [r for r in results if (r["kind"], r["dt"], r["N"], r["K"], r["T"], r["variant"]) == (kind, dt, N, K, T, "_pq")]
            p1 = [r for r in results if (r["kind"], r["dt"], r["N"], r["K"], r["T"], r["variant"]) == (kind, "q4_1", N, K, T, "_pq")]
            if dt != "q4_1" and p and p1:
                print(f"  {kind}_{dt} {N}x{K} T={T}: {p[0]['gbs']:.0f} vs {p1[0]['gbs']:.0f} GB/s = {p[0]['gbs'] / p1[0]['gbs']:.2f}")
    print(f"\ncorrectness: {fails} failures (_pq against the model on sampled rows, every variant against _pq, T = {ts})")
    if path:
        with open(path, "w") as f:
            json.dump(dict(fails=fails, results=results), f, indent=1)
        print(f"wrote {path}")
    be.close()
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
