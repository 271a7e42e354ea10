"""``needs_nvrtc``: a test that compiles shaders with NVRTC (no GPU needed) skips where NVRTC's library
is not installed (the ``[cuda]`` extra: ``nvidia-cuda-nvrtc``), as on CI's machine."""

import pytest

from xinfer_async.backends.cuda import _nvrtc

try:
    _nvrtc.load()
    HAVE_NVRTC = True
except OSError:
    HAVE_NVRTC = False

needs_nvrtc = pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC not installed (pip install -e '.[cuda]')")
