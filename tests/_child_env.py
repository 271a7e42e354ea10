"""The environment of a test's child process: this checkout first on PYTHONPATH, the inherited path after it.

A child started with ``PYTHONPATH=<root>`` alone loses the parent's other entries, so on a machine whose
dependencies live on PYTHONPATH (the H200 machine: wheels installed with ``pip --target /tmp/site``) the
child fails with ``No module named 'trio'``."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_pythonpath(environ=os.environ) -> str:
    """``ROOT``, then the entries of ``environ["PYTHONPATH"]`` (if any) that are not ``ROOT``."""
    rest = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    return os.pathsep.join([str(ROOT), *rest])


def child_env(**extra: str) -> dict[str, str]:
    """A copy of ``os.environ`` with ``PYTHONPATH=child_pythonpath()`` and ``extra`` set."""
    return dict(os.environ, PYTHONPATH=child_pythonpath(), **extra)
