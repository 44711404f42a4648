"""How busy the machine was with other processes while a block of work ran (Linux /proc/stat).

A CPU timing taken while something else ran is not the machine's figure: benchmarks and local-engine
runs record this beside their seconds so a reader can tell a quiet measurement from a shared one.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine since boot (/proc/stat)."""
    try:
        fields = [float(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


class LoadMeter:
    """How busy the machine was with *other* processes while a block ran (this process's CPU time excluded)."""

    def __enter__(self) -> "LoadMeter":
        self.load_before = os.getloadavg()[0]
        self.machine = _cpu_times()
        self.mine = time.process_time()
        return self

    def __exit__(self, *_) -> None:
        busy, total = _cpu_times()
        ticks = os.sysconf("SC_CLK_TCK")
        others = (busy - self.machine[0]) / ticks - (time.process_time() - self.mine)
        capacity = (total - self.machine[1]) / ticks
        self.result = {
            "load_average_1min": {"before": self.load_before, "after": os.getloadavg()[0]},
            "others_cpu_share": max(0.0, others / capacity) if capacity > 0 else None,
        }


QUIET_SHARE = 0.05
"""Runs and benchmarks during which other processes took more than this share of the machine are flagged: their
seconds are not this CPU's figure (tokens and losses are unaffected)."""
