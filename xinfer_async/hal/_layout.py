"""Device byte layouts of block types: how a backend that asks for it (``Backend.device_layouts``)
keeps a tensor's blocks in device memory, and the host-side conversions from and to GGUF's bytes.

The one layout so far is q6_k's, **rotated**. GGUF's q6_k super-block (ggml ``ggml-common.h``
``block_q6_K``) is 210 bytes: ``ql[128]``, ``qh[64]``, ``scales[16]`` (int8), ``d`` (f16), for 256
elements. 210 is 2 mod 16, so most super-blocks of a tensor start at an address that is not 16-byte
aligned, and a kernel's 16-byte loads of ``ql`` / ``qh`` need funnel shifts or 4-byte loads. In the
rotated layout the super-block at device address ``a`` (even) holds GGUF's 210 bytes rotated right by
``p = (-a) mod 16`` bytes::

    dev[(k + p) % 210] = gguf[k]        for k in 0..209

so ``ql`` starts at ``a + p`` and ``qh`` at ``a + p + 128``, both multiples of 16; scale ``j`` is at
``a + (192 + j + p) % 210`` and ``d`` at ``a + (208 + p) % 210`` (its two bytes never straddle the
wrap: p is even). The rotation depends on the address mod 16 only: a copy of whole blocks, from a
block boundary to a block boundary at an address equal mod 16 (every 256-byte aligned allocation, views
at the same offsets), keeps the layout; any other copy breaks it. Only buffers allocated with such a
dtype are converted: GGUF bytes uploaded into a ``u8`` or ``f32`` buffer stay GGUF's. Block ``i`` of a tensor at ``address`` is rotated by ``(-(address + 210 i)) mod 16``, which
repeats every 8 blocks (8 x 210 = 1680 = 105 x 16).

Policy (which buffers, which ranges) is the runtime's (``runtime/_device.py``, ``_executor.py``); a
backend only declares the labels it keeps in these layouts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: dtype label -> the bytes of one block of a type that has a device layout here
BLOCK_NBYTES = {"q6_k": 210}
#: the alignment a rotated super-block's ``ql`` gets, in bytes
ALIGN = 16
#: blocks a conversion handles at once (~1.7 MB of q6_k: source and result stay in L2/L3)
_CHUNK_BLOCKS = 8 * 1024


def _flat(host: Any, arg: str) -> np.ndarray:
    """``host`` as flat uint8 bytes (a view of a contiguous array or bytes-like object: no copy).

    Raises:
        TypeError: ``host`` is not a numpy array or bytes-like.
    """
    if isinstance(host, np.ndarray):
        return np.ascontiguousarray(host).reshape(-1).view(np.uint8)
    try:
        return np.frombuffer(memoryview(host), np.uint8)
    except TypeError:
        raise TypeError(f"{arg}: host must be a numpy array or bytes-like, got {type(host).__name__}") from None


def _blocks(label: str, host: Any, address: int, arg: str) -> np.ndarray:
    """``host`` as an ``(n, block_nbytes)`` uint8 view (no copy of a contiguous buffer).

    Raises:
        ValueError: an odd ``address``, or a byte count that is not a whole number of blocks.
        TypeError: ``host`` is not a numpy array or bytes-like.
    """
    bs = BLOCK_NBYTES[label]
    if address % 2:
        raise ValueError(f"{arg}: address={address:#x} is odd; {label} blocks must start at an even device address")
    flat = _flat(host, arg)
    if flat.nbytes % bs:
        raise ValueError(f"{arg}: {flat.nbytes} bytes are not a whole number of {label} blocks of {bs} bytes")
    return flat.reshape(-1, bs)


def _out(flat_nbytes: int, out: np.ndarray | None, arg: str) -> np.ndarray:
    if out is None:
        return np.empty(flat_nbytes, np.uint8)
    if out.dtype != np.uint8 or out.ndim != 1 or out.nbytes != flat_nbytes or not out.flags.c_contiguous:
        raise ValueError(f"{arg}: out must be a C-contiguous 1-D uint8 array of {flat_nbytes} bytes, "
                         f"got {out.dtype} {out.shape}")
    return out


def _rotate(blocks: np.ndarray, out: np.ndarray, address: int, sign: int) -> None:
    """``out`` (n, bs) = every block of ``blocks`` rotated right (``sign`` 1) or left (-1) by its
    address's rotation; 8 strided 2-D copies a chunk (the rotation repeats every 8 blocks)."""
    n, bs = blocks.shape
    step = _CHUNK_BLOCKS
    for lo in range(0, n, step):
        src, dst = blocks[lo:lo + step], out[lo:lo + step]
        base = address + lo * bs
        for r in range(min(8, len(src))):
            p = (-(base + r * bs)) % ALIGN
            s = p if sign > 0 else bs - p  # a right rotation by p is a left rotation by bs - p
            if s == 0 or s == bs:
                dst[r::8] = src[r::8]
            else:
                dst[r::8, s:] = src[r::8, :bs - s]
                dst[r::8, :s] = src[r::8, bs - s:]


