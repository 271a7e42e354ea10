"""Designs probed against the q4_1 matrix-vector target: ``python tools/gemv_probes.py``.

A research tool, not part of the package (as ``tools/gemv_variants.py``, whose weights, ceiling
kernel and graph timing it uses): it drives the cuda backend's private modules directly.

The issue's target for ``matmul_q4_1`` at one token is 60 % of 4.3 TB/s on a 4096 x 4096 weight
(10.5 MB: 4.07 us a launch). This times, on L2-cold weight copies launched back to back in one CUDA
graph (as ``gemv_variants``), the production kernel against three probes that are not wired into
the backend:

- ``read``: the ceiling, a kernel that reads the weight's bytes and computes nothing;
- ``bf16x3``: tensor cores (mma m16n8k16 bf16) with x split exactly into three bf16 parts (hi, mid,
  lo: every product exact, f32 accuracy), 16 rows a CTA staged with coalesced ``cp.async`` in two
  stages over K, x split once a CTA into shared memory, 8 warps splitting K;
- ``dp4a``: llama.cpp's numerics (ggml's q8_1 idea): x quantized to int8 per 32-block (d = amax / 127,
  s = d * sum(q)) by ``quant_x``, then ``dp4a`` on the nibbles, a warp per row and a lane per block;
  timed alone (x quantized beforehand) and with ``quant_x`` launched before each.

Each probe's result is checked first: ``bf16x3`` against float64 (within 1e-6 of sum |w x|),
``dp4a`` against float64 on its own quantized x (exact up to f32 rounding), and its distance from
float64 on the f32 x is printed (the accuracy the int8 activations give away). Figures: us a launch
(L2-cold), the % of 4.3 TB/s, and the same launch on one L2-resident weight (``hot``: the kernel's
time without DRAM).
"""

from __future__ import annotations

import os
import struct
import sys

import numpy as np

from xinfer_async.hal._commands import DispatchCmd

from gemv_variants import PEAK, graph_replay_ms, l2_cold_copies, make_weights, read_grid, read_source, wbytes_of

