"""The one optimizer object the local engine's trainer drives, for AdamW and every matrix optimizer alike.

Matrix-optimizer runs mirror Megatron Core's emerging optimizers: 2-D (and 3-D expert) weights other than
the embedding and output layer go to the matrix optimizer (the one its registry entry's ``local_builder`` builds:
:mod:`optbench.config.optimizers`), everything else to
``torch.optim.AdamW`` (or :class:`~optbench.optim.lion.Lion` with ``optimizer.scalar_optimizer=lion``); both share
the learning rate the trainer's schedule sets. (The state keeps its keys ``muon`` and ``adamw`` for the two sides.) With
``optimizer.muon.layer_wise`` and more than one data-parallel rank, each parameter is owned by one
rank (:mod:`optbench.optim.layer_wise`). AdamW runs give every parameter to ``torch.optim.AdamW``
and update it on every rank (Megatron's element-wise distributed optimizer is not reproduced).

Both sides follow Megatron's weight-decay rule (0 for 1-D parameters and biases) and, like
Megatron's gradient buffers, treat a trainable parameter without a gradient as having a zero one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from optbench.config.optimizers import REGISTRY
from optbench.config.schema import MUON_ASSIGNMENTS, OPTIMIZERS, ModelConfig, OptimizerConfig
from optbench.common.errors import Problem, UserError
from optbench.optim.adaptive_muon import AdaptiveMuon
from optbench.optim.layer_wise import LayerWiseSharding
from optbench.optim.lion import Lion
from optbench.releases.versions import release_line
from optbench.optim.muon import Muon
from optbench.optim.newton_schulz import coefficient_schedule, norm_eps, resolve_matmul_precision
from optbench.optim.routing import (
    MUON,
    ParamRoute,
    megatron_order,
    param_groups,
    qkv_split_shapes_for,
    route_parameters,
)
from optbench.optim.tensor_parallel import TP_MODES

STATE_FORMAT = "optbench.optim/1"


class TrainingOptimizer:
    """Gradient reduction, clipping, the update, the parameter all-gather and checkpoint state."""

    def __init__(
        self,
        name: str,
        routes: Sequence[ParamRoute],
        muon: torch.optim.Optimizer | None,
        adamw: torch.optim.Optimizer | None,
        *,
        dp_group=None,
        sharding: LayerWiseSharding | None = None,
        grad_reduce_in_fp32: bool = False,
    ) -> None:
        self.name = name
        self.routes = list(routes)
        self.muon = muon
        self.adamw = adamw
        self.dp_group = dp_group
        self.sharding = sharding
        self.grad_reduce_in_fp32 = grad_reduce_in_fp32
        self.params = [r.param for r in self.routes]

    @property
    def last_ns_time_s(self) -> float:
        """Wall time of the Newton-Schulz part of the last step (0 for AdamW, or a rank owning no matrix)."""
        return getattr(self.muon, "last_ns_time_s", 0.0)

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """This rank's torch optimizers (Muon first)."""
        return [o for o in (self.muon, self.adamw) if o is not None]

    def _dp_world(self) -> int:
        return dist.get_world_size(self.dp_group) if dist.is_initialized() else 1

    def _fill_missing_grads(self) -> None:
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    @torch.no_grad()
    def reduce_gradients(self) -> None:
        """Average gradients over the data-parallel group: one all-reduce per gradient dtype."""
        world = self._dp_world()
        if world == 1:
            return
        self._fill_missing_grads()
        for dtype in dict.fromkeys(p.grad.dtype for p in self.params):
            grads = [p.grad for p in self.params if p.grad.dtype == dtype]
            flat = torch.cat([g.reshape(-1) for g in grads])
            if self.grad_reduce_in_fp32:
                flat = flat.float()
            dist.all_reduce(flat, group=self.dp_group)
            flat.div_(world)
            offset = 0
            for g in grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> float:
        """Global L2 norm of all gradients (before clipping); scales them to ``max_norm`` if it is > 0.

        After :meth:`reduce_gradients` every rank holds the full averaged gradients, so the local
        norm is the global one (Megatron's layer-wise optimizer also reduces it over all parameters).
        """
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return 0.0
        norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
        if max_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(self.params, max_norm, norm)
        return float(norm)

    @torch.no_grad()
    def step(self) -> None:
        """Update this rank's parameters (its owned ones when layer-wise), then all-gather them."""
        self._fill_missing_grads()
        for optimizer in self.optimizers:
            optimizer.step()
        if self.sharding is not None:
            self.sharding.all_gather()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient, owned or not."""
        for p in self.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.zero_()

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every group (Muon and AdamW share it, as in Megatron)."""
        for optimizer in self.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = lr

    def state_dict(self) -> dict:
        """This rank's optimizer state; with the layer-wise optimizer, only the parameters it owns.

        Resume: every rank saves its own dict and loads it back into an optimizer built the same
        way (same model, config, data-parallel size and assignment); :meth:`load_state_dict` checks that.
        """
        return {
            "format": STATE_FORMAT,
            "optimizer": self.name,
            "layer_wise": self._layer_wise_identity(),
            "param_names": {key: self._names(opt) for key, opt in (("muon", self.muon), ("adamw", self.adamw))},
            "muon": self.muon.state_dict() if self.muon is not None else None,
            "adamw": self.adamw.state_dict() if self.adamw is not None else None,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output; a dict from a different setup is a clear ValueError."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(
                f"not an optbench optimizer state (format {state.get('format')!r}, expected {STATE_FORMAT})"
            )
        if state["optimizer"] != self.name:
            raise ValueError(f"optimizer state is for {state['optimizer']!r}, this run uses {self.name!r}")
        if state["layer_wise"] != self._layer_wise_identity():
            raise ValueError(
                "optimizer state was written with a different layer-wise sharding (data-parallel size, rank "
                "or owner assignment); resume with the same data-parallel size and optimizer.muon.assignment"
            )
        for key, optimizer in (("muon", self.muon), ("adamw", self.adamw)):
            if state["param_names"][key] != self._names(optimizer):
                raise ValueError(f"optimizer state's {key} parameters do not match this model's")
            if optimizer is not None:
                optimizer.load_state_dict(state[key])

    def _layer_wise_identity(self) -> dict | None:
        if self.sharding is None:
            return None
        return {"world": self.sharding.world, "rank": self.sharding.rank, "owners": dict(self.sharding.owner_of_name)}

    def _names(self, optimizer: torch.optim.Optimizer | None) -> list[str]:
        if optimizer is None:
            return []
        name_of = {id(r.param): r.name for r in self.routes}
        return [name_of[id(p)] for group in optimizer.param_groups for p in group["params"]]


