"""The MoE all-to-all across one node's GPUs, through NCCL, against the step model's price of the same bytes.

Why: the layout search prefers lower expert parallelism than NVIDIA's published layouts on most rows
(results/projection/search_ranks.md), and what a lower EP saves is the all-to-all, which the model prices from
datasheet bandwidths: over NVLink 5 at NCCL's published all-to-all rates (data/nccl_all_to_all.csv: one node's
nccl-tests, measured elsewhere), else at an assumed 0.80 of NVLink (``nvlink_efficiency`` in data/interconnect.csv).
This measures it on the machine at hand: every GPU of one node in one expert-parallel group.

Megatron Core's alltoall token dispatcher sends each rank's routed token copies with one
``torch.distributed.all_to_all_single`` per dispatch and per combine, forward and backward; under NVIDIA's
throughput presets (forced load balance) the splits are even. So each case is one ``all_to_all_single`` of
``topk`` copies of a GPU's microbatch tokens (bf16, :func:`optbench.projection.stage_comm.dispatch_copy_bytes`)
for each cluster recipe's model at several micro-batch sizes, plus a size sweep, split evenly over the node's
GPUs. Each trial starts after a barrier; its time is the slowest rank's (the model's "slowest member"), the
median of :data:`TRIALS` after :data:`WARMUP`. Every case checks once that the data arrived permuted as an
all-to-all permutes it. The price is :func:`optbench.projection.comm.all_to_all_s` for those bytes over the
node's ranks with the GPU's row of data/interconnect.csv.

Not measured here: the flex dispatcher (HybridEP, DeepEP: their own kernels, in the NeMo container), an EP group
across nodes (the NIC share), and overlap with computation. ``measure(backend="gloo", device_count=2)`` runs
the same harness on a CPU (tests); its times say nothing about an interconnect and are not priced.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from pathlib import Path
from typing import Any

NAME = "all_to_all"
DESCRIPTION = (
    "NCCL all-to-all of each recipe's MoE dispatch bytes over one node's GPUs vs the step model's price; 2+ GPUs"
)
RECIPES = ("qwen3_30b_a3b_muon", "deepseek_v3_muon", "kimi_k2_muon")
MICRO_BATCHES = (1, 2, 4, 8)
SWEEP_MIB = (1, 8, 64, 256, 1024)
"""Bytes each rank sends, besides the recipes' cases: where the bandwidth curve flattens."""
TRIALS, WARMUP = 10, 3
MEMORY_SHARE = 0.5
"""Cases whose send, receive and check buffers (3 x the bytes sent) exceed this share of a GPU's memory are
skipped."""
QUICK_BYTES = (4096, 65536)


def recipe_cases(quick: bool) -> list[dict[str, Any]]:
    """Each case's name and bytes sent per rank: the recipes' dispatch volumes at each MBS, then the sweep."""
    if quick:
        return [{"case": f"quick {n} B", "send_bytes": n} for n in QUICK_BYTES]
    from optbench.compose.recipe import compose_run
    from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS
    from optbench.projection.stage_comm import dispatch_copy_bytes

    cases = []
    for recipe in RECIPES:
        for mbs in MICRO_BATCHES:
            run = compose_run(recipe, [f"train.mbs={mbs}"])
            m = run.model
            send = dispatch_copy_bytes(run, DEFAULT_ASSUMPTIONS) * m.moe_router_topk
            cases.append(
                {
                    "case": f"{m.name} MBS {mbs}",
                    "model": m.name,
                    "mbs": mbs,
                    "seq_length": run.train.seq_length,
                    "hidden": m.hidden_size,
                    "topk": m.moe_router_topk,
                    "send_bytes": int(send),
                }
            )
    cases += [{"case": f"sweep {mib} MiB", "send_bytes": mib * 2**20} for mib in SWEEP_MIB]
    return cases


def _time_case(dist, torch, send_bytes: int, rank: int, world: int, device) -> dict[str, Any]:
    """One all-to-all of ``send_bytes`` per rank: the slowest rank's median seconds and whether the data arrived."""
    chunk = max(1, send_bytes // 2 // world)
    # chunk j of rank r holds r * world + j; after the all-to-all chunk i of rank r must hold i * world + r (small
    # integers, exact in bf16; built per chunk so that no buffer is larger than the one sent)
    labels = torch.arange(world, dtype=torch.float32)
    send = (labels + rank * world).to(device=device, dtype=torch.bfloat16).repeat_interleave(chunk)
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send)
    expected = (labels * world + rank).to(device=device, dtype=torch.bfloat16).repeat_interleave(chunk)
    arrived = bool(torch.equal(received, expected))
    del expected

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(WARMUP):
        dist.all_to_all_single(received, send)
    seconds = []
    for _ in range(TRIALS):
        dist.barrier()
        synchronize()
        began = time.perf_counter()
        dist.all_to_all_single(received, send)
        synchronize()
        seconds.append(time.perf_counter() - began)
    slowest = torch.tensor(seconds, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    everywhere = torch.tensor([1.0 if arrived else 0.0], device=device)
    dist.all_reduce(everywhere, op=dist.ReduceOp.MIN)  # every rank's data, not only rank 0's
    trials = slowest.cpu().tolist()
    return {
        "sent_bytes": 2 * chunk * world,
        "seconds": statistics.median(trials),
        "spread": [min(trials), max(trials)],
        "arrived": bool(everywhere.item()),
    }


def _worker(rank: int, world: int, backend: str, port: int, cases: list[dict[str, Any]], budget: float, queue) -> None:
    """One rank: time every case that fits its memory budget; rank 0 hands the results back."""
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world, device_id=device if device.type == "cuda" else None)
    try:
        out = []
        for case in cases:
            if 3 * case["send_bytes"] > budget:
                out.append({**case, "skipped": f"buffers of {3 * case['send_bytes'] / 1e9:.1f} GB"})
                continue
            out.append({**case, **_time_case(dist, torch, case["send_bytes"], rank, world, device)})
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if rank == 0:
            queue.put(out)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(world: int, backend: str, cases: list[dict[str, Any]], budget: float) -> list[dict[str, Any]]:
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    # read after the ranks have exited: rank 0's results (a few KB) fit the pipe's buffer, so its put never blocks
    mp.start_processes(
        _worker, args=(world, backend, _free_port(), cases, budget, queue), nprocs=world, start_method="spawn"
    )
    return queue.get()


