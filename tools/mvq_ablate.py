"""Ablations of the integer decode kernel (shaders/xi_mvq.cuh, entry ``_pq``): a copy of ``shaders/``
with one part of ``xi_mvq`` taken out or rewritten, to time with ``XINFER_SHADERS``:

    python tools/mvq_ablate.py OUT_DIR NAME[+NAME...]
    XINFER_SHADERS=OUT_DIR python tools/gemv_variants.py --mvq --quick --dt q4_1 --t 1

NAME:
- ``noquant``: the CTA does not compute the rmsnorm scale nor quantize its tokens (the codes in shared
  memory are whatever was there): what that phase costs on the critical path. Wrong results.
- ``nocompute``: each lane reads one byte of each of its staged blocks and adds it, instead of
  decoding and multiplying: what the cp.async stream alone costs. Wrong results.
- ``unroll2``: the block loop unrolled twice (same sums, same order: the bits do not change).
- ``qouter``: a row's block decoded and multiplied before the next row's (one decoded block live
  instead of R; same sums, same order).
- ``uq8``, ``uq16``: the token quantization (``xi_mmq_quant``) with 8 / 16 loads of 4 floats in
  flight a thread instead of 4 (K = 14336: 448 blocks, 4 round trips at 4, 1 at 16); same bits.
- ``qunroll``: ``xi_mmq_quant``'s per-block code unrolled 4 times (its shuffles, divisions and
  roundings of 4 blocks interleave instead of running one block after another; shaders/xi_mmq.cuh,
  so the tiled integer kernels get it too); same bits.
- ``invunroll``: the rmsnorm pass (``xi_mvq_inv``) unrolled 4 times, so a thread's loads of x are
  in flight together; same bits (each thread adds in the same order).
- ``quant1``: a CTA of one token (decode) loads its K / 4 float4s once, all in flight (16 a thread
  at most without the rmsnorm, 8 with it), adds the rmsnorm sum from those registers and quantizes
  them there (``xi_mvq_quant1``): one trip to L2 instead of two (NORM) or four (K = 14336), the
  blocks' shuffles and divisions interleaved; same bits. ``quant1roll``: the same with one copy of the
  quantize code in a loop (short code; U - 1 register moves a block).
The last six keep every result: ``gemv_mvq.py`` checks them against the model like the entry.

Measured on the H200 (2026-12-02, ``--dt q4_1,q6_k --t 1``, us a launch, L2-cold, ``_pq`` / ``noquant``):
matmul 4096x4096 6.8 / 5.3, rmsnorm_matmul 6144x4096 11.4 / 6.9, matmul 4096x14336 19.8 / 14.6,
SwiGLU 14336x4096 25.7 / 21.3, the q8_0-sized output 128256x4096 (q4_1) 96.4 / 85.6; q6_k 4096x14336
29.2 / 21.7. ``qouter`` was slower (19.8 -> 22.5 on 4096x14336). The `nocompute` patch then read
32-bit words, misaligned in q6_k's 210-byte groups (CUDA_ERROR_MISALIGNED_ADDRESS); it reads bytes now
(compiled with NVRTC, not yet timed).

``quant1``, measured on the H200 (2026-12-02, against HEAD's shaders in the same call): alone
(``gemv_variants.py --mvq --quick --dt q4_1 --t 1``, us, L2-cold) o 4096x4096 6.84 -> 7.13, qkv
6144x4096 11.50 -> 10.18, down 4096x14336 20.10 -> 18.38, gate/up 14336x4096 25.82 -> 24.62, 1B's o
4.22 -> 3.96 and qkv 6.52 -> 5.21; but in the decode graph (``bench model --slots 1 --max-tokens 64
--prompt-tokens 512``, device ms a step, 3 interleaved pairs on 8B) 8B 2.876 / 2.875 / 2.876 ->
2.906 / 2.908 / 2.910, 1B 0.865 -> 0.902, SmolLM2 0.840 -> 0.882: slower, though ``--kernels`` (each
kernel timed alone) gives the matrix kernels 70 us less on 8B (2,170 -> 2,099 us a step). The
step's time outside its kernels grew from 0.34 to 0.42 ms, ~0.7 us for each of the 129 matrix
kernels. Likely cause: instruction fetch. Its U unrolled copies add 27.5 KB to
``matmul_q4_1_pq``'s code (184,576 -> 212,096 bytes of .text, NVRTC 13, sm_90), nearly all on the
T = 1 path, and in a decode step six kernels take turns on every SM. ``quant1roll`` adds 7 KB (128
registers with a 64-byte stack in ``matmul_q4_1_pq``; ``rmsnorm_matmul_q4_1_pq`` 87 -> 96
registers); not timed.

Exit status 2 where the header no longer has the text a patch replaces (the kernel changed: update
the patch)."""

