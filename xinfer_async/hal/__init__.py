"""Hardware abstraction layer: types, states, protocols and errors shared by every backend."""

from ._desc import TensorDesc as TensorDesc
from ._dtype import DType as DType
from ._errors import (
    DeviceError as DeviceError,
    DeviceOutOfMemoryError as DeviceOutOfMemoryError,
    FenceTimeoutError as FenceTimeoutError,
    GGUFError as GGUFError,
    KernelCompileError as KernelCompileError,
    ValidationError as ValidationError,
    XinferError as XinferError,
)
from ._protocols import Buffer as Buffer, Device as Device
from ._state import Access as Access, ResourceState as ResourceState
