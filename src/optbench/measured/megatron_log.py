"""Parse the throughput lines of a raw Megatron Bridge (or Megatron-LM) training log.

Two lines carry the numbers (Bridge 0.3.1 ``training/utils/train_utils.py``
``training_log``), both printed every ``log_interval`` iterations:

* rank 0: ``Step Time : 12.92s GPU utilization: 1037.0MODEL_TFLOP/s/GPU``
* last rank: `` [2026-04-01 12:00:00] iteration      10/     100 | consumed samples: ... |
  elapsed time per iteration (ms): 12920.3 | throughput per GPU (TFLOP/s/GPU): 1037.0 |
  learning rate: 3.000000E-04 | global batch size:  4096 | lm loss: 9.876543E+00 | loss scale: 1.0 |
  grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |``
  (the throughput field only with ``log_throughput=True``).

Real logs are messy, so the parser searches for these patterns anywhere in a line (rank prefixes
such as ``[rank255]:``, srun's ``12: `` labels and timestamps in front are ignored), reads the
``name: value |`` fields after an iteration header until something else starts (another rank's
output glued onto the line), drops exact duplicates (the same line logged twice), and marks a
restart wherever the iteration counter does not increase (a job resumed from a checkpoint or
started over in the same file). A restart that resumes exactly at the next iteration cannot be
told apart from a continuing run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf"
STEP_TIME_RE = re.compile(
    rf"Step Time\s*:\s*(?P<seconds>{_NUMBER})\s*s\s+GPU utilization:\s*(?P<tflops>{_NUMBER})\s*(?:MODEL_)?TFLOP/s/GPU"
)
"""Bridge 0.3.1 prints ``...1037.0MODEL_TFLOP/s/GPU``; older releases ``... 528.1 TFLOP/s/GPU``: both are read."""
ITERATION_RE = re.compile(
    r"(?:\[(?P<timestamp>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})\]\s*)?"
    r"\biteration\s+(?P<iteration>\d{1,18})\s*/\s*(?P<train_iters>\d{1,18})\s*\|"
)
"""Counters of at most 18 digits: a longer run of digits is not an iteration (and would not fit an int64)."""
FIELD_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9 _()/.-]*")
NUMBER_RE = re.compile(_NUMBER)
MAX_FIELD_CHARS = 200
"""A ``name: value`` field of Megatron's iteration line is short; a longer stretch ends the fields."""
MAX_LINE_CHARS = 1 << 16
"""Longest line read (64 KiB): the rest of a longer line is skipped, so that a line without a newline
(binary output, a progress bar) can neither exhaust memory nor slow the parser."""

ELAPSED_MS = "elapsed time per iteration (ms)"
THROUGHPUT = "throughput per GPU (TFLOP/s/GPU)"
LOSS_NAMES = ("lm loss", "loss")
NOT_LOSSES = ("loss scale",)


def _positive(value: float | None) -> float | None:
    """A rate or duration as logged, or None when it cannot be one (a clock jump prints negative times)."""
    return value if value is not None and math.isfinite(value) and value > 0 else None


@dataclass(frozen=True)
class IterationRecord:
    """One iteration line (it averages the ``log_interval`` iterations that end at ``iteration``)."""

    iteration: int
    """Iteration counter at the end of the logged interval."""
    train_iters: int
    """Planned iterations of the run."""
    fields: dict[str, float]
    """Every ``name: value`` field of the line, names as printed (e.g. ``lm loss``)."""
    segment: int
    """0 for the first run in the file, +1 at every restart."""
    line_number: int
    """1-based line in the file."""
    timestamp: str | None = None
    """The ``[YYYY-mm-dd HH:MM:SS]`` stamp Bridge prints, when present."""

    @property
    def elapsed_s(self) -> float | None:
        """Seconds per iteration over the logged interval (None when absent, zero, negative or not finite)."""
        ms = _positive(self.fields.get(ELAPSED_MS))
        return None if ms is None else ms / 1000.0

    @property
    def tflops_per_gpu(self) -> float | None:
        """Model TFLOP/s per GPU from the throughput field (log_throughput=True), else None (also when not positive)."""
        return _positive(self.fields.get(THROUGHPUT))

    @property
    def loss(self) -> float | None:
        """The language-model loss (``lm loss``), or the only other ``... loss`` field."""
        for name in LOSS_NAMES:
            if name in self.fields:
                return self.fields[name]
        others = [v for k, v in self.fields.items() if k.endswith("loss") and k not in NOT_LOSSES]
        return others[0] if len(others) == 1 else None


