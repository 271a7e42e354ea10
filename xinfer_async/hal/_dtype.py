"""Element types, including GGUF's block-quantized types (ggml ``ggml-common.h``)."""

from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    """An element type.

    ``block_size`` elements are stored in ``block_nbytes`` bytes: 1 and the item size for plain
    types; for GGUF block types the layouts of ggml's ``ggml-common.h``: 32 elements in 34 bytes
    (q8_0), 18 (q4_0, iq4_nl), 20 (q4_1), 22 (q5_0) or 24 bytes (q5_1); the K-quants' super-blocks
    of 256 elements in 84 (q2_k), 110 (q3_k), 144 (q4_k), 176 (q5_k), 210 (q6_k) or 136 bytes
    (iq4_xs). ``ggml_type`` is the type's number in GGUF's tensor info (``enum ggml_type``), ``None``
    for a type GGUF has no number for.

    ``q8_0_r8``, ``q4_0_r8``, ``q4_1_r8``, ``q5_0_r8``, ``q5_1_r8``: the cpu backend's row-interleaved layouts of those block
    types (``Backend.matrix_dtype``; the same bytes rearranged, 8 rows' blocks side by side:
    native/kernels/q8dot.c), the same byte count as the GGUF layout; no GGUF number.
    """

    f32 = ("f32", 1, 4, np.float32, 0)
    f16 = ("f16", 1, 2, np.float16, 1)
    bf16 = ("bf16", 1, 2, None, 30)
    i32 = ("i32", 1, 4, np.int32, 26)
    u8 = ("u8", 1, 1, np.uint8, None)
    q8_0 = ("q8_0", 32, 34, None, 8)
    q4_0 = ("q4_0", 32, 18, None, 2)
    q4_1 = ("q4_1", 32, 20, None, 3)
    q5_0 = ("q5_0", 32, 22, None, 6)
    q5_1 = ("q5_1", 32, 24, None, 7)
    q2_k = ("q2_k", 256, 84, None, 10)
    q3_k = ("q3_k", 256, 110, None, 11)
    q4_k = ("q4_k", 256, 144, None, 12)
    q5_k = ("q5_k", 256, 176, None, 13)
    q6_k = ("q6_k", 256, 210, None, 14)
    iq4_nl = ("iq4_nl", 32, 18, None, 20)
    iq4_xs = ("iq4_xs", 256, 136, None, 23)
    q8_0_r8 = ("q8_0_r8", 32, 34, None, None)
    q4_0_r8 = ("q4_0_r8", 32, 18, None, None)
    q4_1_r8 = ("q4_1_r8", 32, 20, None, None)
    q5_0_r8 = ("q5_0_r8", 32, 22, None, None)
    q5_1_r8 = ("q5_1_r8", 32, 24, None, None)

    def __init__(self, label: str, block_size: int, block_nbytes: int, numpy_type, ggml_type: int | None):
        self.label = label
        self.block_size = block_size
        self.block_nbytes = block_nbytes
        self.numpy_type = numpy_type
        self.ggml_type = ggml_type

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
