"""``Fence``: the timeline of one queue, awaitable from trio without busy-waiting.

A queue signals value ``v`` when the ``v``-th submitted command list has completed: the native
``xi_fence_signal`` (``native/fence.c``) stores ``v`` into the shared completed counter and writes
the fence's eventfd. It runs on the cpu queue thread or as a CUDA host callback, and never runs
Python. Trio tasks wait with ``trio.lowlevel.wait_readable`` on that eventfd; one waiting task
reads it at a time and wakes the others.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

import trio

from ..hal import FenceTimeoutError, XinferError


#: how long a waiter polls the completed value before it sleeps (seconds); an empty submission
#: completes in ~10 us on the cpu backend, a wake-up through the eventfd costs about as much again
_SPIN_S = 50e-6
#: the first part of that poll spins without yielding to trio (seconds)
_YIELD_SPIN_S = 20e-6


def _native():
    from .. import _native  # built by `pip install -e .` (native/build_native.py)

    return _native.ffi, _native.lib


class Fence:
    """A monotonically increasing timeline value per queue.

    Attributes:
        completed_value: the highest value the device has signalled (``int``).
        submitted_value: the highest value handed out by ``Queue.submit``.
    """

    def __init__(self, label: str = "queue", error_source: Callable[[], XinferError | None] | None = None,
                 counter: tuple[Any, Any] | None = None):
        """Args:
            label: names the fence in error messages.
            error_source: returns the queue's device error, if any.
            counter: ``(int64_t *, keepalive)`` from ``Backend.fence_counter``: where the completed
                value lives (cuda: mapped pinned memory the GPU reads); default: host memory.
        """
        ffi, lib = _native()
        self._ffi = ffi
        self.label = label
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        if counter is None:
            counter = (ffi.new("int64_t *", 0),) * 2
        self._completed, self._counter_keepalive = counter
        #: the highest value whose xi_fence_signal has run to its release point: its signal struct
        #: (and every earlier one) may be freed (on cuda the GPU stores completed values earlier)
        self._signalled = ffi.new("int64_t *", 0)
        self._submitted = 0
        self._pending: dict[int, tuple[Any, Any]] = {}  # value -> (xi_signal*, keepalive)
        self._lock = threading.Lock()
        self._reader_busy = False
        self._wakeup = trio.Event()
        self._listeners: list[Callable[[], None]] = []
        self._error_source = error_source
        self._closed = False

    # -- state -----------------------------------------------------------------------------
    @property
    def completed_value(self) -> int:
        return int(self._completed[0])

    @property
    def submitted_value(self) -> int:
        return self._submitted

    @property
    def error(self) -> XinferError | None:
        """The device error that a signalled command list raised, if any (sticky)."""
        return self._error_source() if self._error_source else None

    def is_complete(self, value: int) -> bool:
        return self.completed_value >= value

    def add_listener(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` (plain code, no trio operations) whenever progress is observed."""
        self._listeners.append(fn)

    # -- used by Queue ---------------------------------------------------------------------
    def _next_signal(self, keepalive: Any = None) -> tuple[int, Any]:
        """Reserve the next value; returns it and the native ``xi_signal *`` to hand the backend."""
        if self._closed:
            raise trio.ClosedResourceError(f"fence of {self.label} is closed")
        with self._lock:
            self._submitted += 1
            value = self._submitted
            sig = self._ffi.new("xi_signal *", {"fd": self._fd, "completed": self._completed, "value": value,
                                                "signalled": self._signalled})
            self._pending[value] = (sig, keepalive)
        return value, sig

    def _progress(self) -> None:
        done = int(self._signalled[0])
        with self._lock:
            # A signal is freed once xi_fence_signal has passed its release point (the store into
            # ``_signalled``), not when the value completes: on cuda the GPU stores the completed
            # value (cuStreamWriteValue64) before the host callback, which runs later on another
            # stream, has read the struct. Callbacks run in submission order, so every signal up
            # to ``done`` is through.
            for v in [v for v in self._pending if v <= done]:
                del self._pending[v]
        for fn in self._listeners:
            fn()

    def _raise_if_error(self) -> None:
        err = self.error
        if err is not None:
            raise err

    # -- waiting ---------------------------------------------------------------------------
    async def wait(self, value: int, *, timeout_s: float | None = None) -> None:
        """Wait until the fence reaches ``value``.

        Never blocks the trio thread and never spins: the eventfd wakes the waiter.

        Args:
            value: a timeline value (from ``Queue.submit``).
            timeout_s: give up after this many seconds.

        Raises:
            FenceTimeoutError: ``timeout_s`` passed first (also a ``trio.TooSlowError``).
            DeviceError: the device failed while executing the submitted work.
        """
        if timeout_s is None:
            await self._wait(value)
            return
        with trio.move_on_after(timeout_s) as scope:
            await self._wait(value)
        if scope.cancelled_caught:
            raise FenceTimeoutError(
                f"{self.label}: fence value {value} not reached within {timeout_s} s "
                f"(completed {self.completed_value}, submitted {self._submitted})"
            )

    async def _wait(self, value: int) -> None:
        if self.completed_value >= value:
            await trio.lowlevel.checkpoint()
            self._progress()
            self._raise_if_error()
            return
        if not self._reader_busy:
            # The await's checkpoint comes first, while the device runs the work just submitted
            # (a cancelled waiter raises here; a loop of short waits lets other tasks run): its
            # cost (several us a trio round) overlaps the device instead of adding to the wait.
            await trio.lowlevel.checkpoint()
            # then a brief poll (DESIGN: allowed for short work): the completion of an empty or
            # tiny list lands within microseconds, before a wake-up through the eventfd would.
            # It stays on this thread (sched_yield releases the GIL, so the cpu queue thread
            # runs meanwhile) for at most _YIELD_SPIN_S, then polls between trio checkpoints.
            start = time.perf_counter()
            while self.completed_value < value and time.perf_counter() - start < _YIELD_SPIN_S:
                os.sched_yield()
            while self.completed_value < value and time.perf_counter() - start < _SPIN_S:
                await trio.lowlevel.checkpoint()
            if self.completed_value >= value:
                self._progress()
        while self.completed_value < value:
            if self._closed:  # woken by the close of the fence (or the reader's hand-over after it)
                raise trio.ClosedResourceError(f"fence of {self.label} is closed")
            if self._reader_busy:
                await self._wakeup.wait()
                continue
            self._reader_busy = True
            try:
                await trio.lowlevel.wait_readable(self._fd)
                try:
                    os.eventfd_read(self._fd)
                except BlockingIOError:
                    pass
            finally:
                self._reader_busy = False
                wake, self._wakeup = self._wakeup, trio.Event()
                wake.set()
            self._progress()
        self._raise_if_error()

    def wait_blocking(self, value: int, timeout_s: float | None = None) -> None:
        """Block the calling thread until the fence reaches ``value``: yields the cpu for up to
        ``_SPIN_S`` while polling, then sleeps with a backoff (20 us doubling to 1 ms).

        Raises:
            FenceTimeoutError: ``timeout_s`` passed first.
            DeviceError: the device failed while executing the submitted work.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        spin_until = time.perf_counter() + _SPIN_S
        while self.completed_value < value and time.perf_counter() < spin_until:
            os.sched_yield()  # releases the GIL: the cpu queue thread runs meanwhile
        delay = 20e-6
        while self.completed_value < value:
            if deadline is not None and time.monotonic() >= deadline:
                raise FenceTimeoutError(
                    f"{self.label}: fence value {value} not reached within {timeout_s} s "
                    f"(completed {self.completed_value}, submitted {self._submitted})"
                )
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)
        self._progress()
        self._raise_if_error()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            # the backend may free the counter's memory (cuda: mapped pinned) once its queue is
            # closed: keep the last value in memory of our own, so completed_value stays readable
            self._completed = self._ffi.new("int64_t *", int(self._completed[0]))
            self._counter_keepalive = None
            try:
                trio.lowlevel.notify_closing(self._fd)
            except RuntimeError:  # not inside trio: nobody can be waiting on the fd
                pass
            os.close(self._fd)
