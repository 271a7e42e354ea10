"""runtime/_timer.py: GpuTimer on device timestamps."""

import math

import numpy as np
import pytest

from xinfer_async import Gemm, ValidationError


async def _time_gemm(dev, rng, m):
    a = dev.upload(rng.standard_normal((m, m)).astype(np.float32))
    b = dev.upload(rng.standard_normal((m, m)).astype(np.float32))
    c = dev.alloc((m, m), "f32")
    gemm = Gemm(dev, m, m, m).compile()
    gemm.bind(a, b, c)
    ex = dev.executor()
    timer = dev.timer()
    timer.begin(ex)
    for _ in range(4):
        gemm.dispatch(ex)
    timer.end(ex)
    with pytest.raises(ValidationError, match=r"^GpuTimer: the command list's fence has not completed$"):
        timer.elapsed_ms()
    await ex.submit_and_wait()
    ex.reset()  # the timer stays readable after its list is reused
    return timer.elapsed_ms()


async def test_gpu_timer_reports_nonnegative(devices, rng):
    small = min([await _time_gemm(devices, rng, 16) for _ in range(3)])
    large = min([await _time_gemm(devices, rng, 512) for _ in range(3)])
    for t in (small, large):
        assert math.isfinite(t) and t >= 0.0
    assert large > small  # 32768x the flops


def test_timer_misuse(devices):
    timer = devices.timer()
    with pytest.raises(ValidationError, match=r"^GpuTimer.end\(\) before begin\(\)$"):
        timer.end(devices.executor())
    with pytest.raises(ValidationError, match=r"^GpuTimer: record begin\(\) and end\(\) first$"):
        timer.elapsed_ms()
