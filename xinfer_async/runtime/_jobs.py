"""``JobQueue``: a bounded queue of async jobs run by a nursery of workers on pooled resources.

A job is ``async def job(resource) -> result``; the resource (a command list from a
``CommandListPool``, an inference slot from a ``PreparedModel``) comes from the ``acquire``
callable given to the queue, an async context manager factory. A job's exception reaches the
caller that submitted it. A caller cancelled while its job waits in the queue removes it; cancelled
while it runs, the job is cancelled and its resource goes back only when the resource's own fence
completes (the pool and slot managers guarantee that).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

import outcome
import trio

from ..hal import XinferError


class JobCancelledError(XinferError):
    """The job was cancelled (by its submitter, or by the queue shutting down)."""


@dataclasses.dataclass(frozen=True)
class JobStatistics:
    """Counts since the queue opened, and queue-wait percentiles (seconds) of recent jobs."""

    queued: int
    running: int
    submitted: int
    completed: int
    failed: int
    cancelled: int
    max_queued: int
    wait_p50_s: float
    wait_p90_s: float
    wait_p99_s: float


class _Job:
    __slots__ = ("fn", "done", "result", "state", "scope", "enqueued_at", "callbacks")

    def __init__(self, fn):
        self.fn = fn
        self.done = trio.Event()
        self.result: outcome.Outcome | None = None
        self.state = "queued"  # queued -> running -> done | cancelled
        self.scope: trio.CancelScope | None = None
        self.enqueued_at = trio.current_time()
        self.callbacks: list = []

    def finish(self) -> None:
        self.done.set()
        for fn in self.callbacks:
            fn()


class JobHandle:
    """A submitted job: ``await handle.result()``; ``handle.cancel()``.

    It answers ``done()`` and ``await wait()`` as a ``Completion`` does; a job ends on the host
    (it may submit several command lists or none), so it has no queue and fence value of its own.
    """

    def __init__(self, queue: "JobQueue", job: _Job):
        self._queue = queue
        self._job = job

    def done(self) -> bool:
        """Whether the job has ended (returned, raised or been cancelled); never blocks."""
        return self._job.done.is_set()

    async def wait(self) -> None:
        """Wait until the job has ended, however it ends, without taking its result or raising its
        exception. Unlike ``result()``, cancelling the waiting task leaves the job running."""
        await self._job.done.wait()

    async def result(self) -> Any:
        """The job's return value (or its exception, re-raised). If the awaiting task is
        cancelled, the job is cancelled too."""
        try:
            await self._job.done.wait()
        except trio.Cancelled:
            self.cancel()
            raise
        result = self._job.result
        if isinstance(result, outcome.Error):  # not unwrap(): an outcome unwraps only once
            raise result.error
        return result.value

    def cancel(self) -> None:
        self._queue._cancel(self._job)

    def add_done_callback(self, fn) -> None:
        """Call ``fn()`` (plain code, in the trio thread) when the job ends, however it ends; at
        once if it has ended."""
        if self._job.done.is_set():
            fn()
        else:
            self._job.callbacks.append(fn)


class JobQueue:
    """Bounded job queue; construct with ``open_job_queue``.

    Args:
        acquire: ``acquire()`` returns an async context manager yielding a resource for one job.
        workers: number of concurrent workers (at most this many jobs run at once).
        max_queued: queue capacity; ``submit`` waits for room, ``submit_nowait`` raises.
    """

    def __init__(self, acquire: Callable[[], Any], *, workers: int, max_queued: int):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if max_queued < 1:
            raise ValueError(f"max_queued must be >= 1, got {max_queued}")
        self._acquire = acquire
        self.workers = workers
        self.max_queued = max_queued
        self._queue: collections.deque[_Job] = collections.deque()
        self._room = trio.lowlevel.ParkingLot()
        self._work = trio.lowlevel.ParkingLot()
        self._waits: collections.deque[float] = collections.deque(maxlen=4096)
        self._running = 0
        self._running_jobs: set[_Job] = set()
        self._counts = collections.Counter()
        self._max_queued_seen = 0
        self._closed = False

    # -- submitting ------------------------------------------------------------------------
    def submit_nowait(self, fn: Callable[[Any], Awaitable[Any]]) -> JobHandle:
        """Queue ``fn`` now.

        Raises:
            trio.WouldBlock: the queue is full.
            trio.ClosedResourceError: the queue is closed.
        """
        if self._closed:
            raise trio.ClosedResourceError("job queue is closed")
        if len(self._queue) >= self.max_queued:
            raise trio.WouldBlock
        job = _Job(fn)
        self._queue.append(job)
        self._counts["submitted"] += 1
        self._max_queued_seen = max(self._max_queued_seen, len(self._queue))
        self._work.unpark()
        return JobHandle(self, job)

    async def submit(self, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        """Queue ``fn`` (waiting for room) and return its result.

        Raises:
            whatever ``fn`` raised; trio.ClosedResourceError if the queue closed.
        """
        handle = await self.submit_handle(fn)
        return await handle.result()

    async def submit_handle(self, fn: Callable[[Any], Awaitable[Any]]) -> JobHandle:
        """Queue ``fn`` (waiting for room) and return its handle without awaiting the result."""
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            try:
                handle = self.submit_nowait(fn)
                break
            except trio.WouldBlock:
                await self._room.park()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return handle

    def _cancel(self, job: _Job) -> None:
        if job.state == "queued":
            try:
                self._queue.remove(job)
            except ValueError:
                pass
            job.state = "cancelled"
            self._counts["cancelled"] += 1
            job.result = outcome.Error(JobCancelledError("job was cancelled before it ran"))
            job.finish()
            self._room.unpark()
        elif job.state == "running" and job.scope is not None:
            job.scope.cancel()

    # -- workers ---------------------------------------------------------------------------
    async def _worker(self) -> None:
        while True:
            while not self._queue:
                if self._closed:
                    return
                await self._work.park()
            job = self._queue.popleft()
            self._room.unpark()
            job.state = "running"
            self._running += 1
            self._running_jobs.add(job)
            self._waits.append(trio.current_time() - job.enqueued_at)
            try:
                with trio.CancelScope() as job.scope:
                    try:  # a failure to get or give back the resource is the job's failure too
                        async with self._acquire() as resource:
                            value = await job.fn(resource)
                    except Exception as exc:
                        job.result = outcome.Error(exc)
                    else:
                        job.result = outcome.Value(value)
                if job.result is None:
                    self._counts["cancelled"] += 1
                    job.result = outcome.Error(JobCancelledError("job was cancelled while it ran"))
                elif isinstance(job.result, outcome.Error):
                    self._counts["failed"] += 1
                else:
                    self._counts["completed"] += 1
            finally:
                self._running -= 1
                self._running_jobs.discard(job)
                if job.result is None:
                    self._counts["cancelled"] += 1
                    job.result = outcome.Error(JobCancelledError("job queue was shut down while the job ran"))
                job.state = "done"
                job.finish()

    def spawn_system_workers(self, name: str = "xinfer_async.job-worker") -> None:
        """Run the workers as trio system tasks (for an owner without a nursery, e.g. a loaded
        model); they end when the queue closes or the current ``trio.run`` ends."""
        for i in range(self.workers):
            trio.lowlevel.spawn_system_task(self._worker, name=f"{name}-{i}")

    def close(self) -> None:
        """Refuse new jobs; workers exit once the queue is drained."""
        self._closed = True
        self._work.unpark_all()
        self._room.unpark_all()

    def cancel_all(self) -> None:
        """Cancel every queued and running job (a running job's resource still goes back only
        after its fence)."""
        for job in list(self._queue) + list(self._running_jobs):
            self._cancel(job)

    def statistics(self) -> JobStatistics:
        waits = sorted(self._waits)

        def pct(p: float) -> float:
            if not waits:
                return 0.0
            return waits[min(len(waits) - 1, max(0, math.ceil(p * len(waits)) - 1))]

        c = self._counts
        return JobStatistics(len(self._queue), self._running, c["submitted"], c["completed"], c["failed"],
                             c["cancelled"], self._max_queued_seen, pct(0.5), pct(0.9), pct(0.99))


@asynccontextmanager
async def open_job_queue(acquire: Callable[[], Any], *, workers: int, max_queued: int = 64) -> AsyncIterator[JobQueue]:
    """Open a ``JobQueue`` whose workers run in a nursery for the duration of the block.

    On exit the queue closes, queued jobs still run, and the block waits for the workers.
    """
    q = JobQueue(acquire, workers=workers, max_queued=max_queued)
    async with trio.open_nursery() as nursery:
        for i in range(workers):
            nursery.start_soon(q._worker, name=f"xinfer_async.job-worker-{i}")
        try:
            yield q
        finally:
            q.close()
