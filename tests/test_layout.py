"""hal/_layout.py: q6_k's rotated device layout (conversions, alignment, a dequantizer that reads the
rotated bytes, errors), and the runtime's host/device boundaries with the layout switched on
(``Backend.device_layouts``) on the cpu backend: Device.upload / write / download, Executor.upload /
download / copy / fill."""

import gguf
import numpy as np
import pytest

from xinfer_async import open_device
from xinfer_async.hal import Backend
from xinfer_async.hal import _layout
from xinfer_async.hal._layout import from_device_layout, to_device_layout

BS = 210  # bytes of a q6_k super-block (ggml-common.h block_q6_K)
ADDRESSES = [*range(0, 32, 2), 256, 0x1000 + 6, 2**40 + 10, 0x7F12_3456_789A]


def q6k_blocks(rng, n: int) -> np.ndarray:
    """(n * 210,) uint8: random q6_k super-blocks (ql, qh, int8 scales random; d a finite f16 of
    either sign in [0.002, 0.02))."""
    raw = rng.integers(0, 256, (n, BS), dtype=np.uint8)
    d = (rng.uniform(0.002, 0.02, n) * rng.choice([-1, 1], n)).astype(np.float16)
    raw[:, 208:210] = d.view(np.uint8).reshape(n, 2)
    return raw.reshape(-1)


