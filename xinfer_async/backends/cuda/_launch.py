"""Launch configuration of each CUDA kernel in ``shaders/``: block size, static shared memory, and
the grid as a function of the constants (a dict keyed by the KERNELS.md field names)."""

from __future__ import annotations


def _cdiv(a: int, b: int) -> int:
    return max(1, -(-a // b))


_MAX_GRID_X = 2**31 - 1


def _flat(total: int) -> tuple[int, int, int]:
    # the kernels loop grid-stride, so any grid works; cap it at 64 blocks per SM's worth of work
    return (min(_cdiv(total, 256), 132 * 64), 1, 1)


def _matmul_grid(c: dict, dt: str) -> tuple[int, int, int]:
    """matmul_DT (shaders/xi_quant.cuh): 8 warps a block; T > 1: a warp per row and 4 tokens per
    block row; T == 1: R rows a warp, R = 2 for f32/f16 and when N >= XI_MV_WIDE_N (16384), else 1."""
    if c["T"] == 1:
        r = 2 if dt in ("f32", "f16") or c["N"] >= 16384 else 1
        return (_cdiv(c["N"], 8 * r), 1, 1)
    return (_cdiv(c["N"], 8), _cdiv(c["T"], 4), 1)


#: name -> (block, grid(constants) -> (x, y, z))
LAUNCH = {
    "affine": (256, lambda c: _flat(c["n"])),
    "add": (256, lambda c: _flat(c["n"])),
    "rmsnorm": (256, lambda c: (max(1, c["rows"]), 1, 1)),
    "rope": (256, lambda c: _flat(c["rows"] * c["n_head"] * (c["head_dim"] // 2))),
    "swiglu": (256, lambda c: _flat(c["rows"] * c["n"])),
    "softmax": (256, lambda c: (max(1, c["rows"]), 1, 1)),
    "argmax": (256, lambda c: (max(1, c["rows"]), 1, 1)),
    "attention": (128, lambda c: (max(1, c["T"]), max(1, c["n_head"]), 1)),
    "attention_batched": (128, lambda c: (max(1, c["T"]), max(1, c["n_head"]), 1)),
    "kv_store": (256, lambda c: _flat(c["T"] * c["width"])),
}
for _dt in ("f32", "f16", "q8_0", "q4_0", "q4_1"):
    LAUNCH[f"get_rows_{_dt}"] = (256, lambda c: (max(1, c["T"]), 1, 1))
    LAUNCH[f"matmul_{_dt}"] = (256, lambda c, _dt=_dt: _matmul_grid(c, _dt))
for _dt in ("q8_0", "q4_0", "q4_1"):
    LAUNCH[f"dequantize_{_dt}"] = (256, lambda c: _flat(c["n"]))
