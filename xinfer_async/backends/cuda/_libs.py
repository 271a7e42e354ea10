"""Finding NVIDIA's libraries shipped as Python wheels (``nvidia-cuda-nvrtc``, ``nvidia-cublas``)."""

from __future__ import annotations

import glob
import os
import site
import sys


def _roots() -> list[str]:
    roots = list(sys.path)
    try:
        roots += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # virtualenvs without site.getsitepackages
        pass
    return [r for r in dict.fromkeys(roots) if r and os.path.isdir(os.path.join(r, "nvidia"))]


def find_library(env: str, stem: str, subdirs: tuple[str, ...]) -> list[str]:
    """Candidate paths of ``stem`` (e.g. ``"libnvrtc"``), best first: ``$env`` if set, then the
    ``nvidia/<subdir>/lib/<stem>.so.*`` files of installed wheels (cu13 before cu12), then the
    plain soname for the system loader."""
    found = []
    if os.environ.get(env):
        found.append(os.environ[env])
    for root in _roots():
        for sub in subdirs:
            found += sorted(glob.glob(os.path.join(root, "nvidia", sub, "lib", f"{stem}.so.[0-9]*")), reverse=True)
    found += [f"{stem}.so.13", f"{stem}.so.12", f"{stem}.so"]
    return [p for p in found if not os.path.basename(p).count("builtins")]
