"""Newton-Schulz on tensor-parallel shards: Megatron Core's duplicated, distributed and blockwise modes.

A weight W of full shape [M, N] (or a batch [..., M, N]) is split t ways over ``tp_group`` along
``partition_dim`` (0: rows, a column-parallel layer's output dim; 1: columns, a row-parallel layer's
input dim). Each rank holds its shard in rank order and gets back its shard of the update.

- duplicated: all-gather the shards, every rank orthogonalizes the full matrix and keeps its slice
  (identical to single-process Newton-Schulz of W; t-fold redundant compute).
- distributed: the sharded dimension becomes the contraction dimension of X X^T; each step
  all-reduces the Gram matrix of the unsharded dimension (plus one all-reduce of the squared norm).
  Same result as duplicated up to rounding, with 1/t of the long-side work per rank.
- blockwise: each rank orthogonalizes only its shard, no communication; the result depends on t.

Megatron's update scale uses the full shape in duplicated/distributed mode and the local shard's
shape in blockwise mode (``TensorParallelMuon`` passes no partition_dim there): see
:func:`scale_shape`.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from optbench.optim.newton_schulz import NORM_EPS, newton_schulz

TP_MODES = ("blockwise", "duplicated", "distributed")


def check_tp_mode(mode: str) -> str:
    """``mode`` if it is a known tensor-parallel mode, else a ValueError listing them."""
    if mode not in TP_MODES:
        raise ValueError(f"unknown tensor-parallel Newton-Schulz mode {mode!r}; choose one of {list(TP_MODES)}")
    return mode


def tp_world(group: dist.ProcessGroup | None) -> int:
    """Size of ``group``; 1 when there is no group or torch.distributed is not initialized."""
    if group is None or not dist.is_initialized():
        return 1
    return dist.get_world_size(group)


def scale_shape(rows: int, cols: int, partition_dim: int | None, mode: str, world: int) -> tuple[int, int]:
    """The (rows, cols) the Muon update scale is computed from, for a local shard of rows x cols."""
    if partition_dim is None or mode == "blockwise" or world == 1:
        return rows, cols
    return (rows * world, cols) if partition_dim == 0 else (rows, cols * world)


def newton_schulz_tp(
    x: torch.Tensor,
    steps: int,
    coefficients: str,
    *,
    tp_group: dist.ProcessGroup | None,
    partition_dim: int | None,
    mode: str,
    precision: str = "highest",
    syrk: bool = False,
    scale: float = 1.0,
    out: torch.Tensor | None = None,
    eps: float = NORM_EPS,
) -> torch.Tensor:
    """This rank's shard of the orthogonalized matrix (or batch) whose shard ``x`` is, times ``scale``
    (written into ``out`` when given, except in duplicated mode)."""
    check_tp_mode(mode)
    world = tp_world(tp_group)
    kwargs = dict(steps=steps, coefficients=coefficients, precision=precision, syrk=syrk, scale=scale, eps=eps)
    if partition_dim is None or world == 1 or mode == "blockwise":
        return newton_schulz(x, out=out, **kwargs)
    if partition_dim not in (0, 1):
        raise ValueError(f"partition_dim must be 0 (rows), 1 (columns) or None, got {partition_dim!r}")
    axis = x.ndim - 2 + partition_dim
    if mode == "duplicated":
        shards = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(shards, x.contiguous(), group=tp_group)
        full = newton_schulz(torch.cat(shards, dim=axis), **kwargs)
        return full.chunk(world, dim=axis)[dist.get_rank(tp_group)].contiguous()
    # distributed: make the sharded dimension the columns, i.e. the contraction dimension of X X^T.
    return newton_schulz(x, transpose=partition_dim == 0, tp_group=tp_group, out=out, **kwargs)
