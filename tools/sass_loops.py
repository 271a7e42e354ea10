"""The inner loops of a shader entry's SASS and their instruction mix, on a machine with no GPU:
``python tools/sass_loops.py SHADER ENTRY [--shaders DIR] [--arch sm_90] [--min-idp 8] [--dump I-J]``.

Compiles ``shaders/SHADER.cu`` (or ``DIR/SHADER.cu``: ``XINFER_SHADERS``) as the cuda backend does
(``_kernel.compile_shader``, NVRTC from ``pip install -e '.[cuda]'``), disassembles ENTRY with
``cuobjdump -sass -fun ENTRY`` and prints each innermost loop (a backward branch and the instructions
from its target to it, with no other loop inside; ``--all``: every loop) that holds at least
``--min-idp`` dp4a (``IDP``) instructions: its span, length, the
counts of IDP, LDS, SHFL and BRA, the instructions a block term (length / (IDP / ``--idp-per-term``):
a term, one block of 32 elements of one row for one token, is 8 dp4a; q6_k's `_pq` adds 2 a block and
token for its activation sums, so 10 there where the loop has one row), then the most frequent opcodes. ``--dump
I-J`` prints the instructions I..J (a loop's span).

cuobjdump: ``--cuobjdump PATH``, else ``$CUOBJDUMP``, else ``cuobjdump`` on the PATH, else the one of
NVIDIA's wheels ``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` (``pip install
nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm``: ``nvidia/cu13/bin`` of the site-packages; cuobjdump runs
nvdisasm from beside it). Why: the K-quant decode's cost in the decode step followed its loop's
instruction count (README, "The K-quant decode in fewer instructions"), which this measures before
any device time is spent. A research tool (the cuda backend's private modules), run from the
repository root with ``PYTHONPATH=$PWD``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

_INSTR = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_TARGET = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)")


def parse_sass(text: str) -> list[tuple[int, str]]:
    """(address, instruction text without its ';') of each instruction line of ``cuobjdump -sass``'s
    output, in order (the encoding comment lines are left out)."""
    return [(int(m.group(1), 16), m.group(2)) for m in map(_INSTR.match, text.splitlines()) if m]


def opcode(instr: str) -> str:
    """The opcode without modifiers or predicate: ``@!P2 IDP.4A.U8.S8 R1, ...`` -> ``IDP``."""
    words = instr.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def loops(instrs: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(first, last) instruction indices of each loop: a branch to an address at or before its own,
    from the target's index to the branch's, in the order of the branches."""
    index = {a: i for i, (a, _) in enumerate(instrs)}
    out = []
    for i, (a, t) in enumerate(instrs):
        m = _TARGET.search(t) if opcode(t) == "BRA" else None
        if m and int(m.group(1), 16) <= a and int(m.group(1), 16) in index:
            out.append((index[int(m.group(1), 16)], i))
    return out


def innermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans of ``loops`` with no other span inside them, in the same order."""
    return [s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]


def loop_mix(instrs: list[tuple[int, str]], span: tuple[int, int]) -> collections.Counter:
    """Opcode counts of the instructions of ``span`` (both ends included)."""
    return collections.Counter(opcode(t) for _, t in instrs[span[0]:span[1] + 1])


def _cuobjdump(given: str | None) -> str:
    for path in (given, os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"),
                 os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "cu13", "bin", "cuobjdump")):
        if path and os.path.isfile(path):
            return path
    raise SystemExit("sass_loops: no cuobjdump (--cuobjdump PATH, $CUOBJDUMP, the PATH, or "
                     "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shader", help="shaders/SHADER.cu")
    p.add_argument("entry", help="the entry's name (e.g. qmatmul_q4_k)")
    p.add_argument("--shaders", help="the shaders folder (XINFER_SHADERS; default the repository's)")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--stage-max", type=int, default=102400, help="XI_MVT_STAGE_MAX (default the H200's)")
    p.add_argument("--min-idp", type=int, default=8, help="loops with at least this many IDP (default 8)")
    p.add_argument("--all", action="store_true", help="every loop, not only the innermost")
    p.add_argument("--idp-per-term", type=float, default=8.0, help="dp4a a block term (default 8)")
    p.add_argument("--dump", help="print instructions I-J")
    p.add_argument("--cuobjdump")
    args = p.parse_args(argv)
    if args.shaders:
        os.environ["XINFER_SHADERS"] = os.path.abspath(args.shaders)
    tool = _cuobjdump(args.cuobjdump)
    from xinfer_async.backends.cuda._kernel import compile_shader

    cubin = compile_shader(args.shader, args.arch, args.stage_max)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        env = dict(os.environ, PATH=os.path.dirname(tool) + os.pathsep + os.environ.get("PATH", ""))
        run = subprocess.run([tool, "-sass", "-fun", args.entry, f.name], capture_output=True, text=True, env=env)
    instrs = parse_sass(run.stdout)
    if run.returncode or not instrs:
        sys.stderr.write(run.stderr or f"sass_loops: no instructions for {args.entry!r} in {args.shader}.cu\n")
        return 1
    print(f"{args.entry} ({args.shader}.cu, {args.arch}): {len(instrs)} instructions")
    spans = loops(instrs)
    for span in spans if args.all else innermost(spans):
        mix = loop_mix(instrs, span)
        if mix["IDP"] < args.min_idp:
            continue
        n = span[1] - span[0] + 1
        top = ", ".join(f"{k} {v}" for k, v in mix.most_common(10))
        print(f"loop {span[0]}-{span[1]}: {n} instructions, IDP {mix['IDP']}, LDS {mix['LDS']}, SHFL {mix['SHFL']}, "
              f"BRA {mix['BRA']}; {n / (mix['IDP'] / args.idp_per_term):.1f} a block term; {top}")
    if args.dump:
        i, j = map(int, args.dump.split("-"))
        for a, t in instrs[i:j + 1]:
            print(f"{a:05x} {t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
