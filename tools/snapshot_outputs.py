"""Write every output a refactor must keep byte-identical into one folder, to compare two commits.

    python tools/snapshot_outputs.py /tmp/snap-<name>
    diff -r /tmp/snap-before /tmp/snap-after

What it writes (each case as the user would produce it, with a fixed results_dir and run id so that
nothing depends on the clock or the folder):
* ``plans/<recipe>@<container>@<intent>.json`` and ``.txt``: the plan and the printed summary of every
  recipe at every runnable container and both intents, or the one-line refusal;
* ``jobs/<recipe>/``: ``make pretrain dryrun=true`` for every cluster recipe (plan.json, config.yaml,
  sbatch.sh) and the printed lines;
* ``sweeps/<name>/``: the sweeps the test suite runs, dry (sweep.json, one folder per point) and printed;
* ``table/``: ``make table`` over the committed runs (throughput.md, throughput.csv): every published
  row's projection.

The code is the checkout the tool lives in (its ``src/`` first on the path), so a snapshot of another
commit is taken from a worktree of it: ``git worktree add /tmp/base <rev>`` and run its copy of this tool.
The work folder is fixed (``/tmp/optbench-snapshot-work``, created and marked by this tool) because
rendered jobs name absolute paths; a folder there without the marker is refused, and so is a second snapshot while
one runs (it would write into the first's work folder).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = Path("/tmp/optbench-snapshot-work")
MARKER = ".optbench-snapshot"
SWEEPS = {
    "kimi-ep-pp": ["kimi_k2_muon", "parallel.ep=32,64", "parallel.pp=4,8"],
    "qwen3-ep": ["qwen3_30b_a3b_muon", "parallel.ep=4,8"],
}


# What differs between two runs of the same commit: the clock and NeMo-Run's random experiment ids.
VOLATILE = [
    (re.compile(r"-\d{8}-\d{6}-"), "-<time>-"),
    (re.compile(r"_\d{17,20}\b"), "_<id>"),
    (re.compile(r"(on|at) \d{4}-\d\d-\d\d \d\d:\d\d UTC"), r"\1 <time>"),
]


NEMO_RUN_BLOBS = {"_CONFIG", "_TASKS", "_VERSION"}
"""NeMo-Run's compressed copies of the experiment (absolute paths inside; configs/*.yaml beside them are compared)
and its record of the checkout's commit."""


def stable(text: str) -> str:
    text = text.replace(str(WORK), "<work>").replace(str(ROOT), "<checkout>")
    for pattern, replacement in VOLATILE:
        text = pattern.sub(replacement, text)
    return text


def refuse(message: str) -> None:
    """One line on stderr and exit code 2, as every optbench command refuses a bad input."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def hold_work() -> int:
    """One snapshot at a time: an exclusive lock on ``<work>.lock`` (created by this tool), held until the process
    ends."""
    lock = WORK.with_name(WORK.name + ".lock")
    try:
        handle = os.open(lock, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o644)
    except OSError as err:  # a link or a folder there: not ours to follow or replace
        refuse(f"work folder: {lock} cannot be locked ({err.strerror}); move it away")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            refuse(f"work folder: another snapshot is writing {WORK}; wait for it to end")
        raise
    return handle


def fresh_work() -> Path:
    if WORK.exists() and not (WORK / MARKER).exists():
        refuse(f"work folder: {WORK} exists and was not made by this tool; move it away")
    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    (WORK / MARKER).write_text("")
    return WORK


def launch(args: list[str], cwd: Path = ROOT) -> str:
    done = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"},
    )
    return stable(f"rc {done.returncode}\n{done.stdout}{done.stderr}")


def copy_tree(src: Path, dst: Path) -> None:
    for path in sorted(src.rglob("*")):
        if path.is_file() and path.name not in NEMO_RUN_BLOBS:
            target = dst / stable(str(path.relative_to(src)))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(stable(path.read_text()))


def plans(out: Path) -> None:
    sys.path[:0] = [str(ROOT / "src"), str(ROOT)]  # this checkout's code, whichever one is installed
    from launch.dispatch import plan_run
    from optbench.releases.versions import runnable
    from optbench.compose.recipe import list_recipes
    from optbench.common.errors import UserError
    from optbench.plan import format_summary

    (out / "plans").mkdir(parents=True)
    for recipe in list_recipes():
        for container in runnable():
            for intent in ("reproduce", "train"):
                name = f"{recipe}@{container.name}@{intent}"
                overrides = [
                    f"cluster.container={container.name}",
                    f"intent={intent}",
                    f"results_dir={WORK}/plans",
                    "run_id=snapshot",
                ]
                try:
                    _, plan = plan_run(recipe, overrides)
                except UserError as error:
                    (out / "plans" / f"{name}.txt").write_text(f"refused: {error}\n")
                    continue
                # In plan.json's own key order (a typed plan writes its JSON view; an older commit's plan is a dict).
                data = plan.to_json() if hasattr(plan, "to_json") else plan
                text = stable(json.dumps(data, indent=1, default=str))
                (out / "plans" / f"{name}.json").write_text(text + "\n")
                (out / "plans" / f"{name}.txt").write_text(stable(format_summary(plan)) + "\n")


def jobs(out: Path) -> None:
    for recipe in (
        "kimi_k2_muon",
        "kimi_k2_adamw",
        "deepseek_v3_muon",
        "deepseek_v3_adamw",
        "qwen3_30b_a3b_muon",
        "qwen3_30b_a3b_adamw",
    ):
        folder = WORK / "jobs" / recipe
        printed = launch(["optbench", "pretrain", recipe, "dryrun=true", f"results_dir={folder}", "run_id=snapshot"])
        copy_tree(folder, out / "jobs" / recipe)
        (out / "jobs" / f"{recipe}.txt").write_text(printed)


def sweeps(out: Path) -> None:
    for name, (recipe, *swept) in SWEEPS.items():
        folder = WORK / "sweeps" / name
        printed = launch(["optbench", "sweep", recipe, *swept, "dryrun=true", f"results_dir={folder}"])
        copy_tree(folder, out / "sweeps" / name)
        (out / "sweeps" / f"{name}.txt").write_text(printed)


def table(out: Path) -> None:
    folder = WORK / "table"
    for part in ("runs", "published"):
        shutil.copytree(ROOT / "results" / part, folder / part)
    (folder / ".optbench-results").write_text("")
    printed = launch(["optbench", "table", "--results-dir", str(folder)])
    for name in ("throughput.md", "throughput.csv"):
        (out / "table").mkdir(parents=True, exist_ok=True)
        (out / "table" / name).write_text(stable((folder / name).read_text()))
    (out / "table" / "printed.txt").write_text(re.sub(r"in [\d.]+ s", "in <t> s", printed))


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):  # --help is a request, not a folder to fill
        raise SystemExit(__doc__)
    out = Path(sys.argv[1]).resolve()
    if out.exists():
        refuse(f"folder: {out} exists; name a new folder")
    hold_work()
    fresh_work()
    out.mkdir(parents=True)
    plans(out)
    jobs(out)
    sweeps(out)
    table(out)
    print(f"snapshot in {out}: {sum(1 for p in out.rglob('*') if p.is_file())} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
