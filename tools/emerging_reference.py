"""Freeze Emerging-Optimizers 0.2.0's SOAP, AdaMuon and Lion trajectories as a test fixture.

nemo:26.06-26.08 ship Emerging-Optimizers 0.2.0 (Megatron Bridge's uv.lock pins its git tag; it is not on PyPI), so
the tests cannot install it: this tool takes its source from a git mirror of NVIDIA-NeMo/Emerging-Optimizers (the
`fetch` tool's layout), runs the cases of tests/emerging_reference.py against it and writes
tests/fixtures/emerging_optimizers/eo-0.2.0-<CPU capability>.json with the commit it ran. SOAP's trajectories
depend on the CPU's numerics path (torch's CPU capability and MKL's kernels pick other eigenbases for the same
factors; the capability alone does not tell the path), so each path gets its own file, and a path already recorded
writes nothing; run this where tests/test_optim_emerging.py finds no recorded path::

    git clone --bare https://github.com/NVIDIA-NeMo/Emerging-Optimizers eo.git
    python tools/emerging_reference.py --mirror eo.git [--tag v0.2.0]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))
import emerging_reference as reference  # noqa: E402
from optbench.common.io import atomic_write_text  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mirror",
        type=Path,
        required=True,
        help="the git directory of a clone of NVIDIA-NeMo/Emerging-Optimizers (a bare clone will do)",
    )
    parser.add_argument("--tag", default="v0.2.0")
    args = parser.parse_args()
    git = ["git", f"--git-dir={args.mirror}"]
    commit = subprocess.run(
        [*git, "rev-parse", f"{args.tag}^{{commit}}"], check=True, capture_output=True, text=True
    ).stdout.strip()
    archive = subprocess.run(
        [*git, "archive", "--format=tar", commit, "emerging_optimizers"], check=True, capture_output=True
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        eo = reference.load(Path(tmp))
        make = reference.upstream(eo)
        trajectories = {name: reference.run(make, case) for name, case in reference.CASES.items()}
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    payload = {
        "provenance": {
            "repo": "NVIDIA-NeMo/Emerging-Optimizers",
            "tag": args.tag,
            "commit": commit,
            "torch": torch.__version__,
            "cpu_capability": capability,
            "tool": "tools/emerging_reference.py",
            "cases": "tests/emerging_reference.py (CASES, SHAPES, STEPS, seeds)",
        },
        "trajectories": trajectories,
    }
    version = args.tag.lstrip("v")
    for name, recorded in reference.frozen_paths(version).items():
        if recorded["trajectories"] == trajectories:
            print(f"this CPU's numerics path is recorded already: {reference.FIXTURES / name}")
            return 0
    path = reference.FIXTURES / reference.fixture_name(version, capability)
    if path.exists():  # the same capability on another path (AMD and Intel AVX512 differ): a file of its own
        digest = hashlib.sha256(json.dumps(trajectories).encode()).hexdigest()[:8]
        path = path.with_name(f"{path.stem}-{digest}.json")
    atomic_write_text(path, json.dumps(payload) + "\n")
    print(f"wrote {path} ({len(trajectories)} cases, commit {commit[:9]}, CPU capability {capability})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
