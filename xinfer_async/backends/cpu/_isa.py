"""Which instruction-set path the cpu backend's int8 dot products run: ``XINFER_CPU_ISA``.

The quantized matmuls (q8_0, q4_0, q4_1, q5_0, q5_1 and their row-interleaved ``*_r8`` layouts, q4_k,
q5_k, q6_k) compute exact integer inner products on one of four paths of the native module
(``native/kernels/xi_q8.h``), which all give the same bits:

* ``scalar``: portable C;
* ``avx2``: AVX2 ``vpmaddubsw`` / ``vpmaddwd`` (with F16C);
* ``avxvnni``: AVX-VNNI ``vpdpbusd`` / ``vpdpwssd`` on 256-bit vectors;
* ``avx512vnni``: AVX-512 VNNI ``vpdpbusd`` on 256-bit vectors (AVX512VL), 512-bit K-quant tiles.

``XINFER_CPU_ISA=auto`` (the default) runs the best path this cpu supports; a path name forces it (an
A/B timing, a test). The variable is read once, when the first cpu backend is made.
"""

from __future__ import annotations

import os

from ... import _native

PATHS = ("scalar", "avx2", "avxvnni", "avx512vnni")
#: the cpu features (as /proc/cpuinfo names them) each path needs (the VNNI paths: besides avx2's, not
#: each other's; q8isa.c cpu_runs)
_NEEDS = {"avx2": "avx2, f16c and fma", "avxvnni": "avx_vnni", "avx512vnni": "avx512f, avx512bw, avx512dq, avx512vl "
          "and avx512_vnni"}
_configured = False


def compiled(name: str) -> bool:
    """Whether this build of the native module holds path ``name`` (GCC 11 or later on x86: all four)."""
    return bool(_native.lib.xi_isa_compiled(PATHS.index(name)))


def supported(name: str) -> bool:
    """Whether path ``name`` is built and this cpu (and its OS) runs it."""
    return bool(_native.lib.xi_isa_supported(PATHS.index(name)))


def why_not(name: str) -> str | None:
    """None when path ``name`` can run here, else the reason in words ("cpu lacks avx_vnni")."""
    if name not in PATHS:
        return f"{name!r} is not one of auto, {', '.join(PATHS)}"
    if not compiled(name):
        return f"this build of the native module lacks the {name} path (its compiler could not target it)"
    if not supported(name):
        return f"cpu lacks {_NEEDS.get(name, name)}"
    return None


def selected() -> str:
    """The path the int8 dot products run now."""
    return PATHS[_native.lib.xi_isa_selected()]


def select(name: str, what: str = "isa") -> str:
    """Run the int8 dot products on path ``name`` from now on (process-wide); ``"auto"``: the best
    path this cpu supports. Returns the path that runs.

    Raises:
        ValueError: ``name`` is not ``auto`` or one of ``PATHS``, or names a path this build lacks or
            this cpu cannot run (the message names ``what``, the value and the reason); nothing changes.
    """
    if name == "auto":
        status = _native.lib.xi_isa_select(-1)
    else:
        reason = why_not(name)
        if reason is not None:
            raise ValueError(f"{what}={name!r}: {reason}")
        status = _native.lib.xi_isa_select(PATHS.index(name))
    if status != 0:
        raise ValueError(f"{what}={name!r}: the native module refused it (status {status})")
    return selected()


def configure(environ=None) -> str:
    """Apply ``XINFER_CPU_ISA`` (from ``environ``, default ``os.environ``) the first time it is called
    in this process; later calls change nothing. Returns the path that runs.

    Raises:
        ValueError: as :func:`select`, naming ``XINFER_CPU_ISA``.
    """
    global _configured
    if not _configured:
        env = os.environ if environ is None else environ
        select(env.get("XINFER_CPU_ISA", "auto") or "auto", "XINFER_CPU_ISA")
        _configured = True
    return selected()
