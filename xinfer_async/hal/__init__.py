"""Hardware abstraction layer: the interface a backend implements (``Backend``, ``BackendQueue``,
lowered ``Command``s), and the types, states, protocols and errors every backend shares."""

from ._backend import Backend as Backend, BackendQueue as BackendQueue, Command as Command
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
from ._protocols import Buffer as Buffer
from ._state import Access as Access, ResourceState as ResourceState
