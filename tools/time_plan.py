"""Time ``make plan RECIPE=kimi_k2_muon`` here against another commit's checkout, alternating, warm and cold.

    git worktree add /tmp/base de06254
    .venv/bin/python tools/time_plan.py /tmp/base [runs per cell, default 15]

Each run is ``python -m optbench plan kimi_k2_muon`` with the checkout's own ``src`` first on ``PYTHONPATH`` (one
interpreter and package set for both), its plan written under a folder this tool creates and removes. Before issue 54 a
checkout kept its merges on disk, wherever ``OPTBENCH_COMPOSE_CACHE`` says: warm runs share one folder this tool
creates, cold runs each get a new empty one, so no checkout's own cache is read, replaced or removed. Prints the median
wall and user+sys CPU seconds per cell (docs/notes/architecture-notes.md, "Plan time"). Both checkouts' ``src`` and
``launch`` are byte-compiled first: with
``PYTHONDONTWRITEBYTECODE=1`` (set on our VMs) no run writes a ``.pyc``, and a stale one costs a compile per run.
"""

from __future__ import annotations

import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _run(root: Path, cache: Path) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=f"{root / 'src'}:{root}", OPTBENCH_COMPOSE_CACHE=str(cache))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "optbench", "plan", "kimi_k2_muon", f"results_dir={cache.parent / root.name}"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main(argv: list[str]) -> int:
    if not argv or not (Path(argv[0]) / "launch").is_dir():
        raise SystemExit(__doc__)
    sides = {"other": Path(argv[0]).resolve(), "here": HERE}
    runs = int(argv[1]) if len(argv) > 1 else 15
    for root in sides.values():  # a run under PYTHONDONTWRITEBYTECODE=1 would otherwise compile stale modules each time
        for folder in ("src", "launch"):
            compileall.compile_dir(root / folder, quiet=1)
    with tempfile.TemporaryDirectory(prefix="time-plan-") as work:
        for cold in (False, True):
            print(*_cells(sides, runs, Path(work), cold), sep="\n")
    return 0


def _cells(sides: dict[str, Path], runs: int, work: Path, cold: bool) -> list[str]:
    """One line per side: the medians of ``runs`` alternating runs, warm (one shared cache folder) or cold."""
    warm = work / "warm"
    caches = iter(work / f"cold-{i}" for i in range(2 * runs + len(sides)))
    for root in sides.values():
        _run(root, next(caches) if cold else warm)  # bytecode, and the warm cell's merges
    cells: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for _ in range(runs):
        for name, root in sides.items():
            cells[name].append(_run(root, next(caches) if cold else warm))
    lines = []
    for name, times in cells.items():
        walls = [w for w, _ in times]
        lines.append(
            f"{'cold' if cold else 'warm'} {name} ({sides[name]}): wall median {statistics.median(walls):.3f} s "
            f"({min(walls):.2f}-{max(walls):.2f}), cpu median {statistics.median(c for _, c in times):.3f} s"
        )
    return lines


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
