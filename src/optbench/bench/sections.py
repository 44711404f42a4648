"""A benchmark result is made of sections measured on different machines; each carries its own provenance.

A CPU machine cannot measure a GPU section and a GPU machine lent for minutes should not remeasure the
CPU sections (its CPU is another machine). So:

* every measured section records the command, time, torch, CUDA and Python that produced it
  (:func:`provenance`);
* a run that cannot measure a section keeps the section last written to the same file when that one was
  measured, and says so (:func:`kept_or_fresh`);
* ``python -m optbench bench --gpu-only`` measures the GPU sections alone and keeps every other section of
  the stored result (:func:`stored_result`).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path
from typing import Any

from optbench.common.errors import Problem, UserError
from optbench.metrics.summary import launch_command


def invocation() -> dict[str, str]:
    """The bench command as typed and when it ran: what every benchmark result records at its top."""
    return {
        "command": launch_command(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def provenance() -> dict[str, Any]:
    """Who measured a section: the command as typed, when, and the software it ran on."""
    import torch

    return {
        **invocation(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }


def provenance_line(section: dict[str, Any]) -> str:
    """One line naming the command, date and software of a measured section ('' for a section without them)."""
    if "command" not in section:
        return ""
    cuda = f", CUDA {section['cuda']}" if section.get("cuda") else ""
    return (
        f"Measured by `{section['command']}`, {section['created']}, torch {section['torch']}{cuda}, "
        f"Python {section['python']}."
    )


def stored_result(out_dir: Path, name: str, required: bool = False) -> dict[str, Any] | None:
    """``<out_dir>/<name>.json`` as last written (None when absent, or a one-line error when ``required``)."""
    path = Path(out_dir) / f"{name}.json"
    if not path.is_file():
        if required:
            raise UserError(
                Problem(
                    "--gpu-only",
                    f"{path} does not exist: --gpu-only adds the GPU sections to a "
                    f"stored result; run `python -m optbench bench --only {name}` first",
                )
            )
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(Problem("--out", f"{path} is not a readable benchmark result ({exc}); move it aside")) from None


def kept_or_fresh(fresh: dict[str, Any], stored: dict[str, Any] | None) -> dict[str, Any]:
    """``fresh`` when it was measured; else the stored section when that one was, marked as kept and why."""
    if fresh.get("measured") or not (stored and stored.get("measured")):
        return fresh
    return {**stored, "kept": f"not remeasured by this run ({fresh['reason']})"}


def kept_line(section: dict[str, Any]) -> str:
    """The note a kept section carries in the markdown ('' for a section measured by this run)."""
    return f"Kept from an earlier run: {section['kept']}." if section.get("kept") else ""


def section_notes(section: dict[str, Any]) -> list[str]:
    """The markdown lines under a measured section's heading: who measured it, and whether this run kept it."""
    return [line for line in (provenance_line(section), kept_line(section)) if line]


def require_cuda() -> None:
    """Refuse ``--gpu-only`` on a machine without a CUDA device, in one line, before anything is written."""
    import torch

    if not torch.cuda.is_available():
        raise UserError(
            Problem(
                "--gpu-only",
                f"no CUDA device here (torch {torch.__version__}); run it on a GPU machine, or drop --gpu-only",
            )
        )


def cpu_name() -> str:
    """This machine's CPU model as the kernel names it (the platform's words where /proc/cpuinfo is missing)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def logical_cpus() -> int:
    """CPUs this process may run on: its affinity mask (every CPU where the platform has none)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_thread_counts(cores: int, quick: bool) -> list[int]:
    """The torch thread counts a CPU benchmark times: one thread and every core; a quick (smoke) run one thread."""
    return [1] if cores == 1 or quick else [1, cores]


def run_gpu_only_benchmark(out_dir: Path, name: str, measure, markdown, gpu_only: bool) -> list[Path]:
    """A benchmark that has nothing but a GPU section: measured where a GPU is (``measure()``), else the stored
    measurement kept with the reason; ``<name>.json`` and its rendering ``<name>.md`` written either way."""
    import torch

    from optbench.common.io import atomic_write_json, atomic_write_text

    stored = stored_result(out_dir, name)
    if gpu_only:
        require_cuda()
    if torch.cuda.is_available():
        fresh = measure()
        if not fresh.get("measured"):  # a GPU machine that cannot measure it (1 GPU for 2+) records the command too
            fresh = {"measured": False, **invocation(), **fresh}
    else:
        fresh = {"measured": False, **invocation(), "reason": f"no CUDA device in this run (torch {torch.__version__})"}
    data = {"benchmark": name, **kept_or_fresh(fresh, stored)}
    out_dir = Path(out_dir)
    return [
        atomic_write_json(out_dir / f"{name}.json", data),
        atomic_write_text(out_dir / f"{name}.md", markdown(data)),
    ]
