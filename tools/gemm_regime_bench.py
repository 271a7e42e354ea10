"""The GEMM regime (llm/_gemm.py) against the matrix kernels, per Llama-3.1-8B matrix shape and T:
``python tools/gemm_regime_bench.py [--ts 16,32,48,64,96,128,256,512] [--type q4_1] [--device cuda]``.

A research tool for choosing ``XINFER_GEMM_MIN_T`` (run from the repository root with
``PYTHONPATH=$PWD``). For each shape (N x K; ``glu``: the SwiGLU gate/up 2N x K through
rmsnorm_matmul_swiglu) and T it times, through the runtime (``Executor`` + ``GpuTimer``, the commands
a plan records), one product three ways:

- ``kernel``: ``matmul_DT`` / ``rmsnorm_matmul_swiglu_DT`` as the backend launches them today;
- ``gemm``: the lowered chain with the weights dequantized per call (``to_f16`` or ``rmsnorm_f16``,
  ``dequantize_f16_DT``, the cuBLASLt ``Gemm``, ``unscale_add`` or ``swiglu_unscale``);
- ``resident``: the same without the dequantization (``XINFER_F16_WEIGHTS=1``).

A figure: the median over ``--repeats`` timings of ``--launches`` back-to-back products (warm: the
weights of the smaller shapes stay in L2, which flatters ``kernel`` there), in us per product, and
TFLOP/s (2 N K T). ``--shapes tiny`` runs small shapes (a smoke test, also on ``--device cpu``).

``--algos`` (cuda) prints instead, for each cuBLASLt GEMM ``(n, k)`` an 8B plan runs (qkv, o, gate+up
and an output-layer chunk, down, the output layer's last chunk) and each bucket of m
(``_cublaslt.buckets``: decode, prefill), every candidate algorithm load considers
(``_cublaslt.LtHandle.candidates``: its id, tile, stages, split-K, reduction) with its device us at
the bucket's m and at ``--algo-ms``, its weighted cost (``_cublaslt.weighted_choice``) and a ``*`` on
the one load chooses: ``python tools/gemm_regime_bench.py --algos``. ``--candidates N`` asks the
heuristic for N results at each m instead of load's 8 (``_cublaslt.CANDIDATES``), to see whether a
tile load never considers would be faster (``(best now)`` marks the best of those shown).
``--splitk MIB`` lists instead the candidates with any reduction scheme and up to MIB MiB of workspace
(split-K among them, including the kinds load leaves out), with their us.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
import trio

import xinfer_async
from xinfer_async.ops import Gemm
from xinfer_async.runtime import GpuTimer

#: (n, k) of the cuBLASLt GEMMs of an 8B plan: qkv, o, gate+up (and a 28672-row output chunk), down,
#: the output layer's last chunk (128256 - 4 x 28672)
ALGO_SHAPES = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (13568, 4096)]

SHAPES = {"8b": [(4096, 4096, False), (1024, 4096, False), (6144, 4096, False), (14336, 4096, True),
                 (4096, 14336, False), (128256, 4096, False)],
          "tiny": [(96, 64, False), (64, 128, True)]}


def _steps(dev, way, dt, N, K, T, bufs, gemm):
    """(name, bindings, constants) or a compiled Gemm, the commands of one product."""
    w, w16, x, norm, y, a16, inv, tmp = (bufs[k] for k in ("w", "w16", "x", "norm", "y", "a16", "inv", "tmp"))
    glu = bufs["glu"]
    rows = 2 * N if glu else N
    if way == "kernel":
        if glu:
            return [(f"rmsnorm_matmul_swiglu_{dt}", [w, x, norm, y], dict(T=T, N=N, K=K, eps=1e-5))]
        return [(f"matmul_{dt}", [w, x, y], dict(T=T, N=N, K=K, accumulate=0))]
    out = [("rmsnorm_f16", [x, norm, a16, inv], dict(rows=T, dim=K, eps=1e-5)) if glu else
           ("to_f16", [x, a16, inv], dict(rows=T, dim=K))]
    if way == "gemm":
        out.append((f"dequantize_f16_{dt}", [w, w16], dict(n=rows * K)))
    out.append(gemm)
    out.append(("swiglu_unscale", [tmp, inv, y], dict(rows=T, n=N)) if glu else
               ("unscale_add", [tmp, inv, y], dict(rows=T, n=N, y_stride=N, accumulate=0)))
    return out


async def _time(dev, steps, launches, repeats):
    ms = []
    for r in range(repeats + 2):
        ex, timer = dev.executor(), GpuTimer(dev)
        timer.begin(ex)
        for _ in range(launches):
            for s in steps:
                if isinstance(s, Gemm):
                    s.dispatch(ex)
                else:
                    ex.dispatch(*s)
        timer.end(ex)
        await ex.submit_and_wait()
        if r >= 2:
            ms.append(timer.elapsed_ms())
    return statistics.median(ms) * 1e3 / launches


def algos(args) -> int:
    """Print each candidate algorithm's us at ``--algo-ms`` per (n, k) of ``ALGO_SHAPES``."""
    from xinfer_async.backends.cuda._cublaslt import (CANDIDATES, REDUCTION_SCHEME_WORKSPACE, _config, bucket_of,
                                                      weighted_choice)

    count = CANDIDATES if args.candidates is None else args.candidates
    if count < 1 or args.splitk < 0:
        print(f"--candidates must be >= 1 and --splitk >= 0, got {count} and {args.splitk}", file=sys.stderr)
        return 2

    dev = xinfer_async.open_device(args.device)
    try:
        if dev.name != "cuda":
            print(f"--algos needs a cuda device, got {dev.name}", file=sys.stderr)
            return 2
        lt = dev.backend.cublaslt()
        if args.splitk:
            return _splitk(dev, lt, args, count)
        extra = {int(m) for m in args.algo_ms.split(",")}
        print(f"{dev.description}: cuBLASLt candidates per (n, k) and bucket of m, us per GEMM (median of 5, "
              f"L2-cold weights); cost: sum of weight x t / best at the bucket's m; * the one chosen")
        for bucket in lt.buckets:
            ms = sorted(set(bucket.tune_ms) | {m for m in extra if bucket_of(m, lt.buckets) is bucket})
            print(f"bucket {bucket.name}: m <= {bucket.m_max}, timed at {bucket.tune_ms} weighing {bucket.weights}, "
                  f"workspace <= {bucket.workspace_nbytes >> 20} MiB")
            for n, k in ALGO_SHAPES:
                ws = bucket.workspace_nbytes
                cands = lt.candidates(n, k, bucket.tune_ms, count=count, workspace_nbytes=ws,
                                      mask=REDUCTION_SCHEME_WORKSPACE)
                chosen = lt.algorithm(n, k, bucket.tune_ms[-1])[0]
                fallback = not cands  # none valid at every m of tune_ms: the heuristic's first at the last
                cands = cands or [chosen]
                times = lt.timings(n, k, ms, cands, ws)
                best = weighted_choice(times, bucket.weights, bucket.tune_ms)  # with one candidate: it
                fastest = {m: min(t[m] for t in times) for m in bucket.tune_ms}
                print(f"n={n} k={k}: " + (f"no candidate valid at every m of {bucket.tune_ms}; the heuristic's first "
                                         f"at m = {bucket.tune_ms[-1]}, which load takes:" if fallback
                                         else f"{len(cands)} candidates"))
                for j, (algo, t) in enumerate(zip(cands, times)):
                    c = _config(algo)
                    cost = sum(w * t[m] / fastest[m] for w, m in zip(bucket.weights, bucket.tune_ms))
                    mark = "*" if bytes(ffi_buffer(algo)) == bytes(ffi_buffer(chosen)) else " "
                    cells = " ".join(f"m={m}: {t[m] * 1e3:7.1f} us ({2.0 * m * n * k / (t[m] * 1e-3) / 1e12:5.1f} TF/s)"
                                     for m in ms)
                    print(f" {mark} id {c['id']:>3} tile {c['tile']:>3} stages {c['stages']:>3} splitk {c['splitk']:>2} "
                          f"red {c['reduction']}  {cells}  cost {cost:5.2f}{'  (best now)' if j == best else ''}",
                          flush=True)
    finally:
        dev.close()
    return 0


