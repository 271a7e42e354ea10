"""Shared fixtures: ``devices`` runs a test once per device present (cpu always; cuda when usable);
``cuda_dev`` is the cuda device alone."""

from __future__ import annotations

import os
import threading
import time

import pytest

import xinfer_async
from xinfer_async._open import cuda_status


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def devices(request):
    """One open device per parameter (``cpu``, and ``cuda`` when ``cuda_status()[0]``, else the
    cuda case is skipped with the reason); closed after."""
    if request.param == "cuda":
        ok, reason = cuda_status()
        if not ok:
            pytest.skip(f"cuda backend not usable here: {reason}")
        _warn_if_unheld()
    dev = xinfer_async.open_device(request.param)
    try:
        yield dev
    finally:
        dev.close()


@pytest.fixture
def cuda_dev():
    """An open cuda device, or a skip with the reason (a sync fixture: a skip inside a trio test
    reaches the report without its message); closed after."""
    ok, reason = cuda_status()
    if not ok:
        pytest.skip(f"cuda backend not usable here: {reason}")
    _warn_if_unheld()
    dev = xinfer_async.open_device("cuda")
    try:
        yield dev
    finally:
        dev.close()


@pytest.fixture
def rng():
    """A fresh random generator; the seed is printed (pytest shows it when a test fails)."""
    import numpy as np

    seed = int(np.random.SeedSequence().entropy % (2**63))
    print(f"rng seed = {seed}")
    return np.random.default_rng(seed)


_precompile: dict = {}


def pytest_collection_finish(session):
    """A cold cubin cache: when the selection has cuda tests and a GPU is here, compile every shader
    on a pool of processes (``backends/cuda/_precompile.py``, one a core, the costliest first) on a
    background thread while the tests start; a test that loads a kernel meanwhile waits for the
    pool's cubin (the cache's lock) instead of compiling it again. Under pytest-xdist only worker
    gw0 runs the pool (every worker collects the same tests); the others' kernels wait for it the
    same way. ``XINFER_PRECOMPILE=0`` turns it off; ``$XINFER_NVRTC_LOG`` logs every compile."""
    if not any("cuda" in item.nodeid or item.get_closest_marker("cuda") for item in session.items):
        return
    ok, _ = cuda_status()
    if not ok:
        return
    if os.environ.get("XINFER_PRECOMPILE", "1") != "0" and os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0":
        _start_precompile()  # first: the context hold below may retry for a minute
    _hold_primary_context()


def _start_precompile():
    """Every shader on ``precompile``'s pool, from a background thread (``pytest_collection_finish``)."""
    from xinfer_async.backends.cuda._precompile import device_target, precompile

    def run():
        t0 = time.perf_counter()
        try:
            results = precompile(device_target())
            _precompile["summary"] = (f"{sum(r.outcome == 'compiled' for r in results)} of {len(results)} shaders "
                                      f"compiled ({sum(r.seconds for r in results if r.outcome == 'compiled'):.0f} s "
                                      f"of NVRTC), {time.perf_counter() - t0:.1f} s wall")
        except Exception as exc:  # the test that loads the kernel reports the same error
            _precompile["summary"] = f"failed: {type(exc).__name__}: {exc}"

    _precompile["thread"] = threading.Thread(target=run, name="precompile shaders", daemon=True)
    _precompile["thread"].start()


def _hold_primary_context():
    """Retain device 0's primary context for the whole session (every xdist worker), so that the
    tests' many ``open_device("cuda")`` / ``close()`` pairs retain and release a live context instead
    of creating and destroying one each: on the H200 with 16 workers a creation took 23-35 s and some
    failed with CUDA_ERROR_OUT_OF_MEMORY, which made the GPU suite setup-bound. A device's ``close``
    still frees every block it allocated (``tests/test_device.py``), so nothing leaks across tests."""
    from xinfer_async.backends.cuda import _driver

    lib = _driver.load()
    dev, ctx = _driver.ffi.new("CUdevice *"), _driver.ffi.new("CUcontext *")
    if lib.cuInit(0) or lib.cuDeviceGet(dev, 0):
        return  # the tests that open the device report the error
    # 16 workers creating contexts at once: one was refused (OOM) through a 15 s window of retries
    # (H200), then its first test's own open failed the same way: retry for ~60 s
    for wait in (0.5, 1, 2, 4, 8, 15, 30, 0):
        status = lib.cuDevicePrimaryCtxRetain(ctx, dev[0])
        if status == 0:
            _precompile["held"] = (lib, dev[0])
            return
        time.sleep(wait)
    _precompile["hold_failed"] = _driver.error_name(status)


def _warn_if_unheld():
    """A warning in the first cuda test of a worker whose context hold failed (warnings reach the
    summary under xdist; a terminal line written in the worker would not)."""
    why = _precompile.pop("hold_failed", None)
    if why is not None:
        import warnings

        warnings.warn(f"{os.environ.get('PYTEST_XDIST_WORKER', 'this process')} could not hold the CUDA context "
                      f"for the session ({why}): each of its cuda tests creates one (slow)", stacklevel=2)


def pytest_sessionfinish(session):
    if "thread" in _precompile:
        _precompile["thread"].join()
    if "held" in _precompile:
        lib, dev = _precompile.pop("held")
        lib.cuDevicePrimaryCtxRelease_v2(dev)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if "summary" in _precompile:
        terminalreporter.write_line(f"shader precompile (tests/conftest.py): {_precompile['summary']}")
    _skip_summary(terminalreporter)


def _skip_summary(terminalreporter):
    """After the run: how many tests skipped, grouped by why (most of them need a GPU), so a
    suite that skips ~500 tests on a machine without one says so plainly instead of ``s`` marks."""
    from collections import Counter

    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons: Counter = Counter()
    for rep in skipped:
        why = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        why = why.removeprefix("Skipped: ")
        if "cuda" in why.lower() or "gpu" in why.lower() or "nvrtc" in why.lower():
            ok, reason = cuda_status()
            why = "need a usable cuda device" + ("" if ok else f" (here: {reason})")
        elif len(why) > 110:
            why = why[:107] + "..."
        reasons[why] += 1
    terminalreporter.write_sep("-", f"{len(skipped)} tests skipped, by reason")
    for why, n in reasons.most_common():
        terminalreporter.write_line(f"{n:6d}  {why}")
