"""Finding and opening NVIDIA's libraries shipped as Python wheels (``nvidia-cuda-nvrtc``, ``nvidia-cublas``)."""

from __future__ import annotations

import glob
import os
import site
import sys
from typing import Any, Callable


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


def open_first(ffi: Any, env: str, stem: str, subdirs: tuple[str, ...], hint: str,
               preload: Callable[[str], list[str]] = lambda path: [], keep: list | None = None) -> Any:
    """``ffi.dlopen`` the first of ``find_library(env, stem, subdirs)`` that opens.

    ``preload(path)``: libraries to open with RTLD_GLOBAL before ``path`` (kept open in ``keep``);
    one that fails to open makes that candidate fail.

    Raises:
        OSError: none opened; the message gives ``hint`` and every path tried with its error.
    """
    tried = []
    for path in find_library(env, stem, subdirs):
        try:
            for dep in preload(path):
                handle = ffi.dlopen(dep, ffi.RTLD_GLOBAL | ffi.RTLD_NOW)
                if keep is not None:
                    keep.append(handle)
            return ffi.dlopen(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise OSError(f"{hint}: " + "; ".join(tried))
