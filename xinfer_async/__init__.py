"""xinfer_async: an async (trio) runtime for model inference on GPUs (cuda) and the cpu.

The public surface is this list of re-exports; implementations live in private modules.
"""

from ._omp import configure as _configure_openmp

# The cpu backend's kernels use OpenMP from a queue thread: passive waiting and one thread a
# physical core (or XINFER_THREADS) unless the user chose, set before libgomp starts.
_configure_openmp()

from .hal import (
    Access as Access,
    Buffer as Buffer,
    DeviceError as DeviceError,
    DeviceOutOfMemoryError as DeviceOutOfMemoryError,
    DType as DType,
    FenceTimeoutError as FenceTimeoutError,
    GGUFError as GGUFError,
    KernelCompileError as KernelCompileError,
    ResourceState as ResourceState,
    TensorDesc as TensorDesc,
    ValidationError as ValidationError,
    XinferError as XinferError,
)
from .ops import ComputeKernel as ComputeKernel, Gemm as Gemm, Operator as Operator
from .runtime import (
    BufferView as BufferView,
    CapturedGraph as CapturedGraph,
    CommandListPool as CommandListPool,
    Device as Device,
    Device as DeviceProtocol,  # the former hal protocol's name, kept for compatibility
    DeviceBuffer as DeviceBuffer,
    Executor as Executor,
    Fence as Fence,
    GpuTimer as GpuTimer,
    JobCancelledError as JobCancelledError,
    JobQueue as JobQueue,
    Queue as Queue,
    open_job_queue as open_job_queue,
)
from ._open import open_device as open_device

__version__ = "0.1.0"
