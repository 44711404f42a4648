"""The emerging-optimizer benchmark: results/bench/emerging.json and emerging.md.

One optimizer step of SOAP, AdaMuon (adamuon) and Lion on each tiny proxy's parameters, ours
(:mod:`optbench.optim`) against what a user could pick instead: Emerging-Optimizers 0.3.0's own classes (the
library Megatron Core builds them from; AdaMuon as Megatron wraps it, :mod:`optbench.bench.upstream_optimizers`),
at equal precision (fp32 products on both sides: ``fp32_matmul_prec=highest`` for AdaMuon, SOAP's ``high`` is
fp32 on a CPU). Both sides step the same matrices (2-D weights, each 3-D expert stack split into its experts, as
Megatron holds them) with the same fixed gradients; Lion steps everything else. Timed interleaved, one thread and
every core, each beside a bound: the products the step executes (:mod:`optbench.accounting.optimizer_work` for
SOAP, Newton-Schulz for AdaMuon) at the cores' fp32 peak (:mod:`optbench.bench.cpu_peak`). Element-wise work is not
in the bound, so the bound is a lower bound on time.
"""

from __future__ import annotations

import platform
from pathlib import Path

import torch

from optbench.accounting.ns_flops import ns_flops
from optbench.config.optimizers.soap import soap_flops
from optbench.bench.cpu_peak import cpu_peak, measured_clock
from optbench.bench.optim import PROXIES, _shrunk
from optbench.common.machine_load import LoadMeter
from optbench.common.tables import markdown_table
from optbench.bench.sections import cpu_name, cpu_thread_counts, invocation, logical_cpus
from optbench.bench.optim_timing import _with_gradients, spread, time_interleaved, torch_muon_matrices
from optbench.bench.upstream_optimizers import eager, load, megatron_adaptive_muon, overlay_with_emerging_optimizers
from optbench.compose.recipe import compose_run
from optbench.common.io import atomic_write_json, atomic_write_text
from optbench.optim.adaptive_muon import AdaptiveMuon
from optbench.optim.lion import Lion
from optbench.optim.routing import MUON, route_parameters
from optbench.optim.soap import SOAP

NAME = "emerging"
DESCRIPTION = (
    "SOAP, AdaMuon and Lion steps, ours vs Emerging-Optimizers 0.3.0 at fp32, 1 thread and all cores, vs a peak bound"
)
OPTIMIZERS = ("soap", "adamuon", "lion")


def _copies(tensors: list[torch.Tensor]) -> list[torch.nn.Parameter]:
    out = []
    for t in tensors:
        p = torch.nn.Parameter(t.detach().clone())
        p.grad = t.grad.detach().clone()
        out.append(p)
    return out


def _variants(matrices: list[torch.Tensor], scalars: list[torch.Tensor]) -> dict:
    """Each optimizer's step, ours and upstream, on its own copy of the parameters."""
    from emerging_optimizers.scalar_optimizers import Lion as UpstreamLion
    from emerging_optimizers.soap import SOAP as UpstreamSOAP

    settings = dict(lr=3e-4, weight_decay=0.033)
    adamuon = dict(momentum=0.95, moment2_method="adamuon", beta2=0.95, eps=1e-8)
    return {
        "soap_ours": SOAP(_copies(matrices), betas=(0.9, 0.95), **settings).step,
        "soap_upstream": UpstreamSOAP(_copies(matrices), betas=(0.9, 0.95), use_kl_shampoo=True, **settings).step,
        "adamuon_ours": AdaptiveMuon(
            _copies(matrices),
            nesterov=True,
            fp32_matmul_prec="highest",
            split_qkv=False,
            scale_after_moment2=True,
            **adamuon,
            **settings,
        ).step,
        "adamuon_upstream": megatron_adaptive_muon(
            _copies(matrices), fp32_matmul_prec="highest", **adamuon, **settings
        ).step,
        "lion_ours": Lion(_copies(scalars), betas=(0.95, 0.98), **settings).step,
        "lion_upstream": UpstreamLion(_copies(scalars), betas=(0.95, 0.98), **settings).step,
    }


