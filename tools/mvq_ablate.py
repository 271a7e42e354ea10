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
The last four keep every result: ``gemv_mvq.py`` checks them against the model like the entry.

Measured on the H200 (2026-12-02, ``--dt q4_1,q6_k --t 1``, us a launch, L2-cold, ``_pq`` / ``noquant``):
matmul 4096x4096 6.8 / 5.3, rmsnorm_matmul 6144x4096 11.4 / 6.9, matmul 4096x14336 19.8 / 14.6,
SwiGLU 14336x4096 25.7 / 21.3, the q8_0-sized output 128256x4096 (q4_1) 96.4 / 85.6; q6_k 4096x14336
29.2 / 21.7. ``qouter`` was slower (19.8 -> 22.5 on 4096x14336). The `nocompute` patch then read
32-bit words, misaligned in q6_k's 210-byte groups (CUDA_ERROR_MISALIGNED_ADDRESS); it reads bytes now
(compiled with NVRTC, not yet timed).

Exit status 2 where the header no longer has the text a patch replaces (the kernel changed: update
the patch)."""

from __future__ import annotations

import os
import shutil
import sys

QUANT = """    if (NORM) xi_mvq_inv<TT>(a, tg0, tn, inv);
    xi_mmq_quant<NORM, 4, true>(a, inv, tg0, tn, 0, nb, xq, a.K, ds, XI_MVQ_WARPS * 32);
"""
LOOP_HEAD = "        for (int b = cb0 + ((lane - cb0) & 31); b < cb1; b += 32) {\n"
BODY_START = LOOP_HEAD + """            const int o = b - cb0;  // block within the chunk: group o / 8, block o % 8
            XiMvqB<TYPE> wb[NR];
#pragma unroll
            for (int q = 0; q < NR; q++) wb[q].dec(src + q * CGB + (o >> 3) * GB, o & 7);
#pragma unroll
            for (int t = 0; t < TT; t++) {
                if (t < tn) {
"""
TERM = """#pragma unroll
                    for (int q = 0; q < NR; q++) acc[t][q] = __fadd_rn(acc[t][q], wb[q].term(xw, dsv.x, dsv.y));
                }
            }
        }
"""
NOCOMPUTE = LOOP_HEAD + """            const int o = b - cb0;
            acc[0][0] = __fadd_rn(acc[0][0], (float)src[(o >> 3) * GB + 4 * (o & 7)]);
        }
"""
QOUTER = LOOP_HEAD + """            const int o = b - cb0;  // block within the chunk: group o / 8, block o % 8
            uint32_t xa[TT][8];
            float2 dsa[TT];
#pragma unroll
            for (int t = 0; t < TT; t++) {
                if (t < tn) {
                    const uint4 *xp = reinterpret_cast<const uint4 *>(xq + (size_t_)t * a.K + 32 * b);
                    const int sw = (b >> 2) & 1;
                    const uint4 u0 = xp[sw], u1 = xp[sw ^ 1], x0 = sw ? u1 : u0, x1 = sw ? u0 : u1;
                    xa[t][0] = x0.x; xa[t][1] = x0.y; xa[t][2] = x0.z; xa[t][3] = x0.w;
                    xa[t][4] = x1.x; xa[t][5] = x1.y; xa[t][6] = x1.z; xa[t][7] = x1.w;
                    dsa[t] = ds[(size_t_)t * nb + b];
                }
            }
#pragma unroll
            for (int q = 0; q < NR; q++) {
                XiMvqB<TYPE> w;
                w.dec(src + q * CGB + (o >> 3) * GB, o & 7);
#pragma unroll
                for (int t = 0; t < TT; t++)
                    if (t < tn) acc[t][q] = __fadd_rn(acc[t][q], w.term(xa[t], dsa[t].x, dsa[t].y));
            }
        }
"""
UQ4 = "xi_mmq_quant<NORM, 4, true>(a, inv, tg0, tn, 0, nb, xq, a.K, ds, XI_MVQ_WARPS * 32);"
INV_LOOP = "    for (int i = tid; i < (a.K >> 2); i += XI_MVQ_WARPS * 32) {\n"
QUANT_LOOP = """#pragma unroll 1
        for (int u = 0; u < UQ; u++) {
            const float4 w = v[0];"""
NAMES = ("noquant", "nocompute", "unroll2", "qouter", "uq8", "uq16", "qunroll", "invunroll")


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
                "invunroll": [INV_LOOP]}.get(n, [BODY_START, TERM])
        missing = [t.strip().splitlines()[0] for t in need if t not in text]
        if missing:
            raise ValueError(f"{n}: xi_mvq.cuh no longer has {missing[0]!r} (update tools/mvq_ablate.py)")
        if n == "noquant":
            text = text.replace(QUANT, "")
        elif n in ("uq8", "uq16"):
            text = text.replace(UQ4, UQ4.replace("NORM, 4,", f"NORM, {n[2:]},"))
        elif n == "invunroll":
            text = text.replace(INV_LOOP, "#pragma unroll 4\n" + INV_LOOP)
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
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shaders")
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
