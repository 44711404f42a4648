"""Where the local engine runs: processes, device, threads, compute precision, peak throughput, memory.

One process per data-parallel rank. Under ``torchrun`` the process group comes from the environment
(gloo on CPU, nccl on GPU); a single process needs none. Compute precision follows the device:

* CPU: fp32 weights and fp32 compute; each process gets ``OMP_NUM_THREADS`` threads, else the cores
  other processes leave free, followed as the load changes (:mod:`optbench.engine.local.threads`);
  torch's deterministic algorithms, so a run is bitwise reproducible at a fixed thread count. MFU divides by a peak
  *measured* at start (see :func:`cpu_matmul_probe`), because a
  CPU has no datasheet tensor peak.
* GPU: fp32 weights, gradients and optimizer state, bf16 autocast for the forward and backward
  (precision=bf16); MFU divides by the GPU's datasheet peak from ``optbench/data/gpus.csv``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import resource
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from optbench.accounting.peaks import Peak, peaks_for
from optbench.config.schema import RunConfig
from optbench.common.errors import UserError
from optbench.engine.local.threads import ThreadGovernor, available_cores, fixed_threads
from optbench.catalog.hardware import gpu_catalog
from optbench.optim.newton_schulz import cpu_has_native_bf16

PROBE_SIZES = (256, 512, 1024)
"""Sides of the square GEMMs the CPU peak probe times; the fastest rate of any size is the peak."""
PROBE_WARMUP_S = 0.2
"""Seconds of GEMMs run before timing, so that threads are awake and clocks have ramped up."""
PROBE_BUDGET_S = 0.1
"""Seconds of timed repetitions per size (at least 3); the fastest repetition counts."""
CPU_PEAK_KEYS = {torch.float32: "cpu_fp32_probe", torch.bfloat16: "cpu_bf16_probe"}
"""Keys of the measured CPU peaks in metrics' mfu dicts."""


@dataclass
class Runtime:
    """This process's place in the run."""

    rank: int
    world: int
    local_rank: int
    device: torch.device
    threads: int
    """CPU threads torch uses in this process."""
    gpu: str
    """GPU key of optbench/data/gpus.csv, 'cpu', or the device name when the GPU is not in the catalog."""
    description: str
    """Readable device, e.g. 'cpu: AMD EPYC 7B13, 2 processes x 1 threads' or 'NVIDIA H100 80GB HBM3'."""
    precision: str
    """Compute precision actually used: 'fp32' or 'bf16 autocast (fp32 weights and optimizer state)'."""
    precision_key: str
    """The same in one word, for wandb groups and tags: 'fp32' or 'bf16'."""
    autocast_dtype: torch.dtype | None = None
    """dtype of torch.autocast on GPU; None on CPU."""
    peaks: list[Peak] = field(default_factory=list)
    """MFU denominators, the primary first."""
    governor: ThreadGovernor | None = None
    """Keeps the CPU thread count at the free cores (engine.local.threads)."""

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def autocast(self):
        """bf16 autocast on GPU, nothing on CPU."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type="cuda", dtype=self.autocast_dtype)

    def synchronize(self) -> None:
        """Wait for queued GPU work so that wall-clock timings are real."""
        if self.is_cuda:
            torch.cuda.synchronize(self.device)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def threads_per_process(processes: int) -> int:
    """CPU threads for each of ``processes`` processes: OMP_NUM_THREADS when set (torchrun's children get it
    from the launcher), else the free cores (engine.local.threads) shared out evenly, at least one."""
    fixed = fixed_threads()
    if fixed is not None:
        return fixed
    governor = ThreadGovernor(lambda _: None, available_cores())
    return max(1, governor.start() // processes)


def detect_gpu_key(device_name: str, configured: str) -> str:
    """The catalog key of this GPU: the cluster's setting when it names one, else matched from the device name."""
    if configured in gpu_catalog():
        return configured
    name = device_name.lower().replace(" ", "")
    for key in sorted(gpu_catalog(), key=len, reverse=True):  # gb200 before b200
        if key in name:
            return key
    return device_name


def cpu_matmul_probe(dtype: torch.dtype = torch.float32) -> float:
    """Measured GEMM rate of this process in GFLOP/s: the best of square GEMMs of :data:`PROBE_SIZES`.

    Dense square GEMMs with every thread this process owns are the best case the CPU reaches through
    torch (the MFU denominator); the model's smaller, MoE-shaped GEMMs reach a fraction of it.
    """
    generator = torch.Generator().manual_seed(0)
    pairs = {
        n: (torch.randn(n, n, generator=generator).to(dtype), torch.randn(n, n, generator=generator).to(dtype))
        for n in PROBE_SIZES
    }
    warm = time.perf_counter()
    while time.perf_counter() - warm < PROBE_WARMUP_S:
        torch.mm(*pairs[PROBE_SIZES[-1]])
    best_rate = 0.0
    for n, (a, b) in pairs.items():
        best, repeats, began = float("inf"), 0, time.perf_counter()
        while repeats < 3 or time.perf_counter() - began < PROBE_BUDGET_S:
            start = time.perf_counter()
            torch.mm(a, b)
            best, repeats = min(best, time.perf_counter() - start), repeats + 1
        best_rate = max(best_rate, 2.0 * n**3 / best / 1e9)
    return best_rate


