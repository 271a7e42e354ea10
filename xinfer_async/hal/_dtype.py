"""Element types, including GGUF's block-quantized types (ggml ``ggml-common.h``)."""

from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    """An element type.

    ``block_size`` elements are stored in ``block_nbytes`` bytes: 1 and the item size for plain
    types; 32 elements in 34 bytes (q8_0), 18 bytes (q4_0) or 20 bytes (q4_1) for GGUF block types.
    """

    f32 = ("f32", 1, 4, np.float32)
    f16 = ("f16", 1, 2, np.float16)
    bf16 = ("bf16", 1, 2, None)
    i32 = ("i32", 1, 4, np.int32)
    u8 = ("u8", 1, 1, np.uint8)
    q8_0 = ("q8_0", 32, 34, None)
    q4_0 = ("q4_0", 32, 18, None)
    q4_1 = ("q4_1", 32, 20, None)

    def __init__(self, label: str, block_size: int, block_nbytes: int, numpy_type):
        self.label = label
        self.block_size = block_size
        self.block_nbytes = block_nbytes
        self.numpy_type = numpy_type

    @property
    def is_quantized(self) -> bool:
        return self.block_size > 1

    def nbytes(self, n_elements: int) -> int:
        """Bytes that ``n_elements`` take.

        Raises:
            ValueError: ``n_elements`` is negative or not a multiple of the block size.
        """
        if n_elements < 0:
            raise ValueError(f"n_elements must be >= 0, got {n_elements}")
        if n_elements % self.block_size:
            raise ValueError(
                f"n_elements={n_elements} is not a multiple of {self.label}'s block size {self.block_size}"
            )
        return n_elements // self.block_size * self.block_nbytes

    @classmethod
    def parse(cls, value: "DType | str | np.dtype | type") -> "DType":
        """``DType`` from a ``DType``, its label (``"f32"``) or a numpy dtype.

        Raises:
            TypeError: ``value`` names no supported type.
        """
        if isinstance(value, DType):
            return value
        if isinstance(value, str):
            for d in cls:
                if d.label == value:
                    return d
            if value == "bfloat16":
                return cls.bf16
        try:
            npd = np.dtype(value)
        except TypeError:
            npd = None
        if npd is not None:
            for d in cls:
                if d.numpy_type is not None and np.dtype(d.numpy_type) == npd:
                    return d
        choices = ", ".join(d.label for d in cls)
        raise TypeError(f"dtype={value!r} is not supported; choose one of {choices}")

    def __repr__(self) -> str:
        return f"DType.{self.label}"
