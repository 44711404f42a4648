"""Time ``make plan RECIPE=kimi_k2_muon`` here against another commit's checkout, alternating, warm and cold.

    git worktree add /tmp/base de06254
    .venv/bin/python tools/time_plan.py /tmp/base [runs per cell, default 15]

Each run is ``python -m launch plan kimi_k2_muon`` with the checkout's own ``src`` first on ``PYTHONPATH`` (one
interpreter and package set for both), output under /tmp. Warm keeps what the other checkout caches on disk
(``.cache/compose`` before issue 54); cold removes it before each of its runs. Prints the median wall and user+sys
CPU seconds per cell (docs/architecture.md, "Plan time").
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _run(root: Path, cold: bool) -> tuple[float, float]:
    if cold:
        shutil.rmtree(root / ".cache" / "compose", ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=f"{root / 'src'}:{root}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "launch", "plan", "kimi_k2_muon", f"results_dir=/tmp/time-plan-{root.name}"],
                   cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main(argv: list[str]) -> int:
    if not argv or not (Path(argv[0]) / "launch").is_dir():
        raise SystemExit(__doc__)
    sides = {"other": Path(argv[0]).resolve(), "here": HERE}
    runs = int(argv[1]) if len(argv) > 1 else 15
    for cold in (False, True):
        for root in sides.values():
            _run(root, cold)  # bytecode, and the other side's cache for the warm cell
        cells: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for _ in range(runs):
            for name, root in sides.items():
                cells[name].append(_run(root, cold))
        for name, times in cells.items():
            walls = [w for w, _ in times]
            print(f"{'cold' if cold else 'warm'} {name} ({sides[name]}): wall median {statistics.median(walls):.3f} s "
                  f"({min(walls):.2f}-{max(walls):.2f}), cpu median {statistics.median(c for _, c in times):.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
