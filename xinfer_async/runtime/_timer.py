"""``GpuTimer``: device timestamps around recorded work (cuda: events; cpu: the queue thread's
clock)."""

from __future__ import annotations

from typing import Any

from ..hal import ValidationError


class GpuTimer:
    """``begin(cl)`` ... ``end(cl)``; after the list's fence, ``elapsed_ms()``."""

    def __init__(self, device: Any):
        self.device = device
        self._begin = self._end = None
        self._executor = None

    def begin(self, executor: Any) -> None:
        self._begin = executor.timestamp()
        self._executor = executor

    def end(self, executor: Any) -> None:
        if self._begin is None:
            raise ValidationError("GpuTimer.end() before begin()")
        self._end = executor.timestamp()
        self._executor = executor

    def elapsed_ms(self) -> float:
        """Milliseconds of device time between ``begin`` and ``end``.

        Raises:
            ValidationError: not both recorded, or the list's fence has not completed.
        """
        if self._begin is None or self._end is None:
            raise ValidationError("GpuTimer: record begin() and end() first")
        if not self._executor.is_complete():
            raise ValidationError("GpuTimer: the command list's fence has not completed")
        return self.device.backend.elapsed_ms(self._begin, self._end)
