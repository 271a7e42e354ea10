"""``DeviceBuffer`` and ``BufferView``: an allocation with a tracked resource state, and a byte
range of one."""

from __future__ import annotations

import itertools
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ..hal import DType, ResourceState, TensorDesc, ValidationError

if TYPE_CHECKING:  # annotations only (the device module imports this one)
    from ._device import Device
    from ._queue import Queue

_ids = itertools.count(1)


class DeviceBuffer:
    """A device allocation (implements the ``hal.Buffer`` protocol).

    Attributes:
        desc: shape and dtype.
        size_in_bytes: ``desc.nbytes``.
        state: the ``ResourceState`` the recorded commands left it in.
        address: the backend address (``int``); meaningful only to the backend.
    """

    __slots__ = ("device", "address", "desc", "state", "freed", "last_use", "id", "_finalizer", "__weakref__")

    def __init__(self, device: Device, address: int, desc: TensorDesc):
        self.device = device
        self.address = address
        self.desc = desc
        self.state = ResourceState.COMMON
        self.freed = False
        self.last_use: dict[Queue, int] = {}  # fence value of the last list that used it, per queue
        self.id = next(_ids)
        # a buffer dropped without free() is freed the same way: once its fences complete
        self._finalizer = weakref.finalize(self, device._free_dropped, address, desc.nbytes, self.last_use)

    @property
    def size_in_bytes(self) -> int:
        return self.desc.nbytes

    @property
    def nbytes(self) -> int:
        return self.desc.nbytes

    @property
    def shape(self) -> tuple[int, ...]:
        return self.desc.shape

    @property
    def dtype(self) -> DType:
        return self.desc.dtype

    @property
    def buffer(self) -> "DeviceBuffer":
        return self

    @property
    def offset(self) -> int:
        return 0

    def view(self, offset: int = 0, nbytes: int | None = None) -> "BufferView":
        """The byte range ``[offset, offset + nbytes)`` of this buffer (to its end by default).

        Raises:
            ValueError: the range is negative or runs past the buffer.
        """
        if nbytes is None:
            nbytes = self.size_in_bytes - offset
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size_in_bytes:
            raise ValueError(
                f"view(offset={offset}, nbytes={nbytes}) is outside buffer #{self.id} of {self.size_in_bytes} bytes"
            )
        return BufferView(self, offset, nbytes)

    def busy(self) -> bool:
        """Whether a submitted command list that uses this buffer has not completed yet."""
        return any(q.fence.completed_value < v for q, v in self.last_use.items())

    def free(self) -> None:
        """Release the allocation once every fence that used it has completed. Idempotent.

        Later use of this buffer in a command raises ``ValidationError``.
        """
        if not self.freed:
            self.freed = True
            self.device.free_epoch += 1
            self._finalizer.detach()
            self.device._free_buffer(self)

    def __repr__(self) -> str:
        gone = ", freed" if self.freed else ""
        return f"<DeviceBuffer #{self.id} {self.desc} on {self.device.name}{gone}>"


class BufferView:
    """A byte range of a ``DeviceBuffer``, usable wherever a buffer binding is."""

    __slots__ = ("buffer", "offset", "nbytes")

    def __init__(self, buffer: DeviceBuffer, offset: int, nbytes: int):
        self.buffer = buffer
        self.offset = offset
        self.nbytes = nbytes

    @property
    def size_in_bytes(self) -> int:
        return self.nbytes

    @property
    def address(self) -> int:
        return self.buffer.address + self.offset

    @property
    def device(self) -> Device:
        return self.buffer.device

    def __repr__(self) -> str:
        return f"<BufferView of #{self.buffer.id} [{self.offset}:{self.offset + self.nbytes}]>"


def as_view(obj: DeviceBuffer | BufferView, device: Device, arg: str) -> BufferView:
    """Resolve a binding argument to a live ``BufferView`` on ``device``.

    Raises:
        TypeError: ``obj`` is not a buffer or view.
        ValueError: it belongs to another device.
        ValidationError: its buffer was freed.
    """
    if isinstance(obj, DeviceBuffer):
        view = BufferView(obj, 0, obj.size_in_bytes)
    elif isinstance(obj, BufferView):
        view = obj
    else:
        raise TypeError(f"{arg} must be a DeviceBuffer or BufferView, got {type(obj).__name__}")
    if view.buffer.device is not device:
        raise ValueError(f"{arg} is a buffer of device {view.buffer.device.name!r}, not of {device.name!r}")
    if view.buffer.freed:
        raise ValidationError(f"{arg}: buffer #{view.buffer.id} was freed (use after free)")
    return view


def host_bytes(data: Any) -> np.ndarray:
    """``data`` (a numpy array, made C-contiguous, or any bytes-like object) as flat ``uint8`` bytes.

    Raises:
        TypeError: ``data`` is neither.
    """
    if isinstance(data, np.ndarray):
        arr = np.ascontiguousarray(data)
        return arr.reshape(-1).view(np.uint8)
    try:
        return np.frombuffer(memoryview(data), np.uint8)
    except TypeError:
        raise TypeError(f"data must be a numpy array or bytes-like, got {type(data).__name__}") from None
