"""What Megatron Bridge and Core refuse of a MoE layout, checked before anything is launched.

Both sets of rules are assertions that fire in the container, when the config is finalized or the model is
built on the GPUs; ``make plan`` (and every point of ``make search`` and ``make sweep``) refuses them instead.

* **The flex dispatcher on one expert rank.** HybridEP and DeepEP communicate over one group of every
  expert-tensor and expert-parallel rank, and Core asserts that the group has more than one rank
  (``MoEFlexTokenDispatcher.__init__``): for every backend up to Megatron Core 0.17.0rc0 ("Flex token dispatcher
  requires TPxEP > 1": nemo:26.02 to 26.04), for DeepEP only from 0.17.1 ("DeepEP dispatcher requires TPxEP > 1").
  The TP there is the expert one (``parallel.etp``), so TP2 with EP1 ETP1 is one expert rank too. Which release
  asserts what is read from each tag's source (``tools/bridge_versions.py`` MARKERS ``flex_dispatcher_needs_tp_ep``,
  ``deepep_dispatcher_needs_tp_ep``), not written here by hand.
* **EP-communication overlap** (``parallel.ep_comm_overlap``, NVIDIA's MXFP8 MoE presets from nemo:26.06):
  Bridge's ``CommOverlapConfig`` (every release 0.3.0-0.6.2) asserts expert parallelism (EP > 1), the alltoall
  or flex dispatcher, an interleaved schedule when PP > 1 (VPP set), no full recompute (granularity, method,
  layer count), at most one MTP layer; Core's ``TransformerConfig`` also refuses ``moe`` among the recomputed
  modules from 0.17 (marker ``ep_overlap_refuses_moe_recompute``), whatever the recompute granularity; per-layer
  Transformer Engine graphs of ``moe`` or ``mlp`` (every release); and up to 0.17 (nemo:26.02-26.04.01) any graph
  implementation but Transformer Engine's (marker ``ep_overlap_graphs_te_only``) and an MTP layer without pipeline
  parallelism (marker ``ep_overlap_mtp_needs_pp``). The last three were found by the pairwise override sweep
  (``parallel.cuda_graph_impl=local`` with ``parallel.ep_comm_overlap=true`` on Qwen3, 26.04.01) and reading that
  assertion in each release.
* **DeepEP's GPUs.** Bridge's ``validate_flex_dispatcher_backend`` (every release 0.3.0-0.6.2) takes the DeepEP
  backend on Ampere, Hopper, B200 and B300 only (by the device's compute capability and name): not on GB200 or GB300,
  where NVIDIA's presets use HybridEP.
* **The per-rank expert capacity** (``model.moe_expert_rank_capacity_factor``, which NVIDIA's MXFP8 MoE presets set
  from nemo:26.06 and our config passes through): Core from 0.18 runs it only with the HybridEP or NCCL EP backend
  (marker ``rank_capacity_needs_hybridep``), so DeepEP (B200, B300) under such a preset is refused. Found by the
  pairwise override sweep (``conformance.py --pairs``: DeepEP with ``cluster.gpu=b300`` on Qwen3, 26.08).
* **Aux-loss-free expert bias** (``model.moe_router_enable_expert_bias``): Core's ``TransformerConfig`` (every release)
  takes it only with the sigmoid score function (0.18 on: or sqrtsoftplus, which our config does not offer).

Found by the single-field override sweep through the real Bridge (tests/bridge_env/conformance.py, the machinery of
``make plan CHECK=bridge``; 2026-11-26): the expert-bias rule, ``moe`` recomputed without a typed granularity and DeepEP
on GB300 were plans our checks passed and Bridge refused in the container.
"""

from __future__ import annotations

from collections.abc import Iterable

from optbench.config.schema import RunConfig
from optbench.common.errors import Problem
from optbench.catalog.hardware import gpu_catalog
from optbench.releases import presets
from optbench.releases.graph_rules import cuda_graph_impl
from optbench.releases.versions import Container, behaviour, first_with

