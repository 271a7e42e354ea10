"""The launcher families of the CUDA kernels with several entry points (``FAMILIES``: the matrix
kernels and attention): entry, grid, block and dynamic shared bytes as a function of the constants
(a dict keyed by the declared field names) and of the device. A kernel's declaration
(``ops/_kernels.py``) names its family; the one-entry kernels declare their block and grid there."""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable, Mapping

from ..._switches import env_int, env_switch
from ...ops._attention_split import SPLIT_T_MAX, segments


def _cdiv(a: int, b: int) -> int:
    return max(1, -(-a // b))


_BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20}  # 32 elements
_ELEM_BYTES = {"f32": 4, "f16": 2}
#: the types of shaders/xi_kquant.cuh in the tuned kernels: (elements, bytes) a block (xk_block_elems,
#: xk_block_bytes); at T == 1 they run the staged kernel too (``xi_mvc_staged1``)
STAGED1_TYPES = {"q5_0": (32, 22), "q5_1": (32, 24), "iq4_nl": (32, 18), "q2_k": (256, 84), "q3_k": (256, 110),
                 "q4_k": (256, 144), "q5_k": (256, 176), "q6_k": (256, 210), "iq4_xs": (256, 136), "bf16": (1, 2)}
_MVC_BYTES, _MVC_SPREAD, _MVC_TG = 32768, 264, 8  # XI_MVC_BYTES, XI_MVC_SPREAD, XI_MVC_TG


def row_bytes(dt: str, k: int) -> int:
    """Bytes of a weight row of ``k`` elements of ``dt`` (``xi_row_bytes_of``)."""
    if dt in _ELEM_BYTES:
        return k * _ELEM_BYTES[dt]
    if dt in STAGED1_TYPES:
        qk, nb = STAGED1_TYPES[dt]
        return (k // qk) * nb
    return (k // 32) * _BLOCK_BYTES[dt]


def mvc_rows(dt: str, n: int, k: int, t: int = 1, glu: bool = False) -> int:
    """Output rows a CTA owns in the staged matrix kernel (``xi_mvc_rows`` in shaders/xi_mvc.cuh):
    the largest of 32, 16, 8, 4, 2, 1 under the stage (half each for GLU's two regions) and under
    the want: T == 1: 8 (a row a warp), 16 when N >= 16384 (32 for ``STAGED1_TYPES``); 1 < T <= 8:
    N spread over ~2 CTAs per SM; T > 8: 8; at most 16, 8 with GLU and for ``STAGED1_TYPES`` at
    T > 1. 0: one row does not fit the stage."""
    s1 = dt in STAGED1_TYPES
    fit = ((_MVC_BYTES >> int(glu)) - 32) // max(1, row_bytes(dt, k))
    want = ((32 if s1 else 16) if n >= 16384 else 8) if t == 1 else -(-n // _MVC_SPREAD) if t <= 8 else 8
    cap = 8 if glu else (32 if t == 1 else 8) if s1 else 16
    r = min(want, fit, cap)
    return next((b for b in (32, 16, 8, 4, 2, 1) if r >= b), 0)


def mv1_rows(dt: str, n: int, glu: bool) -> int:
    """Rows a warp at T == 1 (``xi_mv1_rows``): 2 for f32/f16 and N >= 16384 (not with GLU nor for
    ``STAGED1_TYPES``), else 1."""
    return 1 if glu or dt in STAGED1_TYPES else 2 if dt in ("f32", "f16") or n >= 16384 else 1


def _one_token_grid(c: dict, dt: str, glu: bool) -> tuple[int, int, int]:
    """T == 1: ``STAGED1_TYPES`` where a row fits the stage: ``mvc_rows`` rows a block (the staged
    kernel); else ``mv1_rows`` rows a warp (xi_mv1)."""
    rows = mvc_rows(dt, c["N"], c["K"], 1, glu) if dt in STAGED1_TYPES else 0
    return (_cdiv(c["N"], rows), 1, 1) if rows else (_cdiv(c["N"], 8 * mv1_rows(dt, c["N"], glu)), 1, 1)


def _matmul_grid(c: dict, dt: str) -> tuple[int, int, int]:
    """matmul_DT (shaders/xi_mvc.cuh), blocks of 8 warps: T == 1: ``_one_token_grid``; T > 1:
    ``mvc_rows`` output rows and 8 tokens a block, or where one row does not fit the stage,
    xi_quant.cuh's warp per row and 4 tokens a block row."""
    if c["T"] == 1:
        return _one_token_grid(c, dt, False)
    rows = mvc_rows(dt, c["N"], c["K"], c["T"])
    if rows:
        return (_cdiv(c["N"], rows), _cdiv(c["T"], _MVC_TG), 1)
    return (_cdiv(c["N"], 8), _cdiv(c["T"], 4), 1)


def _fused_grid(c: dict, dt: str, glu: bool) -> tuple[int, int, int]:
    """rmsnorm_matmul_DT / rmsnorm_matmul_swiglu_DT: as matmul_DT at T == 1; T > 1: ``mvc_rows`` rows
    (or one row where a row does not fit the stage: the element-by-element path) and 8 tokens a block."""
    if c["T"] == 1:
        return _one_token_grid(c, dt, glu)
    return (_cdiv(c["N"], mvc_rows(dt, c["N"], c["K"], c["T"], glu) or 1), _cdiv(c["T"], _MVC_TG), 1)


_MVT_TT, _MVT_WARPS, _MVT_MIN_T, _MVT_WIDE, _MVT_MANY_T = 8, 8, 8, 2048, 16  # XI_MVT_* (shaders/xi_mvt.cuh)


def mvt_rows(n: int, t: int, glu: bool) -> int:
    """Rows a warp of the tiled kernel (``xi_mvt_rows``): 4 (2 + 2 with GLU) from 2048 weight rows
    (2N with GLU) or above 16 tokens, else 2 (1 + 1)."""
    return (4 if n * (2 if glu else 1) >= _MVT_WIDE or t > _MVT_MANY_T else 2) >> int(glu)


def _tiled_grid(c: dict, glu: bool) -> tuple[int, int, int]:
    """The ``_t`` entries (shaders/xi_mvt.cuh): 8 warps of ``mvt_rows`` rows by 8 tokens a block."""
    return (_cdiv(c["N"], _MVT_WARPS * mvt_rows(c["N"], c["T"], glu)), _cdiv(c["T"], _MVT_TT), 1)


MVT_STAGE_MAX = 102400  # the most dynamic shared bytes the `_t` entries stage tokens in (2 blocks an SM)


#: dynamic shared bytes the integer decode entry ``_pq`` may use on an H200 (its opt-in 227 KB less 1 KB,
#: ``pq_stage_max_for``): its measured parameters (``mvq_params``) stage past 100 KB (one CTA an SM)
PQ_STAGE_MAX = 227 * 1024 - 1024


def pq_stage_max_for(optin: int) -> int:
    """The most dynamic shared bytes of ``_pq`` on a device whose blocks may opt in to ``optin``:
    ``optin`` less the kernel's static shared memory and a margin (1 KB)."""
    return max(0, optin - 1024)


def stage_max_for(optin: int) -> int:
    """XI_MVT_STAGE_MAX for a device whose blocks may opt in to ``optin`` shared bytes: 100 KB, or
    what the device allows less the kernel's static shared memory and a margin (1 KB)."""
    return max(0, min(MVT_STAGE_MAX, optin - 1024))


def mvt_stage_bytes(dt: str, k: int, stage_max: int = MVT_STAGE_MAX) -> int:
    """Dynamic shared bytes of the tiled kernel's staged tokens (``xi_mvt_stage_bytes``): 8 rows of K
    floats, plus K / 8 block sums a row for q4_1; 0 past ``stage_max`` (no staging)."""
    n = _MVT_TT * 4 * (k + (k // 8 if dt == "q4_1" else 0))
    return n if n <= stage_max else 0


_TC_SEG_BLOCKS, _TC_SEGS = 4, 16  # XI_TC_SEG_BLOCKS, XI_TC_SEGS (shaders/xi_tc.cuh)
TC_TYPES = ("q8_0", "q4_1")  # the types with a tensor-core matrix kernel (entries ``_tc``, ``_tct``)


def tc_segs(nb: int) -> int:
    """K segments (warps a CTA) of the tensor-core kernel for ``nb`` 32-element blocks
    (``xi_tc_segs``): ceil(nb / b) for b = 4 blocks a segment, ceil(nb / 16) past 64 blocks."""
    per = _TC_SEG_BLOCKS if nb <= _TC_SEG_BLOCKS * _TC_SEGS else -(-nb // _TC_SEGS)
    return max(1, -(-nb // per))


_TC_REGS = {False: 96, True: 112}  # registers a thread of the `_tc` entries (their __maxnreg__), by GLU


def tc_weight(dt: str, n: int, k: int, glu: bool, sms: int, cc: tuple[int, int]) -> bool:
    """Whether a weight (``n`` output rows of ``k``) runs the tensor-core kernel, at every T (its rows
    then never run another kernel, so they stay bit-identical whatever T): q4_1 and q8_0 on compute
    capability 8.0+, where its one-token grid is short: SwiGLU's gate/up weight when that grid
    takes one wave of the SMs, and weights of at least 4 row tiles (16 rows) an SM (an output
    layer) when it takes at most 6.

    Measured on the H200 (tools/gemv_variants.py, us a launch): at 64 tokens it takes 40-55 % off
    those kernels (SmolLM2's gate/up 24 -> 14, its q8_0 49152 x 576 output 293 -> 131); at one token
    its blocks (a warp per K segment of 16 rows) are latency-bound, even with the one-token body
    (xi_tc_one, us a launch against the float kernel): 3.34 / 2.35 on a 3072 x 576 q4_1 weight, 32.2
    / 15.8 on that output layer, 14.6 / 7.7 on a 4096 x 4096 q4_1 weight; a Llama-3.2-1B decode step
    took 1.48 ms with its gate/up (4 waves) on it, 1.09 ms without (before the one-token body, and with
    the 8-warp attention); on narrow weights it gains under 10 % at 64 tokens."""
    if dt not in TC_TYPES or cc < (8, 0):
        return False
    tiles, segs = _cdiv(n, 16), tc_segs(k // 32)
    per_sm = max(1, min(2048 // (32 * segs), 65536 // (32 * segs * _TC_REGS[glu])))
    waves = _cdiv(tiles, sms * per_sm)
    return (glu and waves <= 1) or (tiles >= 4 * sms and waves <= 6)


#: the most dynamic shared bytes the one-token tensor-core body (xi_tc_one) is given: under the
#: 48 KB a block has without opting in, less 1 KB for the entry's static shared memory
TC1_SHARED_MAX = 47 * 1024


def tc1_shared(nb: int, glu: bool) -> int:
    """Dynamic shared bytes of the one-token tensor-core body (``xi_tc1_shared``): h split into hi
    and lo (256 bytes a block), the segment sums (64 bytes a segment and region), the block sums."""
    return nb * 256 + tc_segs(nb) * (2 if glu else 1) * 64 + nb * 4


def tc_launch(c: dict, glu: bool) -> tuple[tuple[int, int, int], tuple[int, int, int], int, str]:
    """(grid, block, shared bytes, entry suffix) of the tensor-core kernel: ``_tc`` at T <= 8 (8 tokens
    a block), ``_tct`` above (32 tokens, 16 with GLU); a block of ``tc_segs`` warps a tile of 16 rows;
    shared: the segment sums (segments x regions x tiles of 8 tokens x 512 bytes), and at T == 1
    ``tc1_shared`` where that is at most ``TC1_SHARED_MAX`` (K up to 5792, 5664 with GLU): the entry
    then runs its one-token body (xi_tc_one: the same sums, with h split once a block in shared memory)."""
    t, nb = c["T"], c["K"] // 32
    segs, tok = tc_segs(nb), 8 if t <= 8 else 16 if glu else 32
    shared = segs * (2 if glu else 1) * _cdiv(min(t, tok), 8) * 512
    if t == 1 and tc1_shared(nb, glu) <= TC1_SHARED_MAX:
        shared = tc1_shared(nb, glu)
    return (_cdiv(c["N"], 16), _cdiv(t, tok), 1), (32 * segs, 1, 1), shared, "_tc" if t <= 8 else "_tct"


#: the weight types of the integer matrix kernels (shaders/xi_mmq.cuh: entries ``_mmq``, ``_mmqs``, ``_q1``)
MMQ_TYPES = ("q4_0", "q4_1", "q8_0")
_MMQ_WARPS, _MMQ_KB, _MMQ_XS = 4, 8, 8 * 32 + 16  # XI_MMQ_WARPS, XI_MMQ_KB, XI_MMQ_XS (shaders/xi_mmq.cuh)
#: tokens a CTA of the ``_mmq`` entry (64) and of ``_mmqs`` (16)
MMQ_TN, MMQ_TN_SMALL = 64, 16
#: the most tokens the one-token entry ``_q1`` runs under XINFER_MMQ=1 (a CTA a token; above, ``_mmqs``
#: / ``_mmq``); a first guess, to be measured on the H200 (tools/mmq_bench.py)
MMQ_Q1_MAX_T = 4
#: the most dynamic shared bytes ``_q1`` is given (no opt-in): its token's codes and scales, K <= 39,296
Q1_SHARED_MAX = 48 * 1024
#: XINFER_MMQ value -> mode: "" off, "auto" (``_q1`` up to MMQ_Q1_MAX_T tokens, the tiled entries above),
#: "tile" (the tiled entries at every T), "q1" (``_q1`` at every T where its shared memory fits)
MMQ_MODES = {"": "", "0": "", "1": "auto", "auto": "auto", "tile": "tile", "q1": "q1"}


def mmq_mode(environ: Mapping[str, str] = os.environ) -> str:
    """The integer matrix kernels' mode from ``XINFER_MMQ`` (``MMQ_MODES``; unset or ``0``: off).

    They are opt-in until they are measured on the H200 against today's kernels: they change the
    numerics of q4_0 / q4_1 / q8_0 products (activations rounded to int8 per block of 32, as llama.cpp
    does; issue #15's accuracy rule), so the end-to-end golden and perplexity checks must pass with
    them before they become the default.

    Raises:
        ValueError: XINFER_MMQ is set to something else (the message lists the values).
    """
    v = environ.get("XINFER_MMQ", "").strip().lower()
    if v not in MMQ_MODES:
        raise ValueError(f"XINFER_MMQ={v!r} is not one of {', '.join(repr(m) for m in MMQ_MODES)}")
    return MMQ_MODES[v]


def mmq_slot16(dt: str) -> int:
    """16-byte chunks of a staged weight row's K-step (``xi_mmq_slot16``): floor((30 + 8 bb) / 16), odd."""
    return ((30 + _MMQ_KB * _BLOCK_BYTES[dt]) // 16) | 1


def mmq_shared(dt: str, tn: int) -> int:
    """Dynamic shared bytes of the tiled integer kernel with ``tn`` tokens a CTA (``xi_mmq_shared``):
    two stages of (64 staged rows' slots, the tokens' codes, their (d, s) pairs), the rmsnorm scales."""
    stage = _MMQ_WARPS * 16 * 16 * mmq_slot16(dt) + tn * _MMQ_XS + _MMQ_KB * tn * 8
    return 2 * stage + 4 * tn


def q1_shared(k: int) -> int:
    """Dynamic shared bytes of the one-token integer kernel (``xi_q1_shared``): 40 a block of 32 + 16."""
    return 40 * (k // 32) + 16


def mmq_launch(c: dict, dt: str, glu: bool, mode: str, sms: int = 132) -> tuple[tuple[int, int, int], tuple[int, int, int], int, str]:
    """(grid, block, shared bytes, entry suffix) of the integer matrix kernels (shaders/xi_mmq.cuh) in
    ``mode`` (``mmq_mode``): ``_q1`` (256 threads, a CTA a token (grid.y) and 8 output rows, 16 from
    N = 4096, a warp a row) at T <= MMQ_Q1_MAX_T ("auto") or every T ("q1") where ``q1_shared`` fits
    Q1_SHARED_MAX; else the tiled entries (128 threads, 64 staged rows (32 output rows with GLU) a
    CTA): ``_mmq`` (64 tokens a CTA) where T > 16 and its grid has at least 2 CTAs an SM (``sms``),
    else ``_mmqs`` (16 tokens: 4x the CTAs for narrow weights; the total activation-quantization work
    is the same, the weights are read once a tile of 16 tokens). Every entry gives a row the same bits."""
    t, n, k = c["T"], c["N"], c["K"]
    if (mode == "q1" or (mode == "auto" and t <= MMQ_Q1_MAX_T)) and q1_shared(k) <= Q1_SHARED_MAX:
        rows = 16 if n >= 4096 else 8
        return (_cdiv(n, rows), max(1, t), 1), (256, 1, 1), q1_shared(k), "_q1"
    rows = _MMQ_WARPS * (8 if glu else 16)
    tn = MMQ_TN if t > MMQ_TN_SMALL and _cdiv(n, rows) * _cdiv(t, MMQ_TN) >= 2 * sms else MMQ_TN_SMALL
    return (_cdiv(n, rows), _cdiv(t, tn), 1), (32 * _MMQ_WARPS, 1, 1), mmq_shared(dt, tn), \
        "_mmqs" if tn == MMQ_TN_SMALL else "_mmq"


def mmq_usable(dt: str, stage_max: int, cc: tuple[int, int]) -> bool:
    """Whether the integer kernels can run: a type of MMQ_TYPES, compute capability 8.0+ (int8 mma,
    cp.async) and a device whose blocks may opt in to their shared memory (``stage_max``, the
    device's opt-in limit less 1 KB, capped at MVT_STAGE_MAX)."""
    return dt in MMQ_TYPES and cc >= (8, 0) and mmq_shared(dt, MMQ_TN) <= stage_max


#: the weight types of the pipelined matrix kernel (shaders/xi_mvp.cuh, entry ``_p``)
MVP_TYPES = ("f16", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k", "q5_0")
_MVP_WARPS, _MVP_XK, _MVP_TT = 8, 8192, 8  # XI_MVP_WARPS, XI_MVP_XK, XI_MVP_TT
#: bytes of a group of 256 elements (8 blocks of 32, a K-quant super-block: ``xi_mvp_group_bytes``)
_MVP_GROUP = {dt: row_bytes(dt, 256) for dt in MVP_TYPES}
#: where ``_p`` runs (``mvp_weight``): at most this many tokens, weights (both halves with GLU) of at
#: least this many bytes (smaller ones keep xi_mv1 / xi_mvc, fast on SmolLM2-135M). Set from
#: tools/gemv_variants.py's ``--mvp`` table on the H200 (2026-12-01): at T = 1 ``_p`` beats xi_mv1 on
#: the 8B shapes (qkv 25.2 -> 14.6 us, down 29.9 -> 24.3, gate/up 50.6 -> 36.5, output q8_0 275 -> 181;
#: wo 4096x4096 7.8 -> 8.2), at T = 2..8 it mostly loses to xi_mvc (down at T = 8: 128 -> 188 us).
MVP_MAX_T, MVP_MIN_BYTES = 1, 2 << 20
#: shared memory an SM has, by compute capability major (CTAs an SM of ``_p``: ``mvp_ctas_per_sm``)
_SMEM_PER_SM = {8: 164 * 1024, 9: 228 * 1024, 10: 228 * 1024}


def staged_rows(dt: str, k: int) -> bool:
    """Whether rows of ``k`` elements of ``dt`` can stream through the cp.async stages of ``_p`` and
    ``_pq`` (shaders/xi_mvp.cuh, xi_mvq.cuh): whole groups of 256 elements (K % 256 == 0) in rows of
    whole 16-byte words (q6_k's 210-byte groups: K a multiple of 2048)."""
    return k % 256 == 0 and row_bytes(dt, k) % 16 == 0


def mvp_params(dt: str, glu: bool) -> tuple[int, int, int]:
    """(R rows a warp, S stages, CG groups of 256 elements a region's chunk) of the ``_p`` entries
    (XI_MVP_R, XI_MVP_S, XI_MVP_CG in shaders/xi_mvp.cuh): R = 2 (1 with GLU: a gate and an up
    row), S = 3, CG for ~1-1.7 KB a chunk (8 groups of q4_0 / q4_1 and of the K-quants and q5_0,
    whose chunks are then whole 16-byte words (q6_k's 210-byte super-blocks: 8 of them), 4 of q8_0,
    2 of f16)."""
    return (1 if glu else 2), 3, {"q8_0": 4, "f16": 2}.get(dt, 8)


def mvp_shared(dt: str, k: int, t: int, glu: bool, params: tuple[int, int, int] | None = None) -> int:
    """Dynamic shared bytes of the pipelined kernel (``xi_mvp_shared``): 8 warps x S stages x NR
    regions (R, 2R with GLU) x CG groups, and at T == 1 where K <= 8192 the staged token (4.5 K)."""
    r, s, cg = params or mvp_params(dt, glu)
    return _MVP_WARPS * s * r * (2 if glu else 1) * cg * _MVP_GROUP[dt] + (k * 4 + k // 2 if t == 1 and k <= _MVP_XK else 0)


def mvp_ctas_per_sm(shared: int, cc: tuple[int, int], most: int = 2) -> int:
    """CTAs of ``_p`` (and ``_pq``) an SM holds: ``most`` (2: ``__launch_bounds__(256, 2)``,
    registers), fewer where the shared bytes (plus 1 KB the CTA reserves) do not fit the SM's."""
    return max(1, min(most, _SMEM_PER_SM.get(cc[0], 100 * 1024) // (shared + 1024)))


def mvp_launch(c: dict, dt: str, glu: bool, sms: int, cc: tuple[int, int] = (9, 0),
               params: tuple[int, int, int] | None = None) -> tuple[tuple[int, int, int], tuple[int, int, int], int, str]:
    """(grid, block, shared bytes, entry suffix) of the pipelined kernel: 256 threads, tiles of R
    rows a warp, at most one wave of CTAs (the warps stride over the tiles), ceil(T / 8) CTA rows."""
    r, s, cg = params or mvp_params(dt, glu)
    shared = mvp_shared(dt, c["K"], c["T"], glu, (r, s, cg))
    ctas = min(_cdiv(_cdiv(c["N"], r), _MVP_WARPS), sms * mvp_ctas_per_sm(shared, cc))
    return (ctas, _cdiv(c["T"], _MVP_TT), 1), (256, 1, 1), shared, "_p"


def mvp_weight(dt: str, n: int, k: int, t: int, glu: bool, stage_max: int, cc: tuple[int, int]) -> bool:
    """Whether a product runs the pipelined kernel (``_p``, shaders/xi_mvp.cuh): a type of
    MVP_TYPES on compute capability 8.0+ (cp.async), T <= MVP_MAX_T, K a multiple of 256 and rows
    of whole 16-byte words (its cp.async copies; q6_k: K a multiple of 2048), a weight of at least
    MVP_MIN_BYTES, its shared bytes within ``stage_max``. Its rows' results are bit-identical to the
    other entries' (xi_mv1, xi_mvc, xi_mvt), so the choice never changes a result."""
    if dt not in MVP_TYPES or cc < (8, 0) or t > MVP_MAX_T or not staged_rows(dt, k):
        return False
    wbytes = n * (2 if glu else 1) * row_bytes(dt, k)
    return wbytes >= MVP_MIN_BYTES and mvp_shared(dt, k, t, glu) <= stage_max


def mvp_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the pipelined kernel may run (``mvp_weight``): ``XINFER_MVP`` unset or ``1``; ``0``
    turns it off (an A/B switch: its rows give the same bits as the kernels it replaces).

    Raises:
        ValueError: XINFER_MVP is set to something else.
    """
    return env_switch(environ, "XINFER_MVP")


#: the weight types of the integer decode kernel (shaders/xi_mvq.cuh, entry ``_pq``)
MVQ_TYPES = ("q4_0", "q4_1", "q5_0", "q8_0", "q4_k", "q5_k", "q6_k")
_MVQ_WARPS, _MVQ_TT = 8, 8  # XI_MVQ_WARPS, XI_MVQ_TT
#: where ``_pq`` runs (``mvq_weight``): 1 <= T <= PQ_MAX_T tokens
PQ_MAX_T = 8
#: ... and weights (both halves with GLU) of at least PQ_MIN_BYTES: below that the token's
#: quantization, which each CTA does before its first block, costs more than the integer sums save
#: (H200, 2026-12-02, SmolLM2-135M shape, whose only ``_pq`` product is its 576x1536 down of 0.55 MB:
#: ``_pq`` 5.5-6.2 us a launch in situ against ~2.8 for the f32 entry; the decode step 0.797 ms
#: against 0.716 with XINFER_MVQ=0, and 0.797 -> 0.713 with this rule). ``XINFER_PQ_MIN_BYTES``
#: overrides it (``pq_min_bytes``).
PQ_MIN_BYTES = 2 << 20


def mvq_params(dt: str, glu: bool, norm: bool = True) -> tuple[int, int, int]:
    """(R rows a warp, S stages, CG groups of 256 elements a region's chunk) of the ``_pq`` entries
    (XI_MVQ_R, XI_MVQ_S, XI_MVQ_CG in shaders/xi_mvq.cuh), by kind (``norm``: rmsnorm_matmul and the
    SwiGLU kernel; False: matmul) from the H200 sweep of ``tools/gemv_variants.py --mvq`` (2026-12-02,
    Llama-3.1-8B / 3.2-1B shapes, T = 1..8):
    - GLU: R = 1 (a gate and an up row), S = 3 (2 for q5_0, q5_k, q6_k: 8 tokens of K = 4096 then fit
      100 KB beside the stages);
    - rmsnorm_matmul: R = 2 and the same S, except q8_0 (the output layer): R = 4 (128256x4096: 155
      against 180 us at T = 1, 153 against 184 at T = 4);
    - matmul (o, down): R = 4, S = 2 (q8_0: 3): 4096x4096 6.1 against 8.4 us at T = 1, 11.7 against
      14.6 at T = 4; 4096x14336 19.3 against 20.0 and 37.2 against 45.8;
    CG = 8 (4 for q8_0): a multiple of 4 (a warp step is 32 blocks, a block a lane).
    Tried on the H200 and slower at batch 1 (8B q4_1, device ms a decode step, 2.88 with these): 3
    CTAs an SM for the rmsnorm kinds (``__launch_bounds__(256, 3)``, 80 registers) with the matmul
    kind's 8-token body left out, 3.05 (the 1B shape: 0.866 against 0.875); on top of that the matmul
    kind quantizing its token with 16 loads in flight (``xi_mmq_quant``'s UQ, 104 registers) 3.34."""
    slim = dt in ("q5_0", "q5_k", "q6_k")
    if glu:
        return 1, (2 if slim else 3), (4 if dt == "q8_0" else 8)
    if norm:
        return (4 if dt == "q8_0" else 2), (2 if slim else 3), (4 if dt == "q8_0" else 8)
    return 4, (3 if dt == "q8_0" else 2), (4 if dt == "q8_0" else 8)


#: tokens a CTA of the matmul kind's ``_pq``, at most (``mvq_tokens``): with its 4 rows a warp, 8
#: tokens a CTA ran slower than two CTAs of 4 (H200: 2048x8192 at T = 8, 37.7 against 19.9 us)
MVQ_MATMUL_TT = 4


def mvq_shared(dt: str, k: int, tt: int, glu: bool, params: tuple[int, int, int] | None = None,
               norm: bool = True) -> int:
    """Dynamic shared bytes of ``_pq`` for ``tt`` tokens a CTA (``xi_mvq_shared``): 8 warps x S
    stages x NR regions (R, 2R with GLU) x CG groups of 256 elements, the tokens' int8 codes (tt K
    bytes) and their (d, s) pairs (8 bytes a block of 32 a token)."""
    r, s, cg = params or mvq_params(dt, glu, norm)
    return _MVQ_WARPS * s * r * (2 if glu else 1) * cg * row_bytes(dt, 256) + tt * k + tt * (k // 32) * 8


def mvq_tokens(dt: str, k: int, t: int, glu: bool, stage_max: int, params: tuple[int, int, int] | None = None,
               norm: bool = True) -> int:
    """Tokens a CTA of ``_pq`` (TT, grid.y = ceil(T / TT)): the power of two 1..8 (the matmul kind:
    1..MVQ_MATMUL_TT) at or above min(T, that), halved while ``mvq_shared`` exceeds ``stage_max``; 0
    where one token does not fit."""
    most = _MVQ_TT if norm or glu else MVQ_MATMUL_TT
    tt = 1
    while tt < min(t, most):
        tt *= 2
    while tt >= 1 and mvq_shared(dt, k, tt, glu, params, norm) > stage_max:
        tt //= 2
    return tt


def mvq_launch(c: dict, dt: str, glu: bool, sms: int, cc: tuple[int, int] = (9, 0), stage_max: int = PQ_STAGE_MAX,
               params: tuple[int, int, int] | None = None,
               tt: int | None = None, norm: bool = True,
               ctas_per_sm: int | None = None) -> tuple[tuple[int, int, int], tuple[int, int, int], int, str]:
    """(grid, block, shared bytes, entry suffix) of the integer decode kernel: 256 threads, tiles of
    R rows a warp, at most one wave of CTAs a token tile (the warps stride over the tiles; CTAs an
    SM from the shared bytes, ``mvp_ctas_per_sm``, or at most ``ctas_per_sm`` where given: a variant
    compiled for that many, tools/gemv_mvq.py ``--occupancy``), ceil(T / TT) token tiles
    (``mvq_tokens``, or ``tt`` where given: tools/gemv_variants.py sweeps it) within ``stage_max``
    (``_pq``'s limit, as ``matmul_launch``'s ``pq_max``). ``norm``: the kind has the fused rmsnorm
    (rmsnorm_matmul, SwiGLU); False for matmul (its parameters differ: ``mvq_params``).

    Raises:
        ValueError: one token's shared bytes exceed ``stage_max`` (``mvq_weight`` is False there)."""
    r, s, cg = params or mvq_params(dt, glu, norm)
    tt = tt or mvq_tokens(dt, c["K"], c["T"], glu, stage_max, (r, s, cg), norm)
    if tt < 1:
        raise ValueError(f"_pq of {dt} with K={c['K']}: one token needs {mvq_shared(dt, c['K'], 1, glu, (r, s, cg))} "
                         f"shared bytes, over stage_max={stage_max}")
    shared = mvq_shared(dt, c["K"], tt, glu, (r, s, cg), norm)
    ctas = min(_cdiv(_cdiv(c["N"], r), _MVQ_WARPS), sms * mvp_ctas_per_sm(shared, cc, ctas_per_sm or 2))
    return (ctas, _cdiv(c["T"], tt), 1), (256, 1, 1), shared, "_pq"


def mvq_weight(dt: str, n: int, k: int, t: int, glu: bool, stage_max: int, cc: tuple[int, int],
               norm: bool = True, min_bytes: int | None = None) -> bool:
    """Whether a product runs the integer decode kernel (``_pq``, shaders/xi_mvq.cuh): a type of
    MVQ_TYPES on compute capability 8.0+ (cp.async, dp4a), 1 <= T <= PQ_MAX_T, K a multiple of 256
    and rows of whole 16-byte words (its cp.async copies; q6_k: K a multiple of 2048), weights (2n
    rows with GLU) of at least ``min_bytes`` (None: PQ_MIN_BYTES as it is at the call), one token's
    shared bytes within ``stage_max``. Its rows' bits are llama.cpp-style integer sums (activations
    quantized to q8_1), not the f32 entries' (xi_mv1, xi_mvc, ``_p``, and xi_mvt at T > 8): a row
    is the same at every T <= PQ_MAX_T and alone, but not across PQ_MAX_T. Nothing here depends on
    T within 1..PQ_MAX_T but the shared bytes, which fit for T = 1 wherever they fit at all."""
    if dt not in MVQ_TYPES or cc < (8, 0) or not 1 <= t <= PQ_MAX_T or not staged_rows(dt, k):
        return False
    if n * (2 if glu else 1) * row_bytes(dt, k) < (PQ_MIN_BYTES if min_bytes is None else min_bytes):
        return False
    return mvq_tokens(dt, k, t, glu, stage_max, norm=norm) > 0


def pq_min_bytes(environ: Mapping[str, str] = os.environ) -> int | None:
    """``mvq_weight``'s smallest weight for ``_pq``: ``XINFER_PQ_MIN_BYTES`` (an integer >= 0, bytes)
    where set -- a knob for measuring on the H200 --, else None (PQ_MIN_BYTES).

    Raises:
        ValueError: XINFER_PQ_MIN_BYTES is set to something other than an integer >= 0.
    """
    v = environ.get("XINFER_PQ_MIN_BYTES", "").strip()
    if not v:
        return None
    if not v.isdigit():
        raise ValueError(f"XINFER_PQ_MIN_BYTES={v!r} is not an integer >= 0 (bytes)")
    return int(v)


def mvq_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the integer decode kernel may run (``mvq_weight``): ``XINFER_MVQ`` unset or ``1``;
    ``0`` turns it off (back to ``_p`` / xi_mvc, the f32 kernels: other bits).

    Raises:
        ValueError: XINFER_MVQ is set to something else.
    """
    return env_switch(environ, "XINFER_MVQ")


def kq_tiled_min_t(environ: Mapping[str, str] = os.environ) -> int:
    """Tokens above which the ``STAGED1_TYPES`` run the tiled ``_t`` entry (xi_mvt.cuh: each weight
    decoded once for 8 tokens) instead of the staged one (xi_mvc.cuh: decoded once a token): 8, as
    for every type (``XI_MVT_MIN_T``), unless ``XINFER_KQ_TILED_MIN_T`` says 1..8 -- a knob for
    measuring on the H200 (their decode costs several times q4_1's a weight); every entry gives a
    row the same bits, so it changes speed only.

    Raises:
        ValueError: XINFER_KQ_TILED_MIN_T is set to something other than an integer 1..8.
    """
    return env_int(environ, "XINFER_KQ_TILED_MIN_T", _MVT_MIN_T, 1, _MVT_MIN_T)


def matmul_launch(c: dict, dt: str, kind: str, stage_max: int = MVT_STAGE_MAX, sms: int = 132,
                  cc: tuple[int, int] = (9, 0), mmq: str = "", mvp: bool = True,
                  kq_min_t: int = _MVT_MIN_T, mvq: bool = True,
                  pq_max: int = PQ_STAGE_MAX,
                  pq_min: int | None = None) -> tuple[tuple[int, int, int], tuple[int, int, int], int, str]:
    """(grid, block, dynamic shared bytes, entry suffix) of a matrix kernel (``kind``: ``matmul``,
    ``rmsnorm_matmul`` or ``rmsnorm_matmul_swiglu``) of type ``dt`` for the constants:

    - ``mmq`` set (``mmq_mode``: XINFER_MMQ, opt-in) and ``mmq_usable``: the integer kernels
      (shaders/xi_mmq.cuh, ``mmq_launch``) at every T, so a row never mixes them with another kernel;
    - ``tc_weight``: the tensor-core kernel (shaders/xi_tc.cuh), ``_tc`` at T <= 8 (8 tokens a block)
      and ``_tct`` above (32, 16 with GLU): a block of ``tc_segs`` warps a tile of 16 rows; shared:
      the segment sums (``tc_launch``; at T == 1 also h split for the one-token body);
    - ``mvq`` (``mvq_enabled``: XINFER_MVQ unset or 1) and ``mvq_weight`` (1 <= T <= PQ_MAX_T, its
      shared bytes within ``pq_max``, the device's opt-in: ``pq_stage_max_for``, weights of at least
      ``pq_min`` bytes, None: PQ_MIN_BYTES):
      ``_pq``, the integer decode kernel (shaders/xi_mvq.cuh, ``mvq_launch``; llama.cpp's numerics:
      its rows' bits differ from the f32 entries', which take T > PQ_MAX_T);
    - ``mvp`` (``mvp_enabled``: XINFER_MVP unset or 1) and ``mvp_weight`` (T <= MVP_MAX_T, large
      weights): ``_p``, the pipelined kernel (shaders/xi_mvp.cuh, ``mvp_launch``);
    - else T > 8 (for ``STAGED1_TYPES``: T > ``kq_min_t``, ``kq_tiled_min_t``): ``_t``, the
      register-tiled kernel (shaders/xi_mvt.cuh), 8 warps of ``mvt_rows`` rows by 8 tokens a block,
      tokens staged in ``mvt_stage_bytes`` (``stage_max``: the device's);
    - else the first entry (shaders/xi_mvc.cuh), 256 threads (``_matmul_grid``, ``_fused_grid``)."""
    glu, t = kind == "rmsnorm_matmul_swiglu", c["T"]
    if mmq and mmq_usable(dt, stage_max, cc):
        return mmq_launch(c, dt, glu, mmq, sms)
    if tc_weight(dt, c["N"], c["K"], glu, sms, cc):
        return tc_launch(c, glu)
    if mvq and mvq_weight(dt, c["N"], c["K"], t, glu, pq_max, cc, norm=kind != "matmul", min_bytes=pq_min):
        return mvq_launch(c, dt, glu, sms, cc, pq_max, norm=kind != "matmul")
    if mvp and mvp_weight(dt, c["N"], c["K"], t, glu, stage_max, cc):
        return mvp_launch(c, dt, glu, sms, cc)
    if t > (kq_min_t if dt in STAGED1_TYPES else _MVT_MIN_T):
        return _tiled_grid(c, glu), (256, 1, 1), mvt_stage_bytes(dt, c["K"], stage_max), "_t"
    grid = _matmul_grid(c, dt) if kind == "matmul" else _fused_grid(c, dt, glu)
    return grid, (256, 1, 1), 0, ""


#: query heads a block of the attention kernels, at most (XI_ATT_GMAX in shaders/xi_attention.cuh)
ATT_GMAX = 4
#: blocks a split-K attention launch aims at, per SM (2 blocks of 256 threads fit an SM; 4 waves hide
#: the tail of the uneven rows)
ATT_SPLIT_BLOCKS_PER_SM = 8


def attention_split(c: dict, sms: int) -> int:
    """Split-K blocks a row of an attention launch (``S``: grid.y = n_kv * S): 1 where T > SPLIT_T_MAX
    (the rows fill the device) or where no row of the cache can have two segments (``ctx`` / ``rows``
    at most SEG_KEYS keys: the single-pass kernel as it was); else enough blocks for about
    ``ATT_SPLIT_BLOCKS_PER_SM * sms`` in all, at most the segments of the longest row
    (``_attention_split.segments``). A row's bits do not depend on it (ops/_attention_split.py)."""
    t, n_kv = max(1, c["T"]), max(1, c["n_kv"])
    keys = c["ctx"] if "ctx" in c else c["rows"]
    if c["window"] > 0:
        keys = min(keys, c["window"])
    most = segments(keys - 1)
    if t > SPLIT_T_MAX or most <= 1:
        return 1
    heads = t * n_kv * _cdiv(max(1, c["n_head"] // n_kv), ATT_GMAX)
    return max(1, min(most, _cdiv(ATT_SPLIT_BLOCKS_PER_SM * sms, heads)))


def attention_grid(c: dict, sms: int, heads: int = 1) -> tuple[int, int, int]:
    """attention / attention_batched (shaders/xi_attention.cuh): a block per (token, kv head x split-K
    share ``attention_split``, share of that kv head's query heads). Where the blocks fill the SMs
    (T * n_kv * S >= sms), a block runs up to ``ATT_GMAX`` query heads of its kv head, so each key's
    k/v rows are read once for them all; below, ``heads`` a block (``att_block_heads``; 1: a head a
    block, for more blocks in flight). Either way the result is bit-identical."""
    t, n_kv = max(1, c["T"]), max(1, c["n_kv"])
    group = max(1, c["n_head"] // n_kv)
    split = attention_split(c, sms)
    return (t, n_kv * split, _cdiv(group, ATT_GMAX) if t * n_kv * split >= sms else _cdiv(group, heads))


def att_block_heads(environ: Mapping[str, str] = os.environ) -> int:
    """Query heads a block of ``attention_grid`` below the SMs: 1, unless ``XINFER_ATT_BLOCK_HEADS``
    says 1..``ATT_GMAX`` -- a knob for measuring on the H200 (fewer decode blocks leave more SMs to the
    next kernel's resident CTAs; an entry runs 4 heads at once at head_dim <= 64, 2 at <= 128, 1 above:
    more a block run one after another). Any launch whose blocks do not fill the SMs, not only decode's.
    The bits do not change.

    Raises:
        ValueError: XINFER_ATT_BLOCK_HEADS is set to something other than an integer 1..ATT_GMAX."""
    return env_int(environ, "XINFER_ATT_BLOCK_HEADS", 1, 1, ATT_GMAX)


#: the entries of an attention kernel, by head_dim at most: (head_dim, entry, decode entry or None)
_ATT_ENTRIES = ((64, "", "_s"), (128, "_d4", "_d4s"), (256, "_d8", None))


def att_vstage_bytes(head_dim_max: int) -> int:
    """Dynamic shared bytes of a decode entry of head_dim at most ``head_dim_max`` (64: ``_s``, 128:
    ``_d4s``): its 8 warps' staged v rows, 32 rows of ``head_dim_max`` f32 values each (an f16 cache
    uses half; shaders/xi_attention.cuh XI_ATT_VST)."""
    return 8 * 32 * head_dim_max * 4


#: the attention entries' static shared bytes, at most (xi_att_smem and the merge flag: 42,256 with
#: NVRTC 13 for sm_90), with room to spare
ATT_STATIC_SHARED = 44 * 1024


#: the widest head_dim whose decode entry stages its v rows. H200, 2026-12-03 (tools/attention_bench.py,
#: us a launch against the entries reading v from memory): head_dim 64 (SmolLM2's heads) 4.4 / 5.3 / 8.8
#: at 16 / 128 / 640 keys against 4.7 / 6.2 / 9.1; head_dim 128 (the 8B's) 5.3 / 7.0 at 16 / 128 keys
#: against 5.6 / 7.6 but 12.6 / 13.5 / 28.2 at 640 / 704 / 2048 against 11.8 / 11.9 / 25.9 alone. In a
#: decode step, where it counts, head_dim 128 staged is faster at every length measured (H200,
#: 2026-12-04, `bench model --slots 1 --batching --max-tokens 128`, device ms a step, 64 / 128
#: interleaved, 2 rounds): 8B q4_1 after a 512-token prompt 2.205, 2.208 / 2.178, 2.174; its Q4_K_M mix
#: 2.597, 2.601 / 2.560, 2.557; 8B after 3,072 tokens 2.195, 2.195 / 2.187, 2.185
ATT_VSTAGE_HEAD_DIM_MAX = 128


def att_vstage_head_dim_max(environ: Mapping[str, str] = os.environ) -> int:
    """The widest decode entry, by the head_dim it is for (64: ``_s``, 128: ``_d4s``), that stages its v
    rows: ``ATT_VSTAGE_HEAD_DIM_MAX``, unless ``XINFER_ATT_VSTAGE_MAX`` says 0..256 (below 64: none; 64..127:
    ``_s``; 128 and up: both; it compares with the entry's head_dim, not the model's) -- a knob for
    measuring on the H200 (staged or not, the same bits).

    Raises:
        ValueError: XINFER_ATT_VSTAGE_MAX is set to something other than an integer 0..256."""
    return env_int(environ, "XINFER_ATT_VSTAGE_MAX", ATT_VSTAGE_HEAD_DIM_MAX, 0, 256)


def att_vstage(pq_max: int, head_dim_max: int = ATT_VSTAGE_HEAD_DIM_MAX) -> dict[str, int]:
    """Decode entry suffix -> the dynamic shared bytes its staged v rows take, for those of head_dim at
    most ``head_dim_max`` whose bytes and static shared memory fit a block's opt-in (``pq_max`` + 1 KB:
    ``pq_stage_max_for``); the others get none and read v from global memory (the kernel checks
    %dynamic_smem_size)."""
    return {e[2]: att_vstage_bytes(e[0]) for e in _ATT_ENTRIES
            if e[2] and e[0] <= head_dim_max and ATT_STATIC_SHARED + att_vstage_bytes(e[0]) <= pq_max + 1024}


def attention_entries() -> tuple[str, ...]:
    """The entry suffixes of an attention shader (XI_ATT_ENTRIES in shaders/xi_attention.cuh)."""
    return tuple(e[1] for e in _ATT_ENTRIES) + tuple(e[2] for e in _ATT_ENTRIES if e[2])


def attention_launch(c: dict, sms: int, deep: bool = True, vstage: dict[str, int] | None = None, heads: int = 1,
                     ) -> tuple[tuple[int, int, int], tuple[int, int, int], int, str]:
    """(grid, block, shared bytes, entry suffix) of an attention kernel: ``attention_grid`` (``heads``), 256
    threads, the entry of the narrowest head_dim that holds ``c["head_dim"]`` (a wider one than the
    widest entry gets that entry, which writes NaN rows: the kernels' checks say so); where T <=
    SPLIT_T_MAX and ``deep``, that head_dim's decode entry (``_s``, ``_d4s``: a chunk's loads in fewer
    rounds at one block an SM; the same bits) where it has one, with its ``vstage`` bytes
    (``att_vstage``: its v rows staged in shared memory; none: read from global memory)."""
    e = next((e for e in _ATT_ENTRIES if c["head_dim"] <= e[0]), _ATT_ENTRIES[-1])
    if deep and e[2] and max(1, c["T"]) <= SPLIT_T_MAX:
        return attention_grid(c, sms, heads), (256, 1, 1), (vstage or {}).get(e[2], 0), e[2]
    return attention_grid(c, sms, heads), (256, 1, 1), 0, e[1]


def matmul_entries(dt: str) -> tuple[str, ...]:
    """The entry suffixes of a matrix kernel's shader: ``""``, ``"_t"`` (and ``"_tc"``, ``"_tct"``;
    ``"_mmq"``, ``"_mmqs"``, ``"_q1"``; ``"_p"``; ``"_pq"``)."""
    return ("", "_t") + (("_tc", "_tct") if dt in TC_TYPES else ()) + (("_mmq", "_mmqs", "_q1") if dt in MMQ_TYPES else ()) \
        + (("_p",) if dt in MVP_TYPES else ()) + (("_pq",) if dt in MVQ_TYPES else ())


@dataclasses.dataclass(frozen=True)
class Family:
    """How a kernel of a launcher family is launched on one device.

    Attributes:
        entries: the suffixes of its shader's entry points (``""`` first).
        launch: constants -> (grid, block, dynamic shared bytes, entry suffix).
        opt_in: entry suffix -> the dynamic shared bytes past 48 KB the entry must opt in to
            (``cuFuncSetAttribute``) when it is loaded.
    """

    entries: tuple[str, ...]
    launch: Callable[[dict], tuple[tuple[int, int, int], tuple[int, int, int], int, str]]
    opt_in: dict[str, int]


def _matmul_family(params: dict, sms: int, stage_max: int, cc: tuple[int, int], pq_max: int = PQ_STAGE_MAX) -> Family:
    """matmul_DT, rmsnorm_matmul_DT, rmsnorm_matmul_swiglu_DT (``params``: ``dt``, ``kind``):
    ``matmul_launch`` with ``mmq_mode()`` (XINFER_MMQ), ``mvp_enabled()`` (XINFER_MVP),
    ``mvq_enabled()`` (XINFER_MVQ), ``pq_min_bytes()`` (XINFER_PQ_MIN_BYTES) and ``kq_tiled_min_t()``
    (XINFER_KQ_TILED_MIN_T), read when the kernel is loaded; the ``_t`` entry stages tokens in up to ``stage_max`` dynamic shared bytes, the
    tiled integer entries opt in to theirs (``mmq_shared``) wherever ``mmq_usable``, whatever the mode (tools/mmq_bench.py launches
    them directly), ``_p`` (MVP_TYPES) to ``stage_max`` (``mvp_weight`` keeps it within) and ``_pq``
    (MVQ_TYPES) to ``pq_max`` (``mvq_tokens`` keeps it within).

    Raises:
        ValueError: XINFER_MMQ, XINFER_MVP, XINFER_MVQ, XINFER_PQ_MIN_BYTES or XINFER_KQ_TILED_MIN_T is set
            to an unknown value."""
    dt, kind = params["dt"], params["kind"]
    opt_in = {"_t": stage_max} if stage_max > 48 * 1024 else {}
    if mmq_usable(dt, stage_max, cc):
        opt_in.update({"_mmq": mmq_shared(dt, MMQ_TN), "_mmqs": mmq_shared(dt, MMQ_TN_SMALL)})
    if dt in MVP_TYPES and stage_max > 48 * 1024:
        opt_in["_p"] = stage_max  # mvp_weight keeps its shared bytes within stage_max
    if dt in MVQ_TYPES and pq_max > 48 * 1024:
        opt_in["_pq"] = pq_max  # mvq_tokens keeps its shared bytes within pq_max
    return Family(matmul_entries(dt),
                  functools.partial(matmul_launch, dt=dt, kind=kind, stage_max=stage_max, sms=sms, cc=cc,
                                    mmq=mmq_mode(), mvp=mvp_enabled(), kq_min_t=kq_tiled_min_t(),
                                    mvq=mvq_enabled(), pq_max=pq_max, pq_min=pq_min_bytes()),
                  opt_in)


def qmatmul_launch(c: dict, dt: str, glu: bool, sms: int, cc: tuple[int, int] = (9, 0),
                   pq_max: int = PQ_STAGE_MAX) -> tuple[tuple[int, int, int], tuple[int, int, int], int, str]:
    """(grid, block, shared bytes, entry suffix ``""``) of qmatmul_DT / qmatmul_swiglu_DT (``glu``):
    ``mvq_launch`` with the matmul kind's parameters (``mvq_params(norm=False)``: its tokens come
    quantized, so no kind has the fused rmsnorm; GLU keeps its own) and tokens a CTA.

    Raises:
        ValueError: one token's shared bytes exceed ``pq_max``."""
    grid, block, shared, _ = mvq_launch(c, dt, glu, sms, cc, pq_max, norm=glu)
    return grid, block, shared, ""


def _qmatmul_family(params: dict, sms: int, stage_max: int, cc: tuple[int, int], pq_max: int = PQ_STAGE_MAX) -> Family:
    """qmatmul_DT, qmatmul_swiglu_DT (``params``: ``dt``, ``glu`` "0" / "1"): ``qmatmul_launch``, one
    entry, opted in to ``pq_max`` shared bytes (``mvq_tokens`` keeps them within); qmatmul_normq_DT
    (``normq`` "1"): ``normq_launch`` over its two entries, ``""`` and ``"_k2"`` (``normq_k2``)."""
    dt, glu = params["dt"], params["glu"] == "1"
    if params.get("normq") == "1":  # qmatmul_normq_DT: N / 32 CTAs, its static rows buffer beside the stages
        return Family(("", "_k2"), functools.partial(normq_launch, dt=dt, sms=sms, cc=cc, pq_max=pq_max, k2=normq_k2()),
                      {"": pq_max - NORMQ_STATIC, "_k2": pq_max - NORMQ_STATIC - NORMQ_K2_STATIC}
                      if pq_max > 48 * 1024 else {})
    return Family(("",), functools.partial(qmatmul_launch, dt=dt, glu=glu, sms=sms, cc=cc, pq_max=pq_max),
                  {"": pq_max} if pq_max > 48 * 1024 else {})


def quantized_activations(kind: str, dt: str, t: int, n: int, k: int, sms: int, stage_max: int, cc: tuple[int, int],
                          pq_max: int = PQ_STAGE_MAX, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a product of ``kind`` (``matmul``, ``rmsnorm_matmul``, ``rmsnorm_matmul_swiglu``) with
    a weight of ``dt`` (n, k) at T = ``t`` should take its tokens quantized beforehand
    (``quantize_q8_1`` / ``rmsnorm_quantize_q8_1`` then ``qmatmul_DT`` / ``qmatmul_swiglu_DT``): where
    the kernel family would run ``_pq`` (``matmul_launch`` with the same knobs, read now) and
    ``qmatmul_launch`` fits the device (the rmsnorm kind's qmatmul takes the matmul kind's rows and
    stages, which need more shared bytes: on a device of 99 KB a block, q6_k at K = 4096 runs
    ``_pq`` but not qmatmul), unless ``XINFER_PREQUANT=0`` (``prequant_enabled``). The bits are the
    same either way: ``_pq`` quantizes its tokens with the same code, in every CTA.

    Raises:
        ValueError: XINFER_PREQUANT or a knob of ``_matmul_family`` set to an unknown value."""
    if not prequant_enabled(environ) or dt not in MVQ_TYPES:
        return False
    fam = _matmul_family({"dt": dt, "kind": kind}, sms, stage_max, cc, pq_max)
    if fam.launch(dict(T=t, N=n, K=k, accumulate=0, eps=0.0))[3] != "_pq":
        return False
    try:
        qmatmul_launch(dict(T=t, N=n, K=k, accumulate=0), dt, kind == "rmsnorm_matmul_swiglu", sms, cc, pq_max)
    except ValueError:  # one token's shared bytes over pq_max with the matmul kind's stages
        return False
    return True


#: static shared bytes qmatmul_normq_DT adds to qmatmul_DT's (xi_mvq.cuh NQ: the CTA's 32 rows of up to
#: MVQ_MATMUL_TT tokens, f32): its dynamic bytes stay that much further under pq_max
NORMQ_STATIC = MVQ_MATMUL_TT * 32 * 4
#: static shared bytes the ``_k2`` entries add (xi_mvq.cuh xi_mvq_kpart: 8 warps' 32 totals, f32)
NORMQ_K2_STATIC = _MVQ_WARPS * 32 * 4


def normq_k2(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the residual products may run ``qmatmul_normq_DT_k2`` (16 warps, K's chunks split
    between two warps a tile; the same bits as the 8-warp entry, see ``normq_launch``): unset, empty
    or ``1``: yes, where it is faster (the default); ``0``: never.

    Raises:
        ValueError: XINFER_NORMQ_K2 set to something other than '', '0', '1'."""
    return env_switch(environ, "XINFER_NORMQ_K2")


def _normq_stage_bytes(dt: str, k: int) -> int:
    """The 8 warps' stages of qmatmul_normq_DT (``mvq_shared`` without tokens): a ``_k2`` entry's
    other 8 warps take as many more."""
    return mvq_shared(dt, k, 0, False, norm=False)


def normq_k2_fits(dt: str, k: int, pq_max: int = PQ_STAGE_MAX) -> bool:
    """Whether ``qmatmul_normq_DT_k2`` holds one token of K = ``k`` (then every T's: the tokens a CTA
    halve): its 16 warps' stages, the token's codes and pairs, within pq_max less NORMQ_STATIC and
    NORMQ_K2_STATIC; ``normq_launch`` takes it at a T where it needs no more token tiles."""
    room = pq_max - NORMQ_STATIC - NORMQ_K2_STATIC - _normq_stage_bytes(dt, k)
    return mvq_tokens(dt, k, 1, False, room, norm=False) >= 1


def normq_split(dt: str, k: int) -> int:
    """The first block (of 32 elements) of a row's second half in ``qmatmul_normq_DT`` (both entries
    sum the halves apart; in ``_k2`` each is a warp's): the first ceil(cpt / 2) of its cpt =
    ceil(K / (256 CG)) chunks are the first half (tests/_mmq_model.py ``mvq_matmul(split=...)``); K / 32
    or more: the second half is empty."""
    cg = mvq_params(dt, False, norm=False)[2]
    cpt = _cdiv(k // 256, cg)
    return _cdiv(cpt, 2) * cg * 8


def normq_launch(c: dict, dt: str, sms: int, cc: tuple[int, int] = (9, 0),
                 pq_max: int = PQ_STAGE_MAX, k2: bool = False,
                 ) -> tuple[tuple[int, int, int], tuple[int, int, int], int, str]:
    """(grid, block, shared bytes, entry suffix) of qmatmul_normq_DT: ``qmatmul_launch``'s tokens a
    CTA and shared bytes (within pq_max less NORMQ_STATIC), and N / 32 CTAs a token tile whatever an
    SM holds -- every warp one tile of 4 rows, a CTA 32 whole rows, one q8_1 block of each token, which
    it quantizes with no other CTA (none waits for another: more than a wave is only slower). With
    ``k2`` where ``normq_k2_fits`` and it takes no more token tiles (each streams the weight once):
    the entry ``_k2``, 512 threads, two warps a tile each over half of K's chunks (a warp's chain of
    chunks halves), another 8 warps' stages and NORMQ_K2_STATIC less room for the tokens. Either
    entry gives the same bits (xi_mvq.cuh: NQ sums K's halves apart, ``normq_split``), so the choice
    may follow T: on the H200 ``_k2`` ran the 8B step 2.6% faster at one token and 4.5% slower at 4
    batched, where its halved token tiles stream the weight twice.

    Raises:
        ValueError: one token's shared bytes exceed pq_max less NORMQ_STATIC; N not a multiple of 32."""
    if c["N"] % 32:
        raise ValueError(f"qmatmul_normq_{dt}: N={c['N']} is not a multiple of 32")
    grid, block, shared, _ = qmatmul_launch(c, dt, False, sms, cc, pq_max - NORMQ_STATIC)
    if k2 and normq_k2_fits(dt, c["K"], pq_max):
        stages = _normq_stage_bytes(dt, c["K"])
        grid2, _, shared2, _ = qmatmul_launch(c, dt, False, sms, cc, pq_max - NORMQ_STATIC - NORMQ_K2_STATIC - stages)
        if grid2[1] <= grid[1]:  # as few token tiles (each streams the weight once): the shorter chains win
            return (c["N"] // 32, grid2[1], grid2[2]), (512, 1, 1), shared2 + stages, "_k2"
    return (c["N"] // 32, grid[1], grid[2]), block, shared, ""


def normq_fits(dt: str, n: int, k: int, sms: int, cc: tuple[int, int], pq_max: int = PQ_STAGE_MAX,
               environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a residual product of a ``dt`` (n, k) weight whose tokens come quantized
    (``quantized_activations`` of its ``matmul`` kind said yes) runs ``qmatmul_normq_DT``
    (``normq_launch``) at every T of 1..PQ_MAX_T alike, so that a row gets the same bits alone and in
    a batch: n a multiple of 32, one token's shared bytes within pq_max less NORMQ_STATIC (then every
    T's are: the tokens a CTA halve to fit), and ``XINFER_NORMQ`` unset or ``1`` (``0``: a
    ``rmsnorm_quantize_q8_1`` launch instead, the A/B of the H200 measurements).

    Raises:
        ValueError: XINFER_NORMQ set to something else."""
    if not env_switch(environ, "XINFER_NORMQ") or n % 32 or dt not in MVQ_TYPES:
        return False
    try:
        normq_launch(dict(T=1, N=n, K=k, accumulate=0), dt, sms, cc, pq_max)
    except ValueError:
        return False
    return True


def prequant_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """``XINFER_PREQUANT`` unset or ``1``: the model quantizes the tokens of a ``_pq`` product once, in
    a kernel of its own, instead of in every CTA of the product (``quantized_activations``); ``0``:
    in every CTA (the A/B of the H200 measurements).

    Raises:
        ValueError: XINFER_PREQUANT is set to something else."""
    return env_switch(environ, "XINFER_PREQUANT")


def pair_launch(c: dict, dt: str, dt2: str, sms: int, cc: tuple[int, int] = (9, 0),
                pq_max: int = PQ_STAGE_MAX) -> tuple[tuple[int, int, int], tuple[int, int, int], int, str]:
    """(grid, block, shared bytes, entry suffix ``""``) of qmatmul_pair_A_B / qmatmul_rms_pair_A_B (two
    products on the same tokens, shaders/xi_mvq.cuh xi_qmatmul_pair): the matmul kind's parameters,
    PAIR_R2 rows a warp for the second product, tokens a CTA the smaller of the two types'
    (``mvq_tokens``), the larger of their shared bytes for those tokens,
    and the two launches' CTAs side by side (the kernel gives each product its own, a tile a warp, and
    splits a smaller grid in proportion to the weights' bytes: the bits do not depend on the split).

    Raises:
        ValueError: one token's shared bytes of either type exceed ``pq_max``."""
    first = dict(T=c["T"], N=c["N"], K=c["K"], accumulate=0)
    second = dict(first, N=c["N2"])
    p2 = (PAIR_R2,) + mvq_params(dt2, False, norm=False)[1:]
    tt = min(mvq_tokens(dt, c["K"], c["T"], False, pq_max, norm=False),
             mvq_tokens(dt2, c["K"], c["T"], False, pq_max, p2, norm=False))
    if tt < 1:
        raise ValueError(f"qmatmul_pair_{dt}_{dt2} with K={c['K']}: one token's shared bytes exceed {pq_max}")
    (g1, ty, _), block, s1, _ = mvq_launch(first, dt, False, sms, cc, pq_max, tt=tt, norm=False)
    (g2, _, _), _, s2, _ = mvq_launch(second, dt2, False, sms, cc, pq_max, params=p2, tt=tt, norm=False)
    return (g1 + g2, ty, 1), block, max(s1, s2), ""


def pair_fits(dt: str, dt2: str, n: int, n2: int, k: int, sms: int, cc: tuple[int, int],
              pq_max: int = PQ_STAGE_MAX, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether two products of one kind on the same quantized tokens -- ``dt`` (n, k) and ``dt2`` (n2,
    k), each of which takes its tokens quantized (``quantized_activations``) -- run as one
    ``qmatmul_pair_A_B`` launch: a declared pair (ops/_kernels.py QMATMUL_PAIRS), ``pair_launch``
    fits, and ``XINFER_QPAIR`` unset or ``1`` (``0``: a launch a type, the A/B of the H200
    measurements; the same bits).

    Raises:
        ValueError: XINFER_QPAIR set to something else."""
    if not env_switch(environ, "XINFER_QPAIR") or (dt, dt2) not in PAIR_TYPES or n < 1 or n2 < 1:
        return False
    try:
        pair_launch(dict(T=1, N=n, N2=n2, K=k), dt, dt2, sms, cc, pq_max)
    except ValueError:
        return False
    return True


#: rows a warp of the second product of a qmatmul_pair launch (XI_MVQ_PAIR_R2: its q6_k stages then stay
#: under the first product's, two CTAs an SM)
PAIR_R2 = 2
#: the (first, second) types of the qmatmul_pair kernels (ops/_kernels.py QMATMUL_PAIRS repeats them)
PAIR_TYPES = (("q4_k", "q6_k"), ("q5_k", "q6_k"))


def _qmatmul_pair_family(params: dict, sms: int, stage_max: int, cc: tuple[int, int],
                         pq_max: int = PQ_STAGE_MAX) -> Family:
    """qmatmul_pair_A_B, qmatmul_rms_pair_A_B (``params``: ``dt``, ``dt2``): ``pair_launch``, one entry,
    opted in to ``pq_max`` shared bytes."""
    return Family(("",), functools.partial(pair_launch, dt=params["dt"], dt2=params["dt2"], sms=sms, cc=cc,
                                           pq_max=pq_max), {"": pq_max} if pq_max > 48 * 1024 else {})


def _attention_family(params: dict, sms: int, stage_max: int, cc: tuple[int, int], pq_max: int = 0) -> Family:
    """attention, attention_batched (and their ``_f16``, ``_quantize``): ``attention_launch``, its decode
    entries unless ``XINFER_ATT_DEEP=0`` (read when the kernel is loaded: the A/B of the H200 figures),
    opted in to the staged v rows that fit the device (``att_vstage`` of ``pq_max`` and
    ``att_vstage_head_dim_max``), ``att_block_heads`` query heads a block below the SMs.

    Raises:
        ValueError: XINFER_ATT_DEEP set to something other than '', '0', '1'; XINFER_ATT_VSTAGE_MAX or
            XINFER_ATT_BLOCK_HEADS to something other than their integers."""
    vstage = att_vstage(pq_max, att_vstage_head_dim_max())
    return Family(attention_entries(), functools.partial(attention_launch, sms=sms, vstage=vstage,
                                                         deep=env_switch(os.environ, "XINFER_ATT_DEEP"),
                                                         heads=att_block_heads()), vstage)


#: family name (``CudaLaunch.family`` of a declaration) -> (params, sms=, stage_max=, cc=[, pq_max=]) -> ``Family``
FAMILIES: dict[str, Callable[..., Family]] = {"matmul": _matmul_family, "attention": _attention_family,
                                               "qmatmul": _qmatmul_family, "qmatmul_pair": _qmatmul_pair_family}
