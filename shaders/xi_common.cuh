// Shared definitions of the CUDA kernels (shaders/*.cu), compiled by NVRTC for the device's own arch.
// Constants structs: xi_kernels.cuh, generated from the declarations in xinfer_async/ops/_kernels.py.
#pragma once

typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned long long size_t_;

#include "xi_kernels.cuh"

#define XI_INF __int_as_float(0x7f800000)
#define XI_NAN __int_as_float(0x7fc00000)

// IEEE half -> float, exact (cvt.f32.f16), without cuda_fp16.h.
__device__ __forceinline__ float xi_h2f(uint16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// float -> IEEE half bits, rounded to nearest even (cvt.rn.f16.f32; numpy's astype(float16)).
__device__ __forceinline__ uint16_t xi_f2h(float f) {
    uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float xi_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float xi_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum / max for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
__device__ __forceinline__ float xi_block_sum(float v, float *scratch /* [32] */) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = xi_warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : 0.0f;
    return xi_warp_sum(v);
}

__device__ __forceinline__ float xi_block_max(float v, float *scratch /* [32] */) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = xi_warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : -XI_INF;
    return xi_warp_max(v);
}

// Grid-stride loop over [0, n).
#define XI_FOR(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n); \
                          i += (long long)gridDim.x * blockDim.x)

// Programmatic dependent launch (compute capability 9.0 and later). The backend launches every
// kernel of shaders/ with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION where the device has
// it, so a kernel's blocks may start while the previous kernel of the stream still runs. Each entry
// therefore calls xi_grid_begin() in every thread before it touches a buffer and before any return;
// two exceptions: xi_prefetch_l2 (a hint), and the weight reads of the integer decode kernels'
// first stages (xi_mvq.cuh), which rely on no kernel writing a weight (the model uploads weights by
// copies, and model/_session.py's derived_weight awaits the kernel that computes one).
// griddepcontrol.wait holds the thread until the previous kernel has completed and its writes are
// visible, so the order of the stream is kept whatever a kernel does or skips;
// griddepcontrol.launch_dependents then lets the next kernel's blocks be scheduled (to run their own
// prologue up to their wait) while this one works. Launched without the attribute, both are no-ops.
// (CUDA C++ Programming Guide, "Programmatic Dependent Launch"; PTX ISA, griddepcontrol.)
//
// XI_TIMELINE (defined by the backend under XINFER_TIMELINE=1: backends/cuda/_timeline.py): thread 0
// of block (0, 0, 0) also reads the global nanosecond timer before the wait (arrive) and right after
// it (go: the previous kernel has completed), lets the next kernel launch, then takes the next slot of
// the buffer the host points xi_tl at (u64 [0]: slots taken, [1]: unused, then (arrive, go) pairs,
// XI_TL_SLOTS of them) and writes the pair there; the other threads only read the timer. The slots
// are taken in launch order (a kernel passes its wait only after the one before it has ended).
#ifdef XI_TIMELINE
#define XI_TL_SLOTS 65536  // backends/cuda/_timeline.py SLOTS repeats it
__device__ unsigned long long *xi_tl;  // set by the host in every module it loads (cuModuleGetGlobal)
__device__ __forceinline__ unsigned long long xi_globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}
#endif
__device__ __forceinline__ void xi_grid_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#ifdef XI_TIMELINE
    const bool first = (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0;
    const unsigned long long arrive = xi_globaltimer();
#endif
    asm volatile("griddepcontrol.wait;" ::: "memory");
#ifdef XI_TIMELINE
    const unsigned long long go = xi_globaltimer();
#endif
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#ifdef XI_TIMELINE
    if (first) {
        unsigned long long *tl = *(unsigned long long *volatile *)&xi_tl;  // one load, in this thread only
        if (tl != nullptr) {
            const unsigned long long i = atomicAdd(tl, 1ull);
            if (i < XI_TL_SLOTS) *reinterpret_cast<ulonglong2 *>(tl + 2 + 2 * i) = make_ulonglong2(arrive, go);
        }
    }
#endif
#endif
}

// The L2 policy of a weight stream: evict first. A decode step reads each weight byte once (more than
// L2 holds: 5.5 GB for an 8B model against 50 MB), and with the default policy that stream evicts what
// the step reads again from L2: the activations, the KV cache and the kernels' own code (an SM's
// instruction caches are small; an entry's code comes back from L2 after the other kernels of a
// layer ran: in situ, Nsight Compute found `_pq`'s warps waiting for instructions ~70% of their
// stalls). A hint: no value changes. Used by the matrix kernels' weight loads (xi_mvp_cp16 of `_p`
// and `_pq`, xi_ldw* with PF = 4 of `_t`). On the H200 (bench model, decode at batch 1, device ms a
// step): 8B q4_1 3.29 -> 2.88, its Q4_K_M mix 3.87 -> 3.45, Llama-3.2-1B 0.98 -> 0.88 (README).
// (PTX ISA: createpolicy, the .L2::cache_hint operand of ld and cp.async; sm_80+.)
__device__ __forceinline__ uint64_t xi_evict_first() {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

// cp.async of 16 bytes, global to shared (compute capability 8.0+; a plain copy below, where the kernels that
// use it never run), its commit and its wait for all of this thread's groups (xi_mmq.cuh's staging, the
// decode attention's v rows).
__device__ __forceinline__ void xi_cp16(void *s, const void *g) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    const uint32_t sa = (uint32_t)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(g) : "memory");
#else
    *reinterpret_cast<uint4 *>(s) = *reinterpret_cast<const uint4 *>(g);
#endif
}
__device__ __forceinline__ void xi_cp_commit() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
__device__ __forceinline__ void xi_cp_wait_all() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// One q8_1 block of 32 values, a warp's (lane l holds value l; all 32 lanes call it): code l into
// *code from lane l (one byte), and (d, s) into *pair from lane 0, with xi_mmq.cuh's xi_mmq_quant
// arithmetic (d = amax / 127, codes round(v / d) half away from zero, d = 0: codes 0, s = d *
// sum(codes); each float operation rounded once; the max and the integer sum do not depend on their
// order): its bits (tests/_mmq_model.py quantize_q8_1), without its staging. xi_mvq.cuh's
// qmatmul_normq entries quantize their own output with it.
__device__ __forceinline__ void xi_q8_1_warp(float v, uint8_t *code, float2 *pair) {
    float am = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
    const float d = __fdiv_rn(am, 127.0f), id = d > 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    const int q = (int)roundf(__fmul_rn(v, id));
    int qs = q;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) qs += __shfl_xor_sync(0xffffffffu, qs, o);
    *code = (uint8_t)(q & 255);
    if ((threadIdx.x & 31) == 0) *pair = make_float2(d, __fmul_rn(d, (float)qs));
}

// Ask L2 for the bytes [p, p + n): the block's threads take its 128-byte lines in turn (prefetch.L2,
// a hint that never faults and changes no value: L2 is the device's point of coherence, so this is
// safe before xi_grid_begin even where the previous kernel writes those bytes). Every address used
// lies inside the range.
__device__ __forceinline__ void xi_prefetch_l2(const void *p, long long n) {
    if (n <= 0) return;
    const size_t_ a = (size_t_)p, first = a >> 7, last = (a + (size_t_)n - 1) >> 7;
    for (size_t_ l = first + threadIdx.x; l <= last; l += blockDim.x) {
        const size_t_ addr = l == first ? a : l << 7;
        asm volatile("prefetch.L2 [%0];" ::"l"(addr));
    }
}
