"""NVRTC through cffi in ABI mode: CUDA C source -> cubin for the device's own arch, cached on disk.

The library comes from ``$XINFER_NVRTC``, else the installed ``nvidia`` wheels (``nvidia/cu13/lib``,
``nvidia/cuda_nvrtc/lib``, ``nvidia/cu12/lib``). Cubins are cached under
``$XINFER_CACHE_DIR`` or ``$XDG_CACHE_HOME/xinfer_async`` or ``~/.cache/xinfer_async``, subdirectory
``cubin``, keyed by the sha256 of the source, its headers, the options, the arch, the NVRTC version and
the driver version; a compile for a real arch also stores its PTX beside the cubin (``.ptx``, for
``compile_ptx``: one NVRTC run makes both). A miss takes an exclusive lock on ``<cubin>.lock``
(``flock``) and looks again before it compiles, so processes sharing the cache (pytest-xdist
workers, a pre-compile pool) compile each cubin once: the others wait for it and read it.
``statistics()`` counts this process's hits, compiles and waits; ``$XINFER_NVRTC_LOG`` names a file
that gets one line a call (appended, so the processes of one run may share it):
``pid outcome seconds name key``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import os
import tempfile
import threading
import time

import cffi

try:
    import fcntl
except ImportError:  # not POSIX: no cross-process lock, a concurrent miss compiles twice
    fcntl = None

from ...hal._errors import KernelCompileError
from ._libs import open_first

ffi = cffi.FFI()
ffi.cdef(
    """
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
const char *nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcVersion(int *major, int *minor);
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int numHeaders,
                               const char *const *headers, const char *const *includeNames);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet);
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx);
"""
)

_lib = None
_keep = []
_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class CompileStatistics:
    """What ``compile_cubin`` and ``compile_ptx`` did in this process: calls answered from the cache
    (``hits``), NVRTC runs (``compiles``, ``compile_s`` seconds in all), and misses that found
    another process compiling the same cubin and read its result (``waits``, ``wait_s`` seconds)."""

    hits: int = 0
    compiles: int = 0
    compile_s: float = 0.0
    waits: int = 0
    wait_s: float = 0.0


_stats = CompileStatistics()


def statistics() -> CompileStatistics:
    """This process's ``CompileStatistics`` since it started."""
    return _stats


def _count(outcome: str, seconds: float, name: str, key: str) -> None:
    global _stats
    with _lock:
        s = _stats
        if outcome == "hit":
            _stats = dataclasses.replace(s, hits=s.hits + 1)
        elif outcome == "compiled":
            _stats = dataclasses.replace(s, compiles=s.compiles + 1, compile_s=s.compile_s + seconds)
        else:
            _stats = dataclasses.replace(s, waits=s.waits + 1, wait_s=s.wait_s + seconds)
    log = os.environ.get("XINFER_NVRTC_LOG")
    if log:
        try:  # one write of one short line to an O_APPEND file: lines of several processes do not mix
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{os.getpid()} {outcome} {seconds:.3f} {name} {key}\n".encode())
            finally:
                os.close(fd)
        except OSError:
            pass  # the log is a diagnostic: never fail a compile over it


def load():
    """Open NVRTC once.

    Raises:
        OSError: no NVRTC library was found (the message lists where it looked).
    """
    global _lib
    with _lock:
        if _lib is None:
            _lib = open_first(ffi, "XINFER_NVRTC", "libnvrtc", ("cu13", "cuda_nvrtc", "cu12"),
                              "NVRTC not found (pip install nvidia-cuda-nvrtc, or set XINFER_NVRTC)",
                              _builtins, _keep)
    return _lib


