"""Download the wheels a lent GPU machine lacks into one folder, to carry there and install with ``--no-index``.

The lent machine (one H100/H200, no network, Python 3.12, its own CUDA torch 2.11 with triton, numpy, packaging and
what transformers needs) has none of this project's pins, nor Megatron. This tool takes each pin from where the
project keeps it, so the carried set cannot drift from what the tests run:

* the project's environment (pyproject.toml's pins as ``make setup`` installs them): hydra-core, omegaconf, tabulate,
  and the local engine's transformers;
* omegaconf 2.3's own pin of antlr4-python3-runtime (an sdist only, so it is built into a wheel here);
* the newest Megatron Bridge and Core the CPU check runs (``environments.NEXT``) and its Emerging-Optimizers, with
  absl-py, which Emerging-Optimizers imports: Megatron Core's model, optimizer and training step need nothing else
  beyond the machine's torch (tried on this CPU, Python 3.11, with only torch, numpy and packaging installed);
* rich and its two dependencies, which Megatron Bridge's training imports before it reaches Transformer Engine.

    .venv/bin/python tools/gpu_wheels.py [--out .gpu-wheels]
    # on the lent machine, with the folder carried:
    python3 -m pip install --no-index --no-deps --find-links .gpu-wheels .gpu-wheels/*.whl

The folder is refused when it exists and this tool did not make it; its files are replaced only there. The total
must stay under what one call may carry (:data:`CARRY_LIMIT`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from optbench.bridge.cpu_check.environments import EMERGING_OPTIMIZERS, NEXT  # noqa: E402
from optbench.errors import Problem, UserError  # noqa: E402
from optbench.exits import exit_on_user_error  # noqa: E402

PYTHON, PLATFORMS = "3.12", ("manylinux_2_28_x86_64", "manylinux2014_x86_64", "any")
CARRY_LIMIT = 64 * 2**20
"""What one call to the lent machine carries (its README)."""
MARKER = ".optbench-gpu-wheels"
PROJECT_PACKAGES = ("hydra-core", "omegaconf", "tabulate", "transformers")
ANTLR = "antlr4-python3-runtime==4.9.3"
"""omegaconf 2.3 requires antlr4-python3-runtime 4.9.*; PyPI has it as an sdist only."""
EXTRA = ("absl-py==2.5.1", "rich==15.0.0", "markdown-it-py==4.3.0", "mdurl==0.1.2")
"""Imported by Emerging-Optimizers (absl) and by Megatron Bridge's training (rich); versions as tried on this CPU."""


def project_pins() -> list[str]:
    """The versions of :data:`PROJECT_PACKAGES` installed where this tool runs (``make setup``'s .venv: what the tests
    run, within pyproject.toml's pins)."""
    found = []
    for name in PROJECT_PACKAGES:
        try:
            found.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            raise UserError(Problem(name, "is not installed here; run this tool with .venv/bin/python after make setup")) from None
    return found


def wanted() -> list[str]:
    """Every requirement the lent machine gets, exact versions."""
    return [*project_pins(), f"megatron-core=={NEXT['core']}", f"megatron-bridge=={NEXT['bridge']}",
            f"emerging-optimizers=={EMERGING_OPTIMIZERS}", *EXTRA]


def _folder(path: Path) -> Path:
    if path.exists() and not (path / MARKER).is_file():
        raise UserError(Problem("--out", f"{path} exists and tools/gpu_wheels.py did not make it; give a new folder"))
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text("made by tools/gpu_wheels.py; its wheels are replaced on the next run\n")
    for old in path.glob("*.whl"):
        old.unlink()
    return path


def download(out: Path) -> list[Path]:
    """Fetch every wheel (for Python 3.12 on x86-64 Linux) and build antlr's; the wheels in ``out``."""
    pip = [sys.executable, "-m", "pip"]
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    for step in ([*pip, "download", "--quiet", "--no-deps", "--ignore-requires-python", "--only-binary=:all:",
                  "--python-version", PYTHON, "--implementation", "cp", *platforms, "-d", str(out), *wanted()],
                 [*pip, "wheel", "--quiet", "--no-deps", "-w", str(out), ANTLR]):
        if subprocess.run(step, check=False).returncode:
            raise UserError(Problem("pip", f"`pip {step[3]}` failed (its message is above); {out} holds only part of the "
                                           "wheels: do not carry it, run this tool again once the index answers"))
    return sorted(out.glob("*.whl"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".gpu-wheels")
    args = parser.parse_args()
    with exit_on_user_error():
        wheels = download(_folder(args.out))
        total = sum(w.stat().st_size for w in wheels)
        for wheel in wheels:
            print(f"  {wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
        print(f"{len(wheels)} wheels, {total / 2**20:.1f} MiB of the {CARRY_LIMIT // 2**20} MiB one call carries -> {args.out}")
        if total > CARRY_LIMIT:
            raise UserError(Problem("--out", f"the wheels take {total / 2**20:.1f} MiB, over the {CARRY_LIMIT // 2**20} MiB "
                                             "one call carries; split them over two calls"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
