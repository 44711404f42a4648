"""One Muon step on a proxy's parameters, ours against torch.optim.Muon, at equal precision.

Every variant steps its own copy of the same Hugging Face proxy with the same fixed random
gradients; variants are timed interleaved (one step of each per round, so that load from other
processes hits them alike) and reported as median and interquartile range over the rounds.

Precisions are compared like with like:

* ``bf16``: ours with ``fp32_matmul_prec=medium`` (bf16 Newton-Schulz products; the norm and the
  momentum in fp32) against ``torch.optim.Muon`` as it ships (bf16 iterate, one coefficient tuple);
* ``fp32``: ours with ``highest`` against torch.optim.Muon's own code with its bf16 cast replaced by an
  fp32 copy (torch offers no fp32 option; :func:`torch_muon_fp32`).

torch.optim.Muon takes 2-D parameters only, so it gets the matrices ours orthogonalizes: 2-D weights as
they are and each 3-D expert stack split into per-expert matrices. Both run 5 Newton-Schulz steps (ours
the quintic schedule, torch its single tuple: the same products). ``executed_gflop`` counts the products
each variant performs (SYRK's blocked triangles as executed); elementwise work is not counted, so a
bound built on it is a lower bound on time.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import time
from collections.abc import Callable, Iterator

import torch
import torch.optim._muon as torch_muon_module
from torch import nn

from optbench.accounting.ns_flops import ns_flops
from optbench.config.schema import ModelConfig, OptimizerConfig
from optbench.optim import build_optimizer
from optbench.optim.routing import MUON, route_parameters
from optbench.optim.syrk import computed_fraction
from optbench.measured.stats import spread as sample_spread

PRECISIONS = {"bf16": "medium", "fp32": "highest"}
"""Benchmark precision -> our fp32_matmul_prec."""


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so wall-clock times cover it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(
    variants: dict[str, Callable[[], object]], rounds: int, warmup: int, device
) -> dict[str, list[float]]:
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


def spread(values: list[float]) -> dict[str, float]:
    """Median, quartiles, min and max of timing samples (seconds), as the bench's JSON writes them."""
    s = sample_spread(values)
    return {"median": s.median, "q1": s.q1, "q3": s.q3, "min": s.low, "max": s.high, "n": s.n}


def _zeropower_fp32(grad: torch.Tensor, ns_coefficients, ns_steps: int, eps: float) -> torch.Tensor:
    """torch.optim.Muon's ``_zeropower_via_newtonschulz`` (torch 2.13) with ``grad.bfloat16()`` -> ``grad.clone()``."""
    a, b, c = ns_coefficients
    ortho_grad = grad.clone()
    if grad.size(0) > grad.size(1):
        ortho_grad = ortho_grad.T
    ortho_grad.div_(ortho_grad.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram_matrix = ortho_grad @ ortho_grad.T
        gram_update = torch.addmm(gram_matrix, gram_matrix, gram_matrix, beta=b, alpha=c)
        ortho_grad = torch.addmm(ortho_grad, gram_update, ortho_grad, beta=a)
    if grad.size(0) > grad.size(1):
        ortho_grad = ortho_grad.T
    return ortho_grad


@contextlib.contextmanager
def torch_muon_fp32() -> Iterator[None]:
    """Run torch.optim.Muon with fp32 Newton-Schulz products for the duration of the block."""
    original = torch_muon_module._zeropower_via_newtonschulz
    torch_muon_module._zeropower_via_newtonschulz = _zeropower_fp32
    try:
        yield
    finally:
        torch_muon_module._zeropower_via_newtonschulz = original


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


def executed_gflop(shapes: list[tuple[int, int]], steps: int, syrk: bool = False) -> float:
    """GFLOP of the Newton-Schulz products per step; with ``syrk`` the two symmetric products count the
    block triangles :func:`optbench.optim.syrk.symmetric_product` computes."""
    total = 0.0
    for rows, cols in shapes:
        s, n = min(rows, cols), max(rows, cols)
        if syrk:
            fraction = computed_fraction(s)
            total += steps * ((2.0 * s * s * n + 2.0 * s**3) * fraction + 2.0 * s * s * n)
        else:
            total += ns_flops(rows, cols, steps)
    return total / 1e9


def _muon_config(base: OptimizerConfig, precision: str, syrk: bool = False) -> OptimizerConfig:
    return dataclasses.replace(base, muon=dataclasses.replace(base.muon, fp32_matmul_prec=precision, syrk=syrk))


def step_times(
    model_config: ModelConfig,
    muon_config: OptimizerConfig,
    adamw_config: OptimizerConfig,
    *,
    device: str | torch.device = "cpu",
    rounds: int = 7,
    warmup: int = 2,
    seed: int = 0,
) -> dict:
    """Per precision, ours (plain and SYRK) and torch.optim.Muon; the full training steps of both optimizers."""
    from optbench.engine.local.model import build_model

    device = torch.device(device)
    base = _with_gradients(build_model(model_config, seed, device), seed + 1)

    def fresh(config: OptimizerConfig):
        model = copy.deepcopy(base)  # deepcopy leaves .grad behind
        for source, target in zip(base.parameters(), model.parameters()):
            target.grad = source.grad.clone()
        return build_optimizer(model, config)

    variants: dict[str, Callable[[], object]] = {}
    for name, ours_precision in PRECISIONS.items():
        variants[f"ours_{name}"] = fresh(_muon_config(muon_config, ours_precision)).muon.step
        variants[f"ours_{name}_syrk"] = fresh(_muon_config(muon_config, ours_precision, syrk=True)).muon.step
        reference = torch.optim.Muon(
            torch_muon_matrices(base), lr=muon_config.lr, weight_decay=muon_config.weight_decay
        )
        if name == "fp32":
            variants["torch_fp32"] = lambda r=reference: _in_fp32(r)
        else:
            variants["torch_bf16"] = reference.step
    variants["training_step_muon"] = fresh(_muon_config(muon_config, "auto")).step
    variants["training_step_adamw"] = fresh(adamw_config).step
    samples = time_interleaved(variants, rounds, warmup, device)
    shapes = [tuple(m.shape) for m in torch_muon_matrices(base)]
    steps = muon_config.muon.ns_steps
    result: dict = {
        "rounds": rounds,
        "warmup_rounds": warmup,
        "muon_matrices": len(shapes),
        "step_s": {name: spread(values) for name, values in samples.items()},
        "executed_gflop": {"plain": executed_gflop(shapes, steps), "syrk": executed_gflop(shapes, steps, syrk=True)},
    }
    medians = {name: s["median"] for name, s in result["step_s"].items()}
    result["speedup_vs_torch"] = {p: medians[f"torch_{p}"] / medians[f"ours_{p}"] for p in PRECISIONS}
    result["speedup_vs_torch_syrk"] = {p: medians[f"torch_{p}"] / medians[f"ours_{p}_syrk"] for p in PRECISIONS}
    result["muon_vs_adamw_training_step"] = medians["training_step_muon"] / medians["training_step_adamw"]
    return result


def _in_fp32(reference: torch.optim.Optimizer) -> None:
    with torch_muon_fp32():
        reference.step()
