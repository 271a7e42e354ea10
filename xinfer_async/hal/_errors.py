"""The error hierarchy (small and flat, as trio and wgpu-py keep theirs).

``XinferError`` -> ``DeviceError`` (carries the native status name; sticky once a device is lost)
-> ``DeviceOutOfMemoryError`` (also a ``MemoryError``); ``KernelCompileError`` (carries the
compiler log); ``GGUFError`` (malformed model files); ``ValidationError`` (a recorded command breaks
a resource-state, lifetime or hazard rule); ``FenceTimeoutError`` (also trio's ``TooSlowError``).
Bad arguments are plain ``ValueError`` / ``TypeError`` naming the argument and the value.
"""

from __future__ import annotations

import trio


class XinferError(Exception):
    """Base class of every error this package raises on its own account."""


class DeviceError(XinferError):
    """A device or driver call failed.

    Attributes:
        status: the native status name, e.g. ``"CUDA_ERROR_ILLEGAL_ADDRESS"`` (``None`` if none).
    """

    def __init__(self, message: str, status: str | None = None):
        super().__init__(message)
        self.status = status


class DeviceOutOfMemoryError(DeviceError, MemoryError):
    """The device has no room for an allocation."""


class KernelCompileError(XinferError):
    """A kernel's source did not compile.

    Attributes:
        log: the compiler's log.
    """

    def __init__(self, message: str, log: str = ""):
        super().__init__(f"{message}\n{log}" if log else message)
        self.log = log


class GGUFError(XinferError):
    """A GGUF file is malformed, truncated or unsupported."""


class ValidationError(XinferError):
    """A command breaks a rule of the validation layer (wrong resource state, use after free,
    unordered hazard) or of the model layer (region bounds, weight writes, aliasing)."""


class FenceTimeoutError(XinferError, trio.TooSlowError):
    """A fence value was not reached before the deadline."""
