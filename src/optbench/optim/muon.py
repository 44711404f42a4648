"""Muon with Megatron Core 0.16.1's semantics (``TensorParallelMuon`` over Emerging-Optimizers 0.1.0).

Per matrix W with gradient G, learning rate lr, weight decay wd and momentum beta, in this order
(upstream ``OrthogonalizedOptimizer.step``):

    W -= lr * wd * W                          decoupled weight decay (skipped when wd == 0)
    M  = beta * M + (1 - beta) * G            momentum (an EMA: ``M.lerp_(G, 1 - beta)``)
    U  = (1 - beta) * G + beta * M            Nesterov (``G.lerp(M, beta)``); plain momentum: U = M
    U  = NS(U) * scale(rows, cols) * extra_scale_factor
    W -= lr * U

Parameters are 2-D matrices or 3-D stacks of same-shape matrices (HF experts [E, rows, cols]),
orthogonalized and scaled per matrix, exactly as Megatron does for its E separate expert weights.
A fused QKV weight (param group key ``qkv_split_shapes = (q, k, v)`` rows per query group) is, with
``split_qkv``, viewed as [groups, q + k + v, cols] and its Q, K and V blocks, each gathered over all
groups, are orthogonalized and scaled separately (``TensorParallelMuon.orthogonalize``).

Speed: every matrix of one shape (after the QKV split) across all parameters is orthogonalized in
one batched call ([B, rows, cols] bmm), and the element-wise parts use ``torch._foreach`` kernels,
so a step costs a handful of kernel launches per distinct shape rather than per matrix.

Tensor parallelism: param group keys ``partition_dim`` (None, 0 or 1) and ``is_expert`` (use
``expert_tp_group``) describe sharded weights; ``tp_mode`` picks Megatron's mode (see
:mod:`optbench.optim.tensor_parallel`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from optbench.optim.newton_schulz import (
    SCALE_MODES,
    coefficient_schedule,
    muon_scale_factor,
    resolve_matmul_precision,
)
from optbench.optim.tensor_parallel import check_tp_mode, newton_schulz_tp, scale_shape, tp_world


@dataclass
class _ShapeBatch:
    """Matrices of one shape (and TP placement) to orthogonalize together, and where each result goes."""

    inputs: list[torch.Tensor] = field(default_factory=list)
    """Each [b, rows, cols] float32."""
    destinations: list[torch.Tensor] = field(default_factory=list)
    """Views the scaled results are copied into (any shape with b * rows * cols elements)."""


class Muon(torch.optim.Optimizer):
    """Muon (MomentUm Orthogonalized by Newton-Schulz) as Megatron Core runs it.

    Args:
        params: 2-D or 3-D parameters, or param groups; group keys ``lr``, ``weight_decay``,
            ``momentum``, ``nesterov`` and the per-parameter metadata ``qkv_split_shapes``,
            ``partition_dim``, ``is_expert``.
        lr, momentum, weight_decay, nesterov: as Megatron's lr, muon_momentum, weight_decay,
            muon_use_nesterov (weight decay is decoupled and multiplied by lr).
        ns_steps: Newton-Schulz iterations (muon_num_ns_steps); a multiple of 5 for "quintic".
        coefficients: "quintic" (Megatron's default) or "simple" (Keller Jordan, torch.optim.Muon).
        scale_mode: "spectral", "shape_scaling" or "unit_rms_norm" (muon_scale_mode).
        extra_scale_factor: extra multiplier on every update (muon_extra_scale_factor).
        fp32_matmul_prec: "medium" (bf16), "high" (TF32), "highest" (fp32) or "auto" (the fast one
            on the parameters' device, :func:`~optbench.optim.newton_schulz.auto_matmul_precision`).
        split_qkv: orthogonalize the Q, K, V blocks of fused QKV weights separately (muon_split_qkv).
        tp_mode: "blockwise", "duplicated" or "distributed" (muon_tp_mode).
        tp_group, expert_tp_group: process groups of sharded dense / expert weights.
        syrk: compute the symmetric Newton-Schulz products one block triangle at a time.
        batch_same_shapes: orthogonalize same-shape matrices in one batched call (False: one call
            per parameter, for benchmarking).
    """

    def __init__(
        self,
        params,
        lr: float = 3e-4,
        momentum: float = 0.95,
        weight_decay: float = 0.01,
        *,
        nesterov: bool = True,
        ns_steps: int = 5,
        coefficients: str = "quintic",
        scale_mode: str = "spectral",
        extra_scale_factor: float = 1.0,
        fp32_matmul_prec: str = "auto",
        split_qkv: bool = True,
        tp_mode: str = "blockwise",
        tp_group: dist.ProcessGroup | None = None,
        expert_tp_group: dist.ProcessGroup | None = None,
        syrk: bool = False,
        batch_same_shapes: bool = True,
    ) -> None:
        coefficient_schedule(coefficients, ns_steps)  # validates both
        if scale_mode not in SCALE_MODES:
            raise ValueError(f"unknown Muon scale mode {scale_mode!r}; choose one of {list(SCALE_MODES)}")
        check_tp_mode(tp_mode)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if lr < 0.0 or weight_decay < 0.0:
            raise ValueError(f"lr and weight_decay must be >= 0, got lr={lr}, weight_decay={weight_decay}")
        resolve_matmul_precision(fp32_matmul_prec, "cpu")  # validates the name
        self.ns_steps = ns_steps
        self.coefficients = coefficients
        self.scale_mode = scale_mode
        self.extra_scale_factor = extra_scale_factor
        self.fp32_matmul_prec = fp32_matmul_prec
        self.split_qkv = split_qkv
        self.tp_mode = tp_mode
        self.tp_group = tp_group
        self.expert_tp_group = expert_tp_group
        self.syrk = syrk
        self.batch_same_shapes = batch_same_shapes
        self.last_ns_time_s = 0.0
        """Wall time of the orthogonalization (Newton-Schulz, its communication and scaling) in the last step."""
        defaults = dict(
            lr=lr,
            momentum=momentum,
            nesterov=nesterov,
            weight_decay=weight_decay,
            qkv_split_shapes=None,
            partition_dim=None,
            is_expert=False,
        )
        super().__init__(params, defaults)
        first = next((p for g in self.param_groups for p in g["params"]), None)
        self.precision = resolve_matmul_precision(fp32_matmul_prec, first.device if first is not None else "cpu")
        """The resolved Newton-Schulz precision: medium, high or highest."""

    def add_param_group(self, param_group: dict) -> None:
        """Add a group after checking that every parameter is a matrix or a stack of matrices."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        shapes = group["qkv_split_shapes"]
        if shapes is not None:
            group["qkv_split_shapes"] = tuple(int(s) for s in shapes)
        if group["partition_dim"] not in (None, 0, 1):
            raise ValueError(f"partition_dim must be None, 0 or 1, got {group['partition_dim']!r}")
        for p in group["params"]:
            if p.ndim not in (2, 3):
                raise ValueError(
                    f"Muon takes 2-D weight matrices (or 3-D stacks of expert matrices), got a {p.ndim}-D "
                    f"parameter of shape {tuple(p.shape)}; route norms, biases and other 1-D parameters to AdamW"
                )
            if shapes is not None:
                if len(shapes) != 3 or min(shapes) < 1 or p.shape[-2] % sum(shapes):
                    raise ValueError(
                        f"qkv_split_shapes {tuple(shapes)} must be three positive row counts per query group "
                        f"whose sum divides the fused QKV weight's {p.shape[-2]} rows"
                    )

    def _momentum_buffer(self, p: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.preserve_format)
        return state["momentum_buffer"]

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One Muon update of every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        batches: dict[tuple, _ShapeBatch] = {}
        pending: list[tuple[list[torch.Tensor], list[torch.Tensor], float]] = []
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad.float() for p in params]
            buffers = [self._momentum_buffer(p) for p in params]
            lr, wd, beta = group["lr"], group["weight_decay"], group["momentum"]
            if wd > 0.0:
                torch._foreach_add_(params, params, alpha=-lr * wd)
            torch._foreach_lerp_(buffers, grads, 1.0 - beta)
            updates = torch._foreach_lerp(grads, buffers, beta) if group["nesterov"] else buffers
            results = [torch.empty_like(u) for u in updates]
            for index, (update, result) in enumerate(zip(updates, results)):
                self._queue(batches, group, update, result, index)
            pending.append((params, results, lr))
        self.last_ns_time_s = self._orthogonalize_all(batches)
        for params, results, lr in pending:
            torch._foreach_add_(params, results, alpha=-lr)
        return loss

    def _queue(self, batches, group, update: torch.Tensor, result: torch.Tensor, index: int) -> None:
        """Add the matrices of one parameter's update to the shape batches."""
        lead = update.shape[:-2]
        rows, cols = update.shape[-2:]
        pieces: list[tuple[torch.Tensor, torch.Tensor]] = []
        shapes = group["qkv_split_shapes"]
        if shapes is not None and self.split_qkv:
            num_groups = rows // sum(shapes)
            grouped_in = update.view(*lead, num_groups, sum(shapes), cols)
            grouped_out = result.view(*lead, num_groups, sum(shapes), cols)
            offset = 0
            for size in shapes:
                block = grouped_in[..., offset : offset + size, :].reshape(*lead, num_groups * size, cols)
                pieces.append((block, grouped_out[..., offset : offset + size, :]))
                offset += size
        else:
            pieces.append((update, result))
        for source, destination in pieces:
            matrices = source.reshape(-1, *source.shape[-2:])
            key = (tuple(matrices.shape[-2:]), group["partition_dim"], bool(group["is_expert"]))
            if not self.batch_same_shapes:
                key = key + (len(batches), index)
            batch = batches.setdefault(key, _ShapeBatch())
            batch.inputs.append(matrices)
            batch.destinations.append(destination)

    def _orthogonalize_all(self, batches: dict[tuple, _ShapeBatch]) -> float:
        """Orthogonalize and scale every batch into its destinations; returns the wall time it took."""
        device = next((b.inputs[0].device for b in batches.values()), torch.device("cpu"))
        _synchronize(device)
        start = time.perf_counter()
        for ((rows, cols), partition_dim, is_expert), batch in ((k[:3], v) for k, v in batches.items()):
            group = self.expert_tp_group if is_expert else self.tp_group
            stacked = batch.inputs[0] if len(batch.inputs) == 1 else torch.cat(batch.inputs)
            orthogonal = newton_schulz_tp(
                stacked,
                self.ns_steps,
                self.coefficients,
                tp_group=group,
                partition_dim=partition_dim,
                mode=self.tp_mode,
                precision=self.precision,
                syrk=self.syrk,
            )
            full_rows, full_cols = scale_shape(rows, cols, partition_dim, self.tp_mode, tp_world(group))
            orthogonal.mul_(muon_scale_factor(full_rows, full_cols, self.scale_mode) * self.extra_scale_factor)
            offset = 0
            for source, destination in zip(batch.inputs, batch.destinations):
                count = source.shape[0]
                destination.copy_(orthogonal[offset : offset + count].reshape(destination.shape))
                offset += count
        _synchronize(device)
        return time.perf_counter() - start

    def load_state_dict(self, state_dict: dict) -> None:
        """Load, keeping momentum buffers in fp32 (torch casts state to the parameter dtype)."""
        super().load_state_dict(state_dict)
        for state in self.state.values():
            if "momentum_buffer" in state:
                state["momentum_buffer"] = state["momentum_buffer"].float()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
