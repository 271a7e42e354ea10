"""``model/_region.py``: allocations and regions (no device needed)."""

import pytest

from xinfer_async.hal import ValidationError
from xinfer_async.model import Region
from xinfer_async.model._region import Allocation, AllocationKind


def _alloc(nbytes=64):
    return Allocation(object(), AllocationKind.SCRATCH, nbytes, name="a")


def test_region_inside_allocation():
    a = _alloc(64)
    r = a.region()
    assert (r.offset, r.nbytes, r.end) == (0, 64, 64)
    s = r.slice(16, 32)
    assert (s.allocation, s.offset, s.nbytes) == (a, 16, 32)
    assert s.slice(8, 8) == Region(a, 24, 8)
    assert Region(a, 64, 0).nbytes == 0  # an empty region at the end is inside


@pytest.mark.parametrize("offset, nbytes", [(60, 8), (64, 1), (-1, 4), (0, -1), (0, 65)])
def test_region_outside_allocation(offset, nbytes):
    with pytest.raises(ValidationError, match=r"region \[offset=-?\d+, nbytes=-?\d+\] is outside .* of 64 bytes"):
        Region(_alloc(64), offset, nbytes)


@pytest.mark.parametrize("offset, nbytes", [
    (2**64, 1), (2**63 - 1, 2**63), (1, 2**64 - 1), (2**62, 0), (0, 2**62), (2**200, 2**200),
])
def test_region_huge_offsets_are_refused_without_overflow(offset, nbytes):
    # offset + nbytes would wrap around in 64-bit arithmetic; Region refuses them all
    with pytest.raises(ValidationError, match=r"is outside .* of 64 bytes"):
        Region(_alloc(64), offset, nbytes)


def test_allocation_region_past_end():
    with pytest.raises(ValidationError, match=r"region \[offset=2361183241434822606848, nbytes=-\d+\] is outside"):
        _alloc(64).region(2**71)


@pytest.mark.parametrize("offset, nbytes", [(40, 32), (-8, 8), (0, -1), (2**64 - 8, 16), (2**63, 2**63)])
def test_slice_outside_region(offset, nbytes):
    r = _alloc(128).region(32, 64)
    with pytest.raises(ValidationError, match=r"slice \[offset=-?\d+, nbytes=-?\d+\] is outside a region of 64 bytes"):
        r.slice(offset, nbytes)


def test_region_offsets_must_be_int():
    with pytest.raises(TypeError, match="region offset and nbytes must be int, got float, int"):
        Region(_alloc(), 1.5, 4)


def test_overlaps_only_within_one_allocation():
    a, b = _alloc(64), _alloc(64)
    assert Region(a, 0, 16).overlaps(Region(a, 8, 16))
    assert not Region(a, 0, 16).overlaps(Region(a, 16, 16))
    assert not Region(a, 0, 16).overlaps(Region(b, 0, 16))
