"""OpenMP settings of the cpu backend's kernels, chosen once, before libgomp starts (the package's
``__init__`` calls :func:`configure` before anything loads ``xinfer_async._native``).

* ``OMP_WAIT_POLICY=PASSIVE`` unless set: idle OpenMP workers sleep instead of spinning (libgomp's
  spin count is 0 under the passive policy, so ``GOMP_SPINCOUNT`` needs no default). Spinning
  workers starve the trio thread and the queue thread on small or shared machines (measured on 2
  cores under load: decode 2.4 tok/s spinning vs 31 tok/s passive).
* A captured step is one native call, ``xi_replay`` (``native/kernels/team.c``), in one of two
  modes that give the same bits: each kernel opens its own parallel region (``nthreads`` -1), or
  the whole step runs in one region (0), the kernels' work claimed by the team's threads unit by
  unit; between kernels a thread spins at most ``XINFER_SPIN_US`` microseconds (default 20, less
  after waits that had to sleep), then sleeps on a futex. Neither wins everywhere (this project's
  2-core machine, SmolLM2 decode: quiet, the team 98 tok/s against 82; one busy process beside it,
  58 against 64; at load ~20 the team took ~5x the per-kernel regions' wall time: threads that stay
  runnable through a step lose the scheduler's wake-up preference that threads woken per kernel
  keep). So by default (``XINFER_CPU_TEAM`` unset or ``auto``) :class:`ReplayModes` times both on
  each captured step and runs the faster, trying the other again every ``EXPLORE`` runs, so a
  machine that gets busy (or quiet) moves the choice within a few dozen steps;
  ``XINFER_CPU_TEAM=1`` / ``0`` force the team / per-kernel regions.
* ``OMP_NUM_THREADS`` unless set: ``XINFER_THREADS`` when given, else the physical cores this
  process may run on (SMT siblings share one core's execution units, so a second thread on a core
  adds contention, not throughput, to these kernels).
"""
from __future__ import annotations

import os

_SYSFS_CPU = "/sys/devices/system/cpu"
_DEFAULTED: set[str] = set()  # the variables configure() set in os.environ (not the user's)


def physical_cores(cpus=None, sysfs_cpu: str = _SYSFS_CPU) -> int:
    """The number of distinct physical cores among ``cpus`` (logical cpu ids; default: this
    process's affinity), from sysfs ``topology/{physical_package_id,core_id}``; the logical count
    where the topology cannot be read. Always >= 1."""
    if cpus is None:
        try:
            cpus = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            return max(1, os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        try:
            with open(f"{sysfs_cpu}/cpu{cpu}/topology/physical_package_id") as f:
                package = f.read().strip()
            with open(f"{sysfs_cpu}/cpu{cpu}/topology/core_id") as f:
                core = f.read().strip()
        except OSError:
            return max(1, len(cpus))
        cores.add((package, core))
    return max(1, len(cores))


def configure(environ=None, cores=physical_cores) -> None:
    """Set the OpenMP defaults above in ``environ`` (default ``os.environ``); a value already
    there is kept.

    Raises:
        ValueError: ``XINFER_THREADS`` is set and is not a positive integer.
    """
    env = os.environ if environ is None else environ
    mine = _DEFAULTED if environ is None else set()
    if "OMP_WAIT_POLICY" not in env:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
        mine.add("OMP_WAIT_POLICY")
    if "OMP_NUM_THREADS" in env:
        return
    given = env.get("XINFER_THREADS")
    if given is not None:
        try:
            n = int(given)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"XINFER_THREADS must be a positive integer, got {given!r}")
    else:
        n = cores()
    env["OMP_NUM_THREADS"] = str(n)
    mine.add("OMP_NUM_THREADS")


def defaulted() -> frozenset[str]:
    """The names of the variables :func:`configure` set in ``os.environ`` itself (the ones the user
    had set are not among them): what a child process that is not ours (a peer benchmark) should
    not inherit."""
    return frozenset(_DEFAULTED)


TEAM, PER_KERNEL = 0, -1  # xi_replay's nthreads: one region a step (omp_get_max_threads()), a region a kernel


def replay_threads(environ=None) -> int | None:
    """The ``nthreads`` the cpu backend passes to ``xi_replay`` when ``XINFER_CPU_TEAM`` forces one:
    ``TEAM`` (0) for ``1``, ``PER_KERNEL`` (-1) for ``0``; None (unset or ``auto``): chosen per
    step by :class:`ReplayModes`.

    Raises:
        ValueError: ``XINFER_CPU_TEAM`` is set to something other than ``auto``, ``0`` or ``1``.
    """
    env = os.environ if environ is None else environ
    given = env.get("XINFER_CPU_TEAM", "auto").strip().lower() or "auto"
    if given not in ("auto", "0", "1"):
        raise ValueError(f"XINFER_CPU_TEAM must be auto, 0 or 1, got {env.get('XINFER_CPU_TEAM')!r}")
    return None if given == "auto" else TEAM if given == "1" else PER_KERNEL


class ReplayModes:
    """The mode of each captured step's ``xi_replay`` (``TEAM`` or ``PER_KERNEL``; the same bits
    either way): ``forced`` (``replay_threads()``) when not None; else, per step (``key``: the
    prepared run), the one with the lower moving average of its wall seconds (``record``), each
    mode run twice first (alternating), the other mode once every ``EXPLORE`` runs after that. One
    per queue thread (not thread-safe)."""

    EXPLORE = 32
    ALPHA = 0.25  # weight of a new time in a mode's moving average
    MAX_KEYS = 1024  # steps remembered (a plan's captured runs live as long as its graph)

    def __init__(self, forced: int | None = None):
        self.forced = forced
        self._state: dict = {}  # key -> [average seconds TEAM, average seconds PER_KERNEL, runs]

    def pick(self, key) -> int:
        """The ``nthreads`` to run ``key`` with now."""
        if self.forced is not None:
            return self.forced
        st = self._state.get(key)
        if st is None:
            if len(self._state) >= self.MAX_KEYS:
                self._state.clear()
            st = self._state[key] = [None, None, 0]
        runs = st[2]
        st[2] = runs + 1
        if runs < 4 or st[0] is None or st[1] is None:
            return TEAM if runs % 2 == 0 else PER_KERNEL
        best = TEAM if st[0] <= st[1] else PER_KERNEL
        if runs % self.EXPLORE == 0:
            return PER_KERNEL if best == TEAM else TEAM
        return best

    def record(self, key, nthreads: int, seconds: float) -> None:
        """A run of ``key`` in mode ``nthreads`` took ``seconds`` of wall time."""
        st = self._state.get(key)
        if st is None or self.forced is not None:
            return
        i = 0 if nthreads == TEAM else 1
        st[i] = seconds if st[i] is None else st[i] + self.ALPHA * (seconds - st[i])

    def choice(self, key) -> int | None:
        """The mode ``key`` runs in outside exploration (None before both were timed)."""
        if self.forced is not None:
            return self.forced
        st = self._state.get(key)
        if st is None or st[0] is None or st[1] is None:
            return None
        return TEAM if st[0] <= st[1] else PER_KERNEL
