"""``open_device``: pick a backend by name."""

from __future__ import annotations

import os
import re
from typing import Any

from .hal import DeviceError

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N")


def cuda_status() -> tuple[bool, str]:
    """Whether the cuda backend can run here, and if not, why."""
    try:
        from .backends.cuda._backend import CUDABackend
    except Exception as exc:  # the cuda backend never breaks the package's import
        return False, f"the cuda backend failed to import: {type(exc).__name__}: {exc}"
    try:
        return CUDABackend.is_available()
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


def open_device(name: str | None = None, **kwargs: Any):
    """Open a device.

    Args:
        name: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"``; default: the environment variable
            ``XINFER_DEVICE``, else ``"auto"`` (cuda when usable, else cpu).
        **kwargs: passed to the device (``command_lists``, ``validate``).

    Raises:
        ValueError: an unknown name (the message lists the choices).
        TypeError: ``name`` is not a string.
        DeviceError: cuda was asked for where it cannot run (the message says why).
    """
    if name is None:
        name = os.environ.get("XINFER_DEVICE") or "auto"
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    name = name.strip().lower()
    if name == "auto":
        ok, _ = cuda_status()
        name = "cuda" if ok else "cpu"
    if name == "cpu":
        from .backends.cpu import CPUDevice

        return CPUDevice(**kwargs)
    m = re.fullmatch(r"cuda(?::(\d+))?", name)
    if m:
        ok, reason = cuda_status()
        if not ok:
            raise DeviceError(f"device {name!r} is not available: {reason}", "CUDA_UNAVAILABLE")
        from .backends.cuda import CUDADevice

        return CUDADevice(int(m.group(1) or 0), **kwargs)
    raise ValueError(f"device={name!r} is not a device name; choose one of {', '.join(DEVICE_CHOICES)}")