from __future__ import annotations

import os
import shutil
import sys

SHADERS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shaders")

QUANT = """        if (NORM) xi_mvq_inv<TT>(a, tg0, tn, inv);
        xi_mmq_quant<NORM, 4, true>(a, inv, tg0, tn, 0, nb, xq, a.K, ds, XI_MVQ_WARPS * 32);
"""
LOOP_HEAD = "        for (int b = cb0 + ((lane - cb0) & 31); b < cb1; b += 32) {\n"
BODY_START = LOOP_HEAD + """            const int o = b - cb0;  // block within the chunk: group o / 8, block o % 8
            const int rot = TYPE == XI_Q6_K ? xk_q6k_rot(src + (o >> 3) * GB) : 0;  // the same in every region (CGB % 16 == 0)
            XiMvqB<TYPE> wb[NR];
#pragma unroll
            for (int q = 0; q < NR; q++) wb[q].dec(src + q * CGB + (o >> 3) * GB, jl, rot);
#pragma unroll
            for (int t = 0; t < TT; t++) {
                if (t < tn) {
"""
TERM = """#pragma unroll
                    for (int q = 0; q < NR; q++) acc[t][q] = __fadd_rn(acc[t][q], wb[q].term(xw, dsv.x, dsv.y, xs));
                }
            }
        }
"""
NOCOMPUTE = LOOP_HEAD + """            const int o = b - cb0;
            acc[0][0] = __fadd_rn(acc[0][0], (float)src[(o >> 3) * GB + 4 * (o & 7)]);
        }
"""
QOUTER = LOOP_HEAD + """            const int o = b - cb0;  // block within the chunk: group o / 8, block o % 8
            const int rot = TYPE == XI_Q6_K ? xk_q6k_rot(src + (o >> 3) * GB) : 0;
            uint32_t xa[TT][8];
            float2 dsa[TT];
            int2 xsa[TT];
#pragma unroll
            for (int t = 0; t < TT; t++) {
                if (t < tn) {
                    const uint4 *xp = reinterpret_cast<const uint4 *>(xq + (size_t_)t * a.K + 32 * b);
                    const int sw = (b >> 2) & 1;
                    const uint4 u0 = xp[sw], u1 = xp[sw ^ 1], x0 = PRE || !sw ? u0 : u1, x1 = PRE || !sw ? u1 : u0;
                    xa[t][0] = x0.x; xa[t][1] = x0.y; xa[t][2] = x0.z; xa[t][3] = x0.w;
                    xa[t][4] = x1.x; xa[t][5] = x1.y; xa[t][6] = x1.z; xa[t][7] = x1.w;
                    dsa[t] = ds[(size_t_)t * nb + b];
                    xsa[t] = TYPE == XI_Q6_K ? xi_mvq_xs(xa[t]) : make_int2(0, 0);
                }
            }
#pragma unroll
            for (int q = 0; q < NR; q++) {
                XiMvqB<TYPE> w;
                w.dec(src + q * CGB + (o >> 3) * GB, jl, rot);
#pragma unroll
                for (int t = 0; t < TT; t++)
                    if (t < tn) acc[t][q] = __fadd_rn(acc[t][q], w.term(xa[t], dsa[t].x, dsa[t].y, xsa[t]));
            }
        }
"""
UQ4 = "xi_mmq_quant<NORM, 4, true>(a, inv, tg0, tn, 0, nb, xq, a.K, ds, XI_MVQ_WARPS * 32);"
INV_LOOP = "    for (int i = tid; i < (a.K >> 2); i += XI_MVQ_WARPS * 32) {\n"
QUANT_LOOP = """#pragma unroll 1
        for (int u = 0; u < UQ; u++) {
            const float4 w = v[0];"""
