"""The ``Buffer`` protocol: what any backend's buffer offers a user.

No backend type leaks through it: a ``Buffer`` is known by shape, dtype, byte size and state. The
runtime's ``DeviceBuffer`` (``xinfer_async.runtime``) implements it for every backend. (A device is
one class, ``runtime.Device``, over the ``hal.Backend`` interface; no protocol duplicates it.)
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

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