def cpu_peak(dtype: torch.dtype, gflops: float, threads: int, world: int) -> Peak:
    """An MFU denominator of a CPU run, from the probe's measurement."""
    name = "fp32" if dtype == torch.float32 else "bf16"
    return Peak(
        label=f"cpu {name} matmul probe: {gflops:.1f} GFLOP/s measured ({threads} threads per process, {world} "
        "processes)",
        key=CPU_PEAK_KEYS[dtype],
        tflops=gflops / 1e3,
        source=f"measured at start: fastest {name} square GEMM of sides {list(PROBE_SIZES)} per process after "
        f"{PROBE_WARMUP_S} s of warm-up, averaged over processes probing at the same time "
        "(optbench.engine.local.runtime.cpu_matmul_probe)",
    )


def cpu_peaks(threads: int, world: int) -> list[Peak]:
    """The fp32 probe (the model computes in fp32), plus a bf16 probe on CPUs with native bf16 products,
    where Muon's Newton-Schulz products run in bf16 (optimizer.muon.fp32_matmul_prec auto -> medium)."""
    dtypes = [torch.float32] + ([torch.bfloat16] if cpu_has_native_bf16() else [])
    return [cpu_peak(d, _all_reduce_mean(cpu_matmul_probe(d), world), threads, world) for d in dtypes]


def _all_reduce_mean(value: float, world: int) -> float:
    if world == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor.item()) / world


def check_device(run: RunConfig, processes: int) -> bool:
    """Whether the run uses CUDA GPUs (one per process); raises UserError if this machine cannot run it."""
    use_cuda = torch.cuda.is_available() and run.cluster.gpu != "cpu"
    if use_cuda and run.precision.name != "bf16":
        raise UserError(
            f"the local engine runs bf16 autocast on GPUs, not {run.precision.name}; use precision=bf16", "precision"
        )
    if use_cuda and torch.cuda.device_count() < processes:
        raise UserError(
            f"{processes} processes but {torch.cuda.device_count()} GPUs on this machine", "parallel.num_gpus"
        )
    return use_cuda


def init_runtime(run: RunConfig) -> Runtime:
    """Join the process group (under torchrun), pick the device and threads, find the MFU peaks."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    if world != run.parallel.num_gpus:
        raise UserError(
            f"the run asks for {run.parallel.num_gpus} processes but {world} were started; "
            "launch through `make pretrain` (or torchrun --nproc_per_node=parallel.num_gpus)",
            "parallel.num_gpus",
        )
    use_cuda = check_device(run, local_world)
    device = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device("cpu")
    governor = ThreadGovernor(torch.set_num_threads, max(1, available_cores() // local_world), fixed_threads())
    threads = governor.start()
    if world > 1:
        if use_cuda:
            torch.cuda.set_device(device)
        dist.init_process_group(
            backend="nccl" if use_cuda else "gloo",
            timeout=_dt.timedelta(minutes=10),
            device_id=device if use_cuda else None,
        )
    if use_cuda:
        name = torch.cuda.get_device_name(device)
        gpu = detect_gpu_key(name, run.cluster.gpu)
        return Runtime(
            rank,
            world,
            local_rank,
            device,
            threads,
            gpu,
            f"{name} x {world}",
            precision="bf16 autocast (fp32 weights and optimizer state)",
            precision_key="bf16",
            autocast_dtype=torch.bfloat16,
            peaks=peaks_for(gpu, run.precision),
            governor=governor,
        )
    # Bitwise-reproducible CPU runs (resume == uninterrupted): without this, Muon's bf16 (AMX) Newton-Schulz
    # GEMMs with 2+ threads differ from run to run in the last bits; measured cost: none.
    torch.use_deterministic_algorithms(True, warn_only=True)
    description = f"cpu: {_cpu_name()}, {world} processes x {threads} threads"
    return Runtime(
        rank,
        world,
        local_rank,
        device,
        threads,
        "cpu",
        description,
        precision="fp32",
        precision_key="fp32",
        peaks=cpu_peaks(threads, world),
        governor=governor,
    )


def peak_memory_gb(runtime: Runtime) -> float:
    """Peak memory of this process in GB (1e9 bytes): GPU allocator peak, or the CPU process's peak RSS."""
    if runtime.is_cuda:
        return torch.cuda.max_memory_allocated(runtime.device) / 1e9
    # Linux reports ru_maxrss in KiB (macOS in bytes).
    scale = 1 if platform.system() == "Darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e9


def shutdown(runtime: Runtime) -> None:
    """Leave the process group."""
    if runtime.world > 1 and dist.is_initialized():
        dist.destroy_process_group()
