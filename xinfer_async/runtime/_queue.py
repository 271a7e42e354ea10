"""``Queue``: an in-order device queue with its timeline ``Fence``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ..hal import BackendQueue, DeviceError, XinferError
from ..hal._commands import Command
from ._fence import Fence

if TYPE_CHECKING:  # annotations only: the device module imports this one
    from ._device import Device


class Queue:
    """Executes submitted command lists in order; ``submit`` returns the fence value to await.

    Attributes:
        fence: this queue's timeline ``Fence``.
        index: the queue's number on its device (0 is the default queue).
    """

    def __init__(self, device: Device, backend_queue: BackendQueue, index: int):
        self.device = device
        self.index = index
        self._backend = backend_queue
        self.fence = Fence(f"{device.name} queue {index}", error_source=self._error,
                           counter=device.backend.fence_counter(backend_queue))

    def _error(self) -> XinferError | None:
        err = getattr(self._backend, "error", None)
        if err is None:
            return None
        return err if isinstance(err, XinferError) else DeviceError(str(err))

    def submit_lowered(self, commands: Sequence[Command], keepalive: Any = None) -> int:
        """Hand already-validated lowered commands to the backend; returns the fence value.

        ``keepalive`` (host arrays, signals) is held until that value completes.

        Raises:
            DeviceError: the device is lost.
        """
        self.device._check_alive()
        value, signal = self.fence._next_signal(keepalive)
        self._backend.execute(commands, signal)
        return value

    def wait_for(self, other: "Queue", value: int) -> None:
        """Make later work on this queue wait until ``other`` reaches ``value``, which need not be
        submitted yet (D3D12's ``ID3D12CommandQueue::Wait``): work submitted here afterwards stalls
        on the device until ``other`` signals it."""
        if other is not self and other.fence.completed_value < value:
            self._backend.wait_for(other._backend, value)

    async def wait_idle(self) -> None:
        """Wait until everything submitted so far has completed."""
        await self.fence.wait(self.fence.submitted_value)

    def close(self) -> None:
        """Close the backend queue (its pending work first), then the fence. Where the backend gave
        up on work still pending, the queue and its fence are kept for the life of the process:
        that work may still signal the fence, whose signal structs, counters and eventfd must
        outlive it."""
        if self._backend.close() is False:
            abandon(self)
            return
        self.fence.close()


#: queues whose work was still pending when they were closed (see ``Queue.close``)
_ABANDONED: list[Queue] = []


def abandon(queue: Queue) -> None:
    """Keep ``queue`` (its fence and the signals its pending work may still run) alive for good."""
    _ABANDONED.append(queue)
