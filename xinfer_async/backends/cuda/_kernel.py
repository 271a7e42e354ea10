"""CUDA kernels: ``CUDAKernel`` (a loaded ``shaders/<name>.cu``) and ``load_kernel``, which compiles a
declared kernel (``ops/_kernels.py``) with NVRTC and sets up its launch from the declaration's
``cuda`` geometry: one entry point with a block and a grid, or a launcher family of ``_launch.py``
(``FAMILIES``) that picks among several entry points for each launch."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from ...ops import KernelSpec, kernel_spec
from . import _driver, _nvrtc, _timeline
from ._driver import check, ffi
from ._launch import FAMILIES

if TYPE_CHECKING:
    from ._backend import CUDABackend


def shader_dir() -> str:
    """Where ``<name>.cu`` files live: ``$XINFER_SHADERS``, else the repository's ``shaders/``, else the
    package's ``xinfer_async/shaders`` (package data)."""
    if os.environ.get("XINFER_SHADERS"):
        return os.environ["XINFER_SHADERS"]
    pkg = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for d in (os.path.join(os.path.dirname(pkg), "shaders"), os.path.join(pkg, "shaders")):
        if os.path.isdir(d):
            return d
    return os.path.join(os.path.dirname(pkg), "shaders")


class LaunchGrid(tuple):
    """A grid ``(x, y, z)`` (a plain tuple of ints) that also names the block size and the dynamic
    shared memory it is launched with."""

    def __new__(cls, grid, block=(1, 1, 1), shared_bytes=0, function=None):
        self = super().__new__(cls, (int(grid[0]), int(grid[1]), int(grid[2])))
        self.block, self.shared_bytes, self.function = block, shared_bytes, function
        return self


class CUDAKernel:
    """A loaded kernel: ``extern "C" <name>`` of ``shaders/<source>.cu``, launched with ``block``
    threads and ``shared_bytes`` of dynamic shared memory. A kernel of a launcher family (the matrix
    and attention kernels) has several entry points in its shader (``entries``: suffix ->
    CUfunction); ``launch`` (constants -> (grid, block, shared bytes, suffix), e.g.
    ``_launch.matmul_launch``) picks one for each launch.
    ``pdl``: every entry point waits for the previous kernel in-kernel (``xi_grid_begin``, true of
    all of ``shaders/``: tests/test_shaders_compile.py checks each entry's PTX), so the backend may
    launch it with programmatic dependent launch; a kernel that does not wait must keep it false,
    or it would run alongside the kernel before it."""

    def __init__(self, name: str, module, function, block: int, grid_fn, launch=None, entries=None,
                 pdl: bool = False):
        self.name, self.module, self.function, self.pdl = name, module, function, pdl
        self.block = (block, 1, 1)
        self.shared_bytes = 0
        self._grid_fn = grid_fn
        self._launch, self.entries = launch, entries or {"": function}

    def launch_grid(self, constants: dict) -> "LaunchGrid":
        """The grid ``(x, y, z)`` of blocks for the constants (a dict of the declared fields), as
        the runtime puts it in ``DispatchCmd``; it also carries ``.block``, ``.shared_bytes``
        and ``.function``: the entry point these constants launch."""
        if self._launch is not None:
            grid, block, shared, suffix = self._launch(constants)
            return LaunchGrid(grid, block, shared, self.entries[suffix])
        return LaunchGrid(self._grid_fn(constants), self.block, self.shared_bytes, self.function)

    def launch_config(self, constants: dict) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        """``(grid, block, shared_bytes)`` for the constants; ``grid`` is the ``LaunchGrid`` (it names
        the entry point, so the triple launches what ``launch_grid`` does)."""
        g = self.launch_grid(constants)
        return g, g.block, g.shared_bytes

    def __repr__(self) -> str:
        return f"CUDAKernel({self.name!r}, block={self.block[0]})"


def _shader_inputs(source_name: str, stage_max: int) -> tuple[str, str, dict[str, str], tuple[str, ...]]:
    """(source, file name, headers, options) of ``shaders/<source_name>.cu`` as NVRTC takes them."""
    d = shader_dir()
    path = os.path.join(d, f"{source_name}.cu")
    try:
        with open(path) as f:
            source = f.read()
    except OSError as e:
        raise ValueError(f"no shader for kernel {source_name!r}: {e}") from None
    headers = {}
    for h in sorted(os.listdir(d)):
        if h.endswith(".cuh"):
            with open(os.path.join(d, h)) as f:
                headers[h] = f.read()
    return source, f"{source_name}.cu", headers, (f"-DXI_MVT_STAGE_MAX={stage_max}",) + _timeline.compile_options()


