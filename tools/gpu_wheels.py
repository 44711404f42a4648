"""Download the wheels a lent GPU machine lacks into one folder, to carry there and install with ``--no-index``.

The lent machine (one H100/H200, no network, Python 3.12, its own CUDA torch 2.11 with triton, numpy, packaging and
what transformers needs) has none of this project's pins, nor Megatron. This tool takes each pin from where the
project keeps it, so the carried set cannot drift from what the tests run:

* the project's environment (pyproject.toml's pins as ``make setup`` installs them): hydra-core, omegaconf, tabulate,
  and the local engine's transformers;
* omegaconf 2.3's own pin of antlr4-python3-runtime (an sdist only, so it is built into a wheel here);
* the Megatron Bridge and Core of the newest container in NVIDIA's version data (nemo:26.08: Bridge 0.6.0, Core
  0.19.0; ``make gpu-smoke`` plans for that container, and the job refuses any other Bridge) and the
  Emerging-Optimizers the CPU check installs with them, with absl-py, which Emerging-Optimizers imports;
* rich and its two dependencies, which Megatron Bridge's training imports before it reaches Transformer Engine;
* in ``bridge/``: the transformers that Bridge line pins (0.6: 5.12.1, below the project's 5.23) and the tokenizers
  it accepts, installed apart
  and put on ``PYTHONPATH`` for the smoke only, as the CPU check's overlays do.

    .venv/bin/python tools/gpu_wheels.py [--out .gpu-wheels]
    # on the lent machine, with the folder carried:
    python3 -m pip install --no-index --no-deps .gpu-wheels/*.whl
    python3 -m pip install --no-index --no-deps --target /tmp/bridge-site .gpu-wheels/bridge/*.whl

The folder is refused when it exists and this tool did not make it. The wheels are fetched into a staging folder
inside it and, only once every one arrived, replace the wheels the tool downloaded before (its marker lists them);
a wheel the user put there is never touched. The total must stay under what one call may carry
(:data:`CARRY_LIMIT`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from optbench.engine.bridge.cpu_check.environments import EMERGING_OPTIMIZERS, NEXT, TRANSFORMERS, targets  # noqa: E402
from optbench.common.errors import Problem, UserError  # noqa: E402
from optbench.common.exits import exit_on_user_error  # noqa: E402

PYTHON, PLATFORMS = "3.12", ("manylinux_2_28_x86_64", "manylinux2014_x86_64", "any")
BRIDGE_REQUIREMENTS = ROOT / "src" / "optbench" / "engine" / "bridge" / "cpu_check" / "requirements-tf5.txt"
CARRY_LIMIT = 64 * 2**20
"""What one call to the lent machine carries (its README)."""
MARKER = ".optbench-gpu-wheels"
PROJECT_PACKAGES = ("hydra-core", "omegaconf", "tabulate", "transformers")
ANTLR = "antlr4-python3-runtime==4.9.3"
"""omegaconf 2.3 requires antlr4-python3-runtime 4.9.*; PyPI has it as an sdist only."""
EXTRA = (
    "absl-py==2.5.1",
    "rich==15.0.0",
    "markdown-it-py==4.3.0",
    "mdurl==0.1.2",
    "datasets==5.2.0",
    "dill==0.4.1",
    "multiprocess==0.70.19",
    "diffusers==0.42.1",
    "importlib-metadata==10.2.0",
    "webdataset==1.0.2",
    "braceexpand==0.1.7",
)
"""Imported by Emerging-Optimizers (absl), by Megatron Bridge's training (rich) and by its recipes (datasets, diffusers,
webdataset, with their dependencies the lent machine lacks); versions as the CPU check's Bridge environment has them."""


def project_pins() -> list[str]:
    """The versions of :data:`PROJECT_PACKAGES` installed where this tool runs (``make setup``'s .venv: what the tests
    run, within pyproject.toml's pins)."""
    found = []
    for name in PROJECT_PACKAGES:
        try:
            found.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            raise UserError(
                Problem(name, "is not installed here; run this tool with .venv/bin/python after make setup")
            ) from None
    return found


def newest_container():
    """The newest container's release (``environments.targets`` lists the runnable containers, then NEXT)."""
    return next(t for t in reversed(targets()) if t.name != NEXT["name"])


def wanted() -> list[str]:
    """Every requirement the lent machine gets into its own site-packages, exact versions."""
    release = newest_container()
    return [
        *project_pins(),
        f"megatron-core=={release.core}",
        f"megatron-bridge=={release.bridge}",
        f"emerging-optimizers=={EMERGING_OPTIMIZERS}",
        *EXTRA,
    ]


