"""Launch configuration of each CUDA kernel in ``shaders/``: block size, static shared memory, and
the grid as a function of the constants (a dict keyed by the KERNELS.md field names)."""

from __future__ import annotations


def _cdiv(a: int, b: int) -> int:
    return max(1, -(-a // b))


_MAX_GRID_X = 2**31 - 1


def _flat(total: int) -> tuple[int, int, int]:
    # the kernels loop grid-stride, so any grid works; cap it at 64 blocks per SM's worth of work
    return (min(_cdiv(total, 256), 132 * 64), 1, 1)


_BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20}  # 32 elements
_ELEM_BYTES = {"f32": 4, "f16": 2}
_MVC_BYTES, _MVC_SPREAD, _MVC_TG = 32768, 264, 8  # XI_MVC_BYTES, XI_MVC_SPREAD, XI_MVC_TG


def mvc_rows(dt: str, n: int, k: int, t: int = 1, glu: bool = False) -> int:
    """Output rows a CTA owns in the staged matrix kernel (``xi_mvc_rows`` in shaders/xi_mvc.cuh):
    the largest of 16, 8, 4, 2, 1 under the stage (half each for GLU's two regions) and under the
    want: T == 1: 8 (a row a warp), 16 when N >= 16384; 1 < T <= 8: N spread over ~2 CTAs per SM;
    T > 8: 8; GLU at most 8. 0: one row does not fit the stage."""
    row_bytes = k * _ELEM_BYTES[dt] if dt in _ELEM_BYTES else (k // 32) * _BLOCK_BYTES[dt]
    fit = ((_MVC_BYTES >> int(glu)) - 32) // max(1, row_bytes)
    want = (16 if n >= 16384 else 8) if t == 1 else -(-n // _MVC_SPREAD) if t <= 8 else 8
    r = min(want, fit, 8 if glu else 16)
    return next((b for b in (16, 8, 4, 2, 1) if r >= b), 0)


def mv1_rows(dt: str, n: int, glu: bool) -> int:
    """Rows a warp at T == 1 (``xi_mv1_rows``): 2 for f32/f16 and N >= 16384 (not with GLU), else 1."""
    return 1 if glu else 2 if dt in ("f32", "f16") or n >= 16384 else 1


def _matmul_grid(c: dict, dt: str) -> tuple[int, int, int]:
    """matmul_DT (shaders/xi_mvc.cuh), blocks of 8 warps: T == 1: ``mv1_rows`` rows a warp; T > 1:
    ``mvc_rows`` output rows and 8 tokens a block, or where one row does not fit the stage,
    xi_quant.cuh's warp per row and 4 tokens a block row."""
    if c["T"] == 1:
        return (_cdiv(c["N"], 8 * mv1_rows(dt, c["N"], False)), 1, 1)
    rows = mvc_rows(dt, c["N"], c["K"], c["T"])
    if rows:
        return (_cdiv(c["N"], rows), _cdiv(c["T"], _MVC_TG), 1)
    return (_cdiv(c["N"], 8), _cdiv(c["T"], 4), 1)


def _fused_grid(c: dict, dt: str, glu: bool) -> tuple[int, int, int]:
    """rmsnorm_matmul_DT / rmsnorm_matmul_swiglu_DT: as matmul_DT at T == 1; T > 1: ``mvc_rows`` rows
    (or one row where a row does not fit the stage: the element-by-element path) and 8 tokens a block."""
    if c["T"] == 1:
        return (_cdiv(c["N"], 8 * mv1_rows(dt, c["N"], glu)), 1, 1)
    return (_cdiv(c["N"], mvc_rows(dt, c["N"], c["K"], c["T"], glu) or 1), _cdiv(c["T"], _MVC_TG), 1)


_MVT_TT, _MVT_WARPS, _MVT_MIN_T, _MVT_WIDE, _MVT_MANY_T = 8, 8, 8, 2048, 16  # XI_MVT_* (shaders/xi_mvt.cuh)


def mvt_rows(n: int, t: int, glu: bool) -> int:
    """Rows a warp of the tiled kernel (``xi_mvt_rows``): 4 (2 + 2 with GLU) from 2048 weight rows
    (2N with GLU) or above 16 tokens, else 2 (1 + 1)."""
    return (4 if n * (2 if glu else 1) >= _MVT_WIDE or t > _MVT_MANY_T else 2) >> int(glu)


def _tiled_grid(c: dict, glu: bool) -> tuple[int, int, int]:
    """The ``_t`` entries (shaders/xi_mvt.cuh): 8 warps of ``mvt_rows`` rows by 8 tokens a block."""
    return (_cdiv(c["N"], _MVT_WARPS * mvt_rows(c["N"], c["T"], glu)), _cdiv(c["T"], _MVT_TT), 1)


def _tiled(c: dict) -> bool:
    return c["T"] > _MVT_MIN_T


MVT_STAGE_MAX = 102400  # the most dynamic shared bytes the `_t` entries stage tokens in (2 blocks an SM)


def stage_max_for(optin: int) -> int:
    """XI_MVT_STAGE_MAX for a device whose blocks may opt in to ``optin`` shared bytes: 100 KB, or
    what the device allows less the kernel's static shared memory and a margin (1 KB)."""
    return max(0, min(MVT_STAGE_MAX, optin - 1024))


def mvt_stage_bytes(dt: str, k: int, stage_max: int = MVT_STAGE_MAX) -> int:
    """Dynamic shared bytes of the tiled kernel's staged tokens (``xi_mvt_stage_bytes``): 8 rows of K
    floats, plus K / 8 block sums a row for q4_1; 0 past ``stage_max`` (no staging)."""
    n = _MVT_TT * 4 * (k + (k // 8 if dt == "q4_1" else 0))
    return n if n <= stage_max else 0


#: name -> (block, grid(constants) -> (x, y, z))
LAUNCH = {
    "affine": (256, lambda c: _flat(c["n"])),
    "add": (256, lambda c: _flat(c["n"])),
    "rmsnorm": (256, lambda c: (max(1, c["rows"]), 1, 1)),
    "rope": (256, lambda c: _flat(c["rows"] * c["n_head"] * (c["head_dim"] // 2))),
    "swiglu": (256, lambda c: _flat(c["rows"] * c["n"])),
    "softmax": (256, lambda c: (max(1, c["rows"]), 1, 1)),
    "argmax": (1024, lambda c: (max(1, c["rows"]), 1, 1)),
    "attention": (128, lambda c: (max(1, c["T"]), max(1, c["n_head"]), 1)),
    "attention_batched": (128, lambda c: (max(1, c["T"]), max(1, c["n_head"]), 1)),
    "kv_store": (256, lambda c: _flat(c["T"] * c["width"])),
    "rope_kv_store": (128, lambda c: (max(1, c["T"]), _cdiv((c["n_head"] + 2 * c["n_kv"]) * (c["head_dim"] // 2), 128), 1)),
}
for _dt in ("f32", "f16", "q8_0", "q4_0", "q4_1"):
    LAUNCH[f"get_rows_{_dt}"] = (256, lambda c: (max(1, c["T"]), 1, 1))
    LAUNCH[f"matmul_{_dt}"] = (256, lambda c, _dt=_dt: _matmul_grid(c, _dt))
    LAUNCH[f"rmsnorm_matmul_{_dt}"] = (256, lambda c, _dt=_dt: _fused_grid(c, _dt, False))
    LAUNCH[f"rmsnorm_matmul_swiglu_{_dt}"] = (256, lambda c, _dt=_dt: _fused_grid(c, _dt, True))
for _dt in ("q8_0", "q4_0", "q4_1"):
    LAUNCH[f"dequantize_{_dt}"] = (256, lambda c: _flat(c["n"]))

#: name -> (entry, block, use(constants) -> bool, grid(constants), shared bytes(constants,
#: stage_max)): a second entry point of the same shader that serves the constants ``use`` accepts
#: (the register-tiled matrix kernels at T > 8; every (row, token) result equals the first entry's
#: bit for bit, only the speed differs)
VARIANTS = {}
for _dt in ("f32", "f16", "q8_0", "q4_0", "q4_1"):
    _shared = lambda c, stage_max, _dt=_dt: mvt_stage_bytes(_dt, c["K"], stage_max)  # noqa: E731
    VARIANTS[f"matmul_{_dt}"] = (f"matmul_{_dt}_t", 256, _tiled, lambda c: _tiled_grid(c, False), _shared)
    VARIANTS[f"rmsnorm_matmul_{_dt}"] = (f"rmsnorm_matmul_{_dt}_t", 256, _tiled, lambda c: _tiled_grid(c, False), _shared)
    VARIANTS[f"rmsnorm_matmul_swiglu_{_dt}"] = (f"rmsnorm_matmul_swiglu_{_dt}_t", 256, _tiled,
                                                lambda c: _tiled_grid(c, True), _shared)
