"""A CPU's theoretical peak: cores x clock x FLOPs per cycle, each part stated with its source.

The bound the optimizer benchmark compares against: no implementation can run the executed FLOPs
faster than this. To stay a bound, each factor is taken at its highest defensible value:

* **clock**: measured now, on this core, by a chain of dependent integer additions (one cycle each on
  every x86 core since the Pentium Pro) compiled with the system C compiler, best of several runs; it
  sees the boost clock actually running. Without a C compiler, the highest of /proc/cpuinfo's MHz and
  cpufreq's maximum, marked as not measured (a boost above it would make the "bound" beatable, and the
  benchmark flags any measurement faster than its bound).
* **FLOPs per cycle per core** from the instruction set the CPU reports (/proc/cpuinfo flags), at the
  most any core with it executes (two FMA pipes for vector units):

  | precision | ISA | FLOP/cycle/core | why |
  |---|---|---|---|
  | fp32 | AVX-512F | 64 | 2 x 512-bit FMA pipes x 16 lanes x 2 (Intel Xeon Scalable, AMD Zen 5) |
  | fp32 | AVX2 + FMA | 32 | 2 x 256-bit FMA pipes x 8 lanes x 2 |
  | bf16 | AMX-BF16 | 1024 | TDPBF16PS: 16 x 32 x 16 MACs in 16 cycles (Intel, 4th Gen Xeon Scalable) |
  | bf16 | AVX512-BF16 | 128 | VDPBF16PS: 16 lanes x 2 bf16 products + adds, 2 pipes |
  | bf16 | neither | the fp32 figure | bf16 products emulated in fp32 |
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

CLOCK_PROBE_C = r"""
#include <stdio.h>
#include <stdint.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
    uint64_t x = 0; const long n = 50000000; double best = 1e9;
    for (int r = 0; r < 7; r++) {
        double s = now();
        for (long i = 0; i < n; i++)
            __asm__ volatile("add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\t"
                             "add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0" : "+r"(x));
        double e = now() - s; if (e < best) best = e;
    }
    printf("%.6f %lu\n", (double)n * 8 / best / 1e9, (unsigned long)(x & 1));
    return 0;
}
"""
FLOPS_PER_CYCLE = {
    ("fp32", "avx512f"): 64,
    ("fp32", "avx2"): 32,
    ("bf16", "amx_bf16"): 1024,
    ("bf16", "avx512_bf16"): 128,
}
SOURCES = {
    "avx512f": "2 x 512-bit FMA pipes x 16 fp32 lanes x 2 FLOP (Intel Xeon Scalable, AMD Zen 5 optimization guides)",
    "avx2": "2 x 256-bit FMA pipes x 8 fp32 lanes x 2 FLOP",
    "amx_bf16": "AMX TDPBF16PS: 1024 bf16 FLOP per cycle per core (Intel, 4th Gen Xeon Scalable / AMX documentation)",
    "avx512_bf16": "VDPBF16PS: 16 lanes x 2 bf16 products and adds, 2 pipes = 128 FLOP per cycle",
}


@dataclass(frozen=True)
class CpuPeak:
    """Theoretical peak of ``threads`` cores at one precision."""

    precision: str
    threads: int
    clock_ghz: float
    clock_source: str
    isa: str
    flops_per_cycle: int
    isa_source: str

    @property
    def gflops(self) -> float:
        return self.threads * self.clock_ghz * self.flops_per_cycle

    def as_dict(self) -> dict:
        return {**asdict(self), "gflops": self.gflops}


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _reported_ghz() -> float:
    values = []
    try:
        values += [
            float(line.split(":")[1]) / 1e3
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("cpu MHz")
        ]
    except (OSError, ValueError):
        pass
    try:
        values.append(int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) / 1e6)
    except (OSError, ValueError):
        pass
    return max(values, default=0.0)


def measured_clock() -> tuple[float, str]:
    """(GHz, how it was found): the dependent-add probe when a C compiler is there, else the reported clock."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler:
        with tempfile.TemporaryDirectory() as folder:
            source, binary = Path(folder) / "clock.c", Path(folder) / "clock"
            source.write_text(CLOCK_PROBE_C)
            built = subprocess.run([compiler, "-O1", "-o", str(binary), str(source)], capture_output=True)
            if built.returncode == 0:
                done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
                if done.returncode == 0:
                    ghz = float(done.stdout.split()[0])
                    return (
                        ghz,
                        f"measured: 8 dependent 1-cycle adds per loop, best of 7 runs ({Path(compiler).name} -O1)",
                    )
    return (
        _reported_ghz(),
        "reported (/proc/cpuinfo, cpufreq); not measured: a higher boost clock would exceed this 'peak'",
    )


def cpu_peak(precision: str, threads: int, clock: tuple[float, str] | None = None) -> CpuPeak | None:
    """The peak of ``threads`` cores at ``precision`` ("fp32" or "bf16") at ``clock`` (GHz, how found; default:
    measured now); None when the ISA is unknown (not x86)."""
    flags = cpu_flags()
    isa = None
    if precision == "bf16":
        isa = "amx_bf16" if "amx_bf16" in flags else "avx512_bf16" if "avx512_bf16" in flags else None
    if isa is None:
        isa = "avx512f" if "avx512f" in flags else "avx2" if "avx2" in flags and "fma" in flags else None
    if isa is None:
        return None
    ghz, how = clock or measured_clock()
    key = (precision if isa in ("amx_bf16", "avx512_bf16") else "fp32", isa)
    return CpuPeak(precision, threads, ghz, how, isa, FLOPS_PER_CYCLE[key], SOURCES[isa])
