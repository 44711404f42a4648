"""Newton-Schulz FLOPs per matrix (split QKV, experts, TP modes) and per rank (layer-wise ownership, rank order)."""

from __future__ import annotations

import dataclasses

import pytest

from optbench.accounting.ns_flops import (
    dp_group_work,
    local_param_ns_flops,
    megatron_partition_dim,
    ns_flops,
    ns_flops_per_step_per_gpu,
    pingpong_by_numel,
    rank_ns_flops,
)
from optbench.accounting.params import SHAPE_FIELDS, model_parameters
from optbench.accounting.placement import LocalParam, place
from optbench.compose.recipe import compose_run


def it(gram: int, contraction: int) -> float:
    """One textbook iteration with a given orientation: X X^T, A A, B X."""
    return 2 * gram * gram * contraction + 2 * gram**3 + 2 * gram * gram * contraction


def tiny(*overrides: str):
    """qwen3_moe_tiny (h 256, 8 heads, 2 groups of kv 32, 16 experts of 128) under a cluster layout."""
    return compose_run("qwen3_moe_tiny_muon", ["engine=megatron_bridge", *overrides])


def _param(run, name_part: str, pp_rank: int = 0, expert_slice: int | None = None) -> LocalParam:
    held = place(run).ranks[pp_rank]
    params = held.dense if expert_slice is None else held.experts[expert_slice]
    return next(p for p in params if name_part in p.spec.name)


def test_textbook_count_transposes_to_the_short_side() -> None:
    assert ns_flops(64, 256, 5) == ns_flops(256, 64, 5) == 5 * it(64, 256)
    assert ns_flops(64, 256, 1, syrk=True) == 3 * 64 * 64 * 256 + 64**3


