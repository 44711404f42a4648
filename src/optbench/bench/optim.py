"""The optimizer benchmark: results/bench/optim.json and optim.md.

- ``cpu``: one optimizer step on the tiny proxies' parameters, ours vs torch.optim.Muon vs AdamW
  (:mod:`optbench.bench.optim_timing`), and the blocked-SYRK Newton-Schulz against the plain one.
- ``imbalance``: NS FLOPs max/mean over ranks at the published GB300 layouts for Megatron's
  ping-pong, our cost-aware policy and a lower bound (:mod:`optbench.bench.optim_imbalance`).
- ``gpu``: the same step-time ratios on a CUDA device when there is one, else why not.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import json
import shlex
import subprocess
import sys
from pathlib import Path

import torch

from optbench.bench.optim_imbalance import imbalance_section
from optbench.bench.optim_timing import step_times, syrk_times
from optbench.config.compose import compose_run
from optbench.config.schema import ModelConfig
from optbench.engine.local.runtime import cpu_matmul_probe
from optbench.io import atomic_write_json, atomic_write_text, dumps_strict

NAME = "optim"
DESCRIPTION = "Muon step time vs torch.optim.Muon and AdamW, SYRK, layer-wise load imbalance"
PROXIES = {"kimi_k2_tiny": ("kimi_k2_tiny_muon", "kimi_k2_tiny_adamw"), "qwen3_moe_tiny": ("qwen3_moe_tiny_muon", "qwen3_moe_tiny_adamw")}
"""Proxy model -> (Muon recipe, AdamW recipe) whose model and optimizer settings are timed."""
HEADLINE = "kimi_k2_tiny"
"""The proxy of the default local recipe: its numbers are the top-level cpu.* keys."""
SPEEDUP_TARGET = 10.0
IMBALANCE_SLACK = 1.05
SYRK_SHAPES = {"cpu": [(512, 2048), (1024, 4096)], "cuda": [(2048, 7168), (4096, 14336)]}
"""Matrices for the SYRK comparison: CPU-sized, and Kimi K2's expert fc1 / a 4096-row matrix on GPUs."""


def _shrunk(model: ModelConfig) -> ModelConfig:
    """A much smaller model of the same architecture, for --quick smoke runs."""
    return dataclasses.replace(
        model, num_layers=2, hidden_size=64, ffn_hidden_size=128, num_moe_experts=4, moe_ffn_hidden_size=32,
        moe_router_topk=2, moe_shared_expert_intermediate_size=32 if model.moe_shared_expert_intermediate_size else 0,
        vocab_size=256,
    )


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _proxy_times(device: str, quick: bool, rounds: int = 7, warmup: int = 2, precisions: tuple[str, ...] = ("highest", "medium")) -> dict:
    results = {}
    for proxy, (muon_recipe, adamw_recipe) in PROXIES.items():
        muon_run, adamw_run = compose_run(muon_recipe, []), compose_run(adamw_recipe, [])
        model = _shrunk(muon_run.model) if quick else muon_run.model
        results[proxy] = step_times(
            model,
            muon_run.optimizer,
            adamw_run.optimizer,
            device=device,
            rounds=2 if quick else rounds,
            warmup=1 if quick else warmup,
            precisions=precisions,
        )
    return results


def _ceiling(models: dict) -> dict:
    """The fastest any Muon could step here: each proxy's Newton-Schulz FLOPs at this CPU's best GEMM rate.

    The rate is the better of the bf16 and fp32 square-GEMM probes (the local engine's MFU denominator),
    a best case that Newton-Schulz's smaller, batched products do not reach; the floor leaves out the
    momentum and update arithmetic, so the real ceiling on the speedup is lower still.
    """
    rates = {"bf16": cpu_matmul_probe(torch.bfloat16), "fp32": cpu_matmul_probe(torch.float32)}
    best = max(rates.values())
    proxies = {}
    for proxy, m in models.items():
        floor_s = m["ns_flops_per_step"] / (best * 1e9)
        proxies[proxy] = {
            "ns_gflop_per_step": m["ns_flops_per_step"] / 1e9,
            "ns_floor_s": floor_s,
            "max_speedup_vs_torch_muon": m["torch_muon_step_s"] / floor_s,
        }
    return {"probe_gflops": rates, "proxies": proxies}


def _device_section(device: str, quick: bool) -> dict:
    models = _proxy_times(device, quick)
    shapes = [(64, 256)] if quick else SYRK_SHAPES[torch.device(device).type]
    return {
        **_headline(models),
        "threads": torch.get_num_threads(),
        "models": models,
        **({"ceiling": _ceiling(models)} if torch.device(device).type == "cpu" else {}),
        "syrk": syrk_times(shapes, device=device, rounds=1 if quick else 3),
    }


