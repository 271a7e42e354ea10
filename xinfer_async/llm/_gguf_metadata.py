"""The metadata of a GGUF file, without its tensors: what the command line checks before loading.

Reads the header and the key/value section of a GGUF v2/v3 file (spec: ggml's docs/gguf.md) with
every count and length checked against the file's size before it is used; numeric arrays are read
in bulk (numpy views), string arrays with one ``struct`` call per string. The tensor infos and the
tensor data are not read. ``load_gguf`` parses the whole file with the ``gguf`` package; this
module exists for the checks that must not wait for that (``xinfer_async/_cli_checks.py``).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..hal._errors import GGUFError

__all__ = ["read_metadata"]

# GGUF value types -> (struct format, numpy dtype) for the scalar ones
_SCALARS = {0: ("<B", np.uint8), 1: ("<b", np.int8), 2: ("<H", np.uint16), 3: ("<h", np.int16),
            4: ("<I", np.uint32), 5: ("<i", np.int32), 6: ("<f", np.float32), 7: ("<?", np.bool_),
            10: ("<Q", np.uint64), 11: ("<q", np.int64), 12: ("<d", np.float64)}
_STRING, _ARRAY = 8, 9


class _Cursor:
    def __init__(self, buf: Any, path: Path):
        self.buf, self.pos, self.end, self.path = buf, 0, len(buf), path

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise GGUFError(f"{self.path}: truncated: {what} needs {n} bytes at offset {self.pos}, "
                            f"the file has {self.end}")

    def scalar(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def string(self, what: str) -> str:
        n = self.scalar("<Q", what)
        self.need(n, what)
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype][0], key)
        if vtype == _STRING:
            return self.string(key)
        if vtype != _ARRAY:
            raise GGUFError(f"{self.path}: key {key!r} has unknown value type {vtype}")
        etype = self.scalar("<I", key)
        count = self.scalar("<Q", key)
        if etype in _SCALARS:
            dt = np.dtype(_SCALARS[etype][1])
            self.need(count * dt.itemsize, key)
            a = np.frombuffer(self.buf, dt, count, self.pos)
            self.pos += count * dt.itemsize
            return a.tolist()
        if etype == _STRING:
            self.need(count * 8, key)  # each string has at least its 8-byte length
            out = []
            buf, pos, end, unpack = self.buf, self.pos, self.end, struct.Struct("<Q").unpack_from
            for i in range(count):
                if pos + 8 > end:
                    self.pos = pos
                    self.need(8, f"{key}[{i}]")
                (n,) = unpack(buf, pos)
                pos += 8
                if pos + n > end:
                    self.pos = pos
                    self.need(n, f"{key}[{i}]")
                out.append(bytes(buf[pos:pos + n]).decode("utf-8", errors="replace"))
                pos += n
            self.pos = pos
            return out
        raise GGUFError(f"{self.path}: key {key!r} is an array of unsupported type {etype}")


def read_metadata(path: str | os.PathLike, until: Callable[[dict], bool] | None = None) -> dict[str, Any]:
    """The key/value metadata of a GGUF v2/v3 file; the tensors are not read.

    Args:
        path: the ``.gguf`` file.
        until: called after each key with the keys read so far; reading stops when it returns
            True (e.g. once ``llama.context_length`` is known, before the vocabulary's arrays).
            None reads every key.

    Returns:
        key -> plain Python value (int, float, bool, str, or a list of them), as
        ``GGUFModel.metadata`` holds them (e.g. ``"tokenizer.ggml.tokens"`` -> ``list[str]``).

    Raises:
        GGUFError: the file is missing or unreadable, is not GGUF, has a version other than 2 or 3,
            or a count or length runs past the end of the file (the message names the key).
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:
                raise GGUFError(f"{path}: not a GGUF file ({size} bytes)")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise GGUFError(f"{path}: cannot read: {exc}") from exc
    try:
        with memoryview(buf) as view:
            c = _Cursor(view, path)
            magic = bytes(view[:4])
            if magic != b"GGUF":
                raise GGUFError(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
            c.pos = 4
            version = c.scalar("<I", "version")
            if version not in (2, 3):
                raise GGUFError(f"{path}: GGUF version {version} is not supported (2 or 3)")
            c.scalar("<Q", "tensor count")
            n_kv = c.scalar("<Q", "key/value count")
            c.need(n_kv * 12, "key/value section")  # each pair: key length (8) + value type (4)
            meta: dict[str, Any] = {}
            for _ in range(n_kv):
                key = c.string("a key")
                meta[key] = c.value(c.scalar("<I", key), key)
                if until is not None and until(meta):
                    break
            return meta
    finally:
        buf.close()
