"""The cuda backend: primitives on the CUDA driver API, NVRTC and cuBLAS, reached through cffi.

Importing this package needs no GPU and no CUDA library; they are opened when a device is made.
"""

from ...ops import ComputeKernel
from ...runtime._device import Device
from ._backend import CUDABackend as CUDABackend, CUDAKernel as CUDAKernel, CUDAQueue as CUDAQueue


class CUDADevice(Device):
    """A ``Device`` on one NVIDIA GPU: ``cuMemAlloc`` memory, streams, NVRTC kernels, cuBLAS GEMM.

    Args:
        ordinal: the CUDA device index.
        command_lists: size of the command-list pool.
        validate: run the validation layer.

    Raises:
        DeviceError: the driver cannot open the device.
        OSError: ``libcuda.so.1`` is missing.
    """

    def __init__(self, ordinal: int = 0, *, command_lists: int = 8, validate: bool = True):
        super().__init__(CUDABackend(ordinal), kernels=ComputeKernel, command_lists=command_lists, validate=validate)


__all__ = ["CUDABackend", "CUDADevice", "CUDAKernel", "CUDAQueue"]
