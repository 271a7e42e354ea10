"""``TensorDesc``: a shape and an element type."""

from __future__ import annotations

import dataclasses
import math

from ._dtype import DType


@dataclasses.dataclass(frozen=True)
class TensorDesc:
    """A tensor's shape (row-major, last axis contiguous) and dtype.

    Raises:
        ValueError: a negative dimension, or a last axis that is not a whole number of blocks.
        TypeError: an unsupported dtype.
    """

    shape: tuple[int, ...]
    dtype: DType

    def __init__(self, shape, dtype):
        shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
        for s in shape:
            if s < 0:
                raise ValueError(f"shape={shape} has a negative dimension")
        dtype = DType.parse(dtype)
        if dtype.is_quantized and shape and shape[-1] % dtype.block_size:
            raise ValueError(
                f"shape={shape}: the last axis must be a multiple of {dtype.label}'s block size {dtype.block_size}"
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.dtype.nbytes(self.numel)

    def __repr__(self) -> str:
        return f"TensorDesc({self.shape}, {self.dtype.label})"
