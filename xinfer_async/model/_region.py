"""Allocations and regions of a model definition (weights and private scratch)."""

from __future__ import annotations

import dataclasses
import enum
import itertools
from typing import Any

from ..hal import TensorDesc, ValidationError

_ids = itertools.count(1)
_MAX = 1 << 62


class Placement(enum.Enum):
    """Where a scratch allocation lives: ``DEVICE`` (device-local) or ``SHARED`` (host-visible;
    both current backends give device memory the host reaches through uploads and downloads)."""

    DEVICE = "device"
    SHARED = "shared"


class AllocationKind(enum.Enum):
    WEIGHT = "weight"  # immutable, uploaded once, shared by every plan and slot
    SCRATCH = "scratch"  # private to each slot, fresh each run (temporaries, IO)
    STATE = "state"  # private to each slot, persistent between runs of that slot (a KV cache)


class Allocation:
    """One allocation of a ``ModelSession``: a weight, private scratch, or persistent state.

    Attributes:
        owner: the session token it belongs to (regions of another definition are refused).
        nbytes: size in bytes.
        buffer: the device buffer of a weight (``None`` for private allocations: slots allocate
            their own).
    """

    def __init__(self, owner: Any, kind: AllocationKind, nbytes: int, placement: Placement = Placement.DEVICE,
                 desc: TensorDesc | None = None, name: str = ""):
        self.owner = owner
        self.kind = kind
        self.nbytes = nbytes
        self.placement = placement
        self.desc = desc
        self.name = name
        self.buffer: Any = None
        self.id = next(_ids)

    @property
    def is_weight(self) -> bool:
        return self.kind is AllocationKind.WEIGHT

    def region(self, offset: int = 0, nbytes: int | None = None) -> "Region":
        return Region(self, offset, self.nbytes - offset if nbytes is None else nbytes)

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"<Allocation #{self.id}{label} {self.kind.value} {self.nbytes} B>"


@dataclasses.dataclass(frozen=True, eq=True)
class Region:
    """Bytes ``[offset, offset + nbytes)`` of an allocation.

    Raises:
        ValidationError: the region lies outside its allocation (checked without overflow:
            Python integers, and any value past 2**62 is refused).
    """

    allocation: Allocation
    offset: int
    nbytes: int

    def __post_init__(self):
        o, n, a = self.offset, self.nbytes, self.allocation
        if not isinstance(o, int) or not isinstance(n, int):
            raise TypeError(f"region offset and nbytes must be int, got {type(o).__name__}, {type(n).__name__}")
        if o < 0 or n < 0 or o >= _MAX or n >= _MAX or o + n > a.nbytes:
            raise ValidationError(
                f"region [offset={o}, nbytes={n}] is outside {a!r} of {a.nbytes} bytes"
            )

    def slice(self, offset: int, nbytes: int) -> "Region":
        """A sub-region, ``offset`` relative to this region's start.

        Raises:
            ValidationError: it runs outside this region.
        """
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise ValidationError(f"slice [offset={offset}, nbytes={nbytes}] is outside a region of {self.nbytes} bytes")
        return Region(self.allocation, self.offset + offset, nbytes)

    @property
    def end(self) -> int:
        return self.offset + self.nbytes

    def overlaps(self, other: "Region") -> bool:
        return self.allocation is other.allocation and self.offset < other.end and other.offset < self.end

    def __repr__(self) -> str:
        return f"Region({self.allocation!r}, {self.offset}, {self.nbytes})"


@dataclasses.dataclass(frozen=True)
class KernelId:
    """A kernel registered with a session (``ModelSession.kernel``)."""

    owner: Any
    name: str


@dataclasses.dataclass(frozen=True)
class IODesc:
    """A fragment input or output: a tensor description placed at a region.

    Raises (checked by ``ModelDefinition.fragment``): ``ValidationError`` for an empty descriptor,
    one larger than its region, or a region of a weight.
    """

    region: Region
    desc: TensorDesc
