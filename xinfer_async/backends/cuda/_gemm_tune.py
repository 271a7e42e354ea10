"""Device time of GEMM launches, for choosing a cuBLASLt algorithm (``_cublaslt.LtHandle``) once per
``(n, k)`` at load: its own stream, buffers and events, so no queue of the device is involved.

The operands are filled with a constant f16 (0.8: tensor cores do the same work whatever the
values; a constant keeps it cheap); the time of a launch is the median of ``repeats`` back-to-back
runs after ``warmup`` runs, each run timed by a pair of CUDA events.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Sequence

from ._driver import check, ffi

#: f16 0.8 twice (0x3A66): the value the A and B operands are filled with
_FILL = 0x3A663A66

#: ``launch(stream, a, b, c)``: enqueue one GEMM on ``stream`` (a ``CUstream`` as int) over the
#: device addresses a, b, c
Launch = Callable[[int, int, int, int], None]


def time_launches(backend: Any, nbytes: tuple[int, int, int], launches: Sequence[Launch], warmup: int = 2,
                  repeats: int = 5) -> list[float]:
    """Device ms of one run of each of ``launches``, on fresh buffers of ``nbytes`` (a, b, c).

    Args:
        backend: the ``CUDABackend`` (its driver library, ``alloc`` and ``free``).
        nbytes: bytes of the a, b and c buffers, each > 0 (a and b a multiple of 4).

    Raises:
        DeviceError / DeviceOutOfMemoryError: a driver call failed (the buffers are freed).
    """
    lib = backend._lib
    backend.make_current()
    addrs: list[int] = []
    events: list[Any] = []
    s = ffi.new("CUstream *")
    check(lib.cuStreamCreate(s, 1), "cuStreamCreate")  # CU_STREAM_NON_BLOCKING
    stream = s[0]
    try:
        for n in nbytes:
            addrs.append(backend.alloc(n))
        a, b, c = addrs
        for addr, n in ((a, nbytes[0]), (b, nbytes[1])):
            check(lib.cuMemsetD32Async(addr, _FILL, n // 4, stream), "cuMemsetD32Async")
        for _ in range(2 * repeats):
            ev = ffi.new("CUevent *")
            check(lib.cuEventCreate(ev, 0), "cuEventCreate")
            events.append(ev[0])
        sid = int(ffi.cast("uintptr_t", stream))
        out = []
        for launch in launches:
            for _ in range(warmup):
                launch(sid, a, b, c)
            for r in range(repeats):
                check(lib.cuEventRecord(events[2 * r], stream), "cuEventRecord")
                launch(sid, a, b, c)
                check(lib.cuEventRecord(events[2 * r + 1], stream), "cuEventRecord")
            check(lib.cuStreamSynchronize(stream), "cuStreamSynchronize")
            ms = ffi.new("float *")
            runs = []
            for r in range(repeats):
                check(lib.cuEventElapsedTime(ms, events[2 * r], events[2 * r + 1]), "cuEventElapsedTime")
                runs.append(float(ms[0]))
            out.append(statistics.median(runs))
        return out
    finally:
        lib.cuStreamSynchronize(stream)
        for ev in events:
            lib.cuEventDestroy_v2(ev)
        for addr in addrs:
            backend.free(addr)
        lib.cuStreamDestroy_v2(stream)
