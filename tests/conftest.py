"""Shared fixtures: ``devices`` runs a test once per device present (cpu always; cuda when usable)."""

from __future__ import annotations

import pytest

import xinfer_async
from xinfer_async.runtime._open import cuda_status


def _device_names() -> list:
    names = ["cpu"]
    if cuda_status()[0]:
        names.append("cuda")
    return names


@pytest.fixture(params=_device_names())
def devices(request):
    """One open device per parameter (``cpu``, and ``cuda`` when ``cuda_status()[0]``); closed after."""
    dev = xinfer_async.open_device(request.param)
    try:
        yield dev
    finally:
        dev.close()