ANY_BACKEND = "flex_dispatcher_needs_tp_ep"
DEEPEP = "deepep_dispatcher_needs_tp_ep"
MOE_RECOMPUTE = "ep_overlap_refuses_moe_recompute"
RANK_CAPACITY = "rank_capacity_needs_hybridep"
OVERLAP_GRAPHS_TE_ONLY = "ep_overlap_graphs_te_only"
OVERLAP_MTP_NEEDS_PP = "ep_overlap_mtp_needs_pp"
RANK_CAPACITY_FACTOR = "model.moe_expert_rank_capacity_factor"
"""A setting of NVIDIA's MXFP8 MoE presets from nemo:26.06 that our config passes through as the preset has it."""


def moe_problems(run: RunConfig, container: Container) -> Iterable[Problem]:
    """Every MoE rule of the run's Megatron Bridge and Core that the run breaks."""
    if run.model.num_moe_experts:
        yield from _deepep_device_problems(run)
        yield from _dispatcher_problems(run, container)
        yield from _ep_overlap_problems(run, container)
        yield from _rank_capacity_problems(run, container)
        m = run.model
        if m.moe_router_enable_expert_bias and m.moe_router_score_function != "sigmoid":
            yield Problem(
                "model.moe_router_enable_expert_bias",
                "the aux-loss-free expert bias needs the sigmoid score "
                f"function, Megatron Core refuses it with {m.moe_router_score_function}; set "
                "model.moe_router_score_function=sigmoid or model.moe_router_enable_expert_bias=false",
                ("model.moe_router_score_function",),
            )


DEEPEP_DEVICES = ("NVIDIA B200", "NVIDIA B300")
"""Blackwell devices Bridge lets DeepEP run on (by name); Ampere and Hopper (SM 8.x, 9.x) by compute capability."""


def _deepep_device_problems(run: RunConfig) -> Iterable[Problem]:
    p = run.parallel
    gpu = gpu_catalog().get(run.cluster.gpu)
    if (
        p.moe_token_dispatcher == "flex"
        and p.moe_flex_dispatcher_backend == "deepep"
        and gpu is not None
        and int(gpu.compute_capability) not in (8, 9)
        and not gpu.device_name.startswith(DEEPEP_DEVICES)
    ):
        yield Problem(
            "parallel.moe_flex_dispatcher_backend",
            f"Megatron Bridge runs DeepEP on Ampere, Hopper, B200 and "
            f"B300 only, not on {run.cluster.gpu} ({gpu.device_name}); use parallel.moe_flex_dispatcher_backend="
            "hybridep or parallel.moe_token_dispatcher=alltoall",
            ("cluster", "parallel.moe_token_dispatcher"),
        )


def _dispatcher_problems(run: RunConfig, container: Container) -> Iterable[Problem]:
    p = run.parallel
    if p.moe_token_dispatcher != "flex" or p.ep * p.etp > 1:
        return
    fixes = ["raise parallel.ep", "use parallel.moe_token_dispatcher=alltoall"]
    if behaviour(container, ANY_BACKEND):
        newer = first_with(lambda c: not behaviour(c, ANY_BACKEND))
        fixes += [f"the hybridep backend from {newer.name} on"] if newer is not None else []
        what = "the flex dispatcher"
    elif p.moe_flex_dispatcher_backend == "deepep" and behaviour(container, DEEPEP):
        fixes += ["parallel.moe_flex_dispatcher_backend=hybridep"]
        what = "the flex dispatcher's DeepEP backend"
    else:
        return
    yield Problem(
        "parallel.ep",
        f"{what} needs ep x etp > 1 in Megatron Core {container.core} ({container.name}), got {p.ep} x {p.etp}: it "
        f"asserts so when the model is built; {', '.join(fixes[:-1])}, or {fixes[-1]}",
        ("parallel.etp", "parallel.moe_token_dispatcher", "parallel.moe_flex_dispatcher_backend", "cluster.container"),
    )


