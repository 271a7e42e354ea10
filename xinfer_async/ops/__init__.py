"""Operators (vendor-library ops) and compute kernels with their contracts."""

from ._compute import ComputeKernel as ComputeKernel
from ._kernels import KERNELS as KERNELS, kernel_spec as kernel_spec
from ._spec import BindingSpec as BindingSpec, CudaLaunch as CudaLaunch, KernelSpec as KernelSpec
from ._operator import Gemm as Gemm, Operator as Operator