def _splitk(dev, lt, args, count: int) -> int:
    """``--algos --splitk MIB``: the candidates with any reduction scheme and up to MIB MiB of
    workspace (split-K included, in-place reductions and workspace fix-ups too), each config and its
    us at ``--algo-ms``: a superset of what load considers (research)."""
    from xinfer_async.backends.cuda._cublaslt import _config

    ws_nbytes = args.splitk << 20
    ms = sorted({int(m) for m in args.algo_ms.split(",")})
    print(f"{dev.description}: cuBLASLt candidates with up to {args.splitk} MiB of workspace, any reduction "
          f"scheme, us per GEMM (median of 5, L2-cold weights)")
    for n, k in ALGO_SHAPES:
        cands = lt.candidates(n, k, ms=ms, count=count, workspace_nbytes=ws_nbytes)
        times = lt.timings(n, k, ms, cands, ws_nbytes) if cands else []
        print(f"n={n} k={k}: {len(cands)} candidates")
        for algo, t in zip(cands, times):
            c = _config(algo)
            cells = " ".join(f"m={m}: {t[m] * 1e3:8.1f} us" for m in ms)
            print(f"   id {c['id']:>3} tile {c['tile']:>3} stages {c['stages']:>3} splitk {c['splitk']:>2} "
                  f"reduction {c['reduction']}  {cells}", flush=True)
    return 0


