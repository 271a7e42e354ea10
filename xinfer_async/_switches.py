"""On/off switches read from the environment: the A/B knobs of the benchmarks (``XINFER_MVP``,
``XINFER_NORMQ``, ``XINFER_QATT``, ...). Each is on when unset or ``1`` and off when ``0``; the kernels a
switch chooses between give the same bits, so a switch changes speed only. ``env_int``: the integer
knobs of the same kind (``XINFER_KQ_TILED_MIN_T``, ``XINFER_ATT_BLOCK_HEADS``, ...)."""

from __future__ import annotations

from typing import Mapping


def env_switch(environ: Mapping[str, str], name: str) -> bool:
    """Whether the switch ``name`` is on: unset, empty or ``1`` is on, ``0`` off.

    Raises:
        ValueError: ``name`` is set to something else (the message names the variable and the value).
    """
    v = environ.get(name, "").strip()
    if v not in ("", "0", "1"):
        raise ValueError(f"{name}={v!r} is not one of '', '0', '1'")
    return v != "0"


def env_int(environ: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    """The integer ``lo``..``hi`` that ``name`` says; ``default`` where it is unset or empty.

    Raises:
        ValueError: ``name`` is set to something else (the message names the variable, the value and the range).
    """
    v = environ.get(name, "").strip()
    if not v:
        return default
    if not (v.isascii() and v.isdigit()) or not lo <= int(v) <= hi:
        raise ValueError(f"{name}={v!r} is not an integer from {lo} to {hi}")
    return int(v)
