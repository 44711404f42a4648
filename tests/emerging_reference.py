"""Reference trajectories of Emerging-Optimizers' SOAP, AdaMuon (as Megatron Core wraps it) and Lion, and ours.

Used by tests/test_optim_emerging.py (live against Emerging-Optimizers 0.3.0, which ``make setup`` installs beside
Megatron Core 0.19 in ``.bridge-releases/``) and by tools/emerging_reference.py, which runs the same cases against
the 0.2.0 sources (git-only, the release nemo:26.06-26.08 ship) and freezes them as a fixture.

A case is a handful of matrices, the same seeded gradients every step, and one optimizer's settings; its result is
the parameters after every step. AdaMuon is built as Megatron Core's ``TensorParallelAdaptiveMuon`` builds it without
tensor parallelism: upstream ``AdaptiveMuon`` whose orthogonalization is ``newton_schulz(G) * scale * extra``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from optbench.bench.upstream_optimizers import (  # noqa: F401  (load and the overlay: the callers')
    eager,
    load,
    megatron_adaptive_muon,
    overlay_with_emerging_optimizers,
)

SHAPES = ((6, 10), (12, 7), (8, 8))
"""Small matrices of either orientation and a square one: the frozen 0.2.0 fixture's cases."""
LIVE_SHAPES = (*SHAPES, (7, 130))
"""The live 0.3.0 comparison adds a wide matrix whose right factor is 130 x 130 of rank 7: its null space is where
0.2.0's shifted eigh and 0.3.0's plain one part. Its eigenvectors there depend on LAPACK's threads, so it is compared
only within one process (ours against upstream, same threads), never against a file frozen elsewhere."""
STEPS = 6
CASES: dict[str, dict[str, Any]] = {
    "soap_kl": {"optimizer": "soap", "use_kl_shampoo": True, "precondition_frequency": 1},
    "soap_plain": {"optimizer": "soap", "use_kl_shampoo": False, "precondition_frequency": 1},
    "soap_kl_every_2": {"optimizer": "soap", "use_kl_shampoo": True, "precondition_frequency": 2},
    "adamuon": {"optimizer": "adaptive_muon", "moment2_method": "adamuon"},
    "normuon": {"optimizer": "adaptive_muon", "moment2_method": "normuon"},
    "lion": {"optimizer": "lion"},
}
"""Every case; soap_kl_every_2 exists in 0.2.0 only (0.3.0 dropped precondition_frequency)."""
LR = {"soap": 0.01, "adaptive_muon": 0.02, "lion": 0.001}
WEIGHT_DECAY = 0.1
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "emerging_optimizers"


def fixture_name(version: str, capability: str) -> str:
    """The frozen trajectories of ``version`` run on a CPU of ``capability``
    (``torch.backends.cpu.get_cpu_capability``)."""
    return f"eo-{version}-{capability}.json"


def frozen_paths(version: str) -> dict[str, dict[str, Any]]:
    """Every file of ``version``'s frozen trajectories, by name: one per CPU numerics path it was recorded on.

    The capability torch reports does not name the path: on 2026-11-29 an AMD EPYC VM reporting AVX512 reproduced
    the first file (eo-0.2.0.json) bit for bit and missed eo-0.2.0-AVX512.json by up to 0.32 on SOAP."""
    return {path.name: json.loads(path.read_text()) for path in sorted(FIXTURES.glob(f"eo-{version}*.json"))}


def _start(shapes) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    generator = torch.Generator().manual_seed(1234)
    params = [torch.randn(shape, generator=generator) for shape in shapes]
    grads = [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(STEPS)]
    return params, grads


def run(make_optimizer, case: dict[str, Any], shapes=SHAPES) -> list[list[list[list[float]]]]:
    """Parameters after every step (step, matrix, rows) under ``make_optimizer(params, case)``."""
    start, grads = _start(shapes)
    params = [torch.nn.Parameter(p.clone()) for p in start]
    optimizer = make_optimizer(params, case)
    trajectory = []
    with eager():
        for step_grads in grads:
            for p, g in zip(params, step_grads):
                p.grad = g.clone()
            optimizer.step()
            trajectory.append([p.detach().tolist() for p in params])
    return trajectory


def upstream(eo):
    """``make_optimizer`` for an imported ``emerging_optimizers`` (0.2.0 or 0.3.0)."""
    from emerging_optimizers.scalar_optimizers import Lion
    from emerging_optimizers.soap import SOAP

    def make(params, case):
        lr = LR[case["optimizer"]]
        if case["optimizer"] == "soap":
            extra = (
                {"precondition_frequency": case["precondition_frequency"]} if case["precondition_frequency"] > 1 else {}
            )
            return SOAP(
                params,
                lr=lr,
                betas=(0.9, 0.95),
                shampoo_beta=0.95,
                eps=1e-8,
                weight_decay=WEIGHT_DECAY,
                use_kl_shampoo=case["use_kl_shampoo"],
                **extra,
            )
        if case["optimizer"] == "lion":
            return Lion(params, lr=lr, betas=(0.95, 0.98), weight_decay=WEIGHT_DECAY)
        return megatron_adaptive_muon(
            params, lr=lr, momentum=0.95, weight_decay=WEIGHT_DECAY, moment2_method=case["moment2_method"]
        )

    return make


def ours(emerging_optimizers_version: str):
    """``make_optimizer`` for our implementations with the semantics of that Emerging-Optimizers release."""
    from optbench.optim.adaptive_muon import AdaptiveMuon
    from optbench.optim.lion import Lion
    from optbench.optim.soap import SOAP

    later = tuple(int(x) for x in emerging_optimizers_version.split(".")[:2]) >= (0, 3)

    def make(params, case):
        lr = LR[case["optimizer"]]
        if case["optimizer"] == "soap":
            return SOAP(
                params,
                lr=lr,
                betas=(0.9, 0.95),
                shampoo_beta=0.95,
                eps=1e-8,
                weight_decay=WEIGHT_DECAY,
                use_kl_shampoo=case["use_kl_shampoo"],
                precondition_frequency=case["precondition_frequency"],
                stabilized_eigh=not later,
            )
        if case["optimizer"] == "lion":
            return Lion(params, lr=lr, betas=(0.95, 0.98), weight_decay=WEIGHT_DECAY)
        return AdaptiveMuon(
            params,
            lr=lr,
            momentum=0.95,
            weight_decay=WEIGHT_DECAY,
            nesterov=True,
            fp32_matmul_prec="highest",
            split_qkv=False,
            moment2_method=case["moment2_method"],
            beta2=0.95,
            eps=1e-8,
            scale_after_moment2=later,
        )

    return make
