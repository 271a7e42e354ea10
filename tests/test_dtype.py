"""hal/_dtype.py: element types and GGUF block types."""

import numpy as np
import pytest

from xinfer_async import DType


@pytest.mark.parametrize("dt, block, nbytes", [
    (DType.f32, 1, 4), (DType.f16, 1, 2), (DType.bf16, 1, 2), (DType.i32, 1, 4), (DType.u8, 1, 1),
    (DType.q8_0, 32, 34), (DType.q4_0, 32, 18), (DType.q4_1, 32, 20),
])
def test_block_sizes(dt, block, nbytes):
    assert (dt.block_size, dt.block_nbytes) == (block, nbytes)
    assert dt.nbytes(64 * block) == 64 * nbytes
    assert dt.is_quantized == (block > 1)


def test_parse():
    assert DType.parse("f16") is DType.f16
    assert DType.parse(np.float32) is DType.f32
    assert DType.parse(np.dtype(np.int32)) is DType.i32
    assert DType.parse("bfloat16") is DType.bf16
    assert DType.parse(DType.q4_1) is DType.q4_1


def test_parse_unknown_names_choices():
    with pytest.raises(TypeError, match=r"dtype='f64' is not supported; choose one of f32, f16, bf16, i32, u8, q8_0, q4_0, q4_1"):
        DType.parse("f64")
    with pytest.raises(TypeError, match=r"dtype=<class 'numpy.float64'> is not supported"):
        DType.parse(np.float64)


def test_nbytes_errors():
    with pytest.raises(ValueError, match=r"n_elements must be >= 0, got -1"):
        DType.f32.nbytes(-1)
    with pytest.raises(ValueError, match=r"n_elements=33 is not a multiple of q8_0's block size 32"):
        DType.q8_0.nbytes(33)