def _proxy(recipe: str, quick: bool) -> dict:
    from optbench.engine.local.model import build_model

    run = compose_run(recipe, [])
    model = _with_gradients(build_model(_shrunk(run.model) if quick else run.model, 0, torch.device("cpu")), 1)
    matrices = torch_muon_matrices(model)
    scalars = [r.param for r in route_parameters(model) if r.optimizer != MUON]
    with eager():
        samples = time_interleaved(_variants(matrices, scalars), rounds=2 if quick else 5, warmup=1, device="cpu")
    shapes = [tuple(m.shape) for m in matrices]
    return {
        "matrices": len(shapes),
        "scalar_elements": sum(p.numel() for p in scalars),
        "step_s": {name: spread(values) for name, values in samples.items()},
        "executed_gflop": {
            "soap": sum(soap_flops(r, c).total for r, c in shapes) / 1e9,
            "adamuon": sum(ns_flops(r, c, 5) for r, c in shapes) / 1e9,
        },
    }


def _block(threads: int, quick: bool) -> dict:
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        clock = measured_clock()
        with LoadMeter() as meter:
            models = {proxy: _proxy(recipes[0], quick) for proxy, recipes in PROXIES.items()}
    finally:
        torch.set_num_threads(previous)
    peak = cpu_peak("fp32", threads, clock)
    for m in models.values():
        medians = {name: s["median"] for name, s in m["step_s"].items()}
        m["speedup_vs_upstream"] = {o: medians[f"{o}_upstream"] / medians[f"{o}_ours"] for o in OPTIMIZERS}
        if peak is not None:
            m["bound_s"] = {o: m["executed_gflop"][o] / peak.gflops for o in ("soap", "adamuon")}
            m["ratio_to_bound"] = {o: medians[f"{o}_ours"] / m["bound_s"][o] for o in ("soap", "adamuon")}
    return {"threads": threads, "peak": peak.as_dict() if peak else None, **meter.result, "models": models}


def _markdown(data: dict) -> str:
    lines = [
        "# SOAP, AdaMuon and Lion: one step, ours vs Emerging-Optimizers 0.3.0 (fp32)",
        "",
        f"Command: `{data['command']}` ({data['created']}); torch {data['torch']}, Python {data['python']}; "
        f"CPU: {data['cpu_model']} ({data['logical_cpus']} logical CPUs). Method: src/optbench/bench/emerging.py.",
        "",
    ]
    if not data["measured"]:
        return "\n".join(lines + [f"Not measured: {data['reason']}", ""])
    cells = []
    for block in data["blocks"]:
        for proxy, m in block["models"].items():
            for o in OPTIMIZERS:
                ours, theirs = m["step_s"][f"{o}_ours"]["median"], m["step_s"][f"{o}_upstream"]["median"]
                bound = m.get("bound_s", {}).get(o)
                cells.append(
                    [
                        block["threads"],
                        proxy,
                        o,
                        f"{ours:.4f}",
                        f"{theirs:.4f}",
                        f"{m['speedup_vs_upstream'][o]:.2f}x",
                        "" if bound is None else f"{bound:.4f}",
                        "" if bound is None else f"{ours / bound:.1f}",
                    ]
                )
    lines += markdown_table(
        [
            "threads",
            "proxy",
            "optimizer",
            "ours s (median)",
            "upstream s (median)",
            "upstream / ours",
            "bound s (products at fp32 peak)",
            "ours / bound",
        ],
        cells,
    )
    lines += [
        "",
        "Peaks: "
        + "; ".join(
            f"{b['threads']} thread(s): {b['peak']['gflops']:.0f} GFLOP/s fp32 "
            f"({b['peak']['isa']}, {b['peak']['clock_ghz']:.2f} GHz)"
            for b in data["blocks"]
            if b["peak"]
        ),
        "Load: the share of the other cores' time other processes took during each block is in emerging.json.",
        "",
    ]
    return "\n".join(lines)


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    """Measure and write emerging.json and emerging.md under ``out_dir``."""
    torch.manual_seed(0)
    cores = logical_cpus()
    data = {
        "benchmark": NAME,
        **invocation(),
        "quick": quick,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_model": cpu_name(),
        "logical_cpus": cores,
    }
    folder = overlay_with_emerging_optimizers()
    if folder is None:
        data.update(measured=False, reason="Emerging-Optimizers 0.3.0 is not installed: run `make setup`")
    else:
        load(folder)
        data.update(
            measured=True,
            emerging_optimizers=str(folder),
            blocks=[_block(threads, quick) for threads in cpu_thread_counts(cores, quick)],
        )
    out_dir = Path(out_dir)
    return [
        atomic_write_json(out_dir / "emerging.json", data),
        atomic_write_text(out_dir / "emerging.md", _markdown(data)),
    ]
