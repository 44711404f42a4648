"""The optimizer benchmark: results/bench/optim.json and optim.md.

- ``cpu``: one Muon step on each tiny proxy's parameters, ours against torch.optim.Muon at equal
  precision (bf16 with bf16, fp32 with fp32; :mod:`optbench.bench.optim_timing`), timed on one thread
  and on every core separately, each beside a bound: the FLOPs the variant executes at the cores'
  theoretical peak (:mod:`optbench.bench.cpu_peak`, clock measured around each block). The machine's
  load during each block is recorded.
- ``imbalance``: NS FLOPs max/mean over ranks at the published GB300 layouts for Megatron's
  ping-pong, our cost-aware policy and a lower bound (:mod:`optbench.bench.optim_imbalance`).
- ``gpu``: the same comparison on a CUDA device when there is one (bound: the datasheet bf16 peak),
  else why not.
"""

from __future__ import annotations

import dataclasses
import platform
from pathlib import Path

import torch

from optbench.common.machine_load import LoadMeter
from optbench.bench.cpu_peak import cpu_peak, measured_clock
from optbench.bench.optim_imbalance import imbalance_section
from optbench.bench.optim_timing import PRECISIONS, step_times
from optbench.bench.sections import cpu_name, cpu_thread_counts, logical_cpus
from optbench.compose.recipe import compose_run
from optbench.config.schema import ModelConfig
from optbench.common.io import atomic_write_json, atomic_write_text
from optbench.optim.newton_schulz import resolve_matmul_precision

NAME = "optim"
DESCRIPTION = "Muon step vs torch.optim.Muon at equal precision, 1 thread and all cores, against a peak-based bound"
PROXIES = {
    "kimi_k2_tiny": ("kimi_k2_tiny_muon", "kimi_k2_tiny_adamw"),
    "qwen3_moe_tiny": ("qwen3_moe_tiny_muon", "qwen3_moe_tiny_adamw"),
}
"""Proxy model -> (Muon recipe, AdamW recipe) whose model and optimizer settings are timed."""
BOUND_FACTOR = 2.0
"""CPU target: our step within this factor of the peak-based bound."""
GPU_SPEEDUP_TARGET = 3.0
IMBALANCE_SLACK = 1.05
BUSY_WARNING = 0.25
"""Share of the other cores' time taken by other processes above which a block is marked as measured under load."""


def _shrunk(model: ModelConfig) -> ModelConfig:
    """A much smaller model of the same architecture, for --quick smoke runs."""
    return dataclasses.replace(
        model,
        num_layers=2,
        hidden_size=64,
        ffn_hidden_size=128,
        num_moe_experts=4,
        moe_ffn_hidden_size=32,
        moe_router_topk=2,
        moe_shared_expert_intermediate_size=32 if model.moe_shared_expert_intermediate_size else 0,
        vocab_size=256,
    )


def _proxy_times(device: str, quick: bool) -> dict:
    results = {}
    for proxy, (muon_recipe, adamw_recipe) in PROXIES.items():
        muon_run, adamw_run = compose_run(muon_recipe, []), compose_run(adamw_recipe, [])
        model = _shrunk(muon_run.model) if quick else muon_run.model
        results[proxy] = step_times(
            model,
            muon_run.optimizer,
            adamw_run.optimizer,
            device=device,
            rounds=2 if quick else 9,
            warmup=1 if quick else 2,
        )
    return results


def _with_bounds(models: dict, peaks: dict) -> dict:
    """Each proxy's bound per precision and variant (executed GFLOP / peak) and our median's ratio to it."""
    for m in models.values():
        m["bound_s"], m["ratio_to_bound"] = {}, {}
        for precision in PRECISIONS:
            peak = peaks.get(precision)
            if peak is None:
                continue
            for variant, flops in (("plain", m["executed_gflop"]["plain"]), ("syrk", m["executed_gflop"]["syrk"])):
                name = f"ours_{precision}" + ("_syrk" if variant == "syrk" else "")
                bound = flops / peak["gflops"]
                m["bound_s"][name] = bound
                m["ratio_to_bound"][name] = m["step_s"][name]["median"] / bound
            m["bound_s"][f"torch_{precision}"] = m["executed_gflop"]["plain"] / peak["gflops"]
            m["ratio_to_bound"][f"torch_{precision}"] = (
                m["step_s"][f"torch_{precision}"]["median"] / m["bound_s"][f"torch_{precision}"]
            )
    return models