def ffi_buffer(algo):
    from xinfer_async.backends.cuda._cublaslt import ffi

    return ffi.buffer(algo)


async def run(args) -> int:
    import gguf

    dev = xinfer_async.open_device(args.device)
    rng = np.random.default_rng(2026)
    ts = [int(t) for t in args.ts.split(",")]
    dt = args.type
    qt = getattr(gguf.GGMLQuantizationType, dt.upper())
    print(f"{dev.name}: {dt}; us per product (TFLOP/s); gemm/kernel and resident/kernel < 1: the regime wins")
    print(f"{'N':>7} {'K':>6} {'glu':>3} {'T':>4} {'kernel':>16} {'gemm':>16} {'resident':>16} {'g/k':>5} {'r/k':>5}")
    try:
        for N, K, glu in SHAPES[args.shapes]:
            rows = 2 * N if glu else N
            wq = np.ascontiguousarray(gguf.quants.quantize(
                (rng.standard_normal((rows, K)) * 0.02).astype(np.float32), qt))
            tmax = max(ts)
            bufs = dict(glu=glu, w=dev.upload(wq.reshape(-1).view(np.uint8), (rows, K), dt),
                        w16=dev.alloc((rows, K), "f16"),
                        x=dev.upload(rng.standard_normal((tmax, K)).astype(np.float32)),
                        norm=dev.upload((1 + 0.1 * rng.standard_normal(K)).astype(np.float32)),
                        y=dev.alloc((tmax, N), "f32"), a16=dev.alloc((tmax, K), "f16"), inv=dev.alloc(tmax, "f32"),
                        tmp=dev.alloc((tmax, rows), "f32"))
            # the resident copy: dequantized once
            ex = dev.executor()
            ex.dispatch(f"dequantize_f16_{dt}", [bufs["w"], bufs["w16"]], dict(n=rows * K))
            await ex.submit_and_wait()
            for T in ts:
                gemm = Gemm.create(dev, T, rows, K, "f16", trans_b=True, out_dtype="f32").compile()
                gemm.bind(bufs["a16"], bufs["w16"], bufs["tmp"])
                us = {}
                for way in ("kernel", "gemm", "resident"):
                    us[way] = await _time(dev, _steps(dev, way, dt, N, K, T, bufs, gemm), args.launches, args.repeats)
                tf = lambda u: 2.0 * rows * K * T / u / 1e6  # noqa: E731
                cells = " ".join(f"{us[w]:9.1f} ({tf(us[w]):5.1f})" for w in ("kernel", "gemm", "resident"))
                print(f"{N:>7} {K:>6} {'y' if glu else 'n':>3} {T:>4} {cells} "
                      f"{us['gemm'] / us['kernel']:5.2f} {us['resident'] / us['kernel']:5.2f}", flush=True)
    finally:
        dev.close()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ts", default="16,32,48,64,96,128,256,512", help="token counts")
    ap.add_argument("--type", default="q4_1", help="weight type (one gguf-py can quantize: q4_0, q4_1, q5_0, q5_1, q8_0)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", default="8b", choices=sorted(SHAPES))
    ap.add_argument("--launches", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--algos", action="store_true", help="print each cuBLASLt candidate's us per 8B (n, k) instead")
    ap.add_argument("--algo-ms", default="64,128,512", help="the m values of --algos")
    ap.add_argument("--splitk", type=int, default=0, metavar="MIB",
                    help="--algos: list the candidates with any reduction scheme and up to MIB MiB of workspace "
                         "(split-K included; load never runs them) instead")
    ap.add_argument("--candidates", type=int, default=None,
                    help="--algos: the heuristic results asked for at each m (default: _cublaslt.CANDIDATES, what "
                         "load asks for); more shows whether tiles load never sees are faster")
    args = ap.parse_args(argv)
    if args.algos:
        return algos(args)
    return trio.run(run, args)


if __name__ == "__main__":
    sys.exit(main())
