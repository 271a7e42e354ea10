"""tools/cubin_stats.py: an ELF64 cubin's entries read without a GPU (code bytes, registers, frame).

The parser runs on a cubin built here byte by byte (two entries, their .nv.info attributes among
records of other formats), on broken files (a clear ValueError), and, where NVRTC is installed, on a
real compile: a kernel with a local array indexed at run time has a stack frame, one without has none.
"""

import os
import struct
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import cubin_stats  # noqa: E402


def _elf(sections: list[tuple[str, int, bytes]]) -> bytes:
    """A little-endian ELF64 file of these (name, sh_info, bytes) sections after a null one, the
    names in a .shstrtab last."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _, _ in sections) + b".shstrtab\0"
    body, heads, at, name_at = b"", [], 64, 1
    for n, info, data in sections:
        heads.append((name_at, 1, 0, 0, at + len(body), len(data), 0, info, 1, 0))
        body += data
        name_at += len(n) + 1
    heads.append((name_at, 3, 0, 0, at + len(body), len(names), 0, 0, 1, 0))
    body += names
    shoff = at + len(body)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, len(heads) + 1, len(heads))
    table = bytes(64) + b"".join(struct.pack("<IIQQQQIIQQ", *h) for h in heads)
    return bytes(header) + body + table


def _sval(attr: int, sym: int, value: int) -> bytes:
    return struct.pack("<BBHII", 0x04, attr, 8, sym, value)


def test_entries_of_a_built_cubin():
    info = (struct.pack("<BBH", 0x03, 0x1B, 80)  # an HVAL record: 16 bits of value, no payload
            + _sval(0x2F, 7, 40) + _sval(0x11, 7, 0)
            + struct.pack("<BBH", 0x04, 0x17, 12) + bytes(12)  # an SVAL of another size: skipped
            + _sval(0x2F, 9, 128) + _sval(0x11, 9, 32))
    elf = _elf([(".text.alpha", 7, bytes(64)), (".nv.info", 0, info), (".text.beta_pq", 9, bytes(48)),
                (".nv.info.beta_pq", 0, bytes(8))])
    rows = cubin_stats.entry_stats(elf)
    assert rows == [dict(entry="alpha", code_bytes=64, registers=40, frame_bytes=0),
                    dict(entry="beta_pq", code_bytes=48, registers=128, frame_bytes=32)]


@pytest.mark.parametrize("regs,threads,ctas", [(40, 256, 6), (80, 256, 3), (81, 256, 2), (128, 256, 2),
                                               (255, 256, 1), (32, 128, 16), (0, 256, 0)])
def test_ctas_by_registers(regs, threads, ctas):
    assert cubin_stats.ctas_by_registers(regs, threads) == ctas


@pytest.mark.parametrize("mangle,why", [
    (lambda b: b"\x7fELG" + b[4:], "not a little-endian ELF64"),
    (lambda b: b[:40], "not a little-endian ELF64"),
    (lambda b: b[:-64], "section table out of range"),
])
def test_broken_files_are_refused(mangle, why):
    elf = _elf([(".text.alpha", 7, bytes(64)), (".nv.info", 0, _sval(0x2F, 7, 40))])
    with pytest.raises(ValueError, match=why):
        cubin_stats.entry_stats(mangle(elf))


def test_a_record_past_the_section_is_refused():
    elf = _elf([(".text.alpha", 7, bytes(64)), (".nv.info", 0, _sval(0x2F, 7, 40)[:10])])
    with pytest.raises(ValueError, match="past the section"):
        cubin_stats.entry_stats(elf)


def test_a_real_compile_where_nvrtc_is_installed():
    nvrtc = pytest.importorskip("xinfer_async.backends.cuda._nvrtc")
    try:
        nvrtc.load()
    except Exception as e:  # no NVRTC library here (CI without the cuda extra)
        pytest.skip(f"NVRTC not loadable: {e}")
    src = r'''
extern "C" __global__ void plain(float *y, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
extern "C" __global__ void local_array(float *y, const float *x, int n, int k) {
    float a[64];
    for (int j = 0; j < 64; j++) a[j] = x[(threadIdx.x + j) % n];
    y[threadIdx.x] = a[k & 63];
}
'''
    rows = {r["entry"]: r for r in cubin_stats.entry_stats(nvrtc.compile_cubin(src, "t.cu", "sm_90", {}, (), 0))}
    assert set(rows) == {"plain", "local_array"}
    assert all(r["code_bytes"] > 0 and 0 < r["registers"] <= 255 for r in rows.values())
    assert rows["plain"]["frame_bytes"] == 0 and rows["local_array"]["frame_bytes"] >= 256
