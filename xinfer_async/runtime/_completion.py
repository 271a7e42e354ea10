"""``Completion``: work that is complete once a queue's ``Fence`` reaches a value.

The one type for "this completes at fence value v": ``Executor.completion()`` returns one, a
``Readback`` is one that also holds the downloaded bytes, ``GpuTimer`` holds one for its end
timestamp, the model layer's ``Slot`` and ``PendingRun`` (a ``Completion`` too) use it for a slot's
last submission. ``JobHandle`` offers the same ``done()`` / ``await wait()`` for a job, which ends on
the host rather than at a fence value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..hal import ValidationError

if TYPE_CHECKING:  # typing only: _queue imports the backend interface, not this module
    from ._queue import Queue


class Completion:
    """Work that is complete once ``queue``'s fence reaches ``value``.

    ``await c.wait()``, ``c.done()``, ``c.wait_blocking()``. A completion of work recorded into a
    command list but not submitted yet is unbound (``queue`` and ``value`` are ``None``): it is not
    done, and waiting on it raises; ``Executor.submit`` binds it.

    Args:
        queue: the ``Queue`` the work was submitted to (``None``: not submitted yet).
        value: the fence value (``int``) at which the work is complete.

    Attributes:
        queue: the ``Queue``, or ``None`` while unbound.
        value: the fence value, or ``None`` while unbound.
    """

    def __init__(self, queue: Queue | None = None, value: int | None = None):
        if (queue is None) != (value is None):
            raise ValueError(f"Completion needs both a queue and a fence value, or neither; got value={value!r}")
        self.queue = queue
        self.value = value

    def _bind(self, queue: Queue, value: int) -> None:
        """Set the queue and fence value of the submission that holds this work (``Executor.submit``)."""
        self.queue, self.value = queue, value

    def _bound(self) -> tuple[Queue, int]:
        if self.queue is None or self.value is None:
            raise ValidationError("the work was not submitted: submit its command list before waiting on it")
        return self.queue, self.value

    def done(self) -> bool:
        """Whether the fence has reached the value (``False`` while unbound); never blocks."""
        return self.value is not None and self.queue.fence.completed_value >= self.value

    def is_complete(self) -> bool:
        """Same as ``done()`` (the model layer's name)."""
        return self.done()

    async def wait(self, *, timeout_s: float | None = None) -> None:
        """Await the fence value (``Fence.wait``).

        Raises:
            ValidationError: unbound (the work was not submitted).
            FenceTimeoutError: ``timeout_s`` seconds passed first.
            DeviceError: the device failed while executing the queue's work.
        """
        queue, value = self._bound()
        await queue.fence.wait(value, timeout_s=timeout_s)

    def wait_blocking(self, timeout_s: float | None = None) -> None:
        """Block the calling thread until the fence value (``Fence.wait_blocking``); raises as ``wait``."""
        queue, value = self._bound()
        queue.fence.wait_blocking(value, timeout_s)

    def __repr__(self) -> str:
        if self.value is None:
            return f"<{type(self).__name__} not submitted>"
        return f"<{type(self).__name__} {self.queue.fence.label} value {self.value}{' done' if self.done() else ''}>"