QUANT1_FN = """// One token (a CTA tile of tt == 1) quantized in one pass, K <= 1024 * U: thread j loads float4s
// j, j + 256, ... (U at most, all in flight) once, adds their squares into the rmsnorm sum (NORM:
// xi_mvq_inv's order, so the same inv), then quantizes each float4 from its registers (the 8 lanes of
// a block are 8 consecutive threads, the layout of xi_mmq_quant at T == 1): the same bits as
// xi_mvq_inv + xi_mmq_quant. (tools/mvq_ablate.py quant1 / quant1roll)
#define XI_MVQ_Q1(NORM) ((NORM) ? 8 : 16)
template <bool NORM, int U>
__device__ __forceinline__ void xi_mvq_quant1(const XiMvcArgs &a, int tg0, uint8_t *xq, float2 *ds) {
    __shared__ float red[XI_MVQ_WARPS + 1];
    const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5, n4 = a.K >> 2;
    const float *xt = a.x + (size_t_)tg0 * a.K;
    const bool al = (((size_t_)xt) & 15) == 0, gal = !NORM || (((size_t_)a.norm) & 15) == 0;
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int i = tid + u * XI_MVQ_WARPS * 32;
        v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < n4) v[u] = al ? __ldg(reinterpret_cast<const float4 *>(xt) + i)
                              : make_float4(xt[4 * i], xt[4 * i + 1], xt[4 * i + 2], xt[4 * i + 3]);
    }
    if (NORM) {
        float ss = 0.0f;
#pragma unroll
        for (int u = 0; u < U; u++)
            if (tid + u * XI_MVQ_WARPS * 32 < n4)
                ss = __fadd_rn(ss, __fadd_rn(__fadd_rn(__fmul_rn(v[u].x, v[u].x), __fmul_rn(v[u].y, v[u].y)),
                                             __fadd_rn(__fmul_rn(v[u].z, v[u].z), __fmul_rn(v[u].w, v[u].w))));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
        if (lane == 0) red[wi] = ss;
        __syncthreads();
        if (tid == 0) {
            float t = red[0];
#pragma unroll
            for (int w = 1; w < XI_MVQ_WARPS; w++) t = __fadd_rn(t, red[w]);
            red[XI_MVQ_WARPS] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(t, (float)a.K), a.eps)));
        }
        __syncthreads();
        const float iv = red[XI_MVQ_WARPS];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = tid + u * XI_MVQ_WARPS * 32;
            if (i < n4) {
                const float4 g = gal ? __ldg(reinterpret_cast<const float4 *>(a.norm) + i)
                                     : make_float4(a.norm[4 * i], a.norm[4 * i + 1], a.norm[4 * i + 2], a.norm[4 * i + 3]);
                v[u] = make_float4(__fmul_rn(__fmul_rn(v[u].x, iv), g.x), __fmul_rn(__fmul_rn(v[u].y, iv), g.y),
                                   __fmul_rn(__fmul_rn(v[u].z, iv), g.z), __fmul_rn(__fmul_rn(v[u].w, iv), g.w));
            }
        }
    }
QUANT_LOOP_PRAGMA
    for (int u = 0; u < U; u++) {
        const int i = tid + u * XI_MVQ_WARPS * 32;
        if (u * XI_MVQ_WARPS * 32 < n4) {  // uniform over the CTA (n4 is a multiple of 64)
QUANT_LOOP_TAKE
QUANT_BLOCK_CODE
            if (i < n4) {
                reinterpret_cast<uint32_t *>(xq)[i] =
                    (uint32_t)(q0 & 255) | ((uint32_t)(q1 & 255) << 8) | ((uint32_t)(q2 & 255) << 16) | ((uint32_t)(q3 & 255) << 24);
                if ((tid & 7) == 0) ds[i >> 3] = make_float2(d, __fmul_rn(d, (float)qs));
            }
        }
    }
}

"""
QUANT1_AT = "// The vector body (see the top)"
#: the first and last lines of xi_mmq_quant's code for one float4 w (the block's amax, d, codes and their
#: sum), which quant1 reuses as it stands in shaders/xi_mmq.cuh
BLOCK_FIRST = "            float am = fmaxf(fmaxf(fabsf(w.x), fabsf(w.y)), fmaxf(fabsf(w.z), fabsf(w.w)));\n"
BLOCK_LAST = "            qs += __shfl_xor_sync(0xffffffffu, qs, 4);\n"


def block_code(mmq: str) -> str:
    """xi_mmq_quant's lines from BLOCK_FIRST through BLOCK_LAST in ``mmq`` (xi_mmq.cuh's text).

    Raises:
        ValueError: either line is missing (the quantization changed: update tools/mvq_ablate.py)."""
    if BLOCK_FIRST not in mmq or BLOCK_LAST not in mmq:
        raise ValueError("quant1: xi_mmq.cuh no longer has xi_mmq_quant's block code (update tools/mvq_ablate.py)")
    i = mmq.index(BLOCK_FIRST)
    return mmq[i:mmq.index(BLOCK_LAST, i) + len(BLOCK_LAST)]
