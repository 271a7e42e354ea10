"""Benchmarks: ``python -m xinfer_async.bench SUBCOMMAND [options]``.

Subcommands live in a registry, ``SUBCOMMANDS``: a name -> ``"module:function"`` string, imported
only when that subcommand runs. A function takes the remaining ``argv`` (a list of ``str``) and
returns an exit status. Other parts of the project add theirs with :func:`register` or by adding a
line to the dict (``model``, ``load``).
"""

from __future__ import annotations

import importlib
from typing import Callable

SUBCOMMANDS: dict[str, str] = {
    "runtime": "xinfer_async.bench._runtime:main",
    "model-layer": "xinfer_async.bench._model_layer:main",
    "load": "xinfer_async.bench._load:main",
    "model": "xinfer_async.bench._model:main",
    "serve": "xinfer_async.bench._serve:main",  # a load test of any OpenAI-compatible server over HTTP
    # kernel-level figures (developer tools): cpu matmul speed, cuda raw figures (the gemv research
    # tools, which drive the cuda backend's private modules, live outside the package: tools/)
    "native": "xinfer_async.bench._native_bench:main",
    "cuda-raw": "xinfer_async.bench._cuda_bench:main",
}

#: subcommands that drive the cuda backend directly
NEEDS_CUDA = {"cuda-raw"}


def register(name: str, target: str) -> None:
    """Add subcommand ``name`` running ``target`` (``"package.module:function"``)."""
    SUBCOMMANDS[name] = target


def resolve(name: str) -> Callable[[list[str]], int]:
    """The function of subcommand ``name``.

    Raises:
        ValueError: no subcommand has that name (the message lists them).
    """
    try:
        target = SUBCOMMANDS[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; choose one of {', '.join(sorted(SUBCOMMANDS))}") from None
    module, _, fn = target.partition(":")
    if name in NEEDS_CUDA:
        from .._open import cuda_status

        ok, reason = cuda_status()
        if not ok:
            def unavailable(argv: list[str]) -> int:
                print(f"bench {name} needs the cuda backend: {reason}")
                return 2

            return unavailable
    return getattr(importlib.import_module(module), fn)
