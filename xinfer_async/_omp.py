"""OpenMP settings of the cpu backend's kernels, chosen once, before libgomp starts (the package's
``__init__`` calls :func:`configure` before anything loads ``xinfer_async._native``).

* ``OMP_WAIT_POLICY=PASSIVE`` unless set: idle OpenMP workers sleep instead of spinning (libgomp's
  spin count is 0 under the passive policy, so ``GOMP_SPINCOUNT`` needs no default). Spinning
  workers starve the trio thread and the queue thread on small or shared machines (measured on 2
  cores under load: decode 2.4 tok/s spinning vs 31 tok/s passive).
* A captured step runs in one parallel region (``native/kernels/team.c``): between its kernels a
  thread spins at most ``XINFER_SPIN_US`` microseconds (default 20, less after waits that had to
  sleep), then sleeps on a futex, whatever the OpenMP wait policy.
* ``OMP_NUM_THREADS`` unless set: ``XINFER_THREADS`` when given, else the physical cores this
  process may run on (SMT siblings share one core's execution units, so a second thread on a core
  adds contention, not throughput, to these kernels).
"""
from __future__ import annotations

import os

_SYSFS_CPU = "/sys/devices/system/cpu"


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
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
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
