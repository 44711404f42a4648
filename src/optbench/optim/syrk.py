"""SYRK-style symmetric product X X^T that computes one block triangle and mirrors it.

Both symmetric products of a Newton-Schulz step (A = X X^T and A A = A A^T, A symmetric) only need
one triangle. cuBLAS's SYRK is not exposed by PyTorch and Triton is not a dependency, so this is
a blocked formulation in plain PyTorch that runs on any device: row block i of X is multiplied
with rows i.. of X (one GEMM per block row, so the GEMMs stay large), which touches
k(k+1)/2 of the k^2 output blocks (k = 4 by default), and the strict lower part is filled by a transpose copy.
With k blocks the GEMM work is (k+1)/(2k) of a full product (62.5 % at k = 4; an ideal SYRK is
50 %), at the price of k GEMM launches and an s x s copy; it pays off only for large matrices
(measured by ``make bench``, results/bench/optim.md).
"""

from __future__ import annotations

import torch

DEFAULT_BLOCKS = 4
"""Block rows per matrix: 62.5 % of the full GEMM work in 4 GEMM calls."""
MIN_BLOCK_ROWS = 128
"""Below this many rows per block, one plain GEMM is faster than several small ones."""


def symmetric_product(
    x: torch.Tensor, blocks: int = DEFAULT_BLOCKS, min_block_rows: int = MIN_BLOCK_ROWS
) -> torch.Tensor:
    """x @ x^T for a matrix [s, l] or a batch [B, s, l], computing the upper block triangle only."""
    rows = x.size(-2)
    block_rows = max(min_block_rows, -(-rows // blocks))
    if rows <= block_rows:
        return x @ x.mT
    out = x.new_empty(*x.shape[:-1], rows)
    for start in range(0, rows, block_rows):
        stop = min(start + block_rows, rows)
        # [block, rows - start]: the block row of the upper triangle from the diagonal block on.
        strip = x[..., start:stop, :] @ x[..., start:, :].mT
        out[..., start:stop, start:] = strip
        out[..., stop:, start:stop] = strip[..., :, stop - start :].mT
    return out


def computed_fraction(rows: int, blocks: int = DEFAULT_BLOCKS, min_block_rows: int = MIN_BLOCK_ROWS) -> float:
    """Share of a full x @ x^T's multiply-adds that :func:`symmetric_product` performs for ``rows`` rows."""
    block_rows = max(min_block_rows, -(-rows // blocks))
    starts = range(0, rows, block_rows)
    return sum(min(block_rows, rows - start) * (rows - start) for start in starts) / rows**2
