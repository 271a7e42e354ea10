"""``backends/cuda/_nvrtc.py``'s cubin cache: a hit is read, not compiled (the PTX too); a miss that finds another
process compiling the same cubin waits for it and reads it (the cache's lock), so the processes
sharing a cache (pytest-xdist workers, the pre-compile pool) compile each cubin once. Needs NVRTC,
no GPU."""

import fcntl
import multiprocessing
import os
import threading

import pytest

from xinfer_async.backends.cuda import _nvrtc

try:
    _nvrtc.load()
    HAVE_NVRTC = True
except OSError:
    HAVE_NVRTC = False

pytestmark = pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC not installed (pip install -e '.[cuda]')")

SOURCE = 'extern "C" __global__ void k(float *y, float a) { y[threadIdx.x] *= a + %d.0f; }\n'


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XINFER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("XINFER_NVRTC_LOG", str(tmp_path / "nvrtc.log"))
    return tmp_path


def test_a_cached_cubin_is_read_not_compiled(cache):
    before = _nvrtc.statistics()
    cubin = _nvrtc.compile_cubin(SOURCE % 1, "k.cu", "sm_90")
    mid = _nvrtc.statistics()
    assert cubin[:4] == b"\x7fELF" and mid.compiles == before.compiles + 1 and mid.compile_s > before.compile_s
    assert os.path.isfile(_nvrtc.cache_path(SOURCE % 1, "k.cu", "sm_90"))
    assert _nvrtc.compile_cubin(SOURCE % 1, "k.cu", "sm_90") == cubin
    after = _nvrtc.statistics()
    assert (after.compiles, after.hits) == (mid.compiles, mid.hits + 1)
    lines = [line.split() for line in (cache / "nvrtc.log").read_text().splitlines()]
    me = os.getpid()
    assert [(int(p), o, n) for p, o, _, n, _ in lines] == [(me, "compiled", "k.cu"), (me, "hit", "k.cu")]
    # the PTX of that compile was stored beside the cubin; a virtual arch is a PTX-only compile, cached too
    assert ".entry k" in _nvrtc.compile_ptx(SOURCE % 1, "k.cu", "sm_90")
    assert _nvrtc.statistics().compiles == mid.compiles
    ptx = _nvrtc.compile_ptx(SOURCE % 1, "k.cu", "compute_90")
    assert ".target sm_90" in ptx and _nvrtc.compile_ptx(SOURCE % 1, "k.cu", "compute_90") == ptx
    assert _nvrtc.statistics().compiles == mid.compiles + 1
    # another arch, option or driver version is another cubin
    path = _nvrtc.cache_path(SOURCE % 1, "k.cu", "sm_90")
    assert path != _nvrtc.cache_path(SOURCE % 1, "k.cu", "sm_90", driver_version=12080)
    assert path != _nvrtc.cache_path(SOURCE % 1, "k.cu", "sm_90", options=("-DX=1",))
    assert path != _nvrtc.cache_path(SOURCE % 1, "k.cu", "sm_80")


def test_a_miss_waits_for_the_lock_holder_and_reads_its_cubin(cache, monkeypatch):
    """This test holds the cubin's lock as a compiling process would; the caller's miss must wait
    for it, then read what the holder wrote (a marker, not an ELF) instead of compiling."""
    path = _nvrtc.cache_path(SOURCE % 2, "k.cu", "sm_90")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    missed, read = threading.Event(), _nvrtc._read

    def read_and_tell(p):
        data = read(p)
        missed.set()
        return data

    monkeypatch.setattr(_nvrtc, "_read", read_and_tell)
    before, out = _nvrtc.statistics(), []
    t = threading.Thread(target=lambda: out.append(_nvrtc.compile_cubin(SOURCE % 2, "k.cu", "sm_90")))
    t.start()
    try:
        assert missed.wait(60)  # its first look found nothing: it goes for the lock, which this test holds
        with open(path, "wb") as f:
            f.write(b"compiled by the lock holder")
    finally:
        os.close(fd)  # releases the lock
    t.join(60)
    after = _nvrtc.statistics()
    assert out == [b"compiled by the lock holder"]
    assert (after.compiles, after.waits) == (before.compiles, before.waits + 1)


def _compile_in_child(cache_dir: str, log: str) -> bytes:
    os.environ["XINFER_CACHE_DIR"], os.environ["XINFER_NVRTC_LOG"] = cache_dir, log
    return _nvrtc.compile_cubin(SOURCE % 3, "k.cu", "sm_90")


def test_processes_sharing_a_cache_compile_a_cubin_once(cache):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        cubins = pool.starmap(_compile_in_child, [(str(cache), str(cache / "nvrtc.log"))] * 2)
    assert cubins[0] == cubins[1] and cubins[0][:4] == b"\x7fELF"
    outcomes = sorted(line.split()[1] for line in (cache / "nvrtc.log").read_text().splitlines())
    assert outcomes in (["compiled", "hit"], ["compiled", "waited"])
