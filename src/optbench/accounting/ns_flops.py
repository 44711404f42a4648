"""Newton-Schulz FLOPs: the matrices Muon orthogonalizes and what one orthogonalization costs.

Convention (FACTS.md section 5). Muon transposes a matrix so that it is s x l with s <= l; one
Newton-Schulz iteration computes A = X X^T (s x l times l x s: 2*s^2*l FLOPs), B = b*A + c*A A
(s x s times s x s: 2*s^3) and X' = a*X + B X (s x s times s x l: 2*s^2*l), so

    flops_per_iteration = 4 * s^2 * l + 2 * s^3.

X X^T and A A are symmetric: a SYRK-style kernel computes one triangle, ideally halving them:

    flops_per_iteration_syrk = 3 * s^2 * l + s^3.

The Frobenius normalisation, the a*X and b*A axpys and the scale are O(s*l) and not counted.
"""

from __future__ import annotations

from optbench.accounting.params import QKV, ParamSpec
from optbench.config.schema import ModelConfig


def ns_iteration_flops(rows: int, cols: int, syrk: bool = False) -> float:
    """FLOPs of one Newton-Schulz iteration on a rows x cols matrix."""
    s, l = min(rows, cols), max(rows, cols)
    if syrk:
        return 3.0 * s * s * l + 1.0 * s**3
    return 4.0 * s * s * l + 2.0 * s**3


def ns_flops(rows: int, cols: int, steps: int, syrk: bool = False) -> float:
    """FLOPs of a full orthogonalization (``steps`` iterations) of a rows x cols matrix."""
    return steps * ns_iteration_flops(rows, cols, syrk)


def orthogonalized_matrices(spec: ParamSpec, model: ModelConfig, split_qkv: bool = True) -> list[tuple[int, int]]:
    """Unsharded shapes of the matrices Muon orthogonalizes for one parameter (empty if not a Muon parameter).

    Megatron Core 0.16.1 (``TensorParallelMuon.orthogonalize``): a fused ``linear_qkv`` weight with
    ``muon_split_qkv`` is viewed as [groups, q_per_group*kv + kv + kv, h], split into its Q, K and V
    blocks, and each block, gathered over all groups, is orthogonalized as one matrix:
    Q [heads*kv, h], K [groups*kv, h], V [groups*kv, h]. Every other 2-D weight (MLA projections,
    the router, each expert's fused [gate; up] fc1 and its fc2) is orthogonalized whole.
    """
    if not spec.is_muon:
        return []
    if spec.kind == QKV and split_qkv:
        kv = model.kv_channels or model.hidden_size // model.num_attention_heads
        groups = model.num_query_groups or model.num_attention_heads
        hidden = spec.shape[1]
        return [(model.num_attention_heads * kv, hidden), (groups * kv, hidden), (groups * kv, hidden)]
    return [(spec.shape[0], spec.shape[1])]
