"""Fill the cubin cache ahead of use: ``precompile`` compiles the declared kernels' shaders for one
device on a pool of processes.

NVRTC is single-threaded and CPU-bound, and a shader has one cubin for every shape (shapes are launch
constants; ``_kernel.compile_shader``). A cold cache costs one compile a shader: measured with NVRTC
13 for sm_90 on one core of a 2-core machine, 316 s for the 83 shaders, of which the 15 with the
``matmul`` launcher family (``xi_entries.cuh``: the staged, tiled and tensor-core entry points) take
254 s (10-27 s each) and attention 9 s; the other 66 take 0.2-1.6 s. Since then the 30 matrix
kernels of the types of ``xi_kquant.cuh`` joined the family (two entries each, ~20-25 s each on one
busy core), so the family's 45 shaders take ~1,000 s of one core. Submitted longest first (the
family's entry count estimates the cost), 16 processes fill the cache in about the longest compile.
The cache's lock (``_nvrtc.compile_cubin``) lets a process that loads a kernel meanwhile wait for the
pool's cubin instead of compiling it again.

Run ``python -m xinfer_async.backends.cuda._precompile [--jobs N] [NAME ...]`` on the device's
machine (the target from device 0), or with ``--arch sm_90 --stage-max BYTES [--driver-version V]``
anywhere NVRTC is installed (a cubin cached for the device needs its driver version in the key).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from ...ops._kernels import KERNELS
from . import _driver, _nvrtc
from ._kernel import compile_shader, shader_cache_path
from ._launch import FAMILIES, stage_max_for

__all__ = ["ShaderTarget", "PrecompileResult", "device_target", "shader_names", "precompile"]


@dataclasses.dataclass(frozen=True)
class ShaderTarget:
    """What a cubin is compiled for: ``arch`` (``"sm_90"``), ``stage_max`` (``XI_MVT_STAGE_MAX``,
    bytes) and ``driver_version`` (``cuDriverGetVersion``; part of the cache key), as
    ``CUDABackend`` has them.

    Raises:
        ValueError: an arch not of the form ``sm_<digits>``, or a negative stage_max.
    """

    arch: str
    stage_max: int
    driver_version: int = 0

    def __post_init__(self):
        if not (isinstance(self.arch, str) and self.arch.startswith("sm_") and self.arch[3:].isdigit()):
            raise ValueError(f"arch must be 'sm_<major><minor>' (e.g. 'sm_90'), got {self.arch!r}")
        if self.stage_max < 0:
            raise ValueError(f"stage_max must be >= 0 bytes, got {self.stage_max}")


@dataclasses.dataclass(frozen=True)
class PrecompileResult:
    """One shader's outcome: ``"hit"`` (cached already), ``"compiled"`` (by this pool) or
    ``"waited"`` (another process compiled it meanwhile); ``seconds`` of wall time in its worker."""

    name: str
    outcome: str
    seconds: float


def device_target(ordinal: int = 0) -> ShaderTarget:
    """The ``ShaderTarget`` of CUDA device ``ordinal``, read from the driver without creating a
    context (what ``CUDABackend(ordinal)`` compiles for).

    Raises:
        DeviceError: the driver failed to initialize or the device does not exist.
        OSError: ``libcuda.so.1`` is missing.
    """
    lib = _driver.load()
    _driver.check(lib.cuInit(0), "cuInit")
    dev = _driver.ffi.new("CUdevice *")
    _driver.check(lib.cuDeviceGet(dev, ordinal), f"cuDeviceGet({ordinal})")
    v = _driver.ffi.new("int *")

    def attr(a: int) -> int:
        _driver.check(lib.cuDeviceGetAttribute(v, a, dev[0]), "cuDeviceGetAttribute")
        return v[0]

    major = attr(_driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    minor = attr(_driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    stage_max = stage_max_for(attr(_driver.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN))
    _driver.check(lib.cuDriverGetVersion(v), "cuDriverGetVersion")
    return ShaderTarget(f"sm_{major}{minor}", stage_max, v[0])


def shader_names(target: ShaderTarget | None = None) -> list[str]:
    """The shader of every declared kernel with a cuda launch (``ops/_kernels.py``), the costliest
    to compile first: by the entry-point count of its launcher family (``_launch.FAMILIES``; one
    for a kernel without a family), then by name."""
    arch = target.arch if target else "sm_90"
    cc = (int(arch[3:-1]), int(arch[-1]))
    stage_max = target.stage_max if target else 0

    def entries(spec) -> int:
        fam = spec.cuda.family
        return len(FAMILIES[fam](dict(spec.cuda.params), sms=1, stage_max=stage_max, cc=cc).entries) if fam else 1

    specs = {s.source_name: s for s in KERNELS.values() if s.cuda is not None}
    return sorted(specs, key=lambda n: (-entries(specs[n]), n))


def _compile_one(name: str, target: ShaderTarget) -> PrecompileResult:
    before = _nvrtc.statistics()
    t0 = time.perf_counter()
    compile_shader(name, target.arch, target.stage_max, target.driver_version)
    after = _nvrtc.statistics()
    outcome = "compiled" if after.compiles > before.compiles else "waited" if after.waits > before.waits else "hit"
    return PrecompileResult(name, outcome, time.perf_counter() - t0)


def precompile(target: ShaderTarget, names: list[str] | None = None, jobs: int | None = None) -> list[PrecompileResult]:
    """Compile (or find cached) the cubin of each shader in ``names`` (default: ``shader_names``)
    for ``target``, on ``jobs`` processes (default: ``os.cpu_count()``; 1: in this process),
    submitted in the order given.

    Returns:
        a ``PrecompileResult`` a shader, in the order of ``names``.

    Raises:
        ValueError: jobs < 1, or a name with no shader file.
        KernelCompileError: a shader that NVRTC rejects (the first one, after the others finish).
    """
    names = shader_names(target) if names is None else list(names)
    jobs = (os.cpu_count() or 1) if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    done = {n: PrecompileResult(n, "hit", 0.0) for n in names
            if os.path.exists(shader_cache_path(n, target.arch, target.stage_max, target.driver_version))}
    missing = [n for n in names if n not in done]
    if jobs == 1 or len(missing) <= 1:
        done.update((n, _compile_one(n, target)) for n in missing)
    else:  # spawn: a fresh interpreter a worker (no fork of a process that may hold a CUDA context)
        with ProcessPoolExecutor(min(jobs, len(missing)), mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {n: pool.submit(_compile_one, n, target) for n in missing}
            done.update((n, f.result()) for n, f in futures.items())
    return [done[n] for n in names]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xinfer_async.backends.cuda._precompile",
                                description="Compile the cuda kernels' shaders into the cubin cache, in parallel.")
    p.add_argument("names", nargs="*", help="shader names (default: every declared kernel's)")
    p.add_argument("--jobs", type=int, default=None, help="processes (default: the cores)")
    p.add_argument("--arch", help="compile for this arch (e.g. sm_90) instead of device 0's")
    p.add_argument("--stage-max", type=int, default=None, help="XI_MVT_STAGE_MAX with --arch (default 102400)")
    p.add_argument("--driver-version", type=int, default=0, help="the cache key's driver version with --arch")
    a = p.parse_args(argv)
    if a.arch:
        target = ShaderTarget(a.arch, 102400 if a.stage_max is None else a.stage_max, a.driver_version)
    else:
        target = device_target()
    t0 = time.perf_counter()
    results = precompile(target, a.names or None, a.jobs)
    wall = time.perf_counter() - t0
    for r in sorted(results, key=lambda r: -r.seconds)[:10]:
        print(f"{r.name:32s} {r.outcome:9s} {r.seconds:7.2f} s")
    n = {o: sum(r.outcome == o for r in results) for o in ("compiled", "waited", "hit")}
    work = sum(r.seconds for r in results if r.outcome == "compiled")
    print(f"{len(results)} shaders for {target}: {n['compiled']} compiled ({work:.1f} s of NVRTC), "
          f"{n['waited']} compiled by another process, {n['hit']} cached; {wall:.1f} s wall on "
          f"{a.jobs or os.cpu_count()} processes; cache {_nvrtc.cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
