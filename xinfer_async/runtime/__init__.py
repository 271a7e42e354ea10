"""Backend-neutral policy: devices, buffers, executors, fences, queues, pools, jobs, timers."""

from ._buffer import BufferView as BufferView, DeviceBuffer as DeviceBuffer
from ._completion import Completion as Completion
from ._device import Device as Device
from ._executor import CapturedGraph as CapturedGraph, Executor as Executor, Readback as Readback
from ._fence import Fence as Fence
from ._jobs import (
    JobCancelledError as JobCancelledError,
    JobHandle as JobHandle,
    JobQueue as JobQueue,
    JobStatistics as JobStatistics,
    open_job_queue as open_job_queue,
)
from ._pool import CommandListPool as CommandListPool, PoolStatistics as PoolStatistics
from ._queue import Queue as Queue
from ._timer import GpuTimer as GpuTimer
