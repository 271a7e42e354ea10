"""Device time of GEMM launches, for choosing a cuBLASLt algorithm (``_cublaslt.LtHandle``) once per
``(n, k)`` at load: its own stream, buffers and events, so no queue of the device is involved.

The operands are filled with a constant f16 (0.8: tensor cores do the same work whatever the
values; a constant keeps it cheap); the time of a launch is the median of ``repeats`` back-to-back
runs after ``warmup`` runs, each run timed by a pair of CUDA events.

The weights (operand b) are read from L2-cold memory, as a decode step reads them (every matrix of a
layer, then the next layer's: a step streams gigabytes through a 50 MB L2): the runs cycle through
enough copies of b that together they exceed ``COLD_BYTES``, so a run never finds its b in L2 from
the run before. Timing one b over and over (as before) measured the smaller matrices (an 8B
layer's 4096 x 4096 f16: 34 MB) from L2 and chose their tiles for a speed the step never sees.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Sequence

from ._driver import check, ffi

#: f16 0.8 twice (0x3A66): the value the A and B operands are filled with
_FILL = 0x3A663A66

#: ``launch(stream, a, b, c, workspace)``: enqueue one GEMM on ``stream`` (a ``CUstream`` as int) over
#: the device addresses a, b, c, with the workspace at ``workspace`` (0 where it has 0 bytes)
Launch = Callable[[int, int, int, int, int], None]

#: the bytes the copies of operand b add up to at least (about 2.5 x the H200's 50 MB L2)
COLD_BYTES = 128 << 20
#: the most copies of b (a b of 8 MB or less is then partly L2-warm: such GEMMs are launch-bound)
MAX_COPIES = 16


def b_copies(b_nbytes: int, cold_bytes: int = COLD_BYTES, most: int = MAX_COPIES) -> int:
    """How many copies of operand b a timing cycles through: ``ceil(cold_bytes / b_nbytes)``, at
    least 1 and at most ``most``.

    Raises:
        ValueError: ``b_nbytes`` is not > 0.
    """
    if b_nbytes <= 0:
        raise ValueError(f"b_nbytes must be > 0, got {b_nbytes}")
    return max(1, min(most, -(-cold_bytes // b_nbytes)))


def time_launches(backend: Any, nbytes: tuple[int, ...], launches: Sequence[Launch], warmup: int = 2,
                  repeats: int = 5) -> list[float]:
    """Device ms of one run of each of ``launches``, on fresh buffers of ``nbytes`` (a, b, c and,
    optionally, a workspace); run r reads copy ``r % b_copies(nbytes[1])`` of b (L2-cold: see the
    module docstring).

    Args:
        backend: the ``CUDABackend`` (its driver library, ``alloc`` and ``free``).
        nbytes: bytes of the a, b and c buffers, each > 0 (a and b a multiple of 4), then of the
            workspace (>= 0; absent: 0).

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
        copies = b_copies(nbytes[1])
        ws_nbytes = nbytes[3] if len(nbytes) > 3 else 0
        for n in (nbytes[0], nbytes[2]) + ((ws_nbytes,) if ws_nbytes else ()) + (nbytes[1],) * copies:
            addrs.append(backend.alloc(n))
        a, c = addrs[0], addrs[1]
        ws, bs = (addrs[2], addrs[3:]) if ws_nbytes else (0, addrs[2:])
        for addr, n in [(a, nbytes[0])] + [(b, nbytes[1]) for b in bs]:
            check(lib.cuMemsetD32Async(addr, _FILL, n // 4, stream), "cuMemsetD32Async")
        for _ in range(2 * repeats):
            ev = ffi.new("CUevent *")
            check(lib.cuEventCreate(ev, 0), "cuEventCreate")
            events.append(ev[0])
        sid = int(ffi.cast("uintptr_t", stream))
        out = []
        for launch in launches:
            for r in range(warmup):
                launch(sid, a, bs[r % copies], c, ws)
            for r in range(repeats):
                check(lib.cuEventRecord(events[2 * r], stream), "cuEventRecord")
                launch(sid, a, bs[(warmup + r) % copies], c, ws)
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
