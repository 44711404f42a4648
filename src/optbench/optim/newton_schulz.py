"""Newton-Schulz orthogonalization as Emerging-Optimizers 0.1.0 (used by Megatron Core 0.16.1) computes it.

For a matrix G (or a batch of them, shape [..., m, n]) the iteration approximates U V^T of G's SVD:

1. transpose so that rows <= cols (whiten the smaller side), unless the caller forces ``transpose``;
2. X = G / max(||G||_F, eps), eps = 1e-7 (per matrix; over all shards when ``tp_group`` is given);
3. per step with coefficients (a, b, c): A = X X^T, B = b*A + c*A A, X = a*X + B X;
4. undo the transpose.

Precision follows upstream: "medium" casts X to bf16 before the iteration and back to fp32 after it
(PyTorch has no fp32-in/bf16-compute GEMM); "high" allows TF32 and "highest" keeps fp32, both through
``torch.set_float32_matmul_precision`` for the duration of the call.

Where this differs from upstream, on purpose: a 3-D input is a batch of independent matrices (HF
experts [E, rows, cols] = Megatron's E separate 2-D expert weights), whereas upstream's fallback
flattens a 3-D tensor into one matrix (its conv1d case, which Megatron never hits for experts).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
import torch.distributed as dist

from optbench.optim.syrk import symmetric_product

COEFFICIENT_SETS: dict[str, tuple[tuple[float, float, float], ...]] = {
    # Keller Jordan's Muon and torch.optim.Muon: one tuple, repeated every step.
    "simple": ((3.4445, -4.7750, 2.0315),),
    # Megatron's default ("quintic"): one tuple per step, from modded-nanogpt via Emerging-Optimizers.
    "quintic": (
        (4.0848, -6.8946, 2.9270),
        (3.9505, -6.3029, 2.6377),
        (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046),
        (2.8366, -3.0525, 1.2012),
    ),
}
MATMUL_PRECISIONS = ("medium", "high", "highest")
SCALE_MODES = ("spectral", "shape_scaling", "unit_rms_norm")
NORM_EPS = 1e-7
"""Upstream's clamp on the Frobenius norm before the first step."""


def coefficient_schedule(coefficients: str, steps: int) -> tuple[tuple[float, float, float], ...]:
    """The (a, b, c) tuple of every step.

    Emerging-Optimizers 0.1.0 cycles through the set and requires ``steps`` to be a multiple of its
    length: any number of steps for "simple", 5, 10, ... for "quintic".
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"ns_steps must be an integer of at least 1, got {steps!r}")
    if coefficients not in COEFFICIENT_SETS:
        raise ValueError(f"unknown Newton-Schulz coefficients {coefficients!r}; choose one of {sorted(COEFFICIENT_SETS)}")
    sets = COEFFICIENT_SETS[coefficients]
    if steps % len(sets):
        raise ValueError(
            f"ns_steps={steps} must be a multiple of {len(sets)} with the {coefficients!r} coefficients "
            "(one tuple per step, as Emerging-Optimizers requires)"
        )
    return tuple(sets[i % len(sets)] for i in range(steps))


def muon_scale_factor(rows: int, cols: int, mode: str = "spectral") -> float:
    """Update scale for a rows x cols matrix (Emerging-Optimizers ``get_muon_scale_factor``)."""
    if mode == "spectral":
        return max(rows, cols) ** 0.5
    if mode == "shape_scaling":
        return max(1.0, rows / cols) ** 0.5
    if mode == "unit_rms_norm":
        return (rows / cols) ** 0.5
    raise ValueError(f"unknown Muon scale mode {mode!r}; choose one of {list(SCALE_MODES)}")


def auto_matmul_precision(device: torch.device | str) -> str:
    """The fast precision on ``device``: "medium" (bf16 products) where bf16 GEMMs are fast, else "highest".

    CUDA GPUs run bf16 on tensor cores. On CPUs it depends on the ISA oneDNN may use (measured on
    one Sapphire Rapids core, 16 x 256 x 256 bmm, see docs/optimizer.md): with AMX tiles bf16 is
    ~13x faster than fp32; with AVX512-BF16 alone about as fast; with AVX2 only ~5x slower. So
    "medium" with AMX (unless ``ONEDNN_MAX_CPU_ISA`` rules it out) and "highest" on every other CPU.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return "medium"
    if device.type == "cpu" and _cpu_has_amx_bf16():
        return "medium"
    return "highest"


def _cpu_has_amx_bf16() -> bool:
    """AMX tiles present and not switched off for oneDNN (which runs PyTorch's bf16 CPU GEMMs)."""
    limit = os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "ALL")).upper()
    if limit != "ALL" and "AMX" not in limit:
        return False
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    try:
        return bool(probe()) if probe is not None else False
    except RuntimeError:
        return False