SOURCE = r'''
#include "xi_mvc.cuh"
// Prototype: T = 1 q4_1 gemv with x quantized to int8 per 32-block (llama.cpp's q8_1 idea): dp4a.
struct dq_c { int N; int K; };
// x (K) -> xq (K int8), ds (K/32 float2: d = amax / 127, s = d * sum(q)); a warp per block
extern "C" __global__ void __launch_bounds__(256) quant_x(const float *__restrict__ x, int8_t *__restrict__ xq, float2 *__restrict__ ds, dq_c c) {
    xi_grid_begin();
    const int b = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (b >= c.K / 32) return;
    const float v = x[b * 32 + lane];
    const float amax = xi_warp_max(fabsf(v));
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    const int q = __float2int_rn(v * id);
    xq[b * 32 + lane] = (int8_t)q;
    const float s = xi_warp_sum((float)q);
    if (lane == 0) ds[b] = make_float2(d, d * s);
}
__device__ __forceinline__ int dq_dp4a(uint32_t a, uint32_t b, int c) {
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
// a warp per row, lane per block (blocks lane, lane + 32, ...), U blocks' loads at once
template <int U>
__device__ __forceinline__ void dq1(const uint8_t *__restrict__ w, const int8_t *__restrict__ xq, const float2 *__restrict__ ds,
                                    float *__restrict__ y, dq_c c) {
    const int row = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31, nb = c.K >> 5;
    if (blockIdx.y == 0) xi_prefetch_l2(w + (size_t_)blockIdx.x * 8 * nb * 20, 8LL * nb * 20);
    xi_grid_begin();
    if (row >= c.N) return;
    const uint8_t *rw = w + (size_t_)row * nb * 20;
    float acc = 0.0f;
    for (int b0 = lane; b0 < nb; b0 += 32 * U) {
        uint32_t q[U][4], dm[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = b0 + 32 * u;
            if (b < nb) {
                const uint32_t *p = reinterpret_cast<const uint32_t *>(rw + b * 20);
                dm[u] = __ldg(p);
                q[u][0] = __ldg(p + 1); q[u][1] = __ldg(p + 2); q[u][2] = __ldg(p + 3); q[u][3] = __ldg(p + 4);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int b = b0 + 32 * u;
            if (b < nb) {
                const uint4 x0 = __ldg(reinterpret_cast<const uint4 *>(xq + b * 32)), x1 = __ldg(reinterpret_cast<const uint4 *>(xq + b * 32 + 16));
                const float2 dxs = __ldg(ds + b);
                int si = dq_dp4a(q[u][0] & 0x0F0F0F0Fu, x0.x, 0);
                si = dq_dp4a(q[u][1] & 0x0F0F0F0Fu, x0.y, si);
                si = dq_dp4a(q[u][2] & 0x0F0F0F0Fu, x0.z, si);
                si = dq_dp4a(q[u][3] & 0x0F0F0F0Fu, x0.w, si);
                si = dq_dp4a((q[u][0] >> 4) & 0x0F0F0F0Fu, x1.x, si);
                si = dq_dp4a((q[u][1] >> 4) & 0x0F0F0F0Fu, x1.y, si);
                si = dq_dp4a((q[u][2] >> 4) & 0x0F0F0F0Fu, x1.z, si);
                si = dq_dp4a((q[u][3] >> 4) & 0x0F0F0F0Fu, x1.w, si);
                const float sf = __int_as_float(0x4B400000 + si) - 12582912.0f;
                acc = fmaf(xi_h2f(dm[u] & 0xffff) * dxs.x, sf, acc);
                acc = fmaf(xi_h2f(dm[u] >> 16), dxs.y, acc);
            }
        }
    }
    acc = xi_warp_sum(acc);
    if (lane == 0) y[row] = acc;
}
extern "C" __global__ void __launch_bounds__(256) probe_dp4a(const uint8_t *__restrict__ w, const int8_t *__restrict__ xq, const float2 *__restrict__ ds, float *__restrict__ y, dq_c c) { dq1<1>(w, xq, ds, y, c); }

// Prototype: T = 1 q4_1 gemv on the tensor cores with x split into three bf16 parts (hi, mid, lo:
// exact, x = hi + mid + lo), weights staged with coalesced cp.async in NST stages over K.
__device__ __forceinline__ void bx_cp16(void *smem, const void *g) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g) : "memory");
}
__device__ __forceinline__ void bx_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void bx_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ void bx_wait_n(int n) {
    switch (n) { case 0: bx_wait<0>(); break; case 1: bx_wait<1>(); break; case 2: bx_wait<2>(); break; case 3: bx_wait<3>(); break;
                 case 4: bx_wait<4>(); break; case 5: bx_wait<5>(); break; case 6: bx_wait<6>(); break; default: bx_wait<7>(); break; }
}
__device__ __forceinline__ uint32_t bx_bf2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ float bx_lo(uint32_t r) { return __uint_as_float(r << 16); }
__device__ __forceinline__ float bx_hi(uint32_t r) { return __uint_as_float(r & 0xffff0000u); }
// (v0, v1) -> three bf16x2: hi, mid, lo
__device__ __forceinline__ void bx_split(float v0, float v1, uint32_t &H, uint32_t &M, uint32_t &L) {
    H = bx_bf2(v0, v1);
    const float r0 = v0 - bx_lo(H), r1 = v1 - bx_hi(H);
    M = bx_bf2(r0, r1);
    L = bx_bf2(r0 - bx_lo(M), r1 - bx_hi(M));
}
// bytes (selected by sel: two of v's, each 0..15) as the bf16 pair (128 + q) - 128 = q, exact
__device__ __forceinline__ uint32_t bx_q2(uint32_t v, uint32_t sel) {
    const uint32_t h = __byte_perm(v, 0x43434343u, sel);
    uint32_t r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(h), "r"(0x3F803F80u), "r"(0xC300C300u));
    return r;
}
__device__ __forceinline__ void bx_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__host__ __device__ constexpr int bx_rs(int K) { return (((K / 32) * 20 + 15) & ~15) + 16; }
__host__ __device__ constexpr int bx_shared(int K) { return 16 * bx_rs(K) + (K / 32) * 192 + (K / 32) * 4 + 8 * 16 * 4; }

template <int NST>
__device__ __forceinline__ void bx(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y, xi_matmul_c c) {
    extern __shared__ __align__(16) uint8_t bx_sm[];
    const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5, g = lane >> 2, tq = lane & 3;
    const int nb = c.K >> 5, rb = nb * 20, rs = bx_rs(c.K), bps = nb / NST, cps = bps * 20 / 16;
    uint8_t *W = bx_sm;
    uint4 *Bs = reinterpret_cast<uint4 *>(bx_sm + 16 * rs);
    float *xs = reinterpret_cast<float *>(Bs + nb * 12), *red = xs + nb;
    const int n0 = blockIdx.x * 16;
    xi_grid_begin();
    for (int s = 0; s < NST; s++) {
        for (int i = tid; i < 16 * cps; i += 256) {
            const int r = i / cps, j = i - r * cps;
            bx_cp16(W + r * rs + s * bps * 20 + j * 16, w + (size_t_)(n0 + r) * rb + s * bps * 20 + j * 16);
        }
        bx_commit();
    }
    for (int base = 0; base < nb * 4; base += 256) {
        const int i = base + tid, b = i >> 2;
        float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
        if (i < nb * 4) {
            lo = __ldg(reinterpret_cast<const float4 *>(x + b * 32 + 4 * tq));
            hi = __ldg(reinterpret_cast<const float4 *>(x + b * 32 + 16 + 4 * tq));
        }
        float sm = xi_blk_sum(lo, hi);
        sm += __shfl_xor_sync(0xffffffffu, sm, 1);
        sm += __shfl_xor_sync(0xffffffffu, sm, 2);
        if (i < nb * 4) {
            if (tq == 0) xs[b] = sm;
            uint32_t H[4], M[4], L[4];
            bx_split(lo.x, lo.y, H[0], M[0], L[0]);
            bx_split(lo.z, lo.w, H[1], M[1], L[1]);
            bx_split(hi.x, hi.y, H[2], M[2], L[2]);
            bx_split(hi.z, hi.w, H[3], M[3], L[3]);
            Bs[b * 12 + tq] = make_uint4(H[0], H[1], H[2], H[3]);
            Bs[b * 12 + 4 + tq] = make_uint4(M[0], M[1], M[2], M[3]);
            Bs[b * 12 + 8 + tq] = make_uint4(L[0], L[1], L[2], L[3]);
        }
    }
    float acc0 = 0.0f, acc1 = 0.0f;
    const float mmask = tq == 0 ? 1.0f : 0.0f;
#pragma unroll 1
    for (int s = 0; s < NST; s++) {
        bx_wait_n(NST - 1 - s);
        __syncthreads();
#pragma unroll 2
        for (int b = s * bps + wi; b < (s + 1) * bps; b += 8) {
            const uint8_t *r0 = W + g * rs + b * 20, *r1 = r0 + 8 * rs;
            const uint32_t w0 = *reinterpret_cast<const uint32_t *>(r0 + 4 + 4 * tq), w1 = *reinterpret_cast<const uint32_t *>(r1 + 4 + 4 * tq);
            const uint32_t dm0 = *reinterpret_cast<const uint32_t *>(r0), dm1 = *reinterpret_cast<const uint32_t *>(r1);
            const uint32_t lo0 = w0 & 0x0F0F0F0Fu, lo1 = w1 & 0x0F0F0F0Fu, hi0 = (w0 >> 4) & 0x0F0F0F0Fu, hi1 = (w1 >> 4) & 0x0F0F0F0Fu;
            const uint32_t a1[4] = {bx_q2(lo0, 0x4140), bx_q2(lo1, 0x4140), bx_q2(lo0, 0x4342), bx_q2(lo1, 0x4342)};
            const uint32_t a2[4] = {bx_q2(hi0, 0x4140), bx_q2(hi1, 0x4140), bx_q2(hi0, 0x4342), bx_q2(hi1, 0x4342)};
            const uint4 bf = g < 3 ? Bs[b * 12 + 4 * g + tq] : make_uint4(0, 0, 0, 0);
            float C[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            bx_mma(C, a1, bf.x, bf.y);
            bx_mma(C, a2, bf.z, bf.w);
            const float xb = xs[b];
            acc0 = fmaf(xi_h2f(dm0 & 0xffff), C[0] + C[1], acc0);
            acc0 = fmaf(xi_h2f(dm0 >> 16) * mmask, xb, acc0);
            acc1 = fmaf(xi_h2f(dm1 & 0xffff), C[2] + C[3], acc1);
            acc1 = fmaf(xi_h2f(dm1 >> 16) * mmask, xb, acc1);
        }
    }
    acc0 += __shfl_xor_sync(0xffffffffu, acc0, 1);
    acc1 += __shfl_xor_sync(0xffffffffu, acc1, 1);
    if (tq == 0) { red[wi * 16 + g] = acc0; red[wi * 16 + g + 8] = acc1; }
    __syncthreads();
    if (tid < 16) {
        float v = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) v += red[k * 16 + tid];
        y[n0 + tid] = c.accumulate ? y[n0 + tid] + v : v;
    }
}
extern "C" __global__ void __launch_bounds__(256, 2) probe_bf16x3(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y, xi_matmul_c c) { bx<2>(w, x, y, c); }
'''

