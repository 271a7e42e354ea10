"""``--compare llama.cpp``: llama.cpp's own benchmarks on the same GGUF file, for a ratio against ours.

llama.cpp (https://github.com/ggml-org/llama.cpp; ``../shared/vendor/`` has the source and the build
recipe) ships two benchmark programs:

- ``llama-bench``: ``ppN``, one N-token prompt evaluated as one batch, and ``tgN``, N single-token
  decode steps from an empty context; tok/s of each (``-o json``: one object a test, ``avg_ts``
  and ``samples_ts`` in tokens/s);
- ``llama-batched-bench``: B sequences, each a ``-npp`` prompt then ``-ntg`` tokens decoded together,
  one batch a step; ``speed_tg`` is the B streams' generated tokens / the decode phase's time
  (``--output-format jsonl``: one object a line).

This module checks a binary, builds the command lines (cpu: ``-t THREADS``; cuda: every layer on the
GPU and flash attention, as the reference figures in ``../shared/vendor/README.md`` were taken), runs
them and parses their output. ``bench model`` interleaves the runs with its own (``LlamaCpp``).

llama.cpp runs with the environment the user started ``bench`` with: the OpenMP defaults the
package sets for itself (``_omp.configure``: ``OMP_WAIT_POLICY``, ``OMP_NUM_THREADS``) are taken out,
so llama.cpp keeps its own defaults, as a user running it gets them. Those spin: on a loaded machine
(load ~20 on 2 cores) llama.cpp's tg128 of SmolLM2-135M ran for minutes where it takes seconds with
``OMP_WAIT_POLICY=PASSIVE``; a variable the user sets reaches both sides (``OMP_WAIT_POLICY=PASSIVE
xinfer-async bench model --compare llama.cpp ...`` measures llama.cpp's kernels rather than its waiting).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import _omp
from ._report import render_table

#: the environment variable ``--llama-bench`` defaults to (also the tests' path to a real build)
ENV_LLAMA_BENCH = "XINFER_LLAMA_BENCH"
#: llama-batched-bench's prompt length a sequence (the reference figures' ``-npp 32``)
BATCHED_PROMPT = 32
TIMEOUT_S = 1800.0


class LlamaCppError(RuntimeError):
    """A llama.cpp program failed (exit status, the end of its stderr) or printed nothing parseable."""


def check_binary(path: str | os.PathLike | None, option: str = "--llama-bench") -> Path:
    """The path of an executable llama.cpp program, checked before anything slow runs.

    Raises:
        ValueError: ``path`` is None or empty (the message names ``option`` and ``$XINFER_LLAMA_BENCH``),
            does not exist, is not a file, or is not executable (the message names the path).
    """
    if not path:
        raise ValueError(f"--compare llama.cpp needs {option} PATH (or ${ENV_LLAMA_BENCH}): the llama-bench "
                         f"binary of a llama.cpp build (recipe: ../shared/vendor/README.md)")
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"{option}: no such file: {str(p)!r}")
    if not p.is_file():
        raise ValueError(f"{option}: not a file: {str(p)!r}")
    if not os.access(p, os.X_OK):
        raise ValueError(f"{option}: not executable: {str(p)!r}")
    return p


def peer_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) less the OpenMP variables ``_omp.configure`` set itself."""
    env = dict(os.environ if environ is None else environ)
    for name in _omp.defaulted():
        env.pop(name, None)
    return env


def llama_bench_argv(binary: str | os.PathLike, model: str | os.PathLike, *, n_prompt: int, n_gen: int,
                     threads: int, cuda: bool, repetitions: int = 1) -> list[str]:
    """``llama-bench`` running ``pp{n_prompt}`` (when > 0) and ``tg{n_gen}`` (when > 0), JSON out."""
    argv = [str(binary), "-m", str(model), "-p", str(n_prompt), "-n", str(n_gen), "-r", str(repetitions),
            "-t", str(threads), "-o", "json"]
    return argv + (["-ngl", "99", "-fa", "1"] if cuda else ["-ngl", "0"])


