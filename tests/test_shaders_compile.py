"""Every shader compiles with NVRTC for sm_90 (the H200) where NVRTC is installed (``pip install -e
'.[cuda]'`` or ``XINFER_NVRTC``), no GPU needed: a compile error shows up on a machine without one.
Skips where NVRTC is absent (CI); on the H200 the cuda tests load every kernel anyway."""

import os

import pytest

from xinfer_async.backends.cuda import _nvrtc
from xinfer_async.backends.cuda._backend import shader_dir

try:
    _nvrtc.load()
    HAVE_NVRTC = True
except OSError:
    HAVE_NVRTC = False

SHADERS = sorted(f for f in os.listdir(shader_dir()) if f.endswith(".cu"))


@pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC not installed (pip install -e '.[cuda]')")
@pytest.mark.parametrize("name", SHADERS)
def test_shader_compiles_for_sm90(name, tmp_path, monkeypatch):
    monkeypatch.setenv("XINFER_CACHE_DIR", str(tmp_path))  # compile, never read a cached cubin
    d = shader_dir()
    headers = {h: open(os.path.join(d, h)).read() for h in os.listdir(d) if h.endswith(".cuh")}
    cubin = _nvrtc.compile_cubin(open(os.path.join(d, name)).read(), name, "sm_90", headers)
    assert cubin[:4] == b"\x7fELF"
