"""CPU threads of the local engine, picked from the cores other processes leave free, and kept so.

Why: torch's CPU kernels run in OpenMP parallel regions that end in a barrier. With as many threads as
cores while other processes also want those cores, every region waits for its slowest, descheduled
thread, and threads that spin at the barrier take time from the others: measured on a 2-core machine
(default ``make pretrain``, 25 s quiet), one busy process beside it made 2 threads take 69 s against
37 s with 1 thread, four made them take 122 s against 99 s. So:

* **Spin briefly, then sleep.** ``GOMP_SPINCOUNT`` (how long an idle OpenMP thread spins before it
  sleeps) defaults to :data:`SPIN_COUNT` when unset, set before torch loads OpenMP
  (:func:`prepare_openmp`). Quiet, it costs nothing measurable (25.8 vs 25.3 s); under two busy
  processes it took 2 threads from 89 s to 61 s.
* **As many threads as free cores** (at least one): at start the others' CPU use is sampled for
  :data:`SAMPLE_S` from ``/proc/stat`` (minus this process's own time), and again every
  :data:`RECHECK_S` seconds of training; the count follows the load both ways. ``OMP_NUM_THREADS``,
  when set, fixes the count (do so for runs that must be bitwise reproducible: a different thread
  count changes the last bits of reductions).

Each change is recorded (step, threads, the others' busy cores) in the run's summary.json.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SPIN_COUNT = "10000"
"""GOMP_SPINCOUNT default: a few microseconds of spinning (libgomp's own default is 300,000)."""
SAMPLE_S = 0.25
"""Seconds the start-up sample of the other processes' CPU use lasts."""
RECHECK_S = 10.0
"""Seconds of training between two looks at the load."""


def prepare_openmp(environ: dict[str, str] | None = None) -> None:
    """Set OpenMP's spin count before torch is imported (it has no effect once torch has loaded OpenMP)."""
    environ = os.environ if environ is None else environ
    environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)


def available_cores() -> int:
    """CPU cores this process may run on: its affinity mask, capped by a cgroup v2 CPU quota when one is set."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cores = os.cpu_count() or 1
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max", encoding="ascii").read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cores


def fixed_threads() -> int | None:
    """OMP_NUM_THREADS when the user (or torchrun's parent) set it to a whole number, else None."""
    configured = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(configured) if configured.isdigit() and int(configured) > 0 else None


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU seconds at one instant: all busy CPUs of the machine, and this process alone."""

    wall: float
    machine_busy: float
    own: float


def _sample() -> CpuSample | None:
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = handle.readline().split()
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    busy = sum(values[:8]) - idle  # user nice system idle iowait irq softirq steal (guest is inside user)
    own = sum(os.times()[:2])
    return CpuSample(time.monotonic(), busy / ticks, own)


def others_busy_cores(before: CpuSample | None, after: CpuSample | None) -> float | None:
    """Cores kept busy by other processes between two samples (None when unknown)."""
    if before is None or after is None or after.wall <= before.wall:
        return None
    others = (after.machine_busy - before.machine_busy) - (after.own - before.own)
    return max(0.0, others / (after.wall - before.wall))


def threads_for(cores: int, busy: float | None) -> int:
    """Threads for ``cores`` when other processes keep ``busy`` cores busy: the free ones, at least one."""
    if busy is None:
        return cores
    return max(1, min(cores, math.floor(cores - busy + 0.5)))


@dataclass
class ThreadGovernor:
    """Keeps this process's thread count at the number of free cores (or fixed by OMP_NUM_THREADS)."""

    set_threads: Callable[[int], None]
    """Applies a thread count (torch.set_num_threads)."""
    cores: int
    """Cores this process may use (its share when several processes run here)."""
    fixed: int | None = None
    """OMP_NUM_THREADS: no adaptation."""
    threads: int = 0
    """The current thread count."""
    changes: list[dict[str, float | int | None]] = field(default_factory=list)
    """Every choice: step (0 = start), threads, other processes' busy cores."""
    _last: CpuSample | None = None

    def start(self) -> int:
        """Pick the starting thread count (sampling the load for SAMPLE_S unless fixed); returns it."""
        if self.fixed is not None:
            self._apply(0, self.fixed, None)
            return self.threads
        before = _sample()
        time.sleep(SAMPLE_S)
        self._last = _sample()
        busy = others_busy_cores(before, self._last)
        self._apply(0, threads_for(self.cores, busy), busy)
        return self.threads

    def tick(self, step: int) -> None:
        """After a step: every RECHECK_S seconds, follow the load."""
        if self.fixed is not None or self._last is None or time.monotonic() - self._last.wall < RECHECK_S:
            return
        now = _sample()
        busy = others_busy_cores(self._last, now)
        self._last = now
        wanted = threads_for(self.cores, busy)
        if wanted != self.threads:
            self._apply(step, wanted, busy)

    def _apply(self, step: int, threads: int, busy: float | None) -> None:
        self.set_threads(threads)
        self.threads = threads
        self.changes.append(
            {"step": step, "threads": threads, "others_busy_cores": None if busy is None else round(busy, 2)}
        )

    def record(self) -> dict[str, object]:
        """What summary.json says about the threads."""
        return {
            "policy": "fixed by OMP_NUM_THREADS"
            if self.fixed is not None
            else f"free cores of {self.cores}, sampled at start and every {RECHECK_S:.0f} s",
            "gomp_spincount": os.environ.get("GOMP_SPINCOUNT"),
            "changes": self.changes,
        }