def batched_bench_argv(binary: str | os.PathLike, model: str | os.PathLike, *, streams: Sequence[int], n_gen: int,
                       threads: int, cuda: bool, n_prompt: int = BATCHED_PROMPT) -> list[str]:
    """``llama-batched-bench``: for each B in ``streams``, B sequences of an ``n_prompt``-token prompt
    and ``n_gen`` decoded tokens (JSON lines out); the context holds the largest B's tokens."""
    ctx = max(streams) * (n_prompt + n_gen) + 64
    argv = [str(binary), "-m", str(model), "-c", str(ctx), "-b", "2048", "-ub", "512", "-npp", str(n_prompt),
            "-ntg", str(n_gen), "-npl", ",".join(str(b) for b in streams), "-t", str(threads), "-tb", str(threads),
            "--output-format", "jsonl"]
    return argv + (["-ngl", "99", "-fa", "on"] if cuda else ["-ngl", "0"])


def parse_llama_bench(text: str) -> list[dict[str, Any]]:
    """The tests of ``llama-bench -o json`` output: one dict each, with its fields as llama.cpp writes
    them (``n_prompt``, ``n_gen``, ``n_threads``, ``avg_ts`` tok/s, ``stddev_ts``, ``samples_ts``,
    ``build_commit``, ``backends``, ...) and ``test``: ``"pp512"`` or ``"tg128"``.

    Raises:
        LlamaCppError: not a JSON array of objects with ``n_prompt``, ``n_gen`` and ``avg_ts``.
    """
    try:
        tests = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LlamaCppError(f"llama-bench printed no JSON ({exc}): {text[:200]!r}") from None
    if not isinstance(tests, list) or not all(isinstance(t, dict) for t in tests):
        raise LlamaCppError(f"llama-bench JSON is not a list of tests: {text[:200]!r}")
    for t in tests:
        missing = {"n_prompt", "n_gen", "avg_ts"} - t.keys()
        if missing:
            raise LlamaCppError(f"llama-bench test lacks {', '.join(sorted(missing))}: {t}")
        t["test"] = f"pp{t['n_prompt']}" if t["n_prompt"] and not t["n_gen"] else (
            f"tg{t['n_gen']}" if not t["n_prompt"] else f"pp{t['n_prompt']}+tg{t['n_gen']}")
    return tests


def parse_batched_bench(text: str) -> list[dict[str, Any]]:
    """The rows of ``llama-batched-bench --output-format jsonl`` output (the lines that are JSON
    objects with ``pl`` and ``speed_tg``; the log lines around them are skipped): ``pl`` streams,
    ``pp``/``tg`` tokens a stream, ``speed_pp``/``speed_tg``/``speed`` tok/s, ``t_*`` seconds.

    Raises:
        LlamaCppError: no such line.
    """
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and {"pl", "speed_tg"} <= row.keys():
            rows.append(row)
    if not rows:
        raise LlamaCppError(f"llama-batched-bench printed no result line: {text[-300:]!r}")
    return rows


def run(argv: Sequence[str], env: dict[str, str] | None = None, timeout_s: float = TIMEOUT_S) -> str:
    """Run a llama.cpp program; its stdout.

    Raises:
        LlamaCppError: it exited with a non-zero status (the message has the command and the end of
            its stderr) or ran past ``timeout_s``.
    """
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, env=peer_env() if env is None else env,
                           timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise LlamaCppError(f"{' '.join(argv)} ran past {timeout_s:.0f} s") from None
    if p.returncode != 0:
        tail = "\n".join(p.stderr.strip().splitlines()[-8:])
        raise LlamaCppError(f"{' '.join(argv)} exited with status {p.returncode}:\n{tail}")
    return p.stdout