def _builtins(path: str) -> list[str]:
    """NVRTC dlopens libnvrtc-builtins by soname: the wheel's copy beside ``path`` goes first."""
    if not os.path.dirname(path):
        return []
    return [b for b in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.*")) if ".alt." not in b]


def version() -> tuple[int, int]:
    lib = load()
    major, minor = ffi.new("int *"), ffi.new("int *")
    lib.nvrtcVersion(major, minor)
    return major[0], minor[0]


def cache_dir() -> str:
    """The cubin cache directory (not created)."""
    base = os.environ.get("XINFER_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "xinfer_async")
    return os.path.join(base, "cubin")


def _check(status: int, what: str) -> None:
    if status != 0:
        msg = ffi.string(load().nvrtcGetErrorString(status)).decode()
        raise KernelCompileError(f"{what} failed: {msg}")


def cache_path(source: str, name: str, arch: str, headers: dict[str, str] | None = None,
               options: tuple[str, ...] = (), driver_version: int = 0) -> str:
    """Where ``compile_cubin`` with these arguments caches its cubin (the file may not exist):
    ``cache_dir()/<name>-<32 hex digits of the key>.cubin``."""
    headers = dict(sorted((headers or {}).items()))
    opts = (f"--gpu-architecture={arch}", "--std=c++17", *options)
    key = hashlib.sha256()
    for part in (source, repr(sorted(headers.items())), repr(opts), arch, repr(version()), str(driver_version)):
        key.update(part.encode())
        key.update(b"\0")
    return os.path.join(cache_dir(), f"{name.replace('/', '_')}-{key.hexdigest()[:32]}.cubin")


def compile_cubin(source: str, name: str, arch: str, headers: dict[str, str] | None = None,
                  options: tuple[str, ...] = (), driver_version: int = 0) -> bytes:
    """Compile CUDA C ``source`` to a cubin for ``arch`` (e.g. ``"sm_90"``), or take it from the cache.

    Args:
        source: the translation unit.
        name: its file name, for the log.
        arch: the real architecture, ``"sm_<major><minor>"``.
        headers: ``{include name: text}`` that ``#include "name"`` may reach.
        options: further NVRTC options.
        driver_version: part of the cache key.

    Returns:
        the cubin (an ELF image).

    Raises:
        KernelCompileError: NVRTC rejected the source (``.log`` holds its log).
    """
    return _cached(source, name, arch, headers, options, driver_version, ".cubin")


def compile_ptx(source: str, name: str, arch: str, headers: dict[str, str] | None = None,
                options: tuple[str, ...] = (), driver_version: int = 0) -> str:
    """The PTX text of CUDA C ``source``: for checks of the generated code (the backend loads cubins).

    For a real architecture (``"sm_90"``) it is the PTX of ``compile_cubin``'s compile with the same
    arguments, cached beside its cubin (one NVRTC run makes both, once); for a virtual one
    (``"compute_90"``) a compile to PTX alone, cached the same way.

    Raises:
        KernelCompileError: NVRTC rejected the source (``.log`` holds its log).
    """
    return _cached(source, name, arch, headers, options, driver_version, ".ptx").decode()


def _cached(source: str, name: str, arch: str, headers: dict[str, str] | None, options: tuple[str, ...],
            driver_version: int, ext: str) -> bytes:
    """The cached ``.cubin`` or ``.ptx`` of a compile, else compile under the cache's lock and store
    what the compile made: both for a real arch (``sm_``), the PTX alone for a virtual one."""
    headers = dict(sorted((headers or {}).items()))
    opts = (f"--gpu-architecture={arch}", "--std=c++17", *options)
    stem = cache_path(source, name, arch, headers, options, driver_version)[:-len(".cubin")]
    digest, path = stem.rsplit("-", 1)[1], stem + ext
    data = _read(path)
    if data is not None:
        _count("hit", 0.0, name, digest)
        return data
    t0 = time.perf_counter()
    with _cache_lock(stem + ".cubin"):
        data = _read(path)  # another process compiled it while this one waited for the lock
        if data is not None:
            _count("waited", time.perf_counter() - t0, name, digest)
            return data
        t0 = time.perf_counter()
        made = _compile(source, name, headers, opts, cubin=arch.startswith("sm_"))
        _count("compiled", time.perf_counter() - t0, name, digest)
        for e, blob in made.items():
            try:  # the PTX first: a reader that finds the cubin finds its PTX too
                fd, tmp = tempfile.mkstemp(dir=os.path.dirname(stem), suffix=".tmp")
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                os.replace(tmp, stem + e)
            except OSError:
                pass  # a read-only cache only costs a recompile
    return made[ext]


def _read(path: str) -> bytes | None:
    """The cached cubin at ``path``, or None (absent or unreadable)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


@contextlib.contextmanager
def _cache_lock(path: str):
    """Hold an exclusive ``flock`` on ``path + ".lock"`` (created with the cache directory) while
    the body runs; a lock that cannot be had (read-only cache, no ``fcntl``) is skipped."""
    fd = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        pass
    try:
        if fd is not None and fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes
        yield
    finally:
        if fd is not None:
            os.close(fd)


def _compile(source: str, name: str, headers: dict[str, str], opts: tuple[str, ...], cubin: bool) -> dict[str, bytes]:
    """One NVRTC run: ``{".ptx": PTX text (no NUL)}``, plus ``".cubin"`` when ``cubin`` (a real arch)."""
    lib = load()
    prog = ffi.new("nvrtcProgram *")
    keep = [ffi.new("char[]", s.encode()) for s in (*headers.values(), *headers.keys(), *opts)]
    nh = len(headers)
    hdrs = ffi.new("const char *[]", keep[:nh]) if nh else ffi.NULL
    names = ffi.new("const char *[]", keep[nh:2 * nh]) if nh else ffi.NULL
    _check(lib.nvrtcCreateProgram(prog, source.encode(), name.encode(), nh, hdrs, names), "nvrtcCreateProgram")
    try:
        optv = ffi.new("const char *[]", keep[2 * nh:])
        status = lib.nvrtcCompileProgram(prog[0], len(opts), optv)
        size = ffi.new("size_t *")
        lib.nvrtcGetProgramLogSize(prog[0], size)
        buf = ffi.new("char[]", max(size[0], 1))
        lib.nvrtcGetProgramLog(prog[0], buf)
        log = ffi.string(buf).decode(errors="replace")
        if status != 0:
            msg = ffi.string(lib.nvrtcGetErrorString(status)).decode()
            raise KernelCompileError(f"{name}: {msg}", log)
        out = {}
        for kind, ext in (("PTX", ".ptx"), ("CUBIN", ".cubin")) if cubin else (("PTX", ".ptx"),):
            _check(getattr(lib, f"nvrtcGet{kind}Size")(prog[0], size), f"nvrtcGet{kind}Size")
            data = ffi.new("char[]", size[0])
            _check(getattr(lib, f"nvrtcGet{kind}")(prog[0], data), f"nvrtcGet{kind}")
            blob = bytes(ffi.buffer(data, size[0]))
            out[ext] = blob.rstrip(b"\0") if kind == "PTX" else blob  # PTX text ends in a NUL
        return out
    finally:
        lib.nvrtcDestroyProgram(prog)
