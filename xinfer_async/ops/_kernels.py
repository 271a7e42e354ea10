"""Kernel contracts, written once for every backend (see ``native/KERNELS.md``).

A ``KernelSpec`` names the kernel, its bindings (order, access, byte size as a function of the
constants) and its constants layout (packed little-endian 4-byte fields).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Callable

from ..hal import Access, DType

R, W, RW = Access.READ, Access.WRITE, Access.READ_WRITE
Consts = dict[str, int | float]


@dataclasses.dataclass(frozen=True)
class BindingSpec:
    name: str
    access: Access
    nbytes: Callable[[Consts], int]


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """The contract of one compute kernel.

    Attributes:
        name: the C symbol is ``xi_k_<name>``, the CUDA kernel ``<name>``.
        bindings: in call order.
        constants: ``(field, "i" | "f")`` in struct order.
        check: extra validation of the constants; returns an error message or ``None``.
    """

    name: str
    bindings: tuple[BindingSpec, ...]
    constants: tuple[tuple[str, str], ...]
    check: Callable[[Consts], str | None] = lambda c: None

    @property
    def source_name(self) -> str:
        return self.name

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
        fmt = "<" + "".join(k for _, k in self.constants)
        return struct.pack(fmt, *(values[n] for n, _ in self.constants)), values


def _f32(expr: Callable[[Consts], int]) -> Callable[[Consts], int]:
    return lambda c: 4 * max(0, expr(c))


def _strided(rows: str, stride: str, width: Callable[[Consts], int]) -> Callable[[Consts], int]:
    return _f32(lambda c: (c[rows] - 1) * c[stride] + width(c) if c[rows] > 0 else 0)


def _stride_ok(rows: str, stride: str, width: Callable[[Consts], int]):
    return lambda c: (f"{stride}={c[stride]} is smaller than the row width {width(c)}"
                      if c[rows] > 1 and c[stride] < width(c) else None)


def _spec(name, bindings, constants, check=lambda c: None) -> KernelSpec:
    return KernelSpec(name, tuple(BindingSpec(*b) for b in bindings), tuple(constants), check)


def _all(*checks):
    def run(c):
        for chk in checks:
            m = chk(c)
            if m:
                return m
        return None

    return run


KERNELS: dict[str, KernelSpec] = {}


def _register(spec: KernelSpec) -> None:
    KERNELS[spec.name] = spec


_register(_spec("affine", [("x", R, _f32(lambda c: c["n"])), ("y", W, _f32(lambda c: c["n"]))],
                [("n", "i"), ("a", "f"), ("b", "f")]))
_register(_spec("add", [("a", R, _f32(lambda c: c["n"])), ("b", R, _f32(lambda c: c["n"])),
                        ("y", W, _f32(lambda c: c["n"]))], [("n", "i")]))
_register(_spec("rmsnorm", [("x", R, _f32(lambda c: c["rows"] * c["dim"])), ("w", R, _f32(lambda c: c["dim"])),
                            ("y", W, _f32(lambda c: c["rows"] * c["dim"]))],
                [("rows", "i"), ("dim", "i"), ("eps", "f")]))
_rope_width = lambda c: c["n_head"] * c["head_dim"]  # noqa: E731
_register(_spec("rope", [("x", RW, _strided("rows", "row_stride", _rope_width)), ("pos", R, _f32(lambda c: c["rows"]))],
                [("rows", "i"), ("n_head", "i"), ("head_dim", "i"), ("row_stride", "i"), ("theta", "f")],
                _all(_stride_ok("rows", "row_stride", _rope_width),
                     lambda c: f"head_dim={c['head_dim']} must be even" if c["head_dim"] % 2 else None)))
_register(_spec("swiglu", [("gate", R, _strided("rows", "in_stride", lambda c: c["n"])),
                           ("up", R, _strided("rows", "in_stride", lambda c: c["n"])),
                           ("y", W, _f32(lambda c: c["rows"] * c["n"]))],
                [("rows", "i"), ("n", "i"), ("in_stride", "i")], _stride_ok("rows", "in_stride", lambda c: c["n"])))
_register(_spec("softmax", [("x", R, _f32(lambda c: c["rows"] * c["n"])), ("y", W, _f32(lambda c: c["rows"] * c["n"]))],
                [("rows", "i"), ("n", "i")]))
_q_width = lambda c: c["n_head"] * c["head_dim"]  # noqa: E731
_kv = _f32(lambda c: c["ctx"] * c["n_kv"] * c["head_dim"])
_register(_spec("attention", [("q", R, _strided("T", "q_stride", _q_width)), ("k", R, _kv), ("v", R, _kv),
                              ("pos", R, _f32(lambda c: c["T"])), ("out", W, _f32(lambda c: c["T"] * _q_width(c)))],
                [("T", "i"), ("n_head", "i"), ("n_kv", "i"), ("head_dim", "i"), ("ctx", "i"), ("q_stride", "i"), ("scale", "f")],
                _all(_stride_ok("T", "q_stride", _q_width),
                     lambda c: (f"n_head={c['n_head']} is not a multiple of n_kv={c['n_kv']}"
                                if c["n_kv"] == 0 or c["n_head"] % c["n_kv"] else None))))
_kv_rows = _f32(lambda c: c["rows"] * c["n_kv"] * c["head_dim"])
_register(_spec("attention_batched", [("q", R, _strided("T", "q_stride", _q_width)), ("k", R, _kv_rows), ("v", R, _kv_rows),
                                      ("first", R, _f32(lambda c: c["T"])), ("last", R, _f32(lambda c: c["T"])),
                                      ("out", W, _f32(lambda c: c["T"] * _q_width(c)))],
                [("T", "i"), ("n_head", "i"), ("n_kv", "i"), ("head_dim", "i"), ("rows", "i"), ("q_stride", "i"), ("scale", "f")],
                _all(_stride_ok("T", "q_stride", _q_width),
                     lambda c: (f"n_head={c['n_head']} is not a multiple of n_kv={c['n_kv']}"
                                if c["n_kv"] == 0 or c["n_head"] % c["n_kv"] else None))))
_register(_spec("kv_store", [("src", R, _strided("T", "src_stride", lambda c: c["width"])),
                             ("cache", RW, _f32(lambda c: c["ctx"] * c["width"])), ("pos", R, _f32(lambda c: c["T"]))],
                [("T", "i"), ("width", "i"), ("ctx", "i"), ("src_stride", "i")],
                _stride_ok("T", "src_stride", lambda c: c["width"])))
_qkv_width = lambda c: (c["n_head"] + 2 * c["n_kv"]) * c["head_dim"]  # noqa: E731  q, k and v heads of a row
_kv_cache = _f32(lambda c: c["ctx"] * c["n_kv"] * c["head_dim"])
_register(_spec("rope_kv_store", [("qkv", RW, _strided("T", "row_stride", _qkv_width)), ("pos", R, _f32(lambda c: c["T"])),
                                  ("row", R, _f32(lambda c: c["T"])), ("k_cache", RW, _kv_cache), ("v_cache", RW, _kv_cache)],
                [("T", "i"), ("n_head", "i"), ("n_kv", "i"), ("head_dim", "i"), ("row_stride", "i"), ("ctx", "i"),
                 ("theta", "f")],
                _all(_stride_ok("T", "row_stride", _qkv_width),
                     lambda c: f"head_dim={c['head_dim']} must be even" if c["head_dim"] % 2 else None)))
_register(_spec("argmax", [("x", R, _f32(lambda c: c["rows"] * c["n"])), ("out", W, _f32(lambda c: c["rows"]))],
                [("rows", "i"), ("n", "i")], lambda c: "n must be >= 1" if c["n"] < 1 and c["rows"] else None))

WEIGHT_DTYPES = (DType.f32, DType.f16, DType.q8_0, DType.q4_0, DType.q4_1)


def _blocks(dt: DType, key: str):
    return lambda c: (f"{key}={c[key]} is not a multiple of {dt.label}'s block size {dt.block_size}"
                      if c[key] % dt.block_size else None)


for _dt in WEIGHT_DTYPES:
    _register(_spec(f"get_rows_{_dt.label}",
                    [("table", R, (lambda d: lambda c: d.nbytes(c["vocab"] * c["dim"]))(_dt)),
                     ("ids", R, _f32(lambda c: c["T"])), ("out", W, _f32(lambda c: c["T"] * c["dim"]))],
                    [("T", "i"), ("dim", "i"), ("vocab", "i")], _blocks(_dt, "dim")))
    _register(_spec(f"matmul_{_dt.label}",
                    [("w", R, (lambda d: lambda c: d.nbytes(c["N"] * c["K"]))(_dt)),
                     ("x", R, _f32(lambda c: c["T"] * c["K"])), ("y", RW, _f32(lambda c: c["T"] * c["N"]))],
                    [("T", "i"), ("N", "i"), ("K", "i"), ("accumulate", "i")], _blocks(_dt, "K")))
    _register(_spec(f"rmsnorm_matmul_{_dt.label}",
                    [("w", R, (lambda d: lambda c: d.nbytes(c["N"] * c["K"]))(_dt)),
                     ("x", R, _f32(lambda c: c["T"] * c["K"])), ("norm", R, _f32(lambda c: c["K"])),
                     ("y", RW, _f32(lambda c: c["T"] * c["N"]))],
                    [("T", "i"), ("N", "i"), ("K", "i"), ("accumulate", "i"), ("eps", "f")], _blocks(_dt, "K")))
    _register(_spec(f"rmsnorm_matmul_swiglu_{_dt.label}",
                    [("w", R, (lambda d: lambda c: d.nbytes(2 * c["N"] * c["K"]))(_dt)),
                     ("x", R, _f32(lambda c: c["T"] * c["K"])), ("norm", R, _f32(lambda c: c["K"])),
                     ("y", W, _f32(lambda c: c["T"] * c["N"]))],
                    [("T", "i"), ("N", "i"), ("K", "i"), ("eps", "f")], _blocks(_dt, "K")))
    if _dt.is_quantized:
        _register(_spec(f"dequantize_{_dt.label}",
                        [("src", R, (lambda d: lambda c: d.nbytes(c["n"]))(_dt)), ("dst", W, _f32(lambda c: c["n"]))],
                        [("n", "i")], _blocks(_dt, "n")))


def kernel_spec(name: str) -> KernelSpec:
    """The contract of kernel ``name``.

    Raises:
        ValueError: no such kernel (the message lists them).
    """
    try:
        return KERNELS[name]
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; known kernels: {', '.join(sorted(KERNELS))}") from None
