"""Shared fixtures: ``devices`` runs a test once per device present (cpu always; cuda when usable)."""

from __future__ import annotations

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
    dev = xinfer_async.open_device(request.param)
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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
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
