"""Benchmarks: ``xinfer-async bench SUBCOMMAND [options]`` (or ``python -m xinfer_async.bench``).

Subcommands live in a registry, ``SUBCOMMANDS``: a name -> ``"module:function"`` string, imported
only when that subcommand runs. A function takes the remaining ``argv`` (a list of ``str``) and
returns an exit status. Other parts of the project add theirs with :func:`register` or by adding a
line to the dict (``model``, ``load``), and a one-line description to ``SUMMARIES`` (``bench --help``
lists it).
"""

from __future__ import annotations

import importlib
import sys
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
    "cuda-matrix": "xinfer_async.bench._matrix_bench:main",
}

#: what each subcommand measures, one line (``xinfer-async bench --help``)
SUMMARIES: dict[str, str] = {
    "model": "decode and prefill speed of a real model (tok/s, GB/s) at several concurrent requests",
    "load": "a serving benchmark: requests arriving at a rate (Poisson), latency and throughput",
    "runtime": "the async runtime's own costs: fence round trips, dispatch recording, kernel GB/s",
    "model-layer": "runs/s of a tiny prepared model and the host overhead of PreparedModel.run",
    "native": "the cpu backend's matmul kernels at SmolLM2-135M's shapes (us a call, GB/s)",
    "cuda-raw": "raw cuda figures: launch and fence round trips, kernel GB/s, cuBLAS TFLOP/s (needs a GPU)",
    "cuda-matrix": "GB/s of the cuda matrix kernels per weight type beside q4_1, at model shapes (needs a GPU)",
    "serve": "a streaming load test of any OpenAI-compatible server over HTTP (TTFT, ITL, tok/s)",
}

#: subcommands that drive the cuda backend directly
NEEDS_CUDA = {"cuda-raw", "cuda-matrix"}

#: subcommands whose function parses its argv with argparse (``--help`` prints and exits before
#: anything runs); for the others ``bench NAME --help`` prints the module's docstring
OWN_HELP = {"model", "load", "runtime", "model-layer", "native", "cuda-raw", "cuda-matrix", "serve"}

#: the command line the benchmarks' usage lines show
PROG = "xinfer-async bench"


def register(name: str, target: str, summary: str = "") -> None:
    """Add subcommand ``name`` running ``target`` (``"package.module:function"``), described by
    ``summary`` (one line) in ``bench --help``."""
    SUBCOMMANDS[name] = target
    if summary:
        SUMMARIES[name] = summary


def parser(name: str, doc: str | None) -> "argparse.ArgumentParser":
    """The argument parser of subcommand ``name``: ``prog`` is ``xinfer-async bench NAME`` and its
    help is the module's docstring whole (what it measures, what each column means), without its
    ``Usage:`` paragraph (argparse prints the usage) and with RST's double backquotes made single."""
    import argparse

    paras = [p for p in (doc or "").strip().split("\n\n") if not p.lstrip().startswith("Usage:")]
    text = "\n\n".join(paras).replace("``", "`")
    return argparse.ArgumentParser(prog=f"{PROG} {name}", description=text,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def resolve(name: str, check_cuda: bool = True) -> Callable[[list[str]], int]:
    """The function of subcommand ``name`` (for a cuda one where cuda is not usable and
    ``check_cuda``, a function that says so and returns 2).

    Raises:
        ValueError: no subcommand has that name (the message lists them).
    """
    try:
        target = SUBCOMMANDS[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; choose one of {', '.join(sorted(SUBCOMMANDS))}") from None
    module, _, fn = target.partition(":")
    if name in NEEDS_CUDA and check_cuda:
        from .._open import cuda_status

        ok, reason = cuda_status()
        if not ok:
            def unavailable(argv: list[str]) -> int:
                print(f"{PROG} {name}: error: needs a usable cuda device: {reason}", file=sys.stderr)
                return 2

            return unavailable
    return getattr(importlib.import_module(module), fn)
