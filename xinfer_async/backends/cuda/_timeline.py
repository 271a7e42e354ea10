"""The launch timeline of the cuda kernels, in situ (a diagnostic; ``xinfer-async bench model --timeline``).

Under ``XINFER_TIMELINE=1`` (read when a shader is compiled and when the backend opens) every shader is
compiled with ``XI_TIMELINE`` (a separate cubin: the options are part of the cache key), and the first
thread of each kernel's block (0, 0, 0) records, in launch order, two readings of the GPU's global
nanosecond timer (PTX ``%globaltimer``): ``arrive``, when it reached its wait for the previous kernel, and
``go``, when it passed it (shaders/xi_common.cuh ``xi_grid_begin``). Compute capability 9.0+ only (the
wait is programmatic dependent launch's ``griddepcontrol.wait``).

What the readings mean, for kernels launched back to back on one stream with programmatic dependent
launch (every kernel of shaders/ on an H100/H200):

- ``go[i+1] - go[i]``: the time kernel i held the stream in situ, from passing its wait to its end as
  the next kernel saw it (its weights cold or warm as the real sequence leaves them, its prologue and its
  neighbours' overlapped as they really are). Summed over a step it is the step.
- ``go[i] - arrive[i]``: how long kernel i's first block was resident and waiting before its
  predecessor ended: its launch latency and prologue were hidden that long. About zero where the block
  could only be placed once the predecessor's blocks had left (registers, shared memory or block slots
  full).

Kernels that do not call ``xi_grid_begin`` (cuBLAS's) and copies record nothing: their time is counted
in the kernel before them. ``runtime/_profile.py`` times each kernel alone instead (warm inputs, no
neighbours); the two side by side show what the sequence adds or hides.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Mapping

import numpy as np

from ._driver import CUDA_ERROR_NOT_FOUND, check, ffi

if TYPE_CHECKING:
    from ._backend import CUDABackend

ENV = "XINFER_TIMELINE"
#: launches the buffer holds (16 bytes each; launches past it are counted, not recorded): XI_TL_SLOTS
#: of shaders/xi_common.cuh
SLOTS = 1 << 16


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``XINFER_TIMELINE`` is ``1``."""
    return environ.get(ENV, "0") == "1"