def _check_config(cfg: OptimizerConfig) -> None:
    """One UserError listing every optimizer setting this engine cannot run."""
    problems = []
    if cfg.name not in OPTIMIZERS:
        problems.append(Problem("optimizer.name", f"unknown optimizer {cfg.name!r}; choose one of {list(OPTIMIZERS)}"))
    for section in REGISTRY[cfg.name].sections if cfg.name in REGISTRY else ():
        if getattr(cfg, section) is None:
            problems.append(
                Problem(
                    f"optimizer.{section}",
                    f"{cfg.name} needs its {section} settings block (optimizer={cfg.name} provides it)",
                )
            )
    if cfg.muon_family and cfg.muon is not None:
        m = cfg.muon
        try:
            coefficient_schedule(m.coefficients, m.ns_steps)
        except ValueError as err:
            field = (
                "optimizer.muon.coefficients"
                if m.coefficients not in ("quintic", "simple")
                else "optimizer.muon.ns_steps"
            )
            problems.append(Problem(field, str(err)))
        checks = [
            ("scale_mode", m.scale_mode, ("spectral", "shape_scaling", "unit_rms_norm")),
            ("tp_mode", m.tp_mode, TP_MODES),
            ("assignment", m.assignment, MUON_ASSIGNMENTS),
            ("fp32_matmul_prec", m.fp32_matmul_prec, ("auto", "medium", "high", "highest")),
        ]
        for key, value, allowed in checks:
            if value not in allowed:
                problems.append(
                    Problem(f"optimizer.muon.{key}", f"unknown value {value!r}; choose one of {list(allowed)}")
                )
    if problems:
        raise UserError(problems)


