"""The model cache directory (``cache_dir``), shared by the registry and the synthetic models."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The model cache directory (not created here).

    ``$XINFER_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/xinfer_async``, else
    ``~/.cache/xinfer_async``.
    """
    env = os.environ.get("XINFER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "xinfer_async"
    return Path.home() / ".cache" / "xinfer_async"
