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
import functools
import os
from collections.abc import Iterator
from pathlib import Path

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
    # Emerging-Optimizers 0.4.0 (muon_utils.py, "cubic5": arXiv:2606.00371): a fixed five-step cubic schedule;
    # c = 0 selects the cubic step, X' = a X + b (X X^T) X, two products instead of three.
    "cubic5": (
        (3.3656576, -3.3420992, 0.0),
        (2.5744352, -1.4957376, 0.0),
        (2.5368962, -1.4312570, 0.0),
        (2.4418906, -1.2764040, 0.0),
        (2.2230472, -0.9630650, 0.0),
    ),
}
FIXED_SCHEDULES = ("cubic5",)
"""Coefficient types whose steps are exactly their tuples (Emerging-Optimizers 0.4.0 refuses any other count)."""
MATMUL_PRECISIONS = ("medium", "high", "highest")
SCALE_MODES = ("spectral", "shape_scaling", "unit_rms_norm")
NORM_EPS = 1e-7
"""Emerging-Optimizers 0.1.0-0.3.0's ``eps`` of the normalization (``newton_schulz(..., eps=1e-7)``)."""
NORM_EPS_FROM_0_4 = 1e-15
"""Emerging-Optimizers 0.4.0's default (docs/optimizer.md, "Emerging-Optimizers by version")."""


def norm_eps(emerging_optimizers: tuple[int, int]) -> float:
    """The normalization ``eps`` of the Emerging-Optimizers release of that (major, minor)."""
    return NORM_EPS_FROM_0_4 if emerging_optimizers >= (0, 4) else NORM_EPS


"""Upstream's clamp on the Frobenius norm before the first step."""


def coefficient_schedule(coefficients: str, steps: int) -> tuple[tuple[float, float, float], ...]:
    """The (a, b, c) tuple of every step.

    Emerging-Optimizers 0.1.0 cycles through the set and requires ``steps`` to be a multiple of its
    length: any number of steps for "simple", 5, 10, ... for "quintic".
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"ns_steps must be an integer of at least 1, got {steps!r}")
    if coefficients not in COEFFICIENT_SETS:
        raise ValueError(
            f"unknown Newton-Schulz coefficients {coefficients!r}; choose one of {sorted(COEFFICIENT_SETS)}"
        )
    sets = COEFFICIENT_SETS[coefficients]
    if coefficients in FIXED_SCHEDULES and steps != len(sets):
        raise ValueError(f"ns_steps={steps}: {coefficients!r} is a fixed {len(sets)}-step schedule")
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

    CUDA GPUs run bf16 on tensor cores. On CPUs it depends on the instructions oneDNN (PyTorch's bf16
    CPU GEMMs) may use: AMX tiles (Intel Sapphire Rapids and later) or AVX512-BF16 (Intel Cooper Lake,
    Sapphire Rapids; AMD Zen 4, Zen 5) run bf16 products natively, measured 4-13x faster than fp32 on
    the machines we had (docs/optimizer.md); without them bf16 is emulated and ~5x slower. The choice
    depends on the CPU's features only, never on a timing, so that every run on a machine (and its
    resume) computes the same way.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return "medium"
    if device.type == "cpu" and cpu_has_native_bf16():
        return "medium"
    return "highest"


def cpu_has_native_bf16() -> bool:
    """AMX tiles or AVX512-BF16 present and not switched off for oneDNN (ONEDNN_MAX_CPU_ISA)."""
    limit = os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "ALL")).upper()
    if limit != "ALL" and "AMX" not in limit and "BF16" not in limit:
        return False
    probes = [getattr(torch.cpu, name, None) for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported")]
    try:
        return any(bool(probe()) for probe in probes if probe is not None)
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
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Orthogonalize ``x`` ([..., m, n], float32); returns a float32 tensor of the same shape, times ``scale``
    (``out``, a float32 tensor of x's shape, when given: reused buffers spare the allocator's page faults).

    With ``tp_group`` the input is this rank's shard of a matrix split along the dimension that
    ``transpose`` makes the contraction (columns after the transpose): the norm and every Gram
    matrix X X^T are summed over the group ("distributed" tensor-parallel mode).
    ``syrk`` computes the two symmetric products (X X^T and A A) one block triangle at a time.
    """
    if x.ndim < 2:
        raise ValueError(f"Newton-Schulz needs a matrix or a batch of matrices, got shape {tuple(x.shape)}")
    if x.dtype != torch.float32:
        raise ValueError(f"Newton-Schulz input must be float32, got {x.dtype}")
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {list(MATMUL_PRECISIONS)}")
    schedule = coefficient_schedule(coefficients, steps)
    result = torch.empty(x.shape, dtype=torch.float32, device=x.device) if out is None else out
    x, target = x.reshape(-1, *x.shape[-2:]), result.view(-1, *x.shape[-2:])
    if transpose is None:
        transpose = x.size(-2) > x.size(-1)
    if transpose:
        x, target = x.mT, target.mT
    chunk = cpu_chunk_matrices(x, precision)
    with matmul_precision(precision):
        if x.size(0) == 1:  # one matrix: 2-D GEMMs as upstream's per-matrix call (baddbmm may round otherwise)
            _iterate(x[0], target[0], schedule, precision, eps, tp_group, syrk, scale)
            return result
        for part, into in zip(x.split(chunk), target.split(chunk)):
            _iterate(part, into, schedule, precision, eps, tp_group, syrk, scale)
    return result


