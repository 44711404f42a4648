"""What each release's Megatron Core refuses of CUDA graphs and recompute together, checked before launch.

Core's ``TransformerConfig.__post_init__`` asserts, in the container (every release 0.16-0.19 unless said):

* ``cuda_graph_impl`` is one it knows: ``full_iteration`` only from Core 0.18 (nemo:26.06; before it, whole
  iterations were a ``local`` graph scope our config does not offer). Read from each tag's source
  (``tools/bridge_versions.py`` marker ``cuda_graph_full_iteration_impl``);
* (Bridge, from 0.6: NeMo 26.08) the ``local`` implementation only for full-iteration graphs, which our config
  writes as ``full_iteration``, so every ``local`` graph is refused there (``bridge/utils/cuda_graph.py``, marker
  ``local_graphs_full_iteration_only``). Found by the single-field override sweep, listed as a gap until the tags
  were fetched;
* full recompute with CUDA graphs on only with full-iteration graphs ("full recompute is only supported with full
  iteration CUDA graph"): NVIDIA's presets graph attention and the router per layer up to 26.04.01;
* recomputing the MoE layer is not graphed with Transformer Engine's ``moe_router`` scope ("moe recompute is not
  supported with moe_router CUDA graph");
* a full-iteration graph takes no per-layer scope ("cuda_graph_modules must be empty when
  cuda_graph_impl="full_iteration"", Core 0.18 on, the only releases that have it): found by
  ``make plan CHECK=bridge`` (a scope typed over 26.06's full-iteration preset passed our checks);
* the per-layer scopes fit the model (every release 0.16-0.19): ``moe`` and ``moe_router`` not together,
  ``moe_preprocess``
  only with ``moe_router``, the MoE scopes only in a MoE model, ``mlp`` only where some layer is dense, and ``moe``
  only for drop-and-pad MoE (a capacity factor with padding, which neither our config nor NVIDIA's presets set). Found
  by the single-field override sweep on 26.02-26.04.01 (tests/bridge_env/conformance.py), where Qwen3's preset
  graphs attention and the router per layer;
* and, graphs or not (:func:`recompute_problems`), selective recompute of ``mla_up_proj`` only in a multi-latent
  attention model ("mla_up_proj in recompute_modules is only supported with multi_latent_attention"): found by the
  pairwise override sweep (``conformance.py --pairs``) on Qwen3.
"""

from __future__ import annotations

from collections.abc import Iterable

from optbench.config.schema import RunConfig
from optbench.common.errors import Problem
from optbench.releases.versions import Container, behaviour, first_with

FULL_ITERATION = "cuda_graph_full_iteration_impl"
LOCAL_FULL_ITERATION_ONLY = "local_graphs_full_iteration_only"


def cuda_graph_impl(run: RunConfig) -> str:
    """The CUDA-graph implementation Bridge is given (our null means transformer_engine with a scope, else none)."""
    p = run.parallel
    return p.cuda_graph_impl or ("transformer_engine" if p.cuda_graph_scope else "none")


def graph_problems(run: RunConfig, container: Container) -> Iterable[Problem]:
    """Every CUDA-graph rule of the run's Megatron Core that the run breaks."""
    p, impl = run.parallel, cuda_graph_impl(run)
    if impl == "full_iteration" and not behaviour(container, FULL_ITERATION):
        newer = first_with(lambda c: behaviour(c, FULL_ITERATION))
        since = f" (from {newer.name})" if newer is not None else ""
        yield Problem(
            "parallel.cuda_graph_impl",
            f"full_iteration is not a CUDA-graph implementation of Megatron Core {container.core} ({container.name}), "
            f"only of 0.18 on{since}; use none, local or transformer_engine",
            ("cluster.container",),
        )
    if impl == "local" and behaviour(container, LOCAL_FULL_ITERATION_ONLY):
        # Our config has no local full-iteration graph (that is full_iteration), so Bridge refuses every local one.
        yield Problem(
            "parallel.cuda_graph_impl",
            f"Megatron Bridge {container.bridge} ({container.name}) takes the local "
            "CUDA-graph implementation only for full-iteration graphs; use full_iteration for whole "
            "iterations or transformer_engine for per-layer scopes",
            ("cluster.container",),
        )
    if impl == "none":
        return
    if impl == "full_iteration" and p.cuda_graph_scope:
        yield Problem(
            "parallel.cuda_graph_scope",
            f"a full-iteration CUDA graph takes no per-layer scope, got "
            f"{list(p.cuda_graph_scope)}; set parallel.cuda_graph_scope=[], or graph those scopes per layer with "
            "parallel.cuda_graph_impl=transformer_engine",
            ("parallel.cuda_graph_impl",),
        )
    yield from _scope_problems(run)
    off = "or turn graphs off (parallel.cuda_graph_impl=none parallel.cuda_graph_scope=[])"
    if p.recompute_granularity == "full" and impl != "full_iteration":
        yield Problem(
            "parallel.recompute_granularity",
            f"full recompute with {impl} CUDA graphs is refused by Megatron "
            f"Core (full-iteration graphs only); use selective recompute, {off}",
            ("parallel.cuda_graph_impl", "parallel.cuda_graph_scope"),
        )
    if (
        impl == "transformer_engine"
        and p.recompute_granularity == "selective"
        and "moe" in (p.recompute_modules or ())
        and "moe_router" in p.cuda_graph_scope
    ):
        yield Problem(
            "parallel.recompute_modules",
            "recomputing 'moe' is refused with the moe_router CUDA graph scope; "
            f"drop 'moe', drop moe_router from parallel.cuda_graph_scope, {off}",
            ("parallel.cuda_graph_scope",),
        )


def recompute_problems(run: RunConfig) -> Iterable[Problem]:
    """What Core asserts of the recomputed modules against the model, CUDA graphs or not."""
    p = run.parallel
    if (
        p.recompute_granularity == "selective"
        and "mla_up_proj" in (p.recompute_modules or ())
        and not run.model.multi_latent_attention
    ):
        yield Problem(
            "parallel.recompute_modules",
            f"mla_up_proj recomputes the up-projections of multi-latent attention "
            f"and {run.model.name} has none (Megatron Core refuses it); drop it from parallel.recompute_modules",
            ("parallel.recompute_granularity",),
        )


def _scope_problems(run: RunConfig) -> Iterable[Problem]:
    """What Core asserts of the per-layer scopes against each other and against the model."""
    scope, m = set(run.parallel.cuda_graph_scope or ()), run.model
    moe_model = (m.num_moe_experts or 0) > 1

    def refused(why: str) -> Problem:
        return Problem(
            "parallel.cuda_graph_scope",
            f"{why}; Megatron Core refuses it (got {sorted(scope)}); drop it from parallel.cuda_graph_scope",
            ("parallel.cuda_graph_impl",),
        )

    if {"moe", "moe_router"} <= scope:
        yield refused("moe and moe_router are not graphed together")
    if "moe_preprocess" in scope and "moe_router" not in scope:
        yield refused("moe_preprocess is graphed only with moe_router")
    if not moe_model and scope & {"moe", "moe_router"}:
        yield refused(f"{m.name} has no MoE layer to graph")
    if moe_model and m.first_k_dense_layers == 0 and "mlp" in scope:
        yield refused(f"the mlp scope graphs dense layers and every layer of {m.name} is MoE")
    if moe_model and "moe" in scope and not {"moe", "moe_router"} <= scope:
        yield refused(
            "the moe scope needs drop-and-pad MoE (a capacity factor with padding), which this run does not set"
        )