@dataclass
class LlamaCpp:
    """llama.cpp's programs on one GGUF file at one thread count.

    Attributes:
        llama_bench: path of ``llama-bench``; ``batched_bench``: of ``llama-batched-bench`` (None:
            batched figures are not taken).
        model: the GGUF file both sides run.
        threads: ``-t`` (cpu threads; ours: ``OMP_NUM_THREADS``, from ``XINFER_THREADS``).
        cuda: every layer on the GPU with flash attention (``-ngl 99 -fa``), else cpu only.
    """

    llama_bench: Path
    batched_bench: Path | None
    model: Path
    threads: int
    cuda: bool

    def bench(self, n_prompt: int, n_gen: int) -> dict[str, Any]:
        """One ``llama-bench`` run of ``pp{n_prompt}`` or ``tg{n_gen}`` (the other 0): its test dict."""
        text = run(llama_bench_argv(self.llama_bench, self.model, n_prompt=n_prompt, n_gen=n_gen,
                                    threads=self.threads, cuda=self.cuda))
        tests = parse_llama_bench(text)
        if len(tests) != 1:
            raise LlamaCppError(f"llama-bench printed {len(tests)} tests, expected 1: {text[:300]!r}")
        return tests[0]

    def batched(self, streams: int, n_gen: int) -> dict[str, Any]:
        """One ``llama-batched-bench`` run of ``streams`` sequences: its row."""
        if self.batched_bench is None:
            raise LlamaCppError("no llama-batched-bench binary")
        rows = parse_batched_bench(run(batched_bench_argv(self.batched_bench, self.model, streams=[streams],
                                                          n_gen=n_gen, threads=self.threads, cuda=self.cuda)))
        return rows[-1]


def batched_bench_beside(llama_bench: Path) -> Path | None:
    """``llama-batched-bench`` in ``llama_bench``'s folder when it is an executable file there, else None."""
    p = llama_bench.with_name("llama-batched-bench")
    return p if p.is_file() and os.access(p, os.X_OK) else None


def spread(samples: Sequence[float]) -> dict[str, float]:
    """``median``, ``min``, ``max`` and ``n`` of ``samples`` (tok/s)."""
    a = np.asarray(samples, np.float64)
    return dict(median=float(np.median(a)), min=float(a.min()), max=float(a.max()), n=int(a.size))


def comparison_row(what: str, batch: int, ours: Sequence[float], theirs: Sequence[float],
                   torch_tok_per_s: float | None = None) -> dict[str, Any]:
    """One line of the table: ours and llama.cpp's tok/s samples (same order: repetition i of each
    ran back to back), medians, ranges and ``ratio`` = ours median / llama.cpp median (> 1: ours
    is faster)."""
    o, t = spread(ours), spread(theirs)
    return dict(what=what, batch=batch, ours=list(ours), llamacpp=list(theirs), ours_tok_per_s=o["median"],
                ours_min=o["min"], ours_max=o["max"], llamacpp_tok_per_s=t["median"], llamacpp_min=t["min"],
                llamacpp_max=t["max"], ratio=o["median"] / t["median"], torch_tok_per_s=torch_tok_per_s,
                torch_ratio=(o["median"] / torch_tok_per_s) if torch_tok_per_s else None)


COLUMNS = [("measure", "what", ""), ("ours tok/s", "ours_tok_per_s", ".1f"), ("min", "ours_min", ".1f"),
           ("max", "ours_max", ".1f"), ("llama.cpp tok/s", "llamacpp_tok_per_s", ".1f"), ("min", "llamacpp_min", ".1f"),
           ("max", "llamacpp_max", ".1f"), ("ours/llama.cpp", "ratio", ".2f")]
TORCH_COLUMNS = [("torch tok/s", "torch_tok_per_s", ".0f"), ("ours/torch", "torch_ratio", ".2f")]


def render(result: dict[str, Any]) -> str:
    """The comparison as text: a head line (build, threads, repetitions, load average) and the table
    (a PyTorch column where any row has one)."""
    rows = result["rows"]
    cols = COLUMNS + (TORCH_COLUMNS if any(r.get("torch_tok_per_s") for r in rows) else [])
    where = "cuda, -ngl 99 -fa" if result["cuda"] else f"cpu, {result['threads']} threads each: ours OMP_NUM_THREADS, llama.cpp -t"
    load = result.get("loadavg")
    head = (f"llama.cpp (build {result.get('build_commit') or 'unknown'}) on the same file ({where}); "
            f"medians of {result['repetitions']} interleaved runs (ours, llama.cpp, ours, ...)"
            + (f"; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start" if load else "")
            + "; ours/llama.cpp > 1: ours is faster")
    return head + "\n" + render_table(cols, rows)