@pytest.mark.parametrize(
    ("tp", "mode", "expected"),
    [
        # Split per query group: Q [8*32, 256], K and V [2*32, 256], each orthogonalized separately.
        (1, "blockwise", 5 * (it(256, 256) + 2 * it(64, 256))),
        (1, "duplicated", 5 * (it(256, 256) + 2 * it(64, 256))),
        # Distributed mode: column-parallel (partition_dim 0), the Gram is of the unsharded dim (256).
        (1, "distributed", 5 * (it(256, 256) + 2 * it(256, 64))),
        # TP2: each rank holds one query group: Q [128, 256], K, V [32, 256].
        (2, "blockwise", 5 * (it(128, 256) + 2 * it(32, 256))),
        (2, "duplicated", 5 * (it(256, 256) + 2 * it(64, 256))),  # gathered, t-fold redundant
        (2, "distributed", 5 * (it(256, 128) + 2 * it(256, 32))),
    ],
)
def test_split_qkv_under_each_tp_mode(tp: int, mode: str, expected: float) -> None:
    run = tiny(f"parallel.tp={tp}", f"parallel.num_gpus={tp}")
    qkv = _param(run, "layers.0.self_attention.linear_qkv.weight")
    assert qkv.local_shape == ((8 + 4) * 32 // tp, 256)
    assert local_param_ns_flops(qkv, run.model, run, mode) == pytest.approx(expected)


def test_unsplit_qkv_is_one_matrix() -> None:
    run = tiny("optimizer.muon.split_qkv=false")
    qkv = _param(run, "layers.0.self_attention.linear_qkv.weight")
    assert local_param_ns_flops(qkv, run.model, run, "blockwise") == pytest.approx(5 * it(256, 384))


def test_experts_are_orthogonalized_one_by_one_and_te_tags_them_dim0_under_ep() -> None:
    run = tiny("parallel.ep=4", "parallel.num_gpus=4")
    fc1 = _param(run, "layers.0.mlp.experts.linear_fc1.weight4", expert_slice=1)  # expert 4 lives on EP rank 1
    fc2 = _param(run, "layers.0.mlp.experts.linear_fc2.weight4", expert_slice=1)
    assert (fc1.local_shape, fc2.local_shape) == ((256, 256), (256, 128))
    assert megatron_partition_dim(fc2.spec, ep=4, etp=1) == 0  # TE: parallel_mode None -> dim 0
    assert megatron_partition_dim(fc2.spec, ep=1, etp=1) == 1
    assert local_param_ns_flops(fc2, run.model, run, "blockwise") == pytest.approx(5 * it(128, 256))
    # Distributed with dim 0: the Gram is of dim 1 (the FFN width here, 128).
    assert local_param_ns_flops(fc2, run.model, run, "distributed") == pytest.approx(5 * it(128, 256))
    single = tiny()
    fc2_ep1 = _param(single, "layers.0.mlp.experts.linear_fc2.weight4", expert_slice=0)
    assert local_param_ns_flops(fc2_ep1, single.model, single, "distributed") == pytest.approx(5 * it(256, 128))


def test_router_and_mla_down_projection() -> None:
    run = compose_run("deepseek_v3_tiny_muon", ["parallel.tp=2", "parallel.num_gpus=2"])
    router = _param(run, "layers.2.mlp.router.weight")
    assert megatron_partition_dim(router.spec, 1, 1) is None
    for mode in ("blockwise", "duplicated", "distributed"):  # no partition_dim: full NS on every rank
        assert local_param_ns_flops(router, run.model, run, mode) == pytest.approx(5 * it(16, 256))
    q_down = _param(run, "layers.0.self_attention.linear_q_down_proj.weight")  # [96, 256], replicated over TP
    assert q_down.local_shape == (96, 256)
    assert local_param_ns_flops(q_down, run.model, run, "blockwise") == pytest.approx(5 * it(96, 256))
    assert local_param_ns_flops(q_down, run.model, run, "distributed") == pytest.approx(5 * it(256, 96))


LAYOUT = ("parallel.num_gpus=16", "parallel.tp=2", "parallel.pp=2", "parallel.ep=4", "parallel.sequence_parallel=true")


def test_layer_wise_ranks_sum_to_every_groups_total() -> None:
    run = tiny(*LAYOUT)  # dp 4, edp 2
    groups = dp_group_work(run)
    assert len(groups) == 2 * 2 + 2 * 4  # (pp x tp) dense groups, (pp x ep x etp) expert groups
    flops = rank_ns_flops(run)
    assert len(flops) == 16
    assert sum(flops) == pytest.approx(sum(item.ns_flops for g in groups for item in g.items))
    for group in groups:
        owners = pingpong_by_numel(group.items, len(group.ranks))
        per_rank = [sum(i.ns_flops for i, o in zip(group.items, owners) if o == k) for k in range(len(group.ranks))]
        assert sum(per_rank) == pytest.approx(sum(i.ns_flops for i in group.items))


def test_global_rank_order_is_tp_cp_ep_dp_pp() -> None:
    run = tiny(*LAYOUT)
    everything_to_first = lambda items, size: [0] * len(items)  # noqa: E731
    flops = rank_ns_flops(run, owners_fn=everything_to_first)
    busy = {rank for rank, value in enumerate(flops) if value > 0}
    # Dense DP groups (tp 2, dp 4): group index 0 is dp_r 0 -> ranks tp_r + 8 pp_r = {0, 1, 8, 9}.
    # Expert DP groups (etp 1, ep 4, edp 2): edp_r 0 -> ranks ep_r + 8 pp_r = {0..3, 8..11}.
    assert busy == {0, 1, 2, 3, 8, 9, 10, 11}
    groups = dp_group_work(run)
    assert groups[0].ranks == (0, 2, 4, 6) and groups[1].ranks == (1, 3, 5, 7)
    assert [g.ranks for g in groups[4:6]] == [(0, 4), (1, 5)]


def test_without_layer_wise_every_rank_runs_all_its_matrices() -> None:
    run = tiny(*LAYOUT, "optimizer.muon.layer_wise=false")
    groups = dp_group_work(run)
    flops = rank_ns_flops(run)
    dense = {r: sum(i.ns_flops for i in g.items) for g in groups[:4] for r in g.ranks}
    expert = {r: sum(i.ns_flops for i in g.items) for g in groups[4:] for r in g.ranks}
    assert flops == pytest.approx([dense[r] + expert[r] for r in range(16)])
    layer_wise = rank_ns_flops(tiny(*LAYOUT))
    assert sum(flops) > sum(layer_wise)


def test_dp_of_one_means_every_rank_owns_everything_it_holds() -> None:
    run = tiny("parallel.num_gpus=2", "parallel.tp=2")
    flops = rank_ns_flops(run)
    total = sum(i.ns_flops for g in dp_group_work(run) if 0 in g.ranks for i in g.items)
    assert flops[0] == pytest.approx(total) and flops[0] == pytest.approx(flops[1])


def test_adamw_runs_no_newton_schulz() -> None:
    run = compose_run("qwen3_moe_tiny_adamw", ["parallel.num_gpus=4"])
    assert rank_ns_flops(run) == [0.0] * 4
    assert all(i.ns_flops == 0.0 for g in dp_group_work(run) for i in g.items)


def test_every_parameter_is_dealt_exactly_once_per_replica() -> None:
    groups = dp_group_work(tiny(*LAYOUT))
    # One model replica: the TP-rank-0 dense groups of both pipeline ranks and every expert group.
    names = [i.name for g in (groups[0], groups[2], *groups[4:]) for i in g.items]
    assert sorted(names) == sorted(p.name for p in model_parameters(tiny().model, 2))


def test_the_inventory_is_keyed_on_the_shape_fields_alone() -> None:
    """It is built from the SHAPE_FIELDS only (reading another field fails), so models that differ
    elsewhere share it and models that differ in one shape field do not."""
    model = tiny().model
    assert set(SHAPE_FIELDS) <= {f.name for f in dataclasses.fields(model)}
    same = dataclasses.replace(model, init_method_std=model.init_method_std * 2, rotary_base=1234)
    assert model_parameters(same, 2) is model_parameters(model, 2)
    wider = dataclasses.replace(model, moe_ffn_hidden_size=2 * model.moe_ffn_hidden_size)
    assert model_parameters(wider, 2) != model_parameters(model, 2)


def test_kimi_k2_published_layout_ns_per_gpu() -> None:
    run = compose_run("kimi_k2_muon")
    stats = ns_flops_per_step_per_gpu(run)
    assert stats["max"] >= stats["mean"] >= stats["min"] > 0
    assert stats["total"] == pytest.approx(stats["mean"] * 256)
    assert ns_flops_per_step_per_gpu(run, syrk=True)["mean"] < stats["mean"]
    # TP1 ETP1: duplicated is the same work as blockwise; distributed's forced orientation costs more.
    assert ns_flops_per_step_per_gpu(run, "duplicated")["mean"] == pytest.approx(stats["mean"])
    assert ns_flops_per_step_per_gpu(run, "distributed")["mean"] > stats["mean"]


@pytest.mark.parametrize(
    "recipe, overrides",
    [
        ("kimi_k2_muon", []),
        ("qwen3_30b_a3b_muon", ["parallel.tp=2", "parallel.etp=2", "parallel.ep=4"]),
        ("deepseek_v3_muon", []),
        ("qwen3_moe_tiny_muon", []),
    ],
)
def test_groups_of_one_shape_class_deal_alike_items(recipe, overrides) -> None:
    """The plan, the memory estimate and the projection price one group per shape class and reuse it for the
    others (DpGroupWork.shape_class): that is exact only if every group of a class deals items of the same
    sizes, counts and order, to the same number of ranks. Each group still names its own parameters."""
    run = compose_run(recipe, overrides)
    by_class: dict = {}
    for group in dp_group_work(run):
        sizes = (len(group.ranks), [(i.numel, i.ns_flops, i.is_expert, i.param.local_shape) for i in group.items])
        assert by_class.setdefault(group.shape_class, sizes) == sizes, group.shape_class
    experts = [g for g in dp_group_work(run) if g.shape_class == ("experts", 0)]
    names = {tuple(i.name for i in g.items) for g in experts}
    assert len(names) == len({id(g.dealt) for g in experts})  # each EP rank's groups name its own experts


@pytest.mark.parametrize(
    ("recipe", "overrides"),
    [
        ("kimi_k2_muon", []),  # PP4 VPP4 EP64 with a pipeline layout and dense first layer
        ("deepseek_v3_muon", ["parallel.ep=32"]),  # MTP layer on the loss stage
        (
            "qwen3_moe_tiny_muon",
            ["engine=megatron_bridge", "parallel.num_gpus=4", "parallel.ep=4", "parallel.etp=2", "parallel.tp=2"],
        ),
    ],
)
def test_expert_slices_hold_exactly_what_dealing_the_inventory_expert_by_expert_gives(recipe, overrides) -> None:
    """The placement builds an EP rank's expert shards only when read, from runs of the inventory; dealt one
    parameter at a time (expert e to EP rank e // (experts / ep), every stage holding its layer) they must be
    the same shards, in the same order, on every EP rank of every pipeline rank."""
    run = compose_run(recipe, overrides)
    p, m = run.parallel, run.model
    placement = place(run)
    per_rank = m.num_moe_experts // p.ep
    expected = [[[] for _ in range(p.ep)] for _ in range(p.pp)]
    for spec in model_parameters(m, p.tp):
        if not spec.is_expert:
            continue
        for stage in placement.stages:
            if spec.layer in (*stage.decoder_layers, *stage.mtp_layers):
                shape = list(spec.shape)
                if p.etp > 1:
                    shape[spec.partition_dim] //= p.etp
                param = LocalParam(spec, tuple(shape), p.etp, stage.index, shape[0] * shape[1])
                expected[stage.pipeline_rank][spec.expert // per_rank].append(param)
    assert sum(map(len, expected[0])) > 0
    for r, held in enumerate(placement.ranks):
        assert len(held.experts) == p.ep
        assert [list(held.experts[k]) for k in range(p.ep)] == expected[r]


def test_cubic5_counts_two_products_per_step_two_thirds_of_quintic_for_a_square_matrix():
    """Issue 80 item 4: Emerging-Optimizers 0.4.0's cubic5 has c = 0 at every step and skips A A."""
    from optbench.accounting.ns_flops import ns_flops, ns_gram_iteration_flops

    n = 4096
    assert ns_flops(n, n, 5, cubic=True) == pytest.approx(ns_flops(n, n, 5) * 2 / 3)
    assert ns_gram_iteration_flops(1024, 7168, cubic=True) == 4 * 1024**2 * 7168
    assert ns_gram_iteration_flops(1024, 7168, syrk=True, cubic=True) == 3 * 1024**2 * 7168


def test_a_cubic5_run_is_planned_with_its_count_and_refused_where_no_container_ships_it():
    from optbench.accounting.ns_flops import ns_flops_per_step_per_gpu
    from optbench.common.errors import UserError
    from optbench.compose.recipe import compose_run
    from optbench.validate import validate

    quintic = ns_flops_per_step_per_gpu(compose_run("kimi_k2_tiny_muon", []))["mean"]
    cubic = ns_flops_per_step_per_gpu(compose_run("kimi_k2_tiny_muon", ["optimizer.muon.coefficients=cubic5"]))["mean"]
    assert cubic < quintic * 0.8  # the proxy's matrices are not square: between 1/2 and 2/3 of quintic's
    with pytest.raises(UserError, match="cubic5 arrives with Emerging-Optimizers 0.4.0"):
        validate(compose_run("kimi_k2_muon", ["optimizer.muon.coefficients=cubic5"]))
    with pytest.raises(UserError, match="must be 5 with the cubic5 coefficients"):
        validate(compose_run("kimi_k2_tiny_muon", ["optimizer.muon.coefficients=cubic5", "optimizer.muon.ns_steps=10"]))


def test_the_local_cubic5_step_is_emerging_optimizers_0_4_0s():
    """X' = a X + b (X X^T) X with 0.4.0's five tuples (muon_utils.py), after the same Frobenius normalisation; the
    singular values end in the relaxed band the schedule targets."""
    import torch

    from optbench.optim.newton_schulz import COEFFICIENT_SETS, newton_schulz

    torch.manual_seed(0)
    x = torch.randn(48, 96)
    X = x / x.norm().clamp_min(1e-7)
    for a, b, c in COEFFICIENT_SETS["cubic5"]:
        assert c == 0.0
        X = a * X + b * (X @ X.mT) @ X
    ours = newton_schulz(x, 5, "cubic5")
    assert torch.allclose(ours, X, atol=1e-5)
    singular = torch.linalg.svdvals(ours)
    assert singular.min() > 0.5 and singular.max() < 1.5
