"""``GpuTimer``: device timestamps around recorded work (cuda: events; cpu: the queue thread's
clock)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..hal import ValidationError
from ._completion import Completion
from ._executor import Executor

if TYPE_CHECKING:  # annotations only: the device module imports this one
    from ._device import Device


class GpuTimer:
    """``begin(cl)`` ... ``end(cl)``; after the list's fence, ``elapsed_ms()``."""

    def __init__(self, device: Device):
        self.device = device
        self._begin = self._end = None
        self._done: Completion | None = None  # of the recording that holds the end timestamp

    def begin(self, executor: Executor) -> None:
        """Record the start timestamp into ``executor`` (recording)."""
        self._begin = executor.timestamp()
        self._end = None
        self._done = executor._track_completion()

    def end(self, executor: Executor) -> None:
        """Record the end timestamp into ``executor``; the same recording as ``begin``, or one
        submitted later on the same queue.

        Raises:
            ValidationError: ``begin`` was not recorded.
        """
        if self._begin is None:
            raise ValidationError("GpuTimer.end() before begin()")
        self._end = executor.timestamp()
        self._done = executor._track_completion()

    def elapsed_ms(self) -> float:
        """Milliseconds of device time between ``begin`` and ``end``.

        Raises:
            ValidationError: not both recorded, or the list's fence has not completed.
        """
        if self._begin is None or self._end is None:
            raise ValidationError("GpuTimer: record begin() and end() first")
        if not self._done.done():
            raise ValidationError("GpuTimer: the command list's fence has not completed")
        return self.device.backend.elapsed_ms(self._begin, self._end)
