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
