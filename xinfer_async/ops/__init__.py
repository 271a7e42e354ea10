"""Operators (vendor-library ops) and compute kernels with their contracts."""

from ._compute import ComputeKernel as ComputeKernel
from ._kernels import KERNELS as KERNELS, KernelSpec as KernelSpec, kernel_spec as kernel_spec
from ._operator import Gemm as Gemm, Operator as Operator

from ..runtime._device import Device as _Device

_Device.kernel_factory = ComputeKernel
