"""Emerging-Optimizers, the library Megatron Core builds its emerging optimizers and Lion from, imported on this
machine (each optimizer's module is its registry entry's ``upstream``).

Its releases declare Python >= 3.12 and import Triton for their SYRK kernels: ``make setup`` installs 0.3.0 beside
Megatron Core 0.19 in ``.bridge-releases/<bridge>/`` (optbench/engine/bridge/cpu_check/environments.py), and
:func:`load` imports a
copy from a folder on Python 3.11 with ``typing.override`` polyfilled and a Triton stand-in for the import only.
:func:`megatron_adaptive_muon` builds AdaMuon as Megatron Core's ``TensorParallelAdaptiveMuon`` does without
tensor parallelism. Used by ``make bench`` (bench ``emerging``) and by the reference tests.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import typing
from contextlib import contextmanager
from pathlib import Path

from optbench.common.checkout import repo_root
from optbench.config.optimizers import REGISTRY

LION_MODULE = "emerging_optimizers.scalar_optimizers"
"""Where upstream keeps Lion, the scalar optimizer Core may give the matrix optimizers' other parameters."""


def overlay_with_emerging_optimizers() -> Path | None:
    """The newest Bridge overlay holding Emerging-Optimizers 0.3.0 (``make bridge-env``), if built."""
    found = sorted((repo_root() / ".bridge-releases").glob("*/emerging_optimizers"))
    return found[-1].parent if found else None


def _anything(*args, **kwargs):
    """Triton stand-in: a decorator returns what it decorates; anything else gives this function back."""
    return args[0] if len(args) == 1 and not kwargs and callable(args[0]) else _anything


class _TritonStandIn(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _anything


@contextmanager
def eager():
    """Upstream compiles a few helpers with torch.compile; the reference runs them as written (no compiler here),
    and 0.2.0 marks NVTX ranges, which a CPU build of torch refuses: they become no-ops meanwhile."""
    import torch._dynamo

    nvtx = torch.cuda.nvtx
    marks = nvtx.range_push, nvtx.range_pop
    nvtx.range_push = nvtx.range_pop = lambda *args, **kwargs: None
    try:
        with torch._dynamo.config.patch(disable=True):
            yield
    finally:
        nvtx.range_push, nvtx.range_pop = marks


def load(folder: Path):
    """Import ``emerging_optimizers`` from ``folder`` on Python 3.11 (typing.override polyfilled). Its SYRK kernels
    import Triton, which a CPU machine lacks: a stand-in serves the import and is removed afterwards (the reference
    never calls those kernels)."""
    if not hasattr(typing, "override"):
        import typing_extensions

        typing.override = typing_extensions.override
    import torch._dynamo  # noqa: F401  before the stand-in: torch inspects a real Triton at import
    import torch._inductor.compile_fx  # noqa: F401  (torch.compile imports it while upstream decorates)

    stand_ins = {}
    if importlib.util.find_spec("triton") is None:
        stand_ins = {"triton": _TritonStandIn("triton"), "triton.language": _TritonStandIn("triton.language")}
        stand_ins["triton"].language = stand_ins["triton.language"]
    sys.modules.update(stand_ins)
    sys.path.insert(0, str(folder))
    try:
        for name in [m for m in sys.modules if m == "emerging_optimizers" or m.startswith("emerging_optimizers.")]:
            del sys.modules[name]
        with eager():
            module = importlib.import_module("emerging_optimizers")
            for sub in sorted({e.upstream for e in REGISTRY.values() if e.upstream} | {LION_MODULE}):
                importlib.import_module(sub)
        return module
    finally:
        sys.path.remove(str(folder))
        for name in stand_ins:
            sys.modules.pop(name, None)


def megatron_adaptive_muon(
    params,
    *,
    lr: float,
    momentum: float,
    weight_decay: float,
    moment2_method: str,
    beta2: float = 0.95,
    eps: float = 1e-8,
    fp32_matmul_prec: str = "highest",
):
    """Upstream ``AdaptiveMuon`` whose orthogonalization is Megatron's: ``newton_schulz(G) * scale`` (spectral, 5
    quintic steps, Nesterov), as ``TensorParallelMuon`` builds it with no tensor-parallel group."""
    from emerging_optimizers.orthogonalized_optimizers import AdaptiveMuon, get_muon_scale_factor
    from emerging_optimizers.orthogonalized_optimizers.muon_utils import newton_schulz

    optimizer = AdaptiveMuon(
        params,
        lr,
        momentum,
        weight_decay,
        nesterov=True,
        fp32_matmul_prec=fp32_matmul_prec,
        coefficient_type="quintic",
        num_ns_steps=5,
        scale_mode="spectral",
        extra_scale_factor=1.0,
        moment2_method=moment2_method,
        beta2=beta2,
        eps=eps,
    )

    def megatron_orthogonalize(grad, *args, **kwargs):
        scale = get_muon_scale_factor(grad.size(-2), grad.size(-1), mode="spectral")
        return newton_schulz(grad, steps=5, coefficient_type="quintic") * scale * 1.0

    optimizer.scaled_orthogonalize_fn = megatron_orthogonalize
    return optimizer
