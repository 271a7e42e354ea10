"""Commands of a model fragment: ``Fill``, ``Copy``, ``Dispatch`` with ``Binding``s and arguments, ``Gemm``."""

from __future__ import annotations

import dataclasses
import struct
from typing import Sequence

from ..hal import Access
from ._region import KernelId, Region


@dataclasses.dataclass(frozen=True)
class Binding:
    """A region bound to a kernel parameter with its access."""

    region: Region
    access: Access = Access.READ


@dataclasses.dataclass(frozen=True)
class Indices:
    """Kernel arguments as 32-bit integers, in the constants struct's order (floats given as
    their value are packed as float where the contract says so)."""

    values: tuple

    def __init__(self, *values):
        object.__setattr__(self, "values", tuple(values))


@dataclasses.dataclass(frozen=True)
class Packed:
    """Kernel arguments as the raw packed constants struct (little-endian 4-byte fields)."""

    data: bytes


@dataclasses.dataclass(frozen=True)
class Fill:
    """Fill a region (a multiple of 4 bytes) with the float32 ``value``."""

    region: Region
    value: float = 0.0


@dataclasses.dataclass(frozen=True)
class Copy:
    """Copy ``src`` to ``dst`` (equal byte counts)."""

    dst: Region
    src: Region


@dataclasses.dataclass(frozen=True)
class Dispatch:
    """Launch a kernel.

    ``unsafe`` contract (the source's): the kernel touches only the bytes its bindings declare,
    with the declared access. Checked here: every binding is at least as large as the kernel's
    contract needs for these arguments, the binding count and the accesses match the contract,
    and no binding writes a weight. Not checkable: what the kernel code really reads.

    Args:
        kernel: from ``ModelSession.kernel``.
        bindings: in the kernel's binding order.
        arguments: a dict of constants, ``Indices(...)`` or ``Packed(bytes)``.
        grid: blocks; default: ``ModelDefinition.launch_config(kernel, arguments)``.
    """

    kernel: KernelId
    bindings: Sequence[Binding]
    arguments: object = None
    grid: tuple | None = None


@dataclasses.dataclass(frozen=True)
class Gemm:
    """``c (m, n) f32 = a (m, k) f16 @ b (n, k)^T f16``, row-major (the ``ops.Gemm`` operator with
    ``out_dtype`` f32: cuBLASLt on cuda, one algorithm per ``(n, k)`` and bucket of m, a split-K one
    given the slot's workspace; numpy on cpu).
    Checked at ``fragment``: the regions are this definition's, large enough, ``c`` not a weight."""

    a: Region
    b: Region
    c: Region
    m: int
    n: int
    k: int


def unpack_arguments(spec, arguments) -> dict:
    """Arguments of a ``Dispatch`` as a constants dict for ``spec`` (an ``ops.KernelSpec``).

    Raises:
        ValueError: a wrong count or byte length.
    """
    names = [n for n, _ in spec.constants]
    if arguments is None:
        return {}
    if isinstance(arguments, dict):
        return dict(arguments)
    if isinstance(arguments, Indices):
        if len(arguments.values) != len(names):
            raise ValueError(f"{spec.name}: Indices has {len(arguments.values)} values, the contract has {len(names)} ({names})")
        return dict(zip(names, arguments.values))
    if isinstance(arguments, Packed):
        fmt = "<" + "".join(k for _, k in spec.constants)
        if len(arguments.data) != struct.calcsize(fmt):
            raise ValueError(f"{spec.name}: Packed has {len(arguments.data)} bytes, the contract needs {struct.calcsize(fmt)}")
        return dict(zip(names, struct.unpack(fmt, arguments.data)))
    raise TypeError(f"arguments must be a dict, Indices or Packed, got {type(arguments).__name__}")