def compile_options(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The NVRTC options the timeline adds to every shader's compile: ``-DXI_TIMELINE``, or none."""
    return ("-DXI_TIMELINE",) if enabled(environ) else ()


class Timeline:
    """The device buffer the kernels record into: u64 ``[0]`` launches counted, ``[1]`` unused, then
    ``SLOTS`` (arrive, go) pairs of u64 nanoseconds (16-byte aligned: one store a pair).

    Raises (constructor): DeviceError: the allocation failed.
    """

    slots = SLOTS

    def __init__(self, backend: "CUDABackend"):
        self._backend = backend
        self.address = backend.alloc(16 * (SLOTS + 1))
        self.reset()

    def attach(self, module) -> bool:
        """Point ``module``'s ``xi_tl`` at the buffer (its kernels then record); False where the module
        has no ``xi_tl`` (compiled without ``XI_TIMELINE``, or without shaders/xi_common.cuh).

        Raises: DeviceError: the driver failed otherwise."""
        be = self._backend
        dptr, size = ffi.new("CUdeviceptr *"), ffi.new("size_t *")
        be.make_current()
        status = be._lib.cuModuleGetGlobal_v2(dptr, size, module, b"xi_tl")
        if status == CUDA_ERROR_NOT_FOUND:
            return False
        check(status, "cuModuleGetGlobal(xi_tl)")
        self._write(int(dptr[0]), np.array([self.address], np.uint64))
        return True

    def reset(self) -> None:
        """Forget what was recorded (call it with no kernel in flight)."""
        self._write(self.address, np.array([0, 0], np.uint64))

    def _write(self, address: int, data: np.ndarray) -> None:
        # a pageable host-to-device copy may return before it lands, and the queues' streams do not
        # wait for it (non-blocking): the context's synchronize does
        self._backend.write(address, data)
        self._backend.synchronize()

    def read(self) -> np.ndarray:
        """The recorded launches since ``reset``, in launch order: ``(n, 2)`` int64 (arrive, go) ns.
        Synchronous: call it once the recorded work has completed (its fence awaited).

        Raises: RuntimeError: more launches than the buffer holds (``slots``)."""
        head = np.empty(2, np.uint64)
        self._backend.read(self.address, head)
        n = int(head[0])
        if n > self.slots:
            raise RuntimeError(f"the timeline counted {n} launches; its buffer holds {self.slots}")
        out = np.empty(2 * n, np.uint64)
        if n:
            self._backend.read(self.address + 16, out)
        return out.reshape(n, 2).astype(np.int64)

    def close(self) -> None:
        """Free the buffer (the backend's ``close``, its kernels done; a lost device: nothing to check)."""
        self._backend._lib.cuMemFree_v2(self.address)


def step_rows(records: np.ndarray, labels: list[str]) -> dict:
    """Per kernel of a plan replayed back to back: ``records`` ((n, 2) arrive, go ns, as ``read``
    returns them) of ``n`` launches, a whole number of replays of the plan, ``labels`` the plan's
    kernels in launch order (``runtime/_profile.command_label`` of its dispatches).

    Each full step (every replay but the last, whose end no later launch marks) gives every kernel its
    in-situ time (the next launch's go minus its go; the step's last kernel: the next step's first go,
    so the gap between replays is counted there) and its lead (go - arrive). Means, not medians: the
    timer ticks in steps (about 1 us on some GPUs, ``resolution_ns``) and a mean of ticked readings
    is not biased by them. Returns ``{"steps" (full steps), "step_us" (their mean length),
    "resolution_ns" (the smallest nonzero difference of two readings), "kernels": [{"label", "calls"
    (a step), "us" (the label's sum a step), "lead_us" (a launch)}] largest first, "order": [{"label",
    "us", "lead_us"}] one per launch of a step}``.

    Raises:
        ValueError: no labels; a count of records that is not a whole number (>= 2) of replays (a
            kernel recorded twice or not at all); go readings that are not in launch order.
    """
    k, n = len(labels), len(records)
    if k == 0:
        raise ValueError("step_rows: the plan has no kernels")
    if n % k or n < 2 * k:
        raise ValueError(f"step_rows: {n} launches recorded for a plan of {k} kernels "
                         f"({n / k:.2f} replays; every kernel must record once a replay, at least 2 replays)")
    arrive, go = records[:, 0].astype(np.float64), records[:, 1].astype(np.float64)
    if (np.diff(go) < 0).any():
        raise ValueError(f"step_rows: the go readings fall back at launch {int(np.argmax(np.diff(go) < 0)) + 1}")
    steps = n // k - 1  # full steps
    busy = (go[1:k * steps + 1] - go[:k * steps]).reshape(steps, k) / 1e3
    lead = (go - arrive)[:k * steps].reshape(steps, k) / 1e3
    order = [dict(label=labels[i], us=float(busy[:, i].mean()), lead_us=float(lead[:, i].mean())) for i in range(k)]
    kernels = []
    for label in dict.fromkeys(labels):
        cols = [i for i in range(k) if labels[i] == label]
        kernels.append(dict(label=label, calls=len(cols), us=float(busy[:, cols].sum(axis=1).mean()),
                            lead_us=float(lead[:, cols].mean())))
    kernels.sort(key=lambda r: -r["us"])
    ticks = np.concatenate([np.diff(go), go - arrive])
    ticks = ticks[ticks > 0]
    return dict(steps=steps, step_us=float(busy.sum(axis=1).mean()),
                resolution_ns=float(ticks.min()) if len(ticks) else None, kernels=kernels, order=order)
