"""The real Megatron Bridge + Core of every NeMo container, installed on this machine (``make bridge-env``) for the
conformance test and ``make plan CHECK=bridge``.

Each runnable container of ``src/optbench/data/bridge/containers.json`` gets its exact Megatron Bridge and the
Megatron Core that Bridge tag pins, plus the ``transformers`` its lock file pins. They share two base virtual
environments, because Bridge 0.3 needs transformers < 5 and 0.4+ needs 5:

* ``.venv-bridge``  (requirements.txt): Bridge 0.3.1 + Core 0.16.1 installed in it (tools/nvidia_presets.py runs here);
* ``.venv-bridge5`` (requirements-tf5.txt): no Megatron in it;

and each other release lives in an overlay folder, ``.bridge-releases/<bridge>/``, installed with
``pip install --no-deps --ignore-requires-python --target`` (the wheels declare Python >= 3.12; their config path
runs on 3.11) and put first on ``PYTHONPATH`` when that release runs. Substitutions, said in the report: the
Emerging-Optimizers a container ships (0.1.0 or 0.2.0, git-only) is replaced by 0.3.0 from PyPI, the only release
there (Megatron Core 0.19 iterates its registry at import, so a stand-in will not do).

``NEXT`` is a release no container in NVIDIA's version data ships yet; it is checked with the newest container's plan.

    python src/optbench/engine/bridge/cpu_check/environments.py build   # what make bridge-env runs
    python src/optbench/engine/bridge/cpu_check/environments.py list    # the targets, their interpreter and PYTHONPATH
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[4]
"""The checkout (this file is src/optbench/engine/bridge/cpu_check/environments.py; it runs by path before any
install)."""
CONTAINERS = HERE.parents[2] / "data" / "bridge" / "containers.json"
OVERLAYS = ROOT / ".bridge-releases"
BASES = {
    "tf4": (ROOT / ".venv-bridge", HERE / "requirements.txt"),
    "tf5": (ROOT / ".venv-bridge5", HERE / "requirements-tf5.txt"),
}
COMPLETE = ".complete"
"""Written into an overlay once every package of it is installed (holding the pins, to rebuild on a change)."""
IN_BASE = {"0.3.1": "0.16.1"}
"""Releases installed in their base environment itself rather than in an overlay."""
TRANSFORMERS = {"0.3": None, "0.4": "5.3.0", "0.5": "5.8.1", "0.6": "5.12.1"}
"""transformers each Bridge line's uv.lock pins (None: the tf4 base's 4.57.6, as 0.3.x pins it)."""
EMERGING_OPTIMIZERS = "0.3.0"
"""Installed with Core >= 0.17 in place of the git-only 0.1.0 / 0.2.0 the containers ship."""
NEXT = {
    "name": "next",
    "bridge": "0.6.2",
    "core": "0.19.2",
    "why": "on PyPI (September 2026); Megatron Bridge's docs/versions1.json at 067f987 (2026-08-22), the newest "
    "version data we have, lists no container with it",
}


@dataclass(frozen=True)
class Target:
    """One Bridge/Core pair to run the conformance report against."""

    name: str
    """The container (nemo:26.06.01), or 'next'."""
    container: str
    """The container whose plan is checked (for 'next': the newest one)."""
    bridge: str
    core: str

    @property
    def line(self) -> str:
        return ".".join(self.bridge.split(".")[:2])

    @property
    def base(self) -> str:
        return "tf4" if self.line == "0.3" else "tf5"

    @property
    def python(self) -> Path:
        return BASES[self.base][0] / "bin" / "python"

    @property
    def overlay(self) -> Path | None:
        return None if IN_BASE.get(self.bridge) == self.core else OVERLAYS / self.bridge

    @property
    def installed(self) -> bool:
        """Whether :func:`build` finished this release here: its interpreter exists and its overlay is complete."""
        return self.python.is_file() and (self.overlay is None or (self.overlay / COMPLETE).is_file())

    def environment(self) -> dict[str, str]:
        """Environment variables for a process that runs this release."""
        env = dict(os.environ)
        if self.overlay is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(self.overlay), *filter(None, [env.get("PYTHONPATH")])])
        return env

    def packages(self) -> list[str]:
        """What the overlay holds."""
        wanted = [f"megatron-bridge=={self.bridge}", f"megatron-core=={self.core}"]
        if TRANSFORMERS[self.line]:
            wanted.append(f"transformers=={TRANSFORMERS[self.line]}")
        if self.line != "0.3":
            wanted.append(f"emerging-optimizers=={EMERGING_OPTIMIZERS}")
        return wanted


def shipped_core(container: dict) -> str:
    """The Megatron Core the container ships where NVIDIA's software-versions page lists one (26.04: 0.17.0, while
    Bridge 0.4.0 pins 0.17.0rc0), else the one the Bridge tag pins (the page lists no later container)."""
    listed = container["core_in_container"] or ""
    return listed if re.fullmatch(r"\d+\.\d+\.\d+", listed) else container["core"]


def targets() -> list[Target]:
    """Every runnable container, then the next release."""
    data = json.loads(CONTAINERS.read_text())
    found = [
        Target(c["container"], c["container"], c["bridge"], shipped_core(c))
        for c in data["containers"]
        if c["runnable"]
    ]
    newest = max(found, key=lambda t: tuple(int(part) for part in t.name.removeprefix("nemo:").split(".")))
    return [*reversed(found), Target(NEXT["name"], newest.container, NEXT["bridge"], NEXT["core"])]


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", *args], check=True)


def create_base(folder: Path) -> None:
    """A virtual environment whose interpreter links to this one, as ``python -m venv`` makes it on POSIX.

    Not a copy: the two bases are created side by side, and a copy is written and then run (ensurepip) while the
    other thread may fork a pip; the forked child holds the copy open for writing until it execs, so running it
    fails "Text file busy" (ETXTBSY; a fresh clone's CI, 2026-11-29). A link is never written, so never busy."""
    venv.create(folder, with_pip=True, symlinks=True)


def build(python: str = sys.executable) -> None:
    """Create both base environments and every overlay (each step is skipped when already done), one progress line
    per environment. A cold build unpacks two CPU torch builds and seven releases: the two bases are built side by
    side, then the overlays two at a time (pip is one process per install, and these machines have 2+ cores)."""
    overlays = [t for t in targets() if t.overlay is not None]
    steps = len(BASES) + len(overlays)
    said = iter(range(1, steps + 1))

    def say(what: str) -> None:
        print(f"bridge-env [{next(said)}/{steps}] {what}", flush=True)

    def base(name: str) -> None:
        folder, requirements = BASES[name]
        say(f"{folder.name}: base environment ({requirements.name})")
        interpreter = folder / "bin" / "python"
        if not interpreter.exists():
            create_base(folder)
        _pip(interpreter, "install", "--quiet", "--upgrade", "pip")
        _pip(interpreter, "install", "--quiet", "-r", str(requirements))
        for bridge, core in IN_BASE.items() if name == "tf4" else ():
            _pip(interpreter, "install", "--quiet", "--no-deps", f"megatron-core=={core}", f"megatron-bridge=={bridge}")

    def overlay(target: Target) -> None:
        done = target.overlay / COMPLETE
        wanted = " ".join(target.packages()) + "\n"
        built = done.is_file() and done.read_text() == wanted
        say(
            f"{target.overlay.relative_to(ROOT)}: Megatron Bridge {target.bridge}, Core {target.core} "
            f"({'built already' if built else target.name})"
        )
        if built:
            return
        if done.is_file():  # an overlay this tool built for other pins: rebuilt, never mixed
            shutil.rmtree(target.overlay)
        _pip(
            target.python,
            "install",
            "--quiet",
            "--no-deps",
            "--ignore-requires-python",
            "--upgrade",
            "--target",
            str(target.overlay),
            *target.packages(),
        )
        done.write_text(wanted)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for future in [pool.submit(base, name) for name in BASES]:
            future.result()  # a failed install stops the build with pip's own error above
        for future in [pool.submit(overlay, target) for target in overlays]:
            future.result()


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "list"
    if command == "build":
        build()
    elif command == "list":
        for target in targets():
            print(
                f"{target.name:<14} bridge {target.bridge:<6} core {target.core:<10} {target.python}"
                + (f" PYTHONPATH={target.overlay}" if target.overlay else "")
            )
    else:
        print("usage: environments.py build|list", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