def build_optimizer(
    model: nn.Module,
    cfg: OptimizerConfig,
    *,
    dp_group=None,
    tp_group=None,
    model_config: ModelConfig | None = None,
    emerging_optimizers: str = "0.2.0",
) -> TrainingOptimizer:
    """Route ``model``'s parameters as Megatron does and build the optimizer the trainer steps.

    ``emerging_optimizers``: the Emerging-Optimizers release whose semantics the emerging optimizers follow (the run's
    container's: 0.2.0 in nemo:26.06-26.08; 0.3.0 changes some of them: each builder reads it)."""
    _check_config(cfg)
    if dp_group is None and dist.is_initialized():
        dp_group = dist.group.WORLD
    qkv_shapes = None
    if model_config is not None and model_config.num_query_groups and model_config.kv_channels:
        qkv_shapes = qkv_split_shapes_for(
            model_config.num_attention_heads, model_config.num_query_groups, model_config.kv_channels
        )
    routing = MUON if cfg.matrix_optimizer else "adamw"  # MUON marks the matrix side, whichever optimizer takes it
    routes = megatron_order(route_parameters(model, optimizer=routing, qkv_split_shapes=qkv_shapes))
    sharding = None
    world = dist.get_world_size(dp_group) if dist.is_initialized() else 1
    if cfg.layer_wise and world > 1:
        muon = cfg.muon
        sharding = LayerWiseSharding.build(
            routes,
            dp_group,
            muon.assignment if muon else "pingpong",
            ns_steps=muon.ns_steps if muon else 5,
            split_qkv=bool(muon and muon.split_qkv),
        )
    mine = [r for r in routes if sharding is None or sharding.owns(r.param)]
    muon_routes = [r for r in mine if r.optimizer == MUON]
    adam_routes = [r for r in mine if r.optimizer != MUON]
    muon = local_builder(cfg.name)(muon_routes, cfg, tp_group, emerging_optimizers) if muon_routes else None
    adamw = _build_scalar(adam_routes, cfg) if adam_routes else None
    return TrainingOptimizer(
        cfg.name, routes, muon, adamw, dp_group=dp_group, sharding=sharding, grad_reduce_in_fp32=cfg.grad_reduce_in_fp32
    )


def build_muon(routes: Sequence[ParamRoute], cfg: OptimizerConfig, tp_group, emerging_optimizers: str) -> Muon:
    """Muon, or AdaMuon with ``optimizer.adaptive_muon`` (the registry's local builder of both), as that
    Emerging-Optimizers release behaves: AdaMuon scales after the second moment from 0.3, the normalization's eps is
    1e-15 from 0.4."""
    m, line = cfg.muon, release_line(emerging_optimizers)
    groups = param_groups(
        routes,
        cfg.weight_decay,
        lambda r: {"qkv_split_shapes": r.qkv_split_shapes, "partition_dim": r.partition_dim, "is_expert": r.is_expert},
    )
    device = routes[0].param.device
    adaptive = cfg.adaptive_muon
    cls, extra = (
        (Muon, {})
        if adaptive is None
        else (
            AdaptiveMuon,
            dict(
                moment2_method=adaptive.moment2_method,
                beta2=adaptive.beta2,
                eps=adaptive.eps,
                scale_after_moment2=line >= (0, 3),
            ),
        )
    )
    return cls(
        groups,
        **extra,
        lr=cfg.lr,
        momentum=m.momentum,
        weight_decay=cfg.weight_decay,
        nesterov=m.nesterov,
        ns_steps=m.ns_steps,
        coefficients=m.coefficients,
        scale_mode=m.scale_mode,
        extra_scale_factor=m.extra_scale_factor,
        fp32_matmul_prec=resolve_matmul_precision(m.fp32_matmul_prec, device),
        split_qkv=m.split_qkv,
        tp_mode=m.tp_mode,
        tp_group=tp_group,
        expert_tp_group=tp_group,
        syrk=m.syrk,
        ns_eps=norm_eps(line),
    )


def local_builder(name: str) -> Callable[..., torch.optim.Optimizer]:
    """The local implementation of a matrix optimizer: its registry entry's ``module:function``."""
    module, function = REGISTRY[name].local_builder.split(":")
    return getattr(importlib.import_module(module), function)


def _build_scalar(routes: Sequence[ParamRoute], cfg: OptimizerConfig) -> torch.optim.Optimizer:
    groups = param_groups(routes, cfg.weight_decay, lambda r: {})
    if cfg.scalar_optimizer == "lion":
        return Lion(groups, lr=cfg.lr, betas=(cfg.lion_beta1, cfg.lion_beta2), weight_decay=cfg.weight_decay)
    return torch.optim.AdamW(
        groups,
        lr=cfg.lr,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay,
        foreach=True,
    )
