"""Lowered commands: what the runtime hands a backend queue (``BackendQueue.execute``) and graph
capture (``Backend.capture``), one frozen record per kind. Addresses are plain ``int`` device
addresses; a backend dispatches on the record's type. ``kind`` names the kind in messages and
profiles (``"copy"``, ``"dispatch"``, ...).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Sequence, Union

import numpy as np


@dataclasses.dataclass(frozen=True, slots=True)
class CopyCmd:
    """Copy ``nbytes`` from device address ``src`` to ``dst`` (ranges do not overlap)."""

    kind: ClassVar[str] = "copy"

    dst: int
    src: int
    nbytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class FillCmd:
    """Fill ``nbytes`` (a multiple of 4) at ``dst`` with the 4-byte ``pattern`` (a uint32 ``int``)."""

    kind: ClassVar[str] = "fill"

    dst: int
    nbytes: int
    pattern: int


@dataclasses.dataclass(frozen=True, slots=True)
class UploadCmd:
    """Copy host bytes ``host`` (a C-contiguous ``numpy.uint8`` array, kept alive by the runtime until
    the list's fence completes) to ``dst``."""

    kind: ClassVar[str] = "upload"

    dst: int
    host: np.ndarray


@dataclasses.dataclass(frozen=True, slots=True)
class DownloadCmd:
    """Copy ``host.nbytes`` device bytes at ``src`` into the writable C-contiguous ``numpy.uint8``
    array ``host`` (valid once the fence completes)."""

    kind: ClassVar[str] = "download"

    src: int
    host: np.ndarray


@dataclasses.dataclass(frozen=True, slots=True)
class DispatchCmd:
    """Launch ``kernel`` (from ``Backend.load_kernel``).

    ``grid``: a ``(x, y, z)`` tuple of blocks (ignored by cpu), or the backend's own launch record
    from its kernel's ``launch_grid`` (cuda: a ``LaunchGrid`` naming the entry point, block and
    shared bytes); ``addresses``: a list of ``int`` in the kernel's binding order; ``constants``: the
    packed constants ``bytes``.
    """

    kind: ClassVar[str] = "dispatch"

    kernel: Any
    grid: Any
    addresses: Sequence[int]
    constants: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class GemmCmd:
    """Run ``gemm`` (from ``Backend.create_gemm``) on the matrices at ``a``, ``b``, ``c``, with
    ``Backend.gemm_workspace_nbytes(gemm)`` bytes of device workspace at ``workspace`` (0: none),
    which no command that may run at the same time uses."""

    kind: ClassVar[str] = "gemm"

    gemm: Any
    a: int
    b: int
    c: int
    workspace: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class TimestampCmd:
    """Record the device time into ``ts`` (from ``Backend.create_timestamp``)."""

    kind: ClassVar[str] = "timestamp"

    ts: Any


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayCmd:
    """Replay ``graph`` (from ``Backend.capture``)."""

    kind: ClassVar[str] = "graph"

    graph: Any


#: any lowered command
Command = Union[CopyCmd, FillCmd, UploadCmd, DownloadCmd, DispatchCmd, GemmCmd, TimestampCmd, ReplayCmd]
#: the kinds a graph may capture (no host I/O, no timestamps, no nested replays)
CAPTURABLE = (CopyCmd, FillCmd, DispatchCmd, GemmCmd)