#: (N, K); the probes handle no other shapes than such: N % 16 == 0, K % 256 == 0
SHAPES = [(4096, 4096), (2048, 2048), (2048, 8192)]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:  # before any driver call
        print(__doc__)
        return 0
    from xinfer_async.backends.cuda import CUDABackend, _driver, _nvrtc
    from xinfer_async.backends.cuda._backend import CUDAKernel, LaunchGrid, shader_dir

    check, ffi = _driver.check, _driver.ffi
    be = CUDABackend()
    q = be.create_queue()
    lib = be._lib
    d = shader_dir()
    headers = {h: open(os.path.join(d, h)).read() for h in sorted(os.listdir(d)) if h.endswith(".cuh")}
    cubin = _nvrtc.compile_cubin(SOURCE + read_source("q4_1"), "gemv_probes.cu", be.arch, headers, driver_version=be.driver_version)
    mod = ffi.new("CUmodule *")
    check(lib.cuModuleLoadData(mod, cubin), "cuModuleLoadData")

    def bx_shared(K):  # bx_shared in SOURCE
        return 16 * ((((K // 32) * 20 + 15) & ~15) + 16) + (K // 32) * 196 + 512

    ks = {}
    for nm in ("mv_q4_1_read", "probe_bf16x3", "quant_x", "probe_dp4a"):
        fn = ffi.new("CUfunction *")
        check(lib.cuModuleGetFunction(fn, mod[0], nm.encode()), nm)
        if nm == "probe_bf16x3":  # its stage is over 48 KB (130 KB at K = 8192)
            check(lib.cuFuncSetAttribute(fn[0], _driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bx_shared(8192)), nm)
        ks[nm] = CUDAKernel(nm, mod[0], fn[0], 256, None, pdl=True)
    base = be.load_kernel("matmul_q4_1")

    def cmds(nm, w, x, xq, ds, y, N, K):
        c = struct.pack("<ii", N, K)

        def launch(k, grid, shared, bind):
            return DispatchCmd(ks[k], LaunchGrid(grid, (256, 1, 1), shared, ks[k].function), bind, c)
        if nm == "base":
            return [DispatchCmd(base, base.launch_grid(dict(T=1, N=N, K=K, accumulate=0)), [w, x, y],
                     struct.pack("<iiii", 1, N, K, 0))]
        if nm == "read":  # gemv_variants' ceiling, matmul_q4_1's parameters
            return [DispatchCmd(ks["mv_q4_1_read"], LaunchGrid(read_grid("q4_1", N, K), (256, 1, 1), 0,
                                                                 ks["mv_q4_1_read"].function),
                     [w, x, y], struct.pack("<iiii", 1, N, K, 0))]
        if nm == "bf16x3":
            return [DispatchCmd(ks["probe_bf16x3"], LaunchGrid((N // 16, 1, 1), (256, 1, 1), bx_shared(K),
                                                                  ks["probe_bf16x3"].function),
                     [w, x, y], struct.pack("<iiii", 1, N, K, 0))]
        out = [launch("quant_x", (-(-(K // 32) // 8), 1, 1), 0, [x, xq, ds])] if nm == "quant+dp4a" else []
        return out + [launch("probe_dp4a", (-(-N // 8), 1, 1), 0, [w, xq, ds, y])]

    rng = np.random.default_rng(11)
    fails = 0
    for N, K in [(4096, 4096), (512, 2048), (2048, 8192)]:
        raw, wv = make_weights(rng, "q4_1", N, K)
        x = (rng.standard_normal(K) * rng.uniform(0.1, 10)).astype(np.float32)
        pw, px, pq, pd, py = be.alloc(raw.nbytes), be.alloc(K * 4), be.alloc(K), be.alloc(K // 4), be.alloc(N * 4)
        be.write(pw, raw)
        be.write(px, x.view(np.uint8))
        ref = wv @ x.astype(np.float64)
        scale = np.abs(wv) @ np.abs(x.astype(np.float64))
        for nm in ("bf16x3", "quant+dp4a"):
            be.write(py, np.full(N, np.nan, np.float32).view(np.uint8))
            for cm in cmds(nm, pw, px, pq, pd, py, N, K):
                be._enqueue(q.stream, cm)
            q.synchronize()
            y = np.empty(N, np.float32)
            be.read(py, y.view(np.uint8))
            err = np.abs(y - ref) / scale
            if nm == "bf16x3":
                ok = bool((err <= 1e-6).all())
                print(f"{N}x{K} bf16x3: max |y - f64| / sum|w x| {np.nanmax(err):.2g}" + ("" if ok else "  FAIL"))
            else:
                xq = np.empty(K, np.int8)
                be.read(pq, xq.view(np.uint8))
                dsv = np.empty(K // 16, np.float32)
                be.read(pd, dsv.view(np.uint8))
                nbk = K // 32
                blk = raw.reshape(N, nbk, 20)
                dw = blk[:, :, 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
                mw = blk[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
                qs = blk[:, :, 4:]
                qv = np.concatenate([qs & 15, qs >> 4], 2).astype(np.float64)
                xhat = (xq.astype(np.float64).reshape(nbk, 32) * dsv[0::2, None]).reshape(1, nbk, 32)
                refq = ((dw[:, :, None] * qv) * xhat).sum((1, 2)) + (mw * dsv[1::2][None, :]).sum(1)
                errq = np.abs(y - refq) / scale
                ok = bool((errq <= 1e-6).all())
                print(f"{N}x{K} dp4a: max |y - f64 on its int8 x| / sum|w x| {np.nanmax(errq):.2g}; against f64 on "
                      f"the f32 x: max {np.nanmax(err):.2g}, median {np.median(err):.2g}" + ("" if ok else "  FAIL"))
            fails += not ok
        for p in (pw, px, pq, pd, py):
            be.free(p)

    stamps = be.create_timestamp(), be.create_timestamp()

    def graph_us(cl, n):  # us a launch of a graph of n launches
        return graph_replay_ms(be, q, stamps, cl, 11) * 1e3 / n

    px, pq, pd, py = be.alloc(8192 * 4), be.alloc(8192), be.alloc(8192 // 4), be.alloc(65536 * 4)
    be.write(px, rng.standard_normal(8192).astype(np.float32).view(np.uint8))
    be._enqueue(q.stream, cmds("quant+dp4a", 0, px, pq, pd, py, 0, 8192)[0])  # x quantized for "dp4a" alone
    q.synchronize()
    names = ("read", "base", "bf16x3", "dp4a", "quant+dp4a")
    print("\nus a launch, L2-cold weights back to back (% of 4.3 TB/s; hot: one L2-resident weight)")
    print(f"{'shape':>11s} " + " ".join(f"{n:>24s}" for n in names))
    for N, K in SHAPES:
        wb = wbytes_of("q4_1", N, K)
        big, stride, copies = l2_cold_copies(be, q, rng, "q4_1", N, K, 256)
        cells = []
        for nm in names:
            cold = graph_us([cm for i in range(copies) for cm in cmds(nm, big + i * stride, px, pq, pd, py, N, K)], copies)
            hot = graph_us([cm for i in range(copies) for cm in cmds(nm, big, px, pq, pd, py, N, K)], copies)
            cells.append(f"{cold:5.2f} {100 * wb / cold / 1e3 / PEAK:3.0f}% hot {hot:5.2f}")
        be.free(big)
        print(f"{N:5d}x{K:<5d} " + " ".join(f"{c:>24s}" for c in cells))
    be.close()
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