@dataclass(frozen=True)
class StepTimeRecord:
    """One ``Step Time : ...s GPU utilization: ...MODEL_TFLOP/s/GPU`` line."""

    step_time_s: float
    """Seconds per iteration (printed with 2 decimals)."""
    tflops_per_gpu: float
    """Model TFLOP/s per GPU (printed with 1 decimal)."""
    line_number: int
    """1-based line in the file."""


@dataclass
class MegatronLog:
    """What a log file says about throughput."""

    path: str
    """The file parsed (or a label for text given directly)."""
    iterations: list[IterationRecord] = field(default_factory=list)
    """Iteration lines in file order, duplicates dropped."""
    step_times: list[StepTimeRecord] = field(default_factory=list)
    """Step Time lines in file order."""
    duplicates: int = 0
    """Iteration lines dropped because an identical one was already read."""

    @property
    def restarts(self) -> int:
        """How many times the iteration counter went back (a resumed or restarted job)."""
        return self.iterations[-1].segment if self.iterations else 0

    @property
    def paired(self) -> bool:
        """True when each iteration line has exactly one Step Time line (same count, same order)."""
        return bool(self.iterations) and len(self.iterations) == len(self.step_times)


def _iteration_fields(text: str, start: int) -> dict[str, float]:
    """``name: value |`` fields from ``start`` until the text stops looking like them.

    Each field is cut at the next ``|`` and read with anchored, non-nested patterns, so the work is
    linear in the line's length whatever it holds."""
    fields: dict[str, float] = {}
    position = start
    while True:
        end = text.find("|", position, position + MAX_FIELD_CHARS)
        if end < 0:
            return fields
        name, colon, value = text[position:end].rpartition(":")
        name, value = name.strip(), value.strip()
        if not colon or not FIELD_NAME_RE.fullmatch(name) or not NUMBER_RE.fullmatch(value):
            return fields
        fields.setdefault(name, float(value))
        position = end + 1


def parse_megatron_lines(lines: Iterable[str], path: str = "<text>") -> MegatronLog:
    """Parse log lines (see the module docstring for what is tolerated)."""
    log = MegatronLog(path=path)
    seen: set[tuple] = set()
    segment, last_iteration = 0, None
    for number, line in enumerate(lines, start=1):
        for match in STEP_TIME_RE.finditer(line):
            seconds, tflops = _positive(float(match["seconds"])), _positive(float(match["tflops"]))
            if seconds is not None and tflops is not None:
                log.step_times.append(StepTimeRecord(seconds, tflops, number))
        for match in ITERATION_RE.finditer(line):
            iteration = int(match["iteration"])
            fields = _iteration_fields(line, match.end())
            identity = (iteration, int(match["train_iters"]), tuple(sorted(fields.items())))
            if identity in seen:
                log.duplicates += 1
                continue
            seen.add(identity)
            if last_iteration is not None and iteration <= last_iteration:
                segment += 1
                seen = {identity}
            last_iteration = iteration
            log.iterations.append(
                IterationRecord(iteration, int(match["train_iters"]), fields, segment, number, match["timestamp"])
            )
    return log


def bounded_lines(handle: TextIO, limit: int = MAX_LINE_CHARS) -> Iterator[str]:
    """The lines of ``handle``, each cut at ``limit`` characters (the rest of a longer line is skipped)."""
    while line := handle.readline(limit):
        if len(line) == limit and not line.endswith("\n"):
            while (rest := handle.readline(limit)) and not rest.endswith("\n"):
                pass
        yield line


def parse_megatron_log(path: str | Path) -> MegatronLog:
    """Parse a log file; undecodable bytes are replaced, never fatal; bounded memory per line."""
    source = Path(path)
    with source.open(encoding="utf-8", errors="replace") as handle:
        return parse_megatron_lines(bounded_lines(handle), path=str(source))
