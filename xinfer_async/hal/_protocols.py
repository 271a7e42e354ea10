"""The ``Device`` and ``Buffer`` protocols: what any backend's objects offer a user.

No backend type leaks through them: a ``Buffer`` is known by shape, dtype, byte size and state.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from ._desc import TensorDesc
from ._dtype import DType
from ._state import ResourceState


@runtime_checkable
class Buffer(Protocol):
    """A device allocation."""

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
    def free(self) -> None: ...


@runtime_checkable
class Device(Protocol):
    """A device: memory, an in-order queue with its timeline fence, pooled command lists, timers."""

    name: str

    def alloc(self, shape, dtype) -> Buffer: ...
    def upload(self, data: Any, shape=None, dtype=None) -> Buffer: ...
    def download(self, buffer: Buffer) -> bytes: ...
    def download_numpy(self, buffer: Buffer) -> np.ndarray: ...
    def executor(self) -> Any: ...
    @property
    def command_lists(self) -> Any: ...
    @property
    def queue(self) -> Any: ...
    def timer(self) -> Any: ...