def resolve_matmul_precision(precision: str, device: torch.device | str) -> str:
    """``precision`` itself, or the device's fast choice for "auto"."""
    if precision == "auto":
        return auto_matmul_precision(device)
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(f"unknown fp32_matmul_prec {precision!r}; choose auto or one of {list(MATMUL_PRECISIONS)}")
    return precision


@contextlib.contextmanager
def matmul_precision(precision: str) -> Iterator[None]:
    """Set torch's float32 matmul precision for a region and restore it (upstream's ``fp32_matmul_precision``)."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def newton_schulz(
    x: torch.Tensor,
    steps: int,
    coefficients: str = "quintic",
    *,
    precision: str = "highest",
    eps: float = NORM_EPS,
    transpose: bool | None = None,
    tp_group: dist.ProcessGroup | None = None,
    syrk: bool = False,
    scale: float = 1.0,
) -> torch.Tensor:
    """Orthogonalize ``x`` ([..., m, n], float32); returns a new float32 tensor of the same shape, times ``scale``.

    With ``tp_group`` the input is this rank's shard of a matrix split along the dimension that
    ``transpose`` makes the contraction (columns after the transpose): the norm and every Gram
    matrix X X^T are summed over the group ("distributed" tensor-parallel mode).
    ``syrk`` computes the two symmetric products (X X^T and A A) one block triangle at a time.
    The result may be a transposed view (it is the transpose of the iteration's contiguous buffer).
    """
    if x.ndim < 2:
        raise ValueError(f"Newton-Schulz needs a matrix or a batch of matrices, got shape {tuple(x.shape)}")
    if x.dtype != torch.float32:
        raise ValueError(f"Newton-Schulz input must be float32, got {x.dtype}")
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {list(MATMUL_PRECISIONS)}")
    schedule = coefficient_schedule(coefficients, steps)
    batch_shape = x.shape[:-2]
    x = x.reshape(-1, *x.shape[-2:]) if x.ndim > 3 else x
    if transpose is None:
        transpose = x.size(-2) > x.size(-1)
    if transpose:
        x = x.mT
    # "medium": PyTorch has no fp32-in/bf16-compute GEMM, so X itself is bf16 during the iteration.
    X = _normalized(x, eps, tp_group, torch.bfloat16 if precision == "medium" else torch.float32)
    with matmul_precision(precision):
        for a, b, c in schedule:
            X = _step(X, a, b, c, tp_group, syrk)
    if X.dtype == torch.float32:
        X = X.mul_(scale) if scale != 1.0 else X
    else:
        X = torch.empty(X.shape, dtype=torch.float32, device=X.device).copy_(X).mul_(scale)
    if transpose:
        X = X.mT
    return X.reshape(*batch_shape, *X.shape[-2:])


def _normalized(x: torch.Tensor, eps: float, tp_group: dist.ProcessGroup | None, dtype: torch.dtype) -> torch.Tensor:
    """x / max(||x||_F, eps) per matrix, written in one pass into a contiguous tensor of ``dtype``.

    The quotient is computed in fp32 and rounded once, as upstream's normalize-then-cast does.
    """
    norm = torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True)
    if tp_group is not None:
        squares = norm.square()
        dist.all_reduce(squares, group=tp_group)
        norm = squares.sqrt()
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    return torch.div(x, norm.clamp_min(eps), out=out)


def _step(X: torch.Tensor, a: float, b: float, c: float, tp_group, syrk: bool) -> torch.Tensor:
    A = symmetric_product(X) if syrk else X @ X.mT
    if tp_group is not None:
        _all_reduce_sum(A, tp_group)
    if syrk:
        # A A is symmetric too: compute one triangle of it, then B = b*A + c*A A.
        B = symmetric_product(A).mul_(c).add_(A, alpha=b)
    else:
        B = _addmm(A, A, A, beta=b, alpha=c)
    return _addmm(X, B, X, beta=a, alpha=1.0)


def _addmm(bias: torch.Tensor, m1: torch.Tensor, m2: torch.Tensor, *, beta: float, alpha: float) -> torch.Tensor:
    """beta*bias + alpha*(m1 @ m2) for a matrix or a batch of matrices, in one fused GEMM call."""
    if m1.ndim == 2:
        return torch.addmm(bias, m1, m2, beta=beta, alpha=alpha)
    return torch.baddbmm(bias, m1, m2, beta=beta, alpha=alpha)


def _all_reduce_sum(tensor: torch.Tensor, group: dist.ProcessGroup) -> None:
    """In-place sum over ``group``; gloo has no bf16 reduction, so bf16 goes through fp32 there."""
    if tensor.dtype == torch.bfloat16 and dist.get_backend(group) == "gloo":
        widened = tensor.float()
        dist.all_reduce(widened, group=group)
        tensor.copy_(widened)
    else:
        dist.all_reduce(tensor, group=group)
