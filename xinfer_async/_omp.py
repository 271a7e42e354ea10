"""OpenMP settings of the cpu backend's kernels, chosen once, before libgomp starts (the package's
``__init__`` calls :func:`configure` before anything loads ``xinfer_async._native``).

* ``OMP_WAIT_POLICY=PASSIVE`` unless set: idle OpenMP workers sleep instead of spinning (libgomp's
  spin count is 0 under the passive policy, so ``GOMP_SPINCOUNT`` needs no default). Spinning
  workers starve the trio thread and the queue thread on small or shared machines (measured on 2
  cores under load: decode 2.4 tok/s spinning vs 31 tok/s passive).
* A captured step is one native call, ``xi_replay`` (``native/kernels/team.c``). By default each of
  its kernels opens its own parallel region, as when called alone. ``XINFER_CPU_TEAM=1`` runs the
  whole step in one parallel region instead, the kernels' work claimed by the team's threads unit by
  unit; between kernels a thread spins at most ``XINFER_SPIN_US`` microseconds (default 20, less
  after waits that had to sleep), then sleeps on a futex. Not the default: on this project's shared
  2-core machine at load ~20 a step took ~5x the per-kernel regions' wall time (threads that stay
  runnable through a step lose the scheduler's wake-up preference that threads woken per kernel
  keep); measure before turning it on.
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


def replay_threads(environ=None) -> int:
    """The ``nthreads`` argument the cpu backend passes to ``xi_replay``: 0 (one parallel region a
    step, ``omp_get_max_threads()`` threads) when ``XINFER_CPU_TEAM=1``, else -1 (each kernel its own
    parallel region).

    Raises:
        ValueError: ``XINFER_CPU_TEAM`` is set to something other than ``0`` or ``1``.
    """
    env = os.environ if environ is None else environ
    given = env.get("XINFER_CPU_TEAM", "0")
    if given not in ("0", "1"):
        raise ValueError(f"XINFER_CPU_TEAM must be 0 or 1, got {given!r}")
    return 0 if given == "1" else -1