def compile_shader(source_name: str, arch: str, stage_max: int, driver_version: int = 0) -> bytes:
    """The cubin of ``shaders/<source_name>.cu`` (with every ``.cuh`` beside it) for ``arch``
    (``"sm_90"``), ``XI_MVT_STAGE_MAX`` = ``stage_max`` bytes (``CUDABackend.stage_max``), from
    ``_nvrtc.compile_cubin`` (its disk cache; ``driver_version`` is part of the key). The only
    compile-time constants of a shader are these (and ``XI_TIMELINE`` under ``XINFER_TIMELINE=1``:
    ``_timeline.py``): shapes are launch constants, so one cubin a shader serves every shape.

    Raises:
        KernelCompileError: NVRTC rejected the source (``.log`` has the log).
        ValueError: no shader file ``<source_name>.cu``.
    """
    source, name, headers, options = _shader_inputs(source_name, stage_max)
    return _nvrtc.compile_cubin(source, name, arch, headers, options, driver_version)


def shader_ptx(source_name: str, arch: str, stage_max: int, driver_version: int = 0) -> str:
    """The PTX of ``compile_shader``'s compile with the same arguments (cached beside its cubin: one
    NVRTC run makes both), for checks of the generated code.

    Raises:
        KernelCompileError: NVRTC rejected the source (``.log`` has the log).
        ValueError: no shader file ``<source_name>.cu``.
    """
    source, name, headers, options = _shader_inputs(source_name, stage_max)
    return _nvrtc.compile_ptx(source, name, arch, headers, options, driver_version)


def shader_cache_path(source_name: str, arch: str, stage_max: int, driver_version: int = 0) -> str:
    """Where ``compile_shader`` with these arguments caches its cubin (the file may not exist yet).

    Raises:
        ValueError: no shader file ``<source_name>.cu``.
    """
    source, name, headers, options = _shader_inputs(source_name, stage_max)
    return _nvrtc.cache_path(source, name, arch, headers, options, driver_version)


def _entries(lib, module, name: str, suffixes) -> dict:
    """suffix -> CUfunction of ``name + suffix`` in ``module``, for each suffix."""
    out = {}
    for suffix in suffixes:
        fn = ffi.new("CUfunction *")
        check(lib.cuModuleGetFunction(fn, module, (name + suffix).encode()), f"cuModuleGetFunction({name + suffix})")
        out[suffix] = fn[0]
    return out


def load_kernel(backend: "CUDABackend", spec: KernelSpec | str) -> CUDAKernel:
    """Compile ``shaders/<spec.source_name>.cu`` for ``backend``'s device and look up its entry
    points; ``spec`` is a declaration (``ops.KernelSpec``) or the name of one.

    Raises:
        KernelCompileError: NVRTC rejected the source (``.log`` has the log).
        ValueError: an unknown kernel name, no cuda launch geometry in the declaration, or no
            shader file for it.
        RuntimeError: under the launch timeline (``backend.timeline``), a module without its
            ``xi_tl`` (``_timeline.Timeline.attach``).
    """
    if isinstance(spec, str):
        spec = kernel_spec(spec)
    name, launch = spec.name, spec.cuda
    if launch is None:
        raise ValueError(f"no CUDA launch configuration for kernel {name!r}")
    if launch.family and launch.family not in FAMILIES:
        raise ValueError(f"kernel {name!r}: unknown CUDA launcher family {launch.family!r}; "
                         f"known: {', '.join(sorted(FAMILIES))}")
    cubin = compile_shader(spec.source_name, backend.arch, backend.stage_max, backend.driver_version)
    backend.make_current()
    lib = backend._lib
    mod, fn = ffi.new("CUmodule *"), ffi.new("CUfunction *")
    check(lib.cuModuleLoadData(mod, cubin), f"cuModuleLoadData({spec.source_name}.cu)")
    check(lib.cuModuleGetFunction(fn, mod[0], name.encode()), f"cuModuleGetFunction({name})")
    if backend.timeline is not None and not backend.timeline.attach(mod[0]):
        lib.cuModuleUnload(mod[0])
        raise RuntimeError(f"{spec.source_name}.cu has no xi_tl under XINFER_TIMELINE=1 "
                           f"(every shader includes shaders/xi_common.cuh's)")
    if not launch.family:
        return CUDAKernel(name, mod[0], fn[0], launch.block,
                          functools.partial(launch.grid, sms=backend.multiprocessors), pdl=True)
    family = FAMILIES[launch.family](dict(launch.params), sms=backend.multiprocessors,
                                     stage_max=backend.stage_max, cc=backend.compute_capability,
                                     pq_max=backend.pq_stage_max)
    entries = _entries(lib, mod[0], name, family.entries)
    for suffix, nbytes in family.opt_in.items():  # dynamic shared memory past 48 KB is opt-in
        check(lib.cuFuncSetAttribute(entries[suffix], _driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     nbytes), f"cuFuncSetAttribute({name}{suffix})")
    return CUDAKernel(name, mod[0], entries[""], 256, None, family.launch, entries, pdl=True)