def _headline(models: dict) -> dict:
    """The headline proxy's step times and the worst speedup over all proxies (bench targets read these)."""
    headline = models[HEADLINE]
    return {
        "model": HEADLINE,
        "muon_step_s": headline["muon_step_s"],
        "torch_muon_step_s": headline["torch_muon_step_s"],
        "speedup_vs_torch_muon": headline["speedup_vs_torch_muon"],
        "speedup_vs_torch_muon_min_over_proxies": min(m["speedup_vs_torch_muon"] for m in models.values()),
        "muon_vs_adamw_training_step": headline["muon_vs_adamw_training_step"],
    }


EMULATED_ISA = {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
"""Keep oneDNN (bf16 GEMMs) and MKL (fp32 GEMMs) to AVX2: this machine behaving like a CPU without
AVX512-BF16 or AMX (most CI runners, AMD Zen 2/3, Intel before Cooper Lake)."""


def _emulated_avx2_section(quick: bool) -> dict:
    """The same step times in a child process whose math libraries may only use AVX2."""
    command = [sys.executable, "-m", "optbench.bench.optim", "--proxy-times-json", str(torch.get_num_threads())]
    if quick:
        command.append("--quick")
    done = subprocess.run(command, env={**os.environ, **EMULATED_ISA}, capture_output=True, text=True, check=True)
    child = json.loads(done.stdout)
    return {
        "what": "this machine with oneDNN and MKL limited to AVX2, emulating a CPU without AMX / AVX512-BF16",
        "environment": EMULATED_ISA,
        **_headline(child["models"]),
        "models": child["models"],
        "ceiling": child["ceiling"],
    }


def _gpu_section(quick: bool) -> dict:
    if not torch.cuda.is_available():
        return {
            "measured": False,
            "reason": "no CUDA device in this run (torch.cuda.is_available() is False; torch "
            f"{torch.__version__} is {'a CPU-only build' if torch.version.cuda is None else 'a CUDA build'}); "
            "run `make bench` on a GPU machine to fill this section",
        }
    return {"measured": True, "device": torch.cuda.get_device_name(0), **_device_section("cuda", quick)}


def _targets(cpu: dict, emulated: dict, imbalance: dict) -> dict:
    targets = {}
    for label, section in (("this CPU", cpu), ("AVX2-only CPU (emulated)", emulated)):
        for scope, key in ((HEADLINE, "speedup_vs_torch_muon"), ("every proxy", "speedup_vs_torch_muon_min_over_proxies")):
            targets[f"speedup vs torch.optim.Muon >= {SPEEDUP_TARGET:g}x, {label}, {scope}"] = section[key] >= SPEEDUP_TARGET
    return {
        **targets,
        "cost_aware never worse than pingpong": all(v["cost_aware"] <= v["pingpong"] for v in imbalance.values()),
        "cost_aware within 5 % of the lower bound": all(
            v["cost_aware"] <= IMBALANCE_SLACK * v["lower_bound"] for v in imbalance.values()
        ),
    }


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    """Measure everything and write optim.json and optim.md under ``out_dir``."""
    torch.manual_seed(0)
    load_before = os.getloadavg()[0]
    cpu = {"cpu_model": _cpu_name(), "logical_cpus": os.cpu_count(), **_device_section("cpu", quick)}
    # Other processes on a small machine skew every number; the 1-minute load average says how busy it was.
    cpu["load_average_1min"] = {"before": load_before, "after": os.getloadavg()[0]}
    emulated = _emulated_avx2_section(quick)
    imbalance = imbalance_section()
    data = {
        "benchmark": NAME,
        "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, "-m", "optbench.bench", *sys.argv[1:]]),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu,
        "cpu_avx2_emulated": emulated,
        "gpu": _gpu_section(quick),
        "imbalance": imbalance,
        "targets": _targets(cpu, emulated, imbalance),
    }
    out_dir = Path(out_dir)
    json_path = atomic_write_json(out_dir / "optim.json", data)
    md_path = atomic_write_text(out_dir / "optim.md", markdown(data))
    return [json_path, md_path]


def _ms(seconds: float) -> str:
    """Seconds as milliseconds for the tables."""
    return f"{seconds * 1e3:.1f} ms"


def _step_table(section: dict, syrk: bool = True) -> list[str]:
    rows = [
        "| proxy | ours Muon (auto) | ours fp32 | ours bf16 | ours unbatched | torch.optim.Muon | speedup | full step Muon run | AdamW run | Muon/AdamW |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for proxy, m in section["models"].items():
        t = m["median_step_s"]
        rows.append(
            f"| {proxy} ({m['muon_matrices']} matrices) | {_ms(m['muon_step_s'])} ({m['auto_precision']}) | {_ms(t['muon_highest'])} "
            f"| {_ms(t['muon_medium']) if 'muon_medium' in t else 'not timed'} | {_ms(t['muon_unbatched'])} | {_ms(t['torch_muon'])} "
            f"| {m['speedup_vs_torch_muon']:.1f}x (fp32: {m['speedup_vs_torch_muon_fp32']:.1f}x) "
            f"| {_ms(t['training_step_muon'])} | {_ms(t['training_step_adamw'])} | {m['muon_vs_adamw_training_step']:.1f}x |"
        )
    ceiling = section.get("ceiling")
    if ceiling:
        rates = ceiling["probe_gflops"]
        rows += [
            "",
            f"Ceiling: at this CPU's best GEMM rate through torch (square-GEMM probe: bf16 {rates['bf16']:,.0f}, "
            f"fp32 {rates['fp32']:,.0f} GFLOP/s), Newton-Schulz alone takes at least",
        ]
        rows += [
            f"{_ms(c['ns_floor_s'])} for {proxy} ({c['ns_gflop_per_step']:.1f} GFLOP per step): no implementation can step "
            f"more than {c['max_speedup_vs_torch_muon']:.1f}x faster than torch.optim.Muon here;"
            for proxy, c in ceiling["proxies"].items()
        ]
        rows[-1] = rows[-1].rstrip(";") + "."
    if not syrk:
        return rows
    rows += [
        "",
        "| Newton-Schulz shape (5 quintic steps) | precision | plain | blocked SYRK | speedup | FLOP ratio: blocked / ideal SYRK |",
        "|---|---|---|---|---|---|",
    ]
    for r in section["syrk"]:
        rows.append(
            f"| {'x'.join(map(str, r['shape']))} | {r['precision']} | {_ms(r['plain_s'])} | {_ms(r['syrk_s'])} "
            f"| {r['speedup']:.2f}x | {r['blocked_flop_ratio']:.2f}x / {r['ideal_flop_ratio']:.2f}x |"
        )
    return rows


def markdown(data: dict) -> str:
    """The short human-readable summary written beside optim.json."""
    cpu, gpu = data["cpu"], data["gpu"]
    lines = [
        "# Optimizer benchmark",
        "",
        f"Command: `{data['command']}` (`make bench`), {data['created']}, torch {data['torch']}"
        + (" (QUICK smoke run: shrunk models, few rounds)" if data["quick"] else ""),
        "",
        f"## CPU: {cpu['cpu_model']}, {cpu['logical_cpus']} logical CPUs, {cpu['threads']} torch threads "
        f"(1-min load average {cpu['load_average_1min']['before']:.1f} before, {cpu['load_average_1min']['after']:.1f} after)",
        "",
        "One optimizer step on the tiny proxies' parameters (median of interleaved rounds). "
        "'auto' is the precision our default picks on this device.",
        "",
        *_step_table(cpu),
        "",
        f"## The same machine as a CPU without AMX or AVX512-BF16 ({', '.join(f'{k}={v}' for k, v in EMULATED_ISA.items())})",
        "",
        *_step_table(data["cpu_avx2_emulated"], syrk=False),
        "",
        "## GPU",
        "",
    ]
    if gpu["measured"]:
        lines += [f"Device: {gpu['device']}", "", *_step_table(gpu)]
    else:
        lines.append(f"Not measured: {gpu['reason']}.")
    lines += [
        "",
        "## Layer-wise load imbalance (NS FLOPs per step, max / mean over ranks; from shapes)",
        "",
        "| model | layout | ping-pong | cost-aware | lower bound | dealt part only: ping-pong / cost-aware / bound |",
        "|---|---|---|---|---|---|",
    ]
    for model, v in data["imbalance"].items():
        lay, dealt = v["layout"], v["dealt_part_only"]
        lines.append(
            f"| {model} | {lay['gpus']} GPUs TP{lay['tp']} PP{lay['pp']} EP{lay['ep']} DP{lay['dp']} EDP{lay['edp']} "
            f"| {v['pingpong']:.4f} | {v['cost_aware']:.4f} | {v['lower_bound']:.4f} "
            f"| {dealt['pingpong']:.3f} / {dealt['cost_aware']:.3f} / {dealt['lower_bound']:.3f} |"
        )
    lines += ["", "## Targets", ""]
    lines += [f"- {'met' if met else 'MISSED'}: {target}" for target, met in data["targets"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    # Child mode of _emulated_avx2_section: print the proxies' step times as JSON.
    arguments = sys.argv[1:]
    if not arguments or arguments[0] != "--proxy-times-json":
        sys.exit("usage: python -m optbench.bench.optim --proxy-times-json THREADS [--quick]")
    torch.set_num_threads(int(arguments[1]))
    # bf16 products take ~10 s per step here and torch.optim.Muon as long: fewer rounds, fp32 only for ours.
    proxies = _proxy_times("cpu", quick="--quick" in arguments, rounds=3, warmup=1, precisions=("highest",))
    print(dumps_strict({"models": proxies, "ceiling": _ceiling(proxies)}))
