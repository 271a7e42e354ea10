"""hal/_desc.py: TensorDesc."""

import pytest

from xinfer_async import DType, TensorDesc


def test_nbytes_and_shape():
    d = TensorDesc((3, 64), "q4_1")
    assert d.shape == (3, 64) and d.dtype is DType.q4_1
    assert d.numel == 192 and d.nbytes == 3 * 2 * 20
    assert TensorDesc(5, "f32").shape == (5,)
    assert TensorDesc((), "f32").nbytes == 4
    assert TensorDesc((0, 7), "f16").nbytes == 0
    assert repr(TensorDesc((2, 2), "f16")) == "TensorDesc((2, 2), f16)"


def test_frozen_and_equal():
    assert TensorDesc([2, 3], "f32") == TensorDesc((2, 3), DType.f32)
    with pytest.raises(AttributeError):
        TensorDesc(1, "f32").shape = (2,)


def test_errors():
    with pytest.raises(ValueError, match=r"shape=\(2, -1\) has a negative dimension"):
        TensorDesc((2, -1), "f32")
    with pytest.raises(ValueError, match=r"shape=\(2, 40\): the last axis must be a multiple of q8_0's block size 32"):
        TensorDesc((2, 40), "q8_0")
    with pytest.raises(TypeError, match=r"dtype='f8' is not supported"):
        TensorDesc(4, "f8")
