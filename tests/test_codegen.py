"""The files generated from the kernel declarations (``ops/_codegen.py``) are current, and the
structs the compilers see have the declared layout."""

import os
import struct

import pytest
from _nvrtc_marks import needs_nvrtc

from xinfer_async import _native
from xinfer_async.backends.cuda import _nvrtc
from xinfer_async.ops import KERNELS
from xinfer_async.ops import _codegen
from xinfer_async.ops._spec import CudaLaunch, KernelSpec, flat


@pytest.mark.parametrize("rel", sorted(_codegen.artefacts()))
def test_generated_file_is_current(rel):
    with open(os.path.join(_codegen.ROOT, rel)) as f:
        committed = f.read()
    assert committed == _codegen.artefacts()[rel], f"{rel} is stale: run python -m xinfer_async.ops._codegen"


def test_check_names_a_stale_file(tmp_path):
    for rel, text in _codegen.artefacts().items():
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert _codegen.stale(str(tmp_path)) == []
    (tmp_path / _codegen.CUDA_HEADER).write_text(_codegen.cuda_header().replace("float eps;", "float epsilon;", 1))
    assert _codegen.stale(str(tmp_path)) == [_codegen.CUDA_HEADER]


@pytest.mark.parametrize("name", sorted(n for n, s in KERNELS.items() if s.cpu))
def test_c_struct_layout_is_the_declared_one(name):
    """The compiled module's ``xi_<name>_c`` (what the C kernels read) against the packing
    ``KernelSpec.pack`` writes: field by field, offset, size and type."""
    spec, ffi = KERNELS[name], _native.ffi
    ctype = ffi.typeof(spec.c_struct)
    assert [f for f, _ in ctype.fields] == [n for n, _ in spec.constants]
    assert ffi.sizeof(ctype) == struct.calcsize(spec.struct_format)
    offset = 0
    for (field, kind), (_, cfield) in zip(spec.constants, ctype.fields):
        assert ffi.offsetof(ctype, field) == offset, field
        assert ffi.sizeof(cfield.type) == 4
        assert cfield.type.cname == {"i": "int32_t", "f": "float"}[kind], field
        offset += 4
    assert hasattr(_native.lib, f"xi_k_{name}")


def test_struct_families_declare_the_same_constants():
    bad = KERNELS["matmul_f32"]
    other = KernelSpec("matmul_toy", bad.bindings, bad.constants[:-1], struct="matmul", cuda=flat(lambda c: 1))
    with pytest.raises(ValueError, match="share the struct xi_matmul_c but declare different constants"):
        _codegen.cuda_header({"matmul_f32": bad, "matmul_toy": other})


def test_every_kernel_declares_its_cuda_launch():
    """Every kernel but the cpu's repacked layouts' (REPACKED_DTYPES: no shader, cuda never picks them)."""
    from xinfer_async.ops._kernels import REPACKED_DTYPES

    cpu_only = tuple(f"_{d.label}" for d in REPACKED_DTYPES)
    for spec in KERNELS.values():
        assert (spec.cuda is None) == spec.name.endswith(cpu_only), spec.name
        if spec.cuda is None:
            continue
        assert isinstance(spec.cuda, CudaLaunch), spec.name
        assert (spec.cuda.grid is None) == bool(spec.cuda.family), spec.name
        assert spec.doc, spec.name


def test_a_constant_kind_is_checked():
    with pytest.raises(ValueError, match="constant 'n' has kind 'd'"):
        KernelSpec("toy", (), (("n", "d"),))




@needs_nvrtc
def test_cuda_struct_layout_is_the_declared_one(tmp_path, monkeypatch):
    """Each CUDA struct compiled by NVRTC: a static_assert of its size and of every field's offset."""
    monkeypatch.setenv("XINFER_CACHE_DIR", str(tmp_path))
    asserts = []
    for spec in {s.struct: s for s in KERNELS.values()}.values():
        t = spec.cuda_struct
        asserts.append(f"static_assert(sizeof({t}) == {struct.calcsize(spec.struct_format)}, \"{t}\");")
        asserts += [f"static_assert(__builtin_offsetof({t}, {f}) == {4 * i}, \"{t}.{f}\");"
                    for i, (f, _) in enumerate(spec.constants)]
    d = os.path.join(_codegen.ROOT, "shaders")
    headers = {h: open(os.path.join(d, h)).read() for h in os.listdir(d) if h.endswith(".cuh")}
    source = '#include "xi_common.cuh"\n' + "\n".join(asserts) + '\nextern "C" __global__ void xi_layout() {}\n'
    assert _nvrtc.compile_cubin(source, "layout.cu", "sm_90", headers)[:4] == b"\x7fELF"


def test_cuda_only_kernels_have_no_c_side_and_the_cpu_refuses_them():
    """``cpu=False`` (the qmatmul family and its quantizers): no C struct nor prototype in the header,
    a shader and a cuda launch, and the cpu device names the kernel when asked for it."""
    from xinfer_async.hal import DeviceError

    cuda_only = [s for s in KERNELS.values() if not s.cpu]
    assert {s.name for s in cuda_only} >= {"quantize_q8_1", "rmsnorm_quantize_q8_1", "qmatmul_q4_1", "qmatmul_swiglu_q6_k"}
    header = _codegen.c_header()
    for s in cuda_only:
        assert s.cuda is not None and f"xi_k_{s.name}(" not in header and s.c_struct not in header
        assert not hasattr(_native.lib, f"xi_k_{s.name}")
    import xinfer_async

    with xinfer_async.open_device("cpu") as dev, pytest.raises(DeviceError, match="'qmatmul_q4_1' runs on cuda only"):
        dev.kernel("qmatmul_q4_1")
