"""The cpu backend (the embedded default; runs everywhere, CI included)."""

from ...ops import ComputeKernel
from ...runtime._device import Device
from ._backend import CPUBackend


class CPUDevice(Device):
    """A ``Device`` on the cpu backend: host memory, queue threads, native C kernels.

    Args:
        command_lists: size of the command-list pool.
        validate: run the validation layer.
        memory_limit_bytes: optional cap on allocations (raises ``DeviceOutOfMemoryError`` past it).
    """

    def __init__(self, *, command_lists: int = 8, validate: bool = True, memory_limit_bytes: int | None = None):
        super().__init__(CPUBackend(memory_limit_bytes), kernels=ComputeKernel, command_lists=command_lists,
                         validate=validate)
