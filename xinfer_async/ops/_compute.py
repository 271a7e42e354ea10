"""``ComputeKernel``: a named kernel with a contract, compiled by the backend once per device."""

from __future__ import annotations

from typing import Any, Sequence

from ..runtime._buffer import as_view
from ..runtime._device import Device
from ._kernels import kernel_spec


class ComputeKernel:
    """A compute kernel bound to a device.

    Attributes:
        spec: its ``KernelSpec`` (bindings, constants).
        handle: the backend's compiled kernel.
    """

    def __init__(self, device: Device, name: str):
        """The declared kernel ``name`` (``ops/_kernels.py``) loaded by ``device``'s backend.

        Raises:
            ValueError: no kernel has that name.
            KernelCompileError: its source does not compile.
        """
        self.device = device
        self.spec = kernel_spec(name)
        self.name = name
        self.handle = device.backend.load_kernel(self.spec)

    def launch_grid(self, constants: dict) -> tuple:
        """The grid the backend launches for these constants (cpu: ``(1, 1, 1)``)."""
        fn = getattr(self.handle, "launch_grid", None)
        return fn(constants) if fn else (1, 1, 1)

    def bind(self, bindings: Sequence[Any], constants: Any):
        """Validate bindings against the contract for these constants.

        Returns:
            (views, [(view, access, binding name)], packed constants, default grid)

        Raises:
            ValueError: a wrong binding count, a binding smaller than the contract needs, or bad
                constants (each names the binding or constant).
            TypeError: a binding that is not a buffer or view.
        """
        spec = self.spec
        packed, values = spec.pack(constants)
        if len(bindings) != len(spec.bindings):
            raise ValueError(f"{spec.name}: expected {len(spec.bindings)} bindings "
                             f"({', '.join(b.name for b in spec.bindings)}), got {len(bindings)}")
        views, accesses = [], []
        for b, obj in zip(spec.bindings, bindings):
            view = as_view(obj, self.device, f"{spec.name} binding {b.name!r}")
            need = b.nbytes(values)
            if view.nbytes < need:
                raise ValueError(f"{spec.name}: binding {b.name!r} has {view.nbytes} bytes but the constants need {need}")
            if need < view.nbytes:
                view = view.buffer.view(view.offset, need) if need else view
            views.append(view)
            accesses.append((view, b.access, b.name))
        return views, accesses, packed, self.launch_grid(values)

    def __repr__(self) -> str:
        return f"<ComputeKernel {self.name} on {self.device.name}>"
