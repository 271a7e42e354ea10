"""Code bytes, registers and stack frame (spills) of each entry of a shader's cubin, on a machine with no
GPU: ``python tools/cubin_stats.py [SHADER ...] [--entry SUBSTR] [--arch sm_90] [--stage-max BYTES]``.

Compiles ``shaders/SHADER.cu`` as the cuda backend does (``_kernel.compile_shader``: NVRTC, the cubin
cache of ``$XINFER_CACHE_DIR``; needs the ``nvidia-cuda-nvrtc`` wheel of ``pip install -e '.[cuda]'``,
which runs without a GPU), then reads the cubin's ELF: an entry's code is its ``.text.<entry>`` section,
its registers and stack frame are the ``EIATTR_REGCOUNT`` (0x2f) and ``EIATTR_FRAME_SIZE`` (0x11)
attributes of ``.nv.info`` (records of a format byte, an attribute byte and a 16-bit size or value;
the two attributes carry (symbol index, value) pairs, the symbol index being the ``sh_info`` of the
entry's ``.text`` section). ``cuobjdump -res-usage`` prints the same registers and frame (REG, STACK).

Why: an entry's first run after the other kernels of a decode step fetches its instructions from L2,
and its registers set how many CTAs an SM holds; both are worth reading before spending device time
(the H200 session of 2026-12-02 found `_pq` waiting for instructions ~70% of its stalls in situ).
The table: entry, code KB, registers, frame bytes (> 0: spilled or a local array), CTAs of 256
threads an SM by registers alone (65,536 registers an SM, allocated per warp in units of 256). A
research tool (the cuda backend's private modules), run from the repository root with
``PYTHONPATH=$PWD``.
"""

from __future__ import annotations

import argparse
import struct
import sys

#: .nv.info attributes read here (the values cuobjdump -res-usage calls REG and STACK)
EIATTR_REGCOUNT, EIATTR_FRAME_SIZE = 0x2F, 0x11
#: .nv.info record formats: a 16-bit size then that many bytes (SVAL); a 16-bit value (HVAL, NVAL, BVAL)
EIFMT_SVAL = 0x04


def sections(elf: bytes) -> dict[str, tuple[int, int, int]]:
    """name -> (sh_info, file offset, size) of each section of a little-endian ELF64 file.

    Raises:
        ValueError: not an ELF64 little-endian file, or its section table or names lie outside it."""
    if len(elf) < 64 or elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a little-endian ELF64 file (a cubin)")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    if shentsize != 64 or shoff + shnum * 64 > len(elf) or shstrndx >= shnum:
        raise ValueError(f"ELF section table out of range (offset {shoff}, {shnum} entries of {shentsize} bytes)")
    heads = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + 64 * i) for i in range(shnum)]
    str_off, str_size = heads[shstrndx][4], heads[shstrndx][5]
    if str_off + str_size > len(elf):
        raise ValueError("ELF section names out of range")
    out = {}
    for name_at, _type, _flags, _addr, off, size, _link, info, _align, _entsize in heads:
        end = elf.find(b"\0", str_off + name_at, str_off + str_size)
        if end < 0:
            raise ValueError("ELF section name not terminated")
        if off + size > len(elf) and _type != 8:  # SHT_NOBITS (.bss-like) has no bytes in the file
            raise ValueError(f"ELF section at {off} of {size} bytes past the end of the file")
        out[elf[str_off + name_at:end].decode()] = (info, off, size)
    return out


def nv_info(data: bytes) -> dict[int, dict[int, int]]:
    """attribute -> {symbol index: value} of the (symbol, value) attributes in an ``.nv.info``
    section's records (EIFMT_SVAL records of 8 bytes); other records are skipped.

    Raises:
        ValueError: a record runs past the section."""
    out: dict[int, dict[int, int]] = {}
    i = 0
    while i + 4 <= len(data):
        fmt, attr, size = data[i], data[i + 1], struct.unpack_from("<H", data, i + 2)[0]
        i += 4
        if fmt != EIFMT_SVAL:
            continue  # the 16 bits were the value
        if i + size > len(data):
            raise ValueError(f".nv.info record of {size} bytes past the section's end")
        if size == 8:
            sym, value = struct.unpack_from("<II", data, i)
            out.setdefault(attr, {})[sym] = value
        i += size
    return out


def ctas_by_registers(registers: int, threads: int = 256) -> int:
    """CTAs of ``threads`` threads an SM holds by registers alone (65,536 an SM; a warp's registers
    allocated in units of 256)."""
    per_warp = -(-registers * 32 // 256) * 256
    return 65536 // (per_warp * -(-threads // 32)) if registers > 0 else 0


def entry_stats(cubin: bytes) -> list[dict]:
    """One dict a kernel entry of ``cubin`` (entry, code_bytes, registers, frame_bytes), by name.

    Raises:
        ValueError: not a readable ELF64 cubin (see ``sections``)."""
    secs = sections(cubin)
    attrs: dict[int, dict[int, int]] = {}
    if ".nv.info" in secs:
        _, off, size = secs[".nv.info"]
        attrs = nv_info(cubin[off:off + size])
    regs, frames = attrs.get(EIATTR_REGCOUNT, {}), attrs.get(EIATTR_FRAME_SIZE, {})
    rows = []
    for name, (sym, _off, size) in sorted(secs.items()):
        if name.startswith(".text."):
            rows.append(dict(entry=name[len(".text."):], code_bytes=size, registers=regs.get(sym, 0),
                             frame_bytes=frames.get(sym, 0)))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python tools/cubin_stats.py", description=__doc__.split("\n\n")[0])
    p.add_argument("shaders", nargs="*", default=["matmul_q4_1"], help="shader names (shaders/NAME.cu)")
    p.add_argument("--entry", default="", help="only entries whose name contains this")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--stage-max", type=int, default=102400, help="XI_MVT_STAGE_MAX (the H200's: 102400)")
    a = p.parse_args(argv)
    from xinfer_async.backends.cuda._kernel import compile_shader

    print(f"{'entry':<44} {'code KB':>8} {'regs':>5} {'frame B':>8} {'CTAs/SM':>8}   ({a.arch}, 256 threads)")
    for name in a.shaders:
        for r in entry_stats(compile_shader(name, a.arch, a.stage_max)):
            if a.entry in r["entry"]:
                print(f"{r['entry']:<44} {r['code_bytes'] / 1024:>8.1f} {r['registers']:>5} {r['frame_bytes']:>8} "
                      f"{ctas_by_registers(r['registers']):>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