def _iterate(x, out, schedule, precision: str, eps: float, tp_group, syrk: bool, scale: float) -> None:
    """Newton-Schulz on ``x`` (rows <= cols), the scaled result written into ``out``."""
    # "medium": PyTorch has no fp32-in/bf16-compute GEMM, so X itself is bf16 during the iteration.
    X = _normalized(x, eps, tp_group, torch.bfloat16 if precision == "medium" else torch.float32)
    for a, b, c in schedule:
        X = _step(X, a, b, c, tp_group, syrk)
    out.copy_(X)
    if scale != 1.0:
        out.mul_(scale)


CPU_CACHE_FALLBACK_BYTES = 1 << 20
"""Per-core L2 size assumed when sysfs does not say (1 MiB: AMD Zen 4/5; Intel Sapphire Rapids has 2 MiB)."""


@functools.lru_cache(maxsize=1)
def cpu_cache_bytes() -> int:
    """This CPU's per-core L2 cache in bytes (sysfs), else :data:`CPU_CACHE_FALLBACK_BYTES`."""
    try:
        text = Path("/sys/devices/system/cpu/cpu0/cache/index2/size").read_text().strip().upper()
        return int(text.rstrip("KMB")) * {"K": 1 << 10, "M": 1 << 20}.get(text[-1], 1)
    except (OSError, ValueError, IndexError):
        return CPU_CACHE_FALLBACK_BYTES


def cpu_chunk_matrices(x: torch.Tensor, precision: str) -> int:
    """How many matrices of a CPU batch one Newton-Schulz call takes: those whose iterate fits one core's L2.

    One batched GEMM over many matrices streams them all through the cache at every product; in
    chunks that stay cache-resident through the five steps the fp32 products ran 10-25 % faster
    (256 x 256 and 256 x 128 stacks of 51-64 matrices, 1 and 2 threads, AMD EPYC Zen 5; bf16
    products 15-30 %), and one matrix at a time loses bf16's batching gain (results/bench/optim.md).
    GPUs take the whole batch in one call (launches, not caches, dominate there).
    """
    if x.device.type != "cpu":
        return x.size(0)
    itemsize = 2 if precision == "medium" else 4
    return max(1, cpu_cache_bytes() // (x.size(-2) * x.size(-1) * itemsize))


def _normalized(x: torch.Tensor, eps: float, tp_group: dist.ProcessGroup | None, dtype: torch.dtype) -> torch.Tensor:
    """x / max(||x||_F, eps) per matrix, written in one pass into a contiguous tensor of ``dtype``.

    The quotient is computed in fp32 and rounded once, as upstream's normalize-then-cast does.
    """
    norm = torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True)
    if tp_group is not None:
        squares = norm.square()
        dist.all_reduce(squares, group=tp_group)
        norm = squares.sqrt()
    if x.ndim == 2:  # one matrix, as upstream: the quotient keeps x's strides (a transposed view stays one)
        return torch.div(x, norm.clamp_min(eps)).to(dtype)
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    return torch.div(x, norm.clamp_min(eps), out=out)


def _step(X: torch.Tensor, a: float, b: float, c: float, tp_group, syrk: bool) -> torch.Tensor:
    A = symmetric_product(X) if syrk else X @ X.mT
    if tp_group is not None:
        _all_reduce_sum(A, tp_group)
    if c == 0.0:  # the cubic step (Emerging-Optimizers 0.4.0): no A A product
        return _addmm(X, A, X, beta=a, alpha=b)
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
