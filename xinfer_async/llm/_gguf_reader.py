"""A bounded GGUF reader: header, metadata, tensor infos and memory-mapped tensor data.

Format (ggml ``docs/gguf.md``, versions 2 and 3, little-endian): magic ``GGUF``, u32 version,
u64 tensor count, u64 metadata count; metadata pairs (string key, u32 value type, value); tensor
infos (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset); padding to
``general.alignment`` (default 32); tensor data. A string is a u64 byte length and UTF-8 bytes; an
array is a u32 element type, a u64 count and the elements (arrays may nest).

Every count, length and offset is checked against the bytes left in the file before anything is
allocated or read, so a corrupt or hostile file costs at most a pass over its own bytes: numeric
arrays are ``np.frombuffer`` views of the memory map, string arrays one tight loop, tensor data views
of the map. The layout is checked as llama.cpp's ``gguf_init_from_file`` does (``ggml/src/gguf.cpp``):
alignment a power of two, each tensor's offset aligned and equal to the padded end of the tensor
before it (tensors packed in file order), its data inside the file. Whether the tensors and keys
make a model is not this module's business (``_llama_config``).
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..hal._errors import GGUFError

__all__ = ["GGUFFile", "TensorInfo", "GGML_TYPES", "VALUE_TYPES", "read_gguf"]

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_NESTING = 8
# Beyond the file-size bounds, caps on counts whose Python objects cost ~100x their bytes in the file
# (real files: ~40 keys, ~300-3000 tensors, nested arrays unused), so a small crafted file cannot make
# the reader allocate gigabytes.
MAX_KEYS = MAX_TENSORS = 1 << 16
MAX_NESTED_ARRAYS = 1 << 16

# ggml type id -> (name, elements per block, bytes per block): ggml ``ggml.h`` / ``ggml.c`` type traits
# (checked against ``gguf.GGML_QUANT_SIZES`` in tests/test_gguf_reader.py).
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}
_FLOAT_VIEW = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2")}

# GGUF metadata value type id -> name
VALUE_TYPES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32", 6: "float32",
               7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64", 12: "float64"}
_STRING, _ARRAY, _BOOL = 8, 9, 7
_SCALAR = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8",
           12: "<f8"}
_SCALAR = {k: np.dtype(v) for k, v in _SCALAR.items()}
_STRUCT = {k: struct.Struct("<" + c) for k, c in
           {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}.items()}
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


@dataclasses.dataclass(frozen=True, eq=False)
class TensorInfo:
    """One tensor info of a GGUF file.

    Attributes:
        name: tensor name, e.g. ``"blk.0.attn_q.weight"``.
        type_id: ggml type id (a key of ``GGML_TYPES``).
        type_name: ggml type name, e.g. ``"Q4_1"``.
        ne: element counts in GGUF order (``ne[0]`` is the contiguous axis).
        offset: byte offset of the data from the start of the file (absolute).
        nbytes: bytes of data.
        data: view of the memory-mapped file: for F32/F16 the elements, shape ``reversed(ne)``
            (numpy order); for every other type uint8 of shape ``reversed(ne[1:]) + (row bytes,)``.
    """

    name: str
    type_id: int
    type_name: str
    ne: tuple[int, ...]
    offset: int
    nbytes: int
    data: np.ndarray = dataclasses.field(repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        """Logical shape in numpy order, ``tuple(reversed(ne))``."""
        return tuple(reversed(self.ne))


@dataclasses.dataclass(frozen=True, eq=False)
class GGUFFile:
    """A parsed GGUF file (the memory map stays open while any array of it is referenced).

    Attributes:
        path: the file.
        version: GGUF version (2 or 3).
        metadata: key -> value: ``str``, ``int``, ``float``, ``bool``; a numeric array is a
            read-only little-endian numpy view of the file (bool arrays as ``bool``); a string array is a
            ``list[str]``; an array of arrays a ``list`` of those.
        value_types: key -> GGUF value type name (``"uint32"``, ``"string"``, ...); for arrays
            ``"array[ELEMENT]"``, e.g. ``"array[string]"``, ``"array[array]"``.
        tensors: the tensor infos in file order.
        alignment: ``general.alignment`` or 32, bytes.
        data_offset: start of the tensor data section, bytes from the start of the file.
        file_size: bytes.
    """

    path: Path
    version: int
    metadata: dict[str, Any]
    value_types: dict[str, str]
    tensors: list[TensorInfo]
    alignment: int
    data_offset: int
    file_size: int


class _Cursor:
    """Bounded little-endian reads over the mapped file; every read checks its length first."""

    __slots__ = ("buf", "size", "off", "path")

    def __init__(self, buf: mmap.mmap, size: int, path: Path):
        self.buf, self.size, self.off, self.path = buf, size, 0, path

    def fail(self, what: str, need: int) -> GGUFError:
        return GGUFError(f"{self.path}: truncated file: {what} needs {need} bytes at offset {self.off} "
                         f"but the file has {self.size} bytes")

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.off:
            raise self.fail(what, n)

    def u32(self, what: str) -> int:
        self.need(4, what)
        (v,) = _U32.unpack_from(self.buf, self.off)
        self.off += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = _U64.unpack_from(self.buf, self.off)
        self.off += 8
        return v

    def string(self, what: str) -> str:
        n = self.u64(f"the length of {what}")
        self.need(n, what)
        s = self.buf[self.off:self.off + n].decode("utf-8", errors="replace")
        self.off += n
        return s

    def count(self, what: str, min_item_bytes: int) -> int:
        """A u64 element count, bounded by the bytes left (each element takes at least ``min_item_bytes``)."""
        n = self.u64(f"the count of {what}")
        if n * min_item_bytes > self.size - self.off:
            raise GGUFError(f"{self.path}: truncated file or corrupt count: {what} has {n} elements, more than the "
                            f"{self.size - self.off} bytes left after offset {self.off} can hold")
        return n


def _strings(c: _Cursor, n: int, what: str) -> list[str]:
    """``n`` strings: one loop over the map collecting bytes (lengths bounded by the bytes left),
    then one UTF-8 decode of them all joined by newlines when none holds a newline (else one each)."""
    buf, size, off = c.buf, c.size, c.off
    unpack = _U64.unpack_from
    raw: list[bytes] = [b""] * n
    for i in range(n):
        if off + 8 > size:
            c.off = off
            raise c.fail(f"the length of {what}[{i}]", 8)
        start = off + 8
        off = start + unpack(buf, off)[0]
        if off > size:
            c.off = start
            raise c.fail(f"{what}[{i}]", off - start)
        raw[i] = buf[start:off]
    c.off = off
    joined = b"\n".join(raw)
    if joined.count(b"\n") == n - 1:  # no string holds a newline: split is exact (0x0A ends no UTF-8 sequence)
        return joined.decode("utf-8", errors="replace").split("\n") if n else []
    return [r.decode("utf-8", errors="replace") for r in raw]


def _value(c: _Cursor, vtype: int, what: str, depth: int = 0) -> tuple[Any, str]:
    """(value, type name) of one metadata value of type ``vtype`` at the cursor."""
    if vtype == _STRING:
        return c.string(what), "string"
    if vtype == _ARRAY:
        if depth >= MAX_ARRAY_NESTING:
            raise GGUFError(f"{c.path}: {what}: arrays nested deeper than {MAX_ARRAY_NESTING}")
        sub = c.u32(f"the element type of {what}")
        if sub not in VALUE_TYPES:
            raise GGUFError(f"{c.path}: {what} has unknown array element type id {sub} (offset {c.off - 4})")
        if sub == _STRING:
            n = c.count(what, 8)
            return _strings(c, n, what), "array[string]"
        if sub == _ARRAY:
            n = c.count(what, 12)
            if n > MAX_NESTED_ARRAYS:
                raise GGUFError(f"{c.path}: {what} is an array of {n} arrays, more than this reader accepts "
                                f"({MAX_NESTED_ARRAYS})")
            return [_value(c, _ARRAY, f"{what}[{i}]", depth + 1)[0] for i in range(n)], "array[array]"
        dt = _SCALAR[sub]
        n = c.count(what, dt.itemsize)
        arr = np.frombuffer(c.buf, dtype=dt, count=n, offset=c.off)
        c.off += n * dt.itemsize
        if sub == _BOOL:
            if n and arr.max() > 1:
                raise GGUFError(f"{c.path}: {what} holds a bool of value {int(arr.max())}, expected 0 or 1")
            arr = arr.view(np.bool_)
        return arr, f"array[{VALUE_TYPES[sub]}]"
    st = _STRUCT.get(vtype)
    if st is None:
        raise GGUFError(f"{c.path}: {what} has unknown value type id {vtype} (offset {c.off - 4})")
    c.need(st.size, what)
    (v,) = st.unpack_from(c.buf, c.off)
    c.off += st.size
    if vtype == _BOOL:
        if v > 1:
            raise GGUFError(f"{c.path}: {what} is a bool of value {v}, expected 0 or 1")
        v = bool(v)
    return v, VALUE_TYPES[vtype]


def _tensor_info(c: _Cursor, i: int) -> tuple[str, int, tuple[int, ...], int]:
    name = c.string(f"the name of tensor {i}")
    n_dims = c.u32(f"the n_dims of tensor {name!r}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise GGUFError(f"{c.path}: tensor {name!r} has n_dims {n_dims}, expected 1 to {MAX_DIMS}")
    ne = tuple(c.u64(f"the shape of tensor {name!r}") for _ in range(n_dims))
    type_id = c.u32(f"the type of tensor {name!r}")
    offset = c.u64(f"the offset of tensor {name!r}")
    return name, type_id, ne, offset


def _tensor(path: Path, u8: np.ndarray, name: str, type_id: int, ne: tuple[int, ...], rel: int,
            data_offset: int, expected_rel: int, alignment: int, file_size: int) -> TensorInfo:
    """A tensor's info with its data view, after checking its type, shape and place in the file."""
    if type_id not in GGML_TYPES:
        raise GGUFError(f"{path}: tensor {name!r} has unknown ggml type id {type_id}")
    tname, block, type_size = GGML_TYPES[type_id]
    if any(d < 1 for d in ne):
        raise GGUFError(f"{path}: tensor {name!r} has shape ne={list(ne)}, every dimension must be >= 1")
    if ne[0] % block:
        raise GGUFError(f"{path}: tensor {name!r} of type {tname} has ne[0]={ne[0]}, "
                        f"not a multiple of the block size {block}")
    n = 1
    for d in ne:
        n *= d
    nbytes = n // block * type_size  # Python ints: no wrap
    start = data_offset + rel
    if rel % alignment:
        raise GGUFError(f"{path}: tensor {name!r} has offset {rel}, not a multiple of the alignment {alignment}")
    if start >= file_size:
        raise GGUFError(f"{path}: tensor {name!r} has offset {rel}, past the end of the file "
                        f"(data section [{data_offset}, {file_size}))")
    if start + nbytes > file_size:
        raise GGUFError(f"{path}: truncated file: tensor {name!r} needs bytes [{start}, {start + nbytes}) "
                        f"but the file has {file_size} bytes")
    if rel != expected_rel:
        raise GGUFError(f"{path}: tensor {name!r} has offset {rel}, expected {expected_rel} (tensors must be "
                        f"packed in file order, each padded to the alignment {alignment}, as llama.cpp reads them)")
    raw = u8[start:start + nbytes]
    if tname in _FLOAT_VIEW:
        data = raw.view(_FLOAT_VIEW[tname]).reshape(tuple(reversed(ne)))
    else:
        data = raw.reshape(tuple(reversed(ne[1:])) + (ne[0] // block * type_size,))
    return TensorInfo(name, type_id, tname, ne, start, nbytes, data)


def read_gguf(path: str | os.PathLike) -> GGUFFile:
    """Parse a GGUF file's header, metadata and tensor infos; map its tensor data.

    Args:
        path: the ``.gguf`` file.

    Returns:
        A :class:`GGUFFile`. Nothing is copied: tensor data and numeric arrays are views of a
        read-only memory map of the file.

    Raises:
        GGUFError: the file is missing, unreadable or empty; the magic is not ``GGUF``; the version
            is not 2 or 3 (a big-endian file is named as such); a count, length or offset runs
            past the end of the file (``truncated file: ...``); more than 65536 keys, tensors or
            nested arrays in one array; a value type, array element type or
            ggml tensor type id is unknown; a key or tensor name repeats; ``general.alignment`` is
            not a uint32 power of two; a tensor has 0 or more than 4 dimensions, a dimension < 1,
            ``ne[0]`` not a multiple of its type's block size, an offset not aligned or not where
            the tensor before it ends (padded), or data past the end of the file. Each message
            names the file and the key or tensor.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            magic = f.read(4)
            if magic != MAGIC:
                raise GGUFError(f"{path}: not a GGUF file (magic {magic!r}, expected {MAGIC!r})")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise GGUFError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise GGUFError(f"{path}: not a regular file") from None
    except (OSError, ValueError) as exc:
        raise GGUFError(f"{path}: cannot read: {exc}") from exc
    c = _Cursor(buf, size, path)
    c.off = 4
    version = c.u32("the version")
    if version not in VERSIONS:
        if int.from_bytes(version.to_bytes(4, "little"), "big") in VERSIONS:
            raise GGUFError(f"{path}: big-endian GGUF files are not supported")
        raise GGUFError(f"{path}: unsupported GGUF version {version}; supported: 2, 3")
    n_tensors = c.u64("the tensor count")
    n_kv = c.u64("the metadata count")
    for what, n, least, most in (("metadata count", n_kv, 13, MAX_KEYS), ("tensor count", n_tensors, 24, MAX_TENSORS)):
        # a pair takes >= 8 (key length) + 4 (type) + 1 bytes; a tensor info >= 8 + 4 + 8 + 4 + 8
        if n * least > size - c.off:
            raise GGUFError(f"{path}: truncated file or corrupt {what}: {n} entries need at least {n * least} "
                            f"bytes but the file has {size}")
        if n > most:
            raise GGUFError(f"{path}: {what} {n} is more than this reader accepts ({most})")

    metadata: dict[str, Any] = {}
    value_types: dict[str, str] = {}
    for i in range(n_kv):
        key = c.string(f"metadata key {i}")
        if key in metadata:
            raise GGUFError(f"{path}: duplicate metadata key {key!r}")
        vtype = c.u32(f"the value type of metadata key {key!r}")
        metadata[key], value_types[key] = _value(c, vtype, f"metadata key {key!r}")

    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if "general.alignment" in metadata and value_types["general.alignment"] != "uint32":
        raise GGUFError(f"{path}: general.alignment must be a uint32, got {value_types['general.alignment']} "
                        f"{alignment!r}")
    if alignment < 1 or alignment & (alignment - 1):
        raise GGUFError(f"{path}: general.alignment must be a power of two, got {alignment}")

    infos = []
    names: set[str] = set()
    for i in range(n_tensors):
        info = _tensor_info(c, i)
        if info[0] in names:
            raise GGUFError(f"{path}: duplicate tensor name {info[0]!r}")
        names.add(info[0])
        infos.append(info)
    data_offset = -(-c.off // alignment) * alignment
    if infos and data_offset > size:
        raise GGUFError(f"{path}: truncated file: the tensor data starts at {data_offset} "
                        f"but the file has {size} bytes")

    u8 = np.frombuffer(buf, dtype=np.uint8)
    tensors = []
    expected = 0
    for name, type_id, ne, rel in infos:
        t = _tensor(path, u8, name, type_id, ne, rel, data_offset, expected, alignment, size)
        tensors.append(t)
        expected = rel + -(-t.nbytes // alignment) * alignment
    return GGUFFile(path=path, version=version, metadata=metadata, value_types=value_types, tensors=tensors,
                    alignment=alignment, data_offset=data_offset, file_size=size)