def _cpu_block(threads: int, quick: bool) -> dict:
    """Every proxy at one thread count, with the peak at the highest clock seen around the block."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        clock_before = measured_clock()
        with LoadMeter() as meter:
            models = _proxy_times("cpu", quick)
        clock_after = measured_clock()
    finally:
        torch.set_num_threads(previous)
    clock = max(clock_before, clock_after)  # the higher clock gives the higher peak: the safer bound
    peaks = {}
    for precision in PRECISIONS:
        peak = cpu_peak(precision, threads, clock)
        if peak is not None:
            peaks[precision] = {**peak.as_dict(), "clock_ghz_before_after": [clock_before[0], clock_after[0]]}
    return {"threads": threads, "peaks": peaks, **meter.result, "models": _with_bounds(models, peaks)}


def _gpu_section(quick: bool) -> dict:
    if not torch.cuda.is_available():
        return {
            "measured": False,
            "reason": "no CUDA device in this run (torch.cuda.is_available() is False; torch "
            f"{torch.__version__} is {'a CPU-only build' if torch.version.cuda is None else 'a CUDA build'}); "
            "run `make bench` on a GPU machine to fill this section",
        }
    return gpu_measurement("cuda", quick)


def gpu_measurement(device: str, quick: bool) -> dict:
    """The GPU section measured on ``device`` (a test passes "cpu" to run the same path without a GPU): both
    proxies, bounded by the datasheet bf16 peak of the device's catalog entry."""
    from optbench.accounting.peaks import peaks_for
    from optbench.bench.sections import provenance
    from optbench.engine.local.runtime import detect_gpu_key

    name = torch.cuda.get_device_name(0) if device == "cuda" else device
    key = detect_gpu_key(name, "auto")
    bf16 = [p for p in peaks_for(key, compose_run("kimi_k2_tiny_muon", []).precision) if p.key.endswith("bf16")]
    peaks = {"bf16": {"gflops": bf16[0].tflops * 1e3, "source": bf16[0].source}} if bf16 else {}
    return {
        "measured": True,
        **provenance(),
        "device": name,
        "peaks": peaks,
        "models": _with_bounds(_proxy_times(device, quick), peaks),
    }


def _targets(cpu_blocks: list[dict], gpu: dict, imbalance: dict) -> dict:
    targets = {}
    for block in cpu_blocks:
        for proxy, m in block["models"].items():
            for precision in PRECISIONS:
                where = f"CPU {block['threads']} thread(s), {proxy}, {precision}"
                targets[f"ours faster than torch.optim.Muon at equal precision: {where}"] = (
                    m["speedup_vs_torch"][precision] > 1.0
                )
                ratio = m["ratio_to_bound"].get(f"ours_{precision}")
                if ratio is not None:
                    targets[f"ours within {BOUND_FACTOR:g}x of the peak-based bound: {where}"] = ratio <= BOUND_FACTOR
    if gpu["measured"]:
        for proxy, m in gpu["models"].items():
            targets[f"ours >= {GPU_SPEEDUP_TARGET:g}x torch.optim.Muon, GPU bf16, {proxy}"] = (
                m["speedup_vs_torch"]["bf16"] >= GPU_SPEEDUP_TARGET
            )
    return {
        **targets,
        "cost_aware never worse than pingpong": all(v["cost_aware"] <= v["pingpong"] for v in imbalance.values()),
        "cost_aware within 5 % of the lower bound": all(
            v["cost_aware"] <= IMBALANCE_SLACK * v["lower_bound"] for v in imbalance.values()
        ),
    }


def run(out_dir: Path, quick: bool = False, gpu_only: bool = False) -> list[Path]:
    """Measure everything and write optim.json and optim.md under ``out_dir``; with ``gpu_only`` measure the GPU
    section alone and keep the rest of the stored optim.json (:mod:`optbench.bench.sections`)."""
    from optbench.bench.sections import invocation, kept_or_fresh, require_cuda, stored_result

    torch.manual_seed(0)
    stored = stored_result(out_dir, NAME, required=gpu_only)
    if gpu_only:
        require_cuda()
        data = {**stored, "gpu": _gpu_section(quick)}
    else:
        cores = logical_cpus()
        cpu = {
            "cpu_model": cpu_name(),
            "logical_cpus": cores,
            "auto_precision": resolve_matmul_precision("auto", "cpu"),
            "blocks": [_cpu_block(threads, quick) for threads in cpu_thread_counts(cores, quick)],
        }
        data = {
            "benchmark": NAME,
            **invocation(),
            "quick": quick,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cpu": cpu,
            "gpu": kept_or_fresh(_gpu_section(quick), (stored or {}).get("gpu")),
            "imbalance": imbalance_section(),
        }
    data["targets"] = _targets(data["cpu"]["blocks"], data["gpu"], data["imbalance"])
    from optbench.bench.optim_report import markdown

    out_dir = Path(out_dir)
    return [atomic_write_json(out_dir / "optim.json", data), atomic_write_text(out_dir / "optim.md", markdown(data))]