def price(case: dict[str, Any], world: int, gpu: str) -> dict[str, Any]:
    """The step model's seconds for the bytes a case sent over ``world`` ranks of one ``gpu`` node, and what the
    measured time says of the NVLink efficiency the model assumes (bytes leaving each rank per second, over the
    datasheet rate)."""
    from optbench.projection import comm
    from optbench.projection.interconnect import interconnect_for

    net = interconnect_for(gpu)
    model_s = comm.all_to_all_s(case["sent_bytes"], tuple(range(world)), net)
    leaving = case["sent_bytes"] * (world - 1) / world
    # The model's NVLink rate is what is left once its one step of latency is taken off the time.
    moving_s = max(case["seconds"] - comm.step_latency_s(False), 1e-9)
    return {
        "model_s": model_s,
        "measured_over_model": case["seconds"] / model_s,
        "achieved_gb_s": leaving / case["seconds"] / 1e9,
        "nvlink_efficiency_measured": leaving / moving_s / net.nvlink_bytes_per_s,
    }


def measure(quick: bool = False, backend: str = "nccl", device_count: int | None = None) -> dict[str, Any]:
    """Every case over all of this node's GPUs (NCCL), priced for the GPU; ``backend="gloo"`` runs the harness on
    ``device_count`` CPU processes instead, unpriced. Fewer than two ranks: not measured, with the reason."""
    import torch

    from optbench.bench.sections import cpu_name, provenance
    from optbench.engine.local.runtime import detect_gpu_key
    from optbench.projection.interconnect import interconnect_for
    from optbench.projection.nccl_all_to_all import nvlink_rate

    on_gpu = backend == "nccl"
    world = device_count if device_count is not None else (torch.cuda.device_count() if on_gpu else 2)
    if world < 2:
        return {"measured": False, "reason": f"an all-to-all needs 2 or more GPUs in one node; this one has {world}"}
    name = torch.cuda.get_device_name(0) if on_gpu else "CPU processes"
    key = detect_gpu_key(name, "auto") if on_gpu else None
    net = interconnect_for(key) if key else None
    if on_gpu and net is None:
        return {"measured": False, "reason": f"{name} is not in data/interconnect.csv: nothing to price against"}
    if on_gpu and world > net.aligned_block_gpus:
        return {
            "measured": False,
            "reason": f"{world} GPUs exceed one NVLink block of {key} ({net.aligned_block_gpus})",
        }
    budget = MEMORY_SHARE * torch.cuda.get_device_properties(0).total_memory if on_gpu else 1e9
    try:
        cases = _run_ranks(world, backend, recipe_cases(quick), budget)
    except Exception as exc:  # a rank that failed (NCCL, memory) is a result to record, not a crash of `make bench`
        return {"measured": False, "reason": f"the {world} ranks failed: {str(exc).strip().splitlines()[-1][:200]}"}
    if net is not None:
        cases = [{**c, **price(c, world, key)} if "seconds" in c else c for c in cases]
    return {
        "measured": True,
        **provenance(),
        "device": name,
        "gpu": key,
        "ranks": world,
        "backend": backend,
        "host_cpu": cpu_name(),
        "nccl": _nccl_version(torch) if on_gpu else None,
        "assumed_nvlink_efficiency": nvlink_rate(net, world) / net.nvlink_bytes_per_s if net else None,
        "nvlink_gb_s_per_direction": net.nvlink_bytes_per_s / 1e9 if net else None,
        "cases": cases,
    }


def _nccl_version(torch) -> str:
    version = torch.cuda.nccl.version()
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)


def run(out_dir: Path, quick: bool = False, gpu_only: bool = False) -> list[Path]:
    """Measure across this node's GPUs (or keep the stored measurement where there are fewer than two)."""
    from optbench.bench.all_to_all_report import markdown
    from optbench.bench.sections import run_gpu_only_benchmark

    return run_gpu_only_benchmark(out_dir, NAME, lambda: measure(quick=quick), markdown, gpu_only)
