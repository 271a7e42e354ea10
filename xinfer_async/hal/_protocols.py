"""The ``Device`` and ``Buffer`` protocols: what any backend's objects offer a user.

No backend type leaks through them: a ``Buffer`` is known by shape, dtype, byte size and state.
The runtime's ``DeviceBuffer`` and ``Device`` (``xinfer_async.runtime``) implement them for every
backend.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from ._desc import TensorDesc
from ._dtype import DType
from ._state import ResourceState


@runtime_checkable
class Buffer(Protocol):
    """A device allocation.

    Attributes:
        size_in_bytes: ``desc.nbytes`` (int, bytes).
        shape: ``desc.shape``; dtype: ``desc.dtype``; desc: the ``TensorDesc``.
        state: the ``ResourceState`` recorded commands left it in.
    """

    @property
    def size_in_bytes(self) -> int: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> DType: ...
    @property
    def desc(self) -> TensorDesc: ...
    @property
    def state(self) -> ResourceState: ...

    def free(self) -> None:
        """Release the memory once every fence that used it has completed (idempotent)."""


@runtime_checkable
class Device(Protocol):
    """A device: memory, an in-order queue with its timeline fence, pooled command lists, timers."""

    name: str

    def alloc(self, shape, dtype) -> Buffer:
        """An uninitialized buffer of ``shape`` x ``dtype``.

        Raises: ValueError/TypeError for a bad shape or dtype; DeviceOutOfMemoryError.
        """

    def upload(self, data: Any, shape=None, dtype=None) -> Buffer:
        """A new buffer holding ``data`` (numpy array or bytes; blocks the calling thread).

        Raises: ValueError when the byte count differs from ``shape`` x ``dtype``; TypeError.
        """

    def download(self, buffer: Buffer) -> bytes:
        """The buffer's bytes, after the work that uses it (blocks the calling thread).

        Raises: ValidationError for a freed buffer; ValueError for another device's buffer.
        """

    def download_numpy(self, buffer: Buffer) -> np.ndarray:
        """``download`` as an array of the buffer's shape and dtype (uint8 for block types)."""

    def executor(self) -> Any:
        """A new one-shot command list (``Executor``)."""

    @property
    def command_lists(self) -> Any:
        """The bounded ``CommandListPool``: ``async with dev.command_lists.acquire() as cl``."""

    @property
    def queue(self) -> Any:
        """The default ``Queue``; ``queue.fence`` is its timeline ``Fence``."""

    def timer(self) -> Any:
        """A ``GpuTimer`` (device timestamps around recorded work, in milliseconds)."""