def rotate_reference(gguf_bytes: np.ndarray, address: int) -> np.ndarray:
    """The layout as its definition states it, one byte at a time: the block at device address a
    holds ``dev[(k + p) % 210] = gguf[k]``, p = (-a) mod 16."""
    out = np.empty_like(gguf_bytes)
    for i in range(gguf_bytes.size // BS):
        p = (-(address + BS * i)) % 16
        for k in range(BS):
            out[BS * i + (k + p) % BS] = gguf_bytes[BS * i + k]
    return out


def dequantize_rotated(dev: np.ndarray, address: int) -> np.ndarray:
    """(n * 256,) float32 values of the q6_k super-blocks whose device bytes ``dev`` start at device
    address ``address``, read from the rotated layout by field position (the reads the CUDA kernels
    make): ql at a + p, qh at a + p + 128, scale j at a + (192 + j + p) % 210, d at a + (208 + p) % 210,
    p = (-a) mod 16; the element formula of ggml's dequantize_row_q6_K (ggml-quants.c)."""
    n = dev.size // BS
    y = np.empty((n, 256), np.float32)
    for i in range(n):
        a = address + BS * i
        p = (-a) % 16
        assert (a + p) % 16 == 0
        blk = dev[BS * i:BS * (i + 1)]
        ql, qh = blk[p:p + 128].astype(np.int32), blk[p + 128:p + 192].astype(np.int32)
        sc = np.array([blk[(192 + j + p) % BS] for j in range(16)], np.uint8).view(np.int8).astype(np.float32)
        d = np.float32(np.array([blk[(208 + p) % BS], blk[(209 + p) % BS]], np.uint8).view(np.float16)[0])
        for h in range(2):  # two halves of 128 elements: ql += 64, qh += 32, sc += 8
            for l in range(32):
                s = 8 * h + l // 16
                q1 = ((ql[64 * h + l] & 0xF) | (((qh[32 * h + l] >> 0) & 3) << 4)) - 32
                q2 = ((ql[64 * h + l + 32] & 0xF) | (((qh[32 * h + l] >> 2) & 3) << 4)) - 32
                q3 = ((ql[64 * h + l] >> 4) | (((qh[32 * h + l] >> 4) & 3) << 4)) - 32
                q4 = ((ql[64 * h + l + 32] >> 4) | (((qh[32 * h + l] >> 6) & 3) << 4)) - 32
                for m, q in enumerate((q1, q2, q3, q4)):
                    y[i, 128 * h + 32 * m + l] = (d * sc[s + 2 * m]) * np.float32(q)
    return y.reshape(-1)


# -- the conversions -------------------------------------------------------------------------------
@pytest.mark.parametrize("address", ADDRESSES)
def test_round_trip_and_definition(rng, address):
    for n in (1, 7, 8, 21):
        raw = q6k_blocks(rng, n)
        dev = to_device_layout("q6_k", raw, address)
        np.testing.assert_array_equal(dev, rotate_reference(raw, address))
        np.testing.assert_array_equal(from_device_layout("q6_k", dev, address), raw)
        if n >= 8:  # 8 consecutive blocks take every rotation once: not all identity
            assert not np.array_equal(dev, raw)


def test_round_trip_across_chunks(rng, monkeypatch):
    """Conversions of more blocks than one chunk (a chunk of 13 blocks: not a multiple of 8)."""
    monkeypatch.setattr(_layout, "_CHUNK_BLOCKS", 13)
    raw = q6k_blocks(rng, 100)
    for address in (0, 6, 2**33 + 14):
        dev = to_device_layout("q6_k", raw, address)
        np.testing.assert_array_equal(dev, rotate_reference(raw, address))
        np.testing.assert_array_equal(from_device_layout("q6_k", dev, address), raw)


@pytest.mark.parametrize("address", ADDRESSES)
def test_ql_and_qh_are_16_byte_aligned(rng, address):
    n = 24
    raw = q6k_blocks(rng, n)
    dev = to_device_layout("q6_k", raw, address)
    for i in range(n):
        a = address + BS * i
        p = (-a) % 16
        assert (a + p) % 16 == 0
        np.testing.assert_array_equal(dev[BS * i + p:BS * i + p + 192], raw[BS * i:BS * i + 192])


@pytest.mark.parametrize("address", [0, 2, 6, 14, 0x2000 + 10, 2**41 + 4])
def test_a_reader_of_the_rotated_layout_equals_gguf(rng, address):
    """The field positions the CUDA kernels read (a numpy model of them, not the kernels: the GPU
    suite's q6_k tests tie those to gguf's values): dequantizing q6_k straight from the rotated
    bytes equals gguf-py's dequantize of GGUF's bytes."""
    n = 16
    raw = q6k_blocks(rng, n)
    want = gguf.quants.dequantize(raw.reshape(n, BS), gguf.GGMLQuantizationType.Q6_K).reshape(-1)
    assert np.isfinite(want).all() and np.count_nonzero(want) > 0.9 * want.size
    got = dequantize_rotated(to_device_layout("q6_k", raw, address), address)
    np.testing.assert_array_equal(got, want)
    # and the reader is not blind to the layout: GGUF's bytes read as rotated ones differ
    with np.errstate(invalid="ignore", over="ignore"):  # GGUF's bytes read as a rotated d: any f16
        assert not np.array_equal(dequantize_rotated(raw, address + 2), want)


def test_other_labels_and_inputs(rng):
    raw = rng.integers(0, 256, 64, dtype=np.uint8)
    for label in ("q4_k", "f32", "q8_0", "u8"):
        assert to_device_layout(label, raw, 3) is raw
        assert from_device_layout(label, raw, 3) is raw
    blocks = q6k_blocks(rng, 9)
    ro = memoryview(blocks.tobytes())  # read-only, as a view of an mmap'ed file
    dev = to_device_layout("q6_k", ro, 18)
    np.testing.assert_array_equal(dev, rotate_reference(blocks, 18))
    assert bytes(ro) == blocks.tobytes()
    out = np.full(blocks.size, 0xA5, np.uint8)
    assert to_device_layout("q6_k", blocks, 18, out=out) is out
    np.testing.assert_array_equal(out, dev)
    assert to_device_layout("q6_k", b"", 4).size == 0


def test_errors(rng):
    raw = q6k_blocks(rng, 2)
    with pytest.raises(ValueError, match=r"^to_device_layout: address=0x7 is odd; q6_k blocks must start at an even device address$"):
        to_device_layout("q6_k", raw, 7)
    with pytest.raises(ValueError, match=r"^from_device_layout: address=0x1 is odd"):
        from_device_layout("q6_k", raw, 1)
    with pytest.raises(ValueError, match=r"^to_device_layout: 419 bytes are not a whole number of q6_k blocks of 210 bytes$"):
        to_device_layout("q6_k", raw[:419], 0)
    with pytest.raises(ValueError, match=r"^from_device_layout: 211 bytes are not a whole number"):
        from_device_layout("q6_k", raw[:211], 0)
    with pytest.raises(ValueError, match=r"^to_device_layout: out must be a C-contiguous 1-D uint8 array of 420 bytes"):
        to_device_layout("q6_k", raw, 0, out=np.empty(410, np.uint8))
    with pytest.raises(TypeError, match=r"^to_device_layout: host must be a numpy array or bytes-like, got list$"):
        to_device_layout("q6_k", [1, 2], 0)


def test_conversion_throughput(rng):
    """Tens of MB a second at the very least (a loaded 8B model has ~1.2 GB of q6_k; this machine
    measured ~2 GB/s): a per-block Python loop would fail this."""
    import time

    raw = q6k_blocks(rng, 8 * 4096)  # 6.9 MB
    to_device_layout("q6_k", raw, 2)
    t0 = time.perf_counter()
    to_device_layout("q6_k", raw, 2)
    assert raw.nbytes / (time.perf_counter() - t0) > 50e6


# -- the runtime, layout switched on (cpu backend) -------------------------------------------------
def test_backends_declare_no_layout_by_default():
    from xinfer_async.backends.cuda._backend import CUDABackend  # the class imports without a GPU

    assert Backend.device_layouts == frozenset()
    assert CUDABackend.device_layouts == frozenset({"q6_k"})  # its kernels read q6_k rotated
    dev = open_device("cpu")
    try:
        assert dev.backend.device_layouts == frozenset()
    finally:
        dev.close()


@pytest.fixture
def rotated(monkeypatch):
    """A cpu device whose backend keeps q6_k in the rotated layout."""
    dev = open_device("cpu")
    monkeypatch.setattr(dev.backend, "device_layouts", frozenset({"q6_k"}))
    yield dev
    dev.close()


def raw_of(dev, buf, lo=0, hi=None):
    """The backend's own bytes [lo:hi) of ``buf`` (no conversion)."""
    hi = buf.nbytes if hi is None else hi
    out = np.empty(hi - lo, np.uint8)
    dev.backend.read(buf.address + lo, memoryview(out))
    return out


def poison(dev, buf, rng):
    dev.backend.write(buf.address, memoryview(rng.integers(0, 256, buf.nbytes, dtype=np.uint8)))


def test_device_upload_download(rotated, rng, monkeypatch):
    monkeypatch.setattr(_layout, "WRITE_CHUNK_BLOCKS", 3)  # chunks at addresses of every rotation
    raw = q6k_blocks(rng, 24)
    buf = rotated.upload(memoryview(raw.tobytes()), (3, 8 * 256), "q6_k")
    assert rotated.download(buf) == raw.tobytes()
    np.testing.assert_array_equal(rotated.download_numpy(buf), raw)
    np.testing.assert_array_equal(raw_of(rotated, buf), rotate_reference(raw, buf.address))
    assert not np.array_equal(raw_of(rotated, buf), raw)
    # a view's bytes, whole blocks or not, are GGUF's
    assert rotated.download(buf.view(5 * BS, 3 * BS)) == raw[5 * BS:8 * BS].tobytes()
    assert rotated.download(buf.view(333, 700)) == raw[333:1033].tobytes()
    # other dtypes are untouched
    f = rng.standard_normal(105).astype(np.float32)
    fb = rotated.upload(f)
    assert raw_of(rotated, fb).tobytes() == f.tobytes() == rotated.download(fb)


def test_device_write_whole_blocks(rotated, rng):
    raw = q6k_blocks(rng, 16)
    buf = rotated.alloc((16 * 256,), "q6_k")
    poison(rotated, buf, rng)
    rotated.write(buf, raw)
    new = q6k_blocks(rng, 3)
    view = buf.view(2 * BS)
    rotated.write(view, new, offset=3 * BS)  # blocks 5..7 of the buffer
    want = raw.copy()
    want[5 * BS:8 * BS] = new
    assert rotated.download(buf) == want.tobytes()
    np.testing.assert_array_equal(raw_of(rotated, buf), rotate_reference(want, buf.address))
    odd = buf.view(2)  # a view 2 bytes in: offset 208 is the buffer's block 1
    rotated.write(odd, new[:BS], offset=BS - 2)
    want[BS:2 * BS] = new[:BS]
    assert rotated.download(buf) == want.tobytes()
    rotated.write(buf, b"", offset=7)  # nothing to convert
    assert rotated.download(buf) == want.tobytes()


def test_device_write_of_part_of_a_block_raises(rotated, rng):
    buf = rotated.upload(q6k_blocks(rng, 4), (4 * 256,), "q6_k")
    before = rotated.download(buf)
    msg = (r"^write of {n} bytes at byte {at} of a q6_k buffer: the device keeps q6_k blocks in a layout of "
           r"their own \(rotated by their address\), so it must start at a block boundary \(a multiple of 210 "
           r"bytes from the buffer's start\) and cover whole 210-byte blocks$")
    with pytest.raises(ValueError, match=msg.format(n=210, at=100)):
        rotated.write(buf, bytes(BS), offset=100)
    with pytest.raises(ValueError, match=msg.format(n=300, at=210)):
        rotated.write(buf, bytes(300), offset=BS)
    with pytest.raises(ValueError, match=msg.format(n=210, at=2)):
        rotated.write(buf.view(2), bytes(BS))  # the view's offset counts
    assert rotated.download(buf) == before


async def test_executor_upload_download(rotated, rng):
    raw = q6k_blocks(rng, 12)
    buf = rotated.alloc((12 * 256,), "q6_k")
    poison(rotated, buf, rng)
    ex = rotated.executor()
    ex.upload(buf, raw[:6 * BS])
    ex.upload(buf.view(6 * BS), raw[6 * BS:])
    whole, part, tail = ex.download(buf), ex.download(buf.view(3 * BS + 50), nbytes=500), ex.download(buf.view(11 * BS))
    await ex.submit_and_wait()
    assert whole.bytes() == raw.tobytes()
    np.testing.assert_array_equal(whole.numpy(dtype=np.uint8), raw)
    assert part.bytes() == raw[3 * BS + 50:3 * BS + 550].tobytes()
    assert tail.bytes() == raw[11 * BS:].tobytes()
    np.testing.assert_array_equal(raw_of(rotated, buf), rotate_reference(raw, buf.address))
    ex.reset()
    with pytest.raises(ValueError, match=r"^upload of 210 bytes at byte 105 of a q6_k buffer: the device keeps"):
        ex.upload(buf.view(105), raw[:BS])
    with pytest.raises(ValueError, match=r"^upload of 100 bytes at byte 0 of a q6_k buffer"):
        ex.upload(buf, raw[:100])


async def test_executor_copy(rotated, rng):
    raw = q6k_blocks(rng, 16)
    src = rotated.upload(raw, (16 * 256,), "q6_k")
    dst = rotated.alloc((16 * 256,), "q6_k")
    poison(rotated, dst, rng)
    assert (dst.address - src.address) % 16 == 0  # 256-byte aligned allocations
    ex = rotated.executor()
    ex.copy(dst.view(0, 8 * BS), src.view(0, 8 * BS))
    ex.copy(dst.view(8 * BS), src.view(0, 8 * BS))  # 8 blocks on: 1680 bytes, 0 mod 16
    await ex.submit_and_wait()
    assert rotated.download(dst) == (raw[:8 * BS].tobytes() * 2)
    ex.reset()
    with pytest.raises(ValueError, match=r"^copy of q6_k from address 0x[0-9a-f]+ to 0x[0-9a-f]+: cpu keeps q6_k "
                                         r"blocks rotated by their address mod 16 \(hal/_layout.py\), so src and dst "
                                         r"must be equal mod 16; these differ by 2$"):
        ex.copy(dst.view(BS, BS), src.view(0, BS))
    # equal mod 16 but a part of a block, or not from a block boundary: the rotated bytes would land
    # at other positions of their blocks
    with pytest.raises(ValueError, match=r"^copy \(src\) of 100 bytes at byte 210 of a q6_k buffer: .* must start at a "
                                         r"block boundary"):
        ex.copy(dst.view(BS, 100), src.view(BS, 100))
    with pytest.raises(ValueError, match=r"^copy \(dst\) of 210 bytes at byte 290 of a q6_k buffer"):
        ex.copy(dst.view(290, BS), src.view(BS, BS))
    u8 = rotated.alloc(16 * BS, "u8")
    with pytest.raises(ValueError, match=r"^copy from a q6_k buffer to a u8 buffer: cpu keeps q6_k in a device layout"):
        ex.copy(u8, src)
    with pytest.raises(ValueError, match=r"^copy from a u8 buffer to a q6_k buffer"):
        ex.copy(src, u8)


async def test_executor_fill(rotated, rng):
    buf = rotated.alloc((2 * 256,), "q6_k")
    poison(rotated, buf, rng)
    ex = rotated.executor()
    ex.fill(buf, 0x5A5A5A5A)  # four equal bytes: the same bytes in either layout
    await ex.submit_and_wait()
    assert rotated.download(buf) == b"\x5a" * 2 * BS
    ex.reset()
    with pytest.raises(ValueError, match=r"^fill of a q6_k buffer with pattern 0x01020304: cpu keeps q6_k blocks rotated"):
        ex.fill(buf, 0x01020304)
    with pytest.raises(ValueError, match=r"^fill of 4 bytes at byte 0 of a q6_k buffer"):
        ex.fill(buf.view(0, 4), 0)


def test_a_graph_input_or_output_of_a_device_layout_type_is_refused(rotated):
    # a slot keeps its graph tensors in f32 buffers, whose host copies are not converted: a q6_k graph
    # input would reach the kernels in GGUF's layout, so prepare refuses it (a weight is converted)
    from xinfer_async.hal import TensorDesc
    from xinfer_async.model import ModelContext, ModelSession

    d = ModelSession(rotated).freeze(ModelContext(rotated))
    g = d.graph()
    q6 = g.input(TensorDesc((256,), "q6_k"))
    with pytest.raises(ValueError, match=r"^plan 'default': input 0 is q6_k, which cpu keeps in a device layout of its own"):
        g.prepare([q6], [q6], 1)
    g = d.graph()
    f = g.input(TensorDesc((64,), "f32"))
    g.prepare([f], [f], 1).close()  # f32 I/O prepares (the check is not a blanket refusal)
