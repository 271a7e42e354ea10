"""The vocabulary a kernel is declared in (``ops/_kernels.py`` holds the declarations).

A ``KernelSpec`` is the one declaration of a compute kernel. From it follow:

- the Python contract: binding order, access and byte size, the constants' packing and checks
  (``KernelSpec.pack``, used by ``ComputeKernel.bind``);
- the constants structs of both languages: ``native/xi_kernels.h`` (C, one ``typedef`` a kernel, plus
  the kernel's prototype) and ``shaders/xi_kernels.cuh`` (CUDA, one ``struct`` a ``struct`` family),
  written by ``python -m xinfer_async.ops._codegen``; ``tests/test_codegen.py`` fails when they are stale;
- the cuda launch geometry (``cuda``: a block size and a grid, or the family of launchers in
  ``backends/cuda/_launch.py`` that picks among several entry points);
- the table of ``native/KERNELS.md`` (``doc``, the bindings' ``shape``).

Constants structs are packed little-endian structs of 4-byte fields (``int32_t`` for ``"i"``,
``float`` for ``"f"``) in declaration order.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Callable

from ..hal import Access

Consts = dict[str, int | float]
#: ``(constants, sms=...) -> (x, y, z)`` blocks; ``sms`` is the device's multiprocessor count
Grid = Callable[..., tuple[int, int, int]]

#: constant kind -> (struct format character, C type)
FIELD_TYPES = {"i": ("i", "int32_t"), "f": ("f", "float")}


@dataclasses.dataclass(frozen=True)
class BindingSpec:
    """One buffer a kernel takes.

    Attributes:
        name: as the kernel sources name it.
        access: what the kernel does to it.
        nbytes: constants -> the bytes the kernel touches (the binding must have at least these).
        shape: for the docs: ``"(rows, dim)"``, with the element type where it is not f32.
    """

    name: str
    access: Access
    nbytes: Callable[[Consts], int]
    shape: str = ""


@dataclasses.dataclass(frozen=True)
class CudaLaunch:
    """How the cuda backend launches a kernel: ``block`` threads and ``grid(constants, sms=...)``
    blocks of the one entry point ``<name>``; or, for kernels with several entry points, ``family``:
    the launcher of ``backends/cuda/_launch.py`` (``FAMILIES``) that picks the entry, grid, block and
    shared bytes for each launch, given ``params``."""

    block: int = 256
    grid: Grid | None = None
    family: str = ""
    params: tuple[tuple[str, str], ...] = ()


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)``, at least 1 (a grid dimension is never 0)."""
    return max(1, -(-a // b))


#: block of the flat (grid-stride) kernels
FLAT_BLOCK = 256


def flat(total: Callable[[Consts], int]) -> CudaLaunch:
    """A grid-stride kernel over ``total(c)`` items, ``FLAT_BLOCK`` threads a block: any grid works,
    so it is capped at 64 blocks an SM."""
    return CudaLaunch(FLAT_BLOCK, lambda c, sms: (min(cdiv(total(c), FLAT_BLOCK), sms * 64), 1, 1))


def per_row(key: str, block: int = 256) -> CudaLaunch:
    """A block a row: ``c[key]`` blocks (at least 1) of ``block`` threads."""
    return CudaLaunch(block, lambda c, sms: (max(1, c[key]), 1, 1))


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """The declaration of one compute kernel.

    Attributes:
        name: the C symbol is ``xi_k_<name>``, the CUDA entry ``<name>`` in ``shaders/<name>.cu``.
        bindings: in call order.
        constants: ``(field, "i" | "f")`` in struct order.
        check: extra validation of the constants; returns an error message or ``None``.
        struct: the CUDA constants struct is ``xi_<struct>_c`` (kernels of one family, e.g. the
            ``matmul_DT``, share it; their constants must then be the same); the C one is always
            ``xi_<name>_c``.
        cuda: its launch geometry on the cuda backend.
        doc: its contract, one line of ``native/KERNELS.md`` (shared by a family's kernels).
        cpu: the cpu backend has it (``xi_k_<name>``); False for a kernel only the cuda backend
            runs (the qmatmul family and its quantizers: a path ``Backend.quantized_activations``
            asks for), which then has no C prototype and no C struct.
    """

    name: str
    bindings: tuple[BindingSpec, ...]
    constants: tuple[tuple[str, str], ...]
    check: Callable[[Consts], str | None] = lambda c: None
    struct: str = ""
    cuda: CudaLaunch | None = None
    doc: str = ""
    cpu: bool = True

    def __post_init__(self):
        if not self.struct:
            object.__setattr__(self, "struct", self.name)
        for n, kind in self.constants:
            if kind not in FIELD_TYPES:
                raise ValueError(f"{self.name}: constant {n!r} has kind {kind!r}; choose 'i' or 'f'")

    @property
    def source_name(self) -> str:
        """The shader file's stem (``shaders/<source_name>.cu``)."""
        return self.name

    @property
    def c_struct(self) -> str:
        """The C constants type (``native/xi_kernels.h``)."""
        return f"xi_{self.name}_c"

    @property
    def cuda_struct(self) -> str:
        """The CUDA constants type (``shaders/xi_kernels.cuh``)."""
        return f"xi_{self.struct}_c"

    @property
    def struct_format(self) -> str:
        """The ``struct`` module format of the packed constants."""
        return "<" + "".join(FIELD_TYPES[k][0] for _, k in self.constants)

    def pack(self, constants) -> tuple[bytes, Consts]:
        """Pack constants (a dict, or a sequence in struct order) into the struct bytes.

        Raises:
            ValueError: a missing, unknown, negative or inconsistent constant (named).
            TypeError: a float given for an int field.
        """
        names = [n for n, _ in self.constants]
        if constants is None:
            constants = {}
        if not isinstance(constants, dict):
            constants = list(constants)
            if len(constants) != len(names):
                raise ValueError(f"{self.name}: expected {len(names)} constants {names}, got {len(constants)}")
            constants = dict(zip(names, constants))
        unknown = set(constants) - set(names)
        if unknown:
            raise ValueError(f"{self.name}: unknown constants {sorted(unknown)}; expected {names}")
        values: Consts = {}
        for n, kind in self.constants:
            if n not in constants:
                raise ValueError(f"{self.name}: constant {n!r} is missing")
            v = constants[n]
            if kind == "i":
                if isinstance(v, float) and not v.is_integer():
                    raise TypeError(f"{self.name}: constant {n}={v!r} must be an integer")
                v = int(v)
                if v < 0:
                    raise ValueError(f"{self.name}: constant {n}={v} must be >= 0")
                if v >= 2**31:
                    raise ValueError(f"{self.name}: constant {n}={v} does not fit in int32")
            else:
                v = float(v)
            values[n] = v
        msg = self.check(values)
        if msg:
            raise ValueError(f"{self.name}: {msg}")
        return struct.pack(self.struct_format, *(values[n] for n, _ in self.constants)), values
