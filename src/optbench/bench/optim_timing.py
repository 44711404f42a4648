"""Optimizer step times on the tiny proxies' parameters: ours vs torch.optim.Muon vs AdamW, same machine, one run.

Every variant steps its own copy of the same Hugging Face proxy with the same fixed random
gradients; variants are timed interleaved (one step of each per round) so that load from other
processes hits them alike, and the median over rounds is reported.

torch.optim.Muon only takes 2-D parameters, so it gets the same matrices Muon does: the 2-D
weights as they are and every 3-D expert stack split into its per-expert 2-D matrices (copies with
the matching gradient slices). It always runs Newton-Schulz in bf16 with one coefficient tuple;
its scale rule does not change the work.
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from optbench.config.schema import ModelConfig, OptimizerConfig
from optbench.optim import build_optimizer
from optbench.accounting.ns_flops import ns_flops
from optbench.optim.newton_schulz import newton_schulz, resolve_matmul_precision
from optbench.optim.routing import MUON, route_parameters
from optbench.optim.syrk import computed_fraction


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so wall-clock times cover it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(variants: dict[str, Callable[[], object]], rounds: int, warmup: int, device) -> dict[str, list[float]]:
    """Seconds of each call, ``rounds`` times, one call of every variant per round after ``warmup`` rounds."""
    device = torch.device(device)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for round_index in range(warmup + rounds):
        for name, call in variants.items():
            synchronize(device)
            start = time.perf_counter()
            call()
            synchronize(device)
            if round_index >= warmup:
                samples[name].append(time.perf_counter() - start)
    return samples


def _with_gradients(model: nn.Module, seed: int) -> nn.Module:
    generator = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = (torch.randn(p.shape, generator=generator) * 1e-3).to(p.device)
    return model


def torch_muon_matrices(model: nn.Module) -> list[nn.Parameter]:
    """Copies of the matrices our Muon updates, 3-D expert stacks split per expert, with their gradients."""
    matrices = []
    for route in route_parameters(model):
        if route.optimizer != MUON:
            continue
        weights = route.param.detach().reshape(-1, *route.param.shape[-2:])
        grads = route.param.grad.reshape(-1, *route.param.shape[-2:])
        for weight, grad in zip(weights, grads):
            matrix = nn.Parameter(weight.clone())
            matrix.grad = grad.clone()
            matrices.append(matrix)
    return matrices


def _muon_config(base: OptimizerConfig, precision: str) -> OptimizerConfig:
    return dataclasses.replace(base, muon=dataclasses.replace(base.muon, fp32_matmul_prec=precision))


def step_times(
    model_config: ModelConfig,
    muon_config: OptimizerConfig,
    adamw_config: OptimizerConfig,
    *,
    device: str | torch.device = "cpu",
    rounds: int = 5,
    warmup: int = 2,
    seed: int = 0,
    precisions: tuple[str, ...] = ("highest", "medium"),
) -> dict:
    """Median step seconds of every variant on one proxy, plus what it stepped."""
    from optbench.engine.local.model import build_model

    device = torch.device(device)
    base = _with_gradients(build_model(model_config, seed, device), seed + 1)
    auto = resolve_matmul_precision("auto", device)

    def fresh(config: OptimizerConfig, **muon_kwargs):
        model = copy.deepcopy(base)  # deepcopy leaves .grad behind
        for source, target in zip(base.parameters(), model.parameters()):
            target.grad = source.grad.clone()
        optimizer = build_optimizer(model, config)
        for key, value in muon_kwargs.items():
            setattr(optimizer.muon, key, value)
        return optimizer

    ours = {precision: fresh(_muon_config(muon_config, precision)) for precision in dict.fromkeys((*precisions, auto))}
    unbatched = fresh(_muon_config(muon_config, auto), batch_same_shapes=False)
    training_muon = fresh(_muon_config(muon_config, auto))
    training_adamw = fresh(adamw_config)
    matrices = torch_muon_matrices(base)
    reference = torch.optim.Muon(matrices, lr=muon_config.lr, weight_decay=muon_config.weight_decay)
    variants = {f"muon_{precision}": optimizer.muon.step for precision, optimizer in ours.items()}
    variants.update(
        muon_unbatched=unbatched.muon.step,
        torch_muon=reference.step,
        training_step_muon=training_muon.step,
        training_step_adamw=training_adamw.step,
    )
    samples = time_interleaved(variants, rounds, warmup, device)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    muon_params = [r.param for r in route_parameters(base) if r.optimizer == MUON]
    return {
        "auto_precision": auto,
        "median_step_s": medians,
        "min_step_s": {name: min(values) for name, values in samples.items()},
        "muon_step_s": medians[f"muon_{auto}"],
        "torch_muon_step_s": medians["torch_muon"],
        "speedup_vs_torch_muon": medians["torch_muon"] / medians[f"muon_{auto}"],
        "speedup_vs_torch_muon_fp32": medians["torch_muon"] / medians["muon_highest"] if "muon_highest" in medians else None,
        "batching_speedup": medians["muon_unbatched"] / medians[f"muon_{auto}"],
        "muon_vs_adamw_training_step": medians["training_step_muon"] / medians["training_step_adamw"],
        "rounds": rounds,
        "warmup_rounds": warmup,
        "muon_matrices": len(matrices),
        "muon_parameters": len(muon_params),
        "muon_elements": sum(p.numel() for p in muon_params),
        "all_elements": sum(p.numel() for p in base.parameters()),
        "ns_flops_per_step": sum(ns_flops(*m.shape, muon_config.muon.ns_steps) for m in matrices),
    }


def _blocked_flop_ratio(rows: int, cols: int) -> float:
    """Plain / blocked NS FLOPs: the two symmetric products shrink to syrk.computed_fraction of themselves."""
    s, l = min(rows, cols), max(rows, cols)
    symmetric, general = 2.0 * s * s * l + 2.0 * s**3, 2.0 * s * s * l
    return (symmetric + general) / (symmetric * computed_fraction(s) + general)


def syrk_times(shapes, *, device="cpu", precisions=("highest", "medium"), rounds: int = 3, steps: int = 5) -> list[dict]:
    """Newton-Schulz seconds with and without the blocked SYRK products, per matrix shape and precision."""
    device = torch.device(device)
    rows = []
    for shape in shapes:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(device)
        for precision in precisions:
            variants = {
                syrk: (lambda s=syrk: newton_schulz(x, steps, "quintic", precision=precision, syrk=s)) for syrk in (False, True)
            }
            samples = time_interleaved({str(k): v for k, v in variants.items()}, rounds, 1, device)
            plain, blocked = statistics.median(samples["False"]), statistics.median(samples["True"])
            rows.append(
                {
                    "shape": list(shape),
                    "precision": precision,
                    "plain_s": plain,
                    "syrk_s": blocked,
                    "speedup": plain / blocked,
                    "ideal_flop_ratio": ns_flops(*shape[-2:], steps) / ns_flops(*shape[-2:], steps, syrk=True),
                    "blocked_flop_ratio": _blocked_flop_ratio(*shape[-2:]),
                }
            )
    return rows
