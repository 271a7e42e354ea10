"""``CommandListPool``: a fixed number of command lists shared by many tasks.

A list goes back to the pool only once its submission's fence is reached: a task that leaves
``async with pool.acquire()`` (or is cancelled) before that hands the list to a system task that
awaits the fence first. A list still executing is never reset.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import trio

from ._executor import Executor
from ._queue import Queue

if TYPE_CHECKING:  # annotations only: the device module imports this one
    from ._device import Device


@dataclasses.dataclass(frozen=True)
class PoolStatistics:
    size: int
    free: int
    in_use: int  # held by a task or still executing
    max_in_use: int
    waiting_tasks: int
    acquired_total: int


class _Lease:
    def __init__(self, pool: "CommandListPool", executor: Executor | None = None, queue: Queue | None = None):
        self._pool = pool
        self._executor = executor
        self._queue = queue

    async def __aenter__(self) -> Executor:
        if self._executor is None:
            self._executor = await self._pool._acquire(self._queue)
        return self._executor

    async def __aexit__(self, *exc) -> None:
        self._pool.release(self._executor)

    def __enter__(self) -> Executor:
        if self._executor is None:
            raise RuntimeError("use `async with pool.acquire()`; only acquire_nowait() works with plain `with`")
        return self._executor

    def __exit__(self, *exc) -> None:
        self._pool.release(self._executor)


class CommandListPool:
    """A bounded pool of ``Executor``s on one device.

    ``async with pool.acquire() as cl`` waits for a free list; ``with pool.acquire_nowait() as cl``
    raises ``trio.WouldBlock`` when none is free.
    """

    def __init__(self, device: Device, size: int, **executor_kwargs):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.device = device
        self.size = size
        self._free = [Executor(device, **executor_kwargs) for _ in range(size)]
        self._lot = trio.lowlevel.ParkingLot()
        self._reserved = 0  # free lists promised to waiting tasks that _return woke (first come, first served)
        self._in_use = 0
        self._max_in_use = 0
        self._acquired = 0

    def acquire(self, queue: Queue | None = None) -> _Lease:
        """An async context manager yielding a free, reset command list that submits to
        ``queue`` (default: the device's queue)."""
        return _Lease(self, queue=queue)

    def acquire_nowait(self, queue: Queue | None = None) -> _Lease:
        """A context manager holding a free list (submitting to ``queue``) now.

        Raises:
            trio.WouldBlock: every list is in use, still executing, or promised to a task that was
                waiting for one (no queue jumping: a task that returns a list and takes one again
                at once cannot starve the waiting ones).
        """
        if len(self._free) <= self._reserved:
            raise trio.WouldBlock
        return _Lease(self, self._take(queue))

    async def _acquire(self, queue: Queue | None = None) -> Executor:
        await trio.lowlevel.checkpoint_if_cancelled()
        if len(self._free) > self._reserved:
            ex = self._take(queue)
            await trio.lowlevel.cancel_shielded_checkpoint()
            return ex
        await self._lot.park()  # _return wakes the longest-waiting task with a list reserved for it
        self._reserved -= 1
        return self._take(queue)

    def _take(self, queue: Queue | None = None) -> Executor:
        ex = self._free.pop()
        ex.reset()
        ex.queue = queue if queue is not None else self.device.queue
        self._in_use += 1
        self._acquired += 1
        self._max_in_use = max(self._max_in_use, self._in_use)
        return ex

    def release(self, ex: Executor) -> None:
        """Return ``ex``; if its submission is still executing, it returns when its fence does."""
        if ex.fence_value is None or ex.is_complete():
            self._return(ex)
        else:
            trio.lowlevel.spawn_system_task(self._return_after_fence, ex, name="xinfer_async.pool-reclaim")

    async def _return_after_fence(self, ex: Executor) -> None:
        try:
            await ex.queue.fence.wait(ex.fence_value)
        except Exception:
            pass  # a device error surfaces to whoever awaits the work; the list is still reusable
        self._return(ex)

    def _return(self, ex: Executor) -> None:
        ex.reset()
        self._free.append(ex)
        self._in_use -= 1
        if self._lot.statistics().tasks_waiting:
            self._reserved += 1
            self._lot.unpark()

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(self.size, len(self._free), self._in_use, self._max_in_use,
                              self._lot.statistics().tasks_waiting, self._acquired)