def bridge_overlay() -> list[str]:
    """What goes into ``bridge/``: the transformers the newest container's Bridge line pins, and the tokenizers the
    CPU check's Bridge environment pins with it (transformers 5.12 refuses the lent machine's tokenizers 0.23.2)."""
    release = newest_container()
    tokenizers = next(
        line.strip() for line in BRIDGE_REQUIREMENTS.read_text().splitlines() if line.startswith("tokenizers==")
    )
    return [f"transformers=={TRANSFORMERS['.'.join(release.bridge.split('.')[:2])]}", tokenizers]


def _folder(path: Path) -> Path:
    """``path``, made and marked when new; refused when it exists and this tool did not make it."""
    if path.exists() and not (path / MARKER).is_file():
        raise UserError(Problem("--out", f"{path} exists and tools/gpu_wheels.py did not make it; give a new folder"))
    path.mkdir(parents=True, exist_ok=True)
    if not (path / MARKER).is_file():
        _record(path, [])
    return path


def _downloaded(out: Path) -> list[str]:
    """The wheels (paths relative to ``out``) the last complete run of this tool put there, as its marker lists them."""
    lines = (out / MARKER).read_text(encoding="utf-8", errors="replace").splitlines()
    return [line[2:] for line in lines if line.startswith("- ") and _wheel_place(line[2:])]


def _wheel_place(name: str) -> bool:
    """Whether ``name`` is where this tool puts a wheel: ``<wheel>`` or ``bridge/<wheel>`` under its folder. A marker
    line naming anything else (an absolute path, a parent, another folder) is never acted on."""
    parts = name.split("/")
    return (
        name.endswith(".whl")
        and parts[-1] not in ("", ".whl")
        and "\\" not in name
        and (len(parts) == 1 or (len(parts) == 2 and parts[0] == "bridge"))
    )


def _record(out: Path, wheels: list[str]) -> None:
    (out / MARKER).write_text(
        "made by tools/gpu_wheels.py; it replaces only the wheels listed here, which it "
        "downloaded (any other file is left alone)\n" + "".join(f"- {w}\n" for w in wheels)
    )


def _fetch(staging: Path) -> None:
    """Fetch every wheel (for Python 3.12 on x86-64 Linux) into ``staging`` and ``staging/bridge``, and build
    antlr's."""
    pip = [sys.executable, "-m", "pip"]
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    download = [
        *pip,
        "download",
        "--quiet",
        "--no-deps",
        "--ignore-requires-python",
        "--only-binary=:all:",
        "--python-version",
        PYTHON,
        "--implementation",
        "cp",
        *platforms,
        "-d",
    ]
    for step in (
        [*download, str(staging), *wanted()],
        [*download, str(staging / "bridge"), *bridge_overlay()],
        [*pip, "wheel", "--quiet", "--no-deps", "-w", str(staging), ANTLR],
    ):
        if subprocess.run(step, check=False).returncode:
            raise UserError(
                Problem(
                    "pip",
                    f"`pip {step[3]}` failed (its message is above); nothing in the folder was "
                    "changed: run this tool again once the index answers",
                )
            )


def download(out: Path, fetch=_fetch) -> list[Path]:
    """Fetch every wheel into a staging folder; only when all arrived, replace the wheels this tool downloaded before
    with them. A wheel the user put in the folder is never touched, and a failed download changes nothing."""
    import shutil
    import tempfile

    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=out))
    try:
        (staging / "bridge").mkdir()
        fetch(staging)
        new = sorted(str(w.relative_to(staging)) for w in [*staging.glob("*.whl"), *staging.glob("bridge/*.whl")])
        earlier = set(_downloaded(out))
        theirs = [w for w in new if (out / w).exists() and w not in earlier]
        if theirs:
            raise UserError(
                Problem(
                    "--out",
                    f"{out / theirs[0]} is a file this tool did not download; move it away "
                    "(nothing in the folder was changed)",
                )
            )
        for old in earlier - set(new):
            (out / old).unlink(missing_ok=True)
        (out / "bridge").mkdir(exist_ok=True)
        for wheel in new:
            os.replace(staging / wheel, out / wheel)
        _record(out, new)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out / w for w in new]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".gpu-wheels")
    args = parser.parse_args()
    with exit_on_user_error():
        wheels = download(_folder(args.out))
        total = sum(w.stat().st_size for w in wheels)
        for wheel in wheels:
            print(f"  {wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.relative_to(args.out)}")
        print(
            f"{len(wheels)} wheels, {total / 2**20:.1f} MiB of the {CARRY_LIMIT // 2**20} MiB one call carries "
            f"-> {args.out}"
        )
        if total > CARRY_LIMIT:
            raise UserError(
                Problem(
                    "--out",
                    f"the wheels take {total / 2**20:.1f} MiB, over the {CARRY_LIMIT // 2**20} MiB "
                    "one call carries; split them over two calls",
                )
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