QUANT1_CALL = """        if (TT == 1 && a.K <= 1024 * XI_MVQ_Q1(NORM)) {
            xi_mvq_quant1<NORM, XI_MVQ_Q1(NORM)>(a, tg0, xq, ds);
        } else {
            if (NORM) xi_mvq_inv<TT>(a, tg0, tn, inv);
            xi_mmq_quant<NORM, 4, true>(a, inv, tg0, tn, 0, nb, xq, a.K, ds, XI_MVQ_WARPS * 32);
        }
"""
#: quant1: the U float4s' quantize code unrolled (U copies, v[u] in registers); quant1roll: one copy in a
#: loop, v[0] taken each time and the rest moved down (xi_mmq_quant's way: short code, U - 1 moves a step)
QUANT1_LOOPS = {
    "quant1": ("#pragma unroll", "            const float4 w = v[u];"),
    "quant1roll": ("#pragma unroll 1", """            const float4 w = v[0];
#pragma unroll
            for (int j = 0; j + 1 < U; j++) v[j] = v[j + 1];"""),
}
NAMES = ("noquant", "nocompute", "unroll2", "qouter", "uq8", "uq16", "qunroll", "invunroll", "quant1",
         "quant1roll")


def ablate(text: str, names: list[str], mmq_text: str | None = None) -> str | tuple[str, str]:
    """``xi_mvq.cuh``'s text with the ablations ``names`` applied in order; with ``mmq_text``
    (``xi_mmq.cuh``'s, which ``qunroll`` patches) the pair of both.

    Raises:
        ValueError: an unknown name, or a text a patch needs is missing (the header changed)."""
    mmq = mmq_text
    for n in names:
        if n not in NAMES:
            raise ValueError(f"unknown ablation {n!r}; one of {', '.join(NAMES)}")
        if n == "qunroll":
            if mmq is None or QUANT_LOOP not in mmq:
                raise ValueError("qunroll: xi_mmq.cuh no longer has xi_mmq_quant's '#pragma unroll 1' loop "
                                 "(update tools/mvq_ablate.py)")
            mmq = mmq.replace(QUANT_LOOP, QUANT_LOOP.replace("unroll 1", "unroll 4"))
            continue
        need = {"noquant": [QUANT], "unroll2": [LOOP_HEAD], "uq8": [UQ4], "uq16": [UQ4],
                "invunroll": [INV_LOOP], "quant1": [QUANT, QUANT1_AT],
                "quant1roll": [QUANT, QUANT1_AT]}.get(n, [BODY_START, TERM])
        missing = [t.strip().splitlines()[0] for t in need if t not in text]
        if missing:
            raise ValueError(f"{n}: xi_mvq.cuh no longer has {missing[0]!r} (update tools/mvq_ablate.py)")
        if n == "noquant":
            text = text.replace(QUANT, "")
        elif n in ("uq8", "uq16"):
            text = text.replace(UQ4, UQ4.replace("NORM, 4,", f"NORM, {n[2:]},"))
        elif n == "invunroll":
            text = text.replace(INV_LOOP, "#pragma unroll 4\n" + INV_LOOP)
        elif n in QUANT1_LOOPS:
            pragma, take = QUANT1_LOOPS[n]
            # the block code of the xi_mmq.cuh given, else of the repository's
            code = block_code(mmq if mmq is not None else open(os.path.join(SHADERS, "xi_mmq.cuh")).read())
            fn = QUANT1_FN.replace("QUANT_LOOP_PRAGMA", pragma).replace("QUANT_LOOP_TAKE", take)
            fn = fn.replace("QUANT_BLOCK_CODE\n", code)
            text = text.replace(QUANT1_AT, fn + QUANT1_AT, 1).replace(QUANT, QUANT1_CALL)
        elif n == "unroll2":
            text = text.replace(LOOP_HEAD, "#pragma unroll 2\n" + LOOP_HEAD)
        else:
            i, j = text.index(BODY_START), text.index(TERM) + len(TERM)
            text = text[:i] + (NOCOMPUTE if n == "nocompute" else QOUTER) + text[j:]
    return text if mmq_text is None else (text, mmq)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv or len(argv) != 2:
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 1
    out, names = argv[0], argv[1].split("+")
    src = SHADERS
    try:
        texts = ablate(open(os.path.join(src, "xi_mvq.cuh")).read(), names,
                       open(os.path.join(src, "xi_mmq.cuh")).read())
    except ValueError as e:
        print(f"mvq_ablate: {e}", file=sys.stderr)
        return 2
    shutil.copytree(src, out, dirs_exist_ok=True)
    for name, text in zip(("xi_mvq.cuh", "xi_mmq.cuh"), texts):
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
    print(f"{out}: shaders/ with xi_mvq.cuh / xi_mmq.cuh patched ({'+'.join(names)}); XINFER_SHADERS={out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