def _rank_capacity_problems(run: RunConfig, container: Container) -> Iterable[Problem]:
    """The preset's per-rank expert capacity needs HybridEP (or NCCL EP) in Core from 0.18."""
    backend = run.parallel.moe_flex_dispatcher_backend
    if backend is None or backend in ("hybridep", "ncclep") or not behaviour(container, RANK_CAPACITY):
        return
    preset = presets.find_preset(run)
    factor = preset.settings.get(RANK_CAPACITY_FACTOR) if preset is not None else None
    if factor is not None:
        yield Problem(
            "parallel.moe_flex_dispatcher_backend",
            f"{backend} with NVIDIA's preset {preset.key}, which caps "
            f"each expert rank's tokens ({RANK_CAPACITY_FACTOR}={factor}): Megatron Core {container.core} "
            f"({container.name}) runs that cap only with hybridep or ncclep; keep the preset's hybridep",
            ("cluster.container",),
        )


OFF = "or set parallel.ep_comm_overlap=false"


def _ep_overlap_problems(run: RunConfig, container: Container) -> Iterable[Problem]:
    p, m = run.parallel, run.model
    if not p.ep_comm_overlap:
        return
    related = ("parallel.ep_comm_overlap",)
    if p.ep == 1:
        yield Problem(
            "parallel.ep", f"EP-communication overlap needs expert parallelism (ep > 1); raise it, {OFF}", related
        )
    if p.moe_token_dispatcher not in ("alltoall", "flex"):
        yield Problem(
            "parallel.moe_token_dispatcher",
            f"EP-communication overlap needs the alltoall or flex dispatcher, got {p.moe_token_dispatcher}; {OFF}",
            related,
        )
    if p.pp > 1 and p.vpp is None:
        yield Problem(
            "parallel.vpp",
            f"EP-communication overlap with pp={p.pp} needs an interleaved schedule: set "
            f"parallel.vpp (2 or more virtual stages per rank), {OFF}",
            ("parallel.pp", *related),
        )
    if p.recompute_granularity == "full" or p.recompute_method is not None or p.recompute_num_layers is not None:
        yield Problem(
            "parallel.recompute_granularity",
            "EP-communication overlap refuses full recompute (granularity, "
            f"method and layer count must be unset); use selective recompute, {OFF}",
            ("parallel.recompute_method", "parallel.recompute_num_layers", *related),
        )
    if "moe" in (p.recompute_modules or ()) and behaviour(container, MOE_RECOMPUTE):  # whatever the granularity
        yield Problem(
            "parallel.recompute_modules", f"EP-communication overlap refuses recomputing 'moe'; drop it, {OFF}", related
        )
    if m.mtp_num_layers > 1:
        yield Problem(
            "model.mtp_num_layers",
            f"EP-communication overlap supports at most one MTP layer, got {m.mtp_num_layers}; {OFF}",
            related,
        )
    core = f"Megatron Core {container.core} ({container.name})"
    if m.mtp_num_layers == 1 and p.pp == 1 and behaviour(container, OVERLAP_MTP_NEEDS_PP):
        yield Problem(
            "parallel.pp",
            f"EP-communication overlap with an MTP layer needs pipeline parallelism in {core}; "
            f"raise parallel.pp (with parallel.vpp), set model.mtp_num_layers=0, {OFF}",
            ("model.mtp_num_layers", "cluster.container", *related),
        )
    impl, scope = cuda_graph_impl(run), sorted(set(p.cuda_graph_scope or ()) & {"moe", "mlp"})
    if impl == "transformer_engine" and scope:
        yield Problem(
            "parallel.cuda_graph_scope",
            f"EP-communication overlap refuses per-layer CUDA graphs of {scope}; "
            f"drop them from parallel.cuda_graph_scope, {OFF}",
            ("parallel.cuda_graph_impl", *related),
        )
    if impl not in ("none", "transformer_engine") and behaviour(container, OVERLAP_GRAPHS_TE_ONLY):
        yield Problem(
            "parallel.cuda_graph_impl",
            f"EP-communication overlap in {core} takes CUDA graphs only from "
            f"transformer_engine, got {impl}; use transformer_engine or none, {OFF}",
            ("cluster.container", *related),
        )
