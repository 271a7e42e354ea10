"""``CUDAQueue`` and the fence-signal protocol: after each command list the GPU stores the fence value
into a mapped counter (``cuStreamWriteValue64``, for polling waiters), then the native C function
``xi_fence_signal`` runs as a host callback (``cuLaunchHostFunc``) on the queue's signal stream, which
waits for the work stream's event (so the work stream never waits for a callback, and no Python ever
runs on a driver thread)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

from ...hal import BackendQueue, Command, DeviceError
from . import _driver
from ._driver import check, ffi
from ._pinned import MappedCounter

if TYPE_CHECKING:
    from ._backend import CUDABackend


def fence_signal_fn():
    """``xi_fence_signal`` of ``xinfer_async._native`` as a ``CUhostFn``."""
    from ... import _native

    addr = int(_native.ffi.cast("uintptr_t", _native.ffi.addressof(_native.lib, "xi_fence_signal")))
    return ffi.cast("CUhostFn", addr)


def _address(signal: Any) -> int:
    if isinstance(signal, int):
        return signal
    try:
        return int(ffi.cast("uintptr_t", signal))
    except TypeError:
        from ... import _native

        return int(_native.ffi.cast("uintptr_t", signal))


class CUDAQueue(BackendQueue):
    """A non-blocking CUDA stream (``stream``) for the work, and a second one (``signal_stream``)
    for the fence's host callbacks: after each list the work stream records ``_done`` (an event)
    and the signal stream waits for it, then runs ``xi_fence_signal``. So the work stream never
    waits for a host callback (the driver's callback thread takes 25-60 us to run one, which would
    sit between consecutive lists, e.g. the steps of a pipelined decode), while the callbacks still
    run in order, each after its own list. ``error`` holds the first :class:`DeviceError` a command
    raised."""

    def __init__(self, backend: "CUDABackend"):
        self._backend = backend
        self._lib = backend._lib
        s, s2, ev = ffi.new("CUstream *"), ffi.new("CUstream *"), ffi.new("CUevent *")
        check(self._lib.cuStreamCreate(s, _driver.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
        self.stream = s[0]
        try:
            check(self._lib.cuStreamCreate(s2, _driver.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
            try:
                check(self._lib.cuEventCreate(ev, _driver.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
            except DeviceError:
                self._lib.cuStreamDestroy_v2(s2[0])
                raise
        except DeviceError:
            self._lib.cuStreamDestroy_v2(self.stream)
            raise
        self.signal_stream, self._done = s2[0], ev[0]
        self.error: DeviceError | None = None
        self.counter: MappedCounter | None = None  # set by CUDABackend.fence_counter
        self._closed = False

    def execute(self, commands: Sequence[Command], signal: Any) -> None:
        backend = self._backend
        backend.make_current()
        try:
            for cmd in commands:
                backend._enqueue(self.stream, cmd)
        except DeviceError as e:
            if self.error is None:
                self.error = e
        finally:
            if self.error is None and backend.stream_wait_value and self.counter is not None:
                # the GPU itself stores the value into the mapped fence counter right after the
                # list (a few us), so a polling waiter sees completion long before the host
                # callback below (25-60 us) wakes sleeping waiters through the eventfd
                status = self._lib.cuStreamWriteValue64_v2(self.stream, self.counter.device_ptr, int(signal.value), 0)
                if status and self.error is None:
                    try:
                        check(status, "cuStreamWriteValue64")
                    except DeviceError as e:
                        self.error = e
            # the signal follows everything enqueued so far (the signal stream waits for the work
            # stream's event; a wait captures the event's latest record, so one event serves every
            # list); if that fails, signal now from this thread (the C function, not Python), so
            # no waiter hangs
            ptr = ffi.cast("void *", _address(signal))
            lib, status, what = self._lib, 0, ""
            for what, call, args in (("cuEventRecord", lib.cuEventRecord, (self._done, self.stream)),
                                     ("cuStreamWaitEvent", lib.cuStreamWaitEvent, (self.signal_stream, self._done, 0)),
                                     ("cuLaunchHostFunc", lib.cuLaunchHostFunc, (self.signal_stream, backend._host_fn, ptr))):
                status = call(*args)
                if status:
                    break
            if status:
                # the callbacks already queued run first (or never, in a lost context, whose
                # driver drops them), so signalling here frees no struct a callback will still read
                lib.cuStreamSynchronize(self.stream)
                lib.cuStreamSynchronize(self.signal_stream)
                if self.error is None:
                    try:
                        check(status, what)
                    except DeviceError as e:
                        self.error = e
                backend._host_fn(ptr)

    def wait_for(self, other: "CUDAQueue", value: int) -> None:
        """Later work on this stream waits until ``other``'s fence counter reaches ``value``:
        ``cuStreamWaitValue64(GEQ)`` on the counter's mapped device address, so a value not yet
        submitted on ``other`` stalls this stream until it is signalled. Fallback (no 64-bit stream
        memory ops, or no mapped counter): an event recorded on ``other``'s tail, which covers only
        what ``other`` has enqueued so far."""
        self._backend.make_current()
        lib = self._lib
        if self._backend.stream_wait_value and other.counter is not None:
            check(lib.cuStreamWaitValue64_v2(self.stream, other.counter.device_ptr, int(value),
                                             _driver.CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue64")
            return
        ev = ffi.new("CUevent *")
        check(lib.cuEventCreate(ev, _driver.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        try:
            check(lib.cuEventRecord(ev[0], other.stream), "cuEventRecord")
            check(lib.cuStreamWaitEvent(self.stream, ev[0], 0), "cuStreamWaitEvent")
        finally:
            lib.cuEventDestroy_v2(ev[0])

    def synchronize(self) -> None:
        """Block until this queue is idle: its work, and the host callbacks that signal it."""
        self._backend.make_current()
        check(self._lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
        check(self._lib.cuStreamSynchronize(self.signal_stream), "cuStreamSynchronize")

    def close(self) -> bool:
        if not self._closed:
            self._closed = True
            self._backend.make_current()
            if _driver.lost is None:
                # a wait on a fence value that is never signalled would block forever: give up
                # after 10 s, as the cpu queue thread's join does (the streams are left alone)
                deadline = time.monotonic() + 10.0
                for stream in (self.stream, self.signal_stream):  # the callbacks touch the fence
                    while self._lib.cuStreamQuery(stream) == _driver.CUDA_ERROR_NOT_READY:
                        if time.monotonic() > deadline:
                            return False
                        time.sleep(1e-4)
            self._lib.cuStreamDestroy_v2(self.stream)
            self._lib.cuStreamDestroy_v2(self.signal_stream)
            self._lib.cuEventDestroy_v2(self._done)
        return True
