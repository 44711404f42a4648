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
from dataclasses import dataclass

import torch
import torch.distributed as dist

from optbench.optim.newton_schulz import (
    NORM_EPS,
    SCALE_MODES,
    coefficient_schedule,
    muon_scale_factor,
    resolve_matmul_precision,
)
from optbench.optim.tensor_parallel import check_tp_mode, newton_schulz_tp, scale_shape, tp_world


@dataclass
class _Piece:
    """Matrices of one parameter's update that go into one shape batch."""

    param: torch.Tensor
    """The parameter (its update's shape)."""
    key: tuple
    """(rows, cols, partition_dim, is_expert[, unbatched id]): which batch."""
    count: int
    """Matrices in this piece (experts of a stack, 1 for a plain matrix)."""
    block: tuple[int, int, int] | None = None
    """For a QKV block: (query groups, row offset in a group, rows in a group)."""
    offset: int = 0
    """First matrix of this piece in its batch."""


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
        ns_eps: float = NORM_EPS,
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
        self._buffers: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self.expert_tp_group = expert_tp_group
        self.syrk = syrk
        self.ns_eps = ns_eps
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
        work = []  # (group, params, grads, buffers, pieces per param)
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
            work.append((group, params, grads, buffers, [self._pieces(group, p) for p in params]))
        # Every matrix of one shape goes into one contiguous batch, written there directly by the
        # Nesterov step (no per-matrix copies), orthogonalized by one batched call, and read back as views.
        sizes: dict[tuple, int] = {}
        for *_, pieces in work:
            for piece in (x for per_param in pieces for x in per_param):
                piece.offset = sizes.get(piece.key, 0)
                sizes[piece.key] = piece.offset + piece.count
        device = work[0][1][0].device if work else torch.device("cpu")
        stacks = {key: self._workspace(key, n, device)[0] for key, n in sizes.items()}
        for group, params, grads, buffers, pieces in work:
            for grad, buffer, per_param in zip(grads, buffers, pieces):
                self._fill(stacks, group, grad, buffer, per_param)
        self.last_ns_time_s, results = self._orthogonalize_all(stacks)
        for group, params, _, _, pieces in work:
            updates = [self._collect(results, per_param) for per_param in pieces]
            torch._foreach_add_(params, self._finish(params, updates), alpha=-group["lr"])
        return loss

    def _finish(self, params: list[torch.Tensor], updates: list[torch.Tensor]) -> list[torch.Tensor]:
        """The updates as applied (AdaMuon normalizes them by a second moment first)."""
        return updates

    def _workspace(self, key: tuple, count: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch and result buffers of one shape group, kept across steps (the groups never change, and
        fresh tens-of-MB allocations each step cost page faults: 83 vs 130 ms per kimi_k2_tiny bf16 step
        on 2 threads when other work ran in between, measured)."""
        buffers = self._buffers.get(key)
        if buffers is None or buffers[0].size(0) != count or buffers[0].device != device:
            shape = (count, key[0], key[1])
            buffers = self._buffers[key] = (torch.empty(shape, device=device), torch.empty(shape, device=device))
        return buffers

    def _pieces(self, group: dict, p: torch.Tensor) -> list[_Piece]:
        """How one parameter's update splits into same-shape matrices (one piece, or Q, K, V blocks)."""
        *lead, rows, cols = p.shape
        count = lead[0] if lead else 1
        base = (group["partition_dim"], bool(group["is_expert"]))
        if not self.batch_same_shapes:
            base = base + (id(p),)
        shapes = group["qkv_split_shapes"]
        if shapes is None or not self.split_qkv:
            return [_Piece(p, (rows, cols, *base), count)]
        groups, offset, pieces = rows // sum(shapes), 0, []
        for size in shapes:
            pieces.append(_Piece(p, (groups * size, cols, *base), count, (groups, offset, size)))
            offset += size
        return pieces

    def _fill(self, stacks, group, grad: torch.Tensor, buffer: torch.Tensor, pieces: list[_Piece]) -> None:
        """Write the (Nesterov) momentum update of one parameter into its batch slots."""
        beta = group["momentum"]
        if pieces[0].block is None:
            piece = pieces[0]
            target = stacks[piece.key][piece.offset : piece.offset + piece.count].view(grad.shape)
            if group["nesterov"]:
                torch.lerp(grad, buffer, beta, out=target)
            else:
                target.copy_(buffer)
            return
        update = grad.lerp(buffer, beta) if group["nesterov"] else buffer
        *lead, rows, cols = update.shape
        for piece in pieces:
            groups, offset, size = piece.block
            grouped = update.view(*lead, groups, rows // groups, cols)[..., offset : offset + size, :]
            slots = stacks[piece.key][piece.offset : piece.offset + piece.count]
            slots.view(*lead, groups, size, cols).copy_(grouped)

    @staticmethod
    def _collect(results: dict, pieces: list[_Piece]) -> torch.Tensor:
        """One parameter's scaled orthogonal update: a view of its batch, or its QKV blocks reassembled."""
        p = pieces[0].param
        if pieces[0].block is None:
            piece = pieces[0]
            return results[piece.key][piece.offset : piece.offset + piece.count].reshape(p.shape)
        update = torch.empty(p.shape, dtype=torch.float32, device=p.device)
        *lead, rows, cols = p.shape
        for piece in pieces:
            groups, offset, size = piece.block
            blocks = results[piece.key][piece.offset : piece.offset + piece.count].reshape(*lead, groups, size, cols)
            update.view(*lead, groups, rows // groups, cols)[..., offset : offset + size, :].copy_(blocks)
        return update

    def _orthogonalize_all(self, stacks: dict[tuple, torch.Tensor]) -> tuple[float, dict[tuple, torch.Tensor]]:
        """Scaled orthogonalization of every batch, and the wall time it took."""
        device = next((t.device for t in stacks.values()), torch.device("cpu"))
        _synchronize(device)
        start = time.perf_counter()
        results = {}
        for key, stacked in stacks.items():
            rows, cols, partition_dim, is_expert = key[:4]
            group = self.expert_tp_group if is_expert else self.tp_group
            full_rows, full_cols = scale_shape(rows, cols, partition_dim, self.tp_mode, tp_world(group))
            results[key] = newton_schulz_tp(
                stacked,
                self.ns_steps,
                self.coefficients,
                tp_group=group,
                partition_dim=partition_dim,
                mode=self.tp_mode,
                precision=self.precision,
                syrk=self.syrk,
                eps=self.ns_eps,
                scale=muon_scale_factor(full_rows, full_cols, self.scale_mode) * self.extra_scale_factor,
                out=self._buffers[key][1] if key in self._buffers else None,
            )
        _synchronize(device)
        return time.perf_counter() - start, results

    def load_state_dict(self, state_dict: dict) -> None:
        """Load, keeping momentum buffers in fp32 (torch casts state to the parameter dtype)."""
        super().load_state_dict(state_dict)
        for state in self.state.values():
            if "momentum_buffer" in state:
                state["momentum_buffer"] = state["momentum_buffer"].float()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