def _convert(label: str, host: Any, address: int, out: np.ndarray | None, sign: int, arg: str) -> Any:
    """``to_device_layout`` (``sign`` 1) or ``from_device_layout`` (-1)."""
    if label not in BLOCK_NBYTES:
        if out is None:
            return host
        src = _flat(host, arg)
        _out(src.nbytes, out, arg)[:] = src
        return out
    blocks = _blocks(label, host, address, arg)
    res = _out(blocks.size, out, arg)
    _rotate(blocks, res.reshape(blocks.shape), address, sign)
    return res


def to_device_layout(label: str, host: Any, address: int, out: np.ndarray | None = None) -> Any:
    """GGUF bytes of a tensor of dtype ``label`` as the device keeps them at ``address``.

    Args:
        label: a dtype label (``"q6_k"``); for a label without a device layout (not in
            ``BLOCK_NBYTES``) ``host`` itself is returned, not a copy (or, with ``out``, copied
            into ``out``).
        host: uint8 bytes (a numpy array or any bytes-like object, e.g. a read-only memoryview of an
            mmap, never written to), a whole number of blocks, GGUF's layout.
        address: the device address (``int``, even) the first byte goes to.
        out: optional C-contiguous 1-D uint8 array of ``host``'s size for the result.

    Returns:
        ``(nbytes,)`` uint8: the device bytes (``out`` when given).

    Raises:
        ValueError: ``address`` is odd, the byte count is not a whole number of blocks, or ``out``
            has the wrong size or type.
    """
    return _convert(label, host, address, out, 1, "to_device_layout")


def from_device_layout(label: str, host: Any, address: int, out: np.ndarray | None = None) -> Any:
    """The inverse of ``to_device_layout``: device bytes read from ``address`` as GGUF bytes.

    Args: as ``to_device_layout``, ``host`` holding the device's bytes.

    Returns:
        ``(nbytes,)`` uint8 in GGUF's layout (``out`` when given); ``host`` itself for a label
        without a device layout.

    Raises: as ``to_device_layout``.
    """
    return _convert(label, host, address, out, -1, "from_device_layout")


def check_whole_blocks(label: str, offset: int, nbytes: int, what: str) -> None:
    """Check that ``nbytes`` at byte ``offset`` of a buffer of dtype ``label`` (one with a device
    layout) are whole blocks: the host bytes of a part of a block cannot be put in the layout.

    Raises:
        ValueError: ``offset`` or ``nbytes`` is not a multiple of the block size (the message says
            ``what`` and why).
    """
    bs = BLOCK_NBYTES[label]
    if offset % bs or nbytes % bs:
        raise ValueError(
            f"{what} of {nbytes} bytes at byte {offset} of a {label} buffer: the device keeps {label} blocks "
            f"in a layout of their own (rotated by their address), so it must start at a block boundary "
            f"(a multiple of {bs} bytes from the buffer's start) and cover whole {bs}-byte blocks")


def gguf_span(label: str, raw: Any, address: int, cut: int, nbytes: int) -> np.ndarray:
    """Bytes ``[cut, cut + nbytes)`` in GGUF's layout of the whole blocks ``raw`` read from device
    ``address`` (a partial read: ``enclosing_blocks`` gives the blocks to read)."""
    return from_device_layout(label, raw, address)[cut:cut + nbytes]


def enclosing_blocks(label: str, offset: int, nbytes: int) -> tuple[int, int]:
    """``(lo, hi)``: the byte range of the whole blocks of ``label`` that hold ``[offset, offset +
    nbytes)`` of a buffer (what a partial read must fetch to convert)."""
    bs = BLOCK_NBYTES[label]
    return offset - offset % bs, -(-(offset + nbytes) // bs) * bs


#: blocks of a dtype with a device layout converted and written at once (~55 MB of q6_k): a write
#: holds one chunk's converted copy, not the tensor's
WRITE_CHUNK_BLOCKS = 8 * 32768


def write_in_device_layout(backend: Any, label: str, address: int, host: Any) -> None:
    """``backend.write`` of the uint8 bytes ``host`` (GGUF's layout) to ``address``, converted to the
    backend's layout of ``label`` a chunk at a time where it keeps one (``backend.device_layouts``),
    as they are otherwise.

    Raises:
        ValueError: ``label`` has a device layout here and ``host`` is not whole blocks, or
            ``address`` is odd (``to_device_layout``).
    """
    src = _flat(host, "write_in_device_layout")
    if label not in backend.device_layouts or label not in BLOCK_NBYTES or not src.nbytes:
        backend.write(address, memoryview(src))
        return
    step = WRITE_CHUNK_BLOCKS * BLOCK_NBYTES[label]
    buf = np.empty(min(step, src.nbytes), np.uint8)  # one buffer for every chunk
    for lo in range(0, src.nbytes, step):
        part = src[lo:lo + step]
        out = to_device_layout(label, part, address + lo, out=buf[:part.nbytes])
        backend.write(address + lo, memoryview(out))
