"""The step-time model on cases small enough to compute by hand (docs/projection.md)."""

from __future__ import annotations

import json
import math

from dataclasses import replace

import pytest

from optbench.accounting.flops import attention_core_per_layer_token, model_flops_per_step
from optbench.accounting.params import parameter_counts
from optbench.compose.recipe import compose_run, repo_root
from optbench.projection import comm
from optbench.projection.activation_traffic import bytes_per_token
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS
from optbench.projection.interconnect import interconnect_for
from optbench.projection.nccl_all_to_all import measurements, nvlink_rate
from optbench.projection.stages import pipeline_rank_work
from optbench.projection.gemm_weights import WeightTraffic, dense_gemm_calls
from optbench.projection.step_model import evaluate, solve_efficiency
from optbench.projection.work import RankOptimizer, StepInputs, build_inputs
from optbench.accounting.placement import place
from optbench.resolve import resolve

GB300_BF16 = 2500e12  # dense bf16 peak per GB300 (gpus.csv)
NVLINK = 900e9 * 0.8  # NVLink 5 per direction x achievable fraction (interconnect.csv)
HBM = 8e12 * 0.75  # GB300 HBM x achievable fraction
ADAM_BYTES = 30.0  # bytes per element of a fused AdamW update (CostModel)
QWEN_BF16 = ["precision=bf16"]


ROOFLINE = replace(DEFAULT_ASSUMPTIONS, weight_roofline=True)
"""The step model with the weight-traffic bound (on by default: the term selection keeps it, by 0.005 points)."""
NO_ROOFLINE = replace(DEFAULT_ASSUMPTIONS, weight_roofline=False)


def _inputs(*overrides: str, assumptions=DEFAULT_ASSUMPTIONS):
    run = compose_run("qwen3_30b_a3b_adamw", [*QWEN_BF16, *overrides])
    net = interconnect_for(run.cluster.gpu, run.cluster.nvlink_domain_size)
    return run, build_inputs(resolve(run), net, assumptions)


def synthetic(**changes) -> StepInputs:
    """A 4-stage pipeline, 8 microbatches of 1 TFLOP per GPU each, nothing else."""
    base = dict(
        world=4,
        pp=4,
        vpp=1,
        microbatches=8,
        gemm_peak_flops=1e15,
        gemm_peak_key="test_bf16",
        stage_flops_mb=(1e12,) * 4,
        stage_attention_flops_mb=(0.0,) * 4,
        stage_ep_s=(0.0,) * 4,
        ep_overlap=False,
        stage_tp_s=(0.0,) * 4,
        stage_cp_s=(0.0,) * 4,
        p2p_s=0.0,
        rank_pipeline=(0, 1, 2, 3),
        grad_comm_s=(0.0,) * 4,
        grad_bucket_s=(0.0,) * 4,
        overlap_grad_reduce=True,
        gather_s=(0.0,) * 4,
        gather_bucket_s=(0.0,) * 4,
        gather_overlapped=False,
        optimizer=(RankOptimizer(),) * 4,
        fp8_cast_s=(0.0,) * 4,
    )
    return StepInputs(**{**base, **changes})


def test_synthetic_pipeline_bubble_and_optimizer_by_hand():
    # t_mb = 1e12 / (0.5 * 1e15) = 2 ms; compute 8 x 2 ms; bubble (pp-1)/vpp = 3 microbatch times.
    step = evaluate(synthetic(), 0.5)
    assert step.parts["compute"] == pytest.approx(0.016)
    assert step.parts["pipeline_bubble"] == pytest.approx(0.006)
    assert step.total_s == pytest.approx(0.022)
    # Interleaving (vpp 2) halves the bubble; the busiest rank's optimizer sets the step.
    ranks = (RankOptimizer(0.1, 0.01, 0.0), RankOptimizer(0.3, 0.01, 0.0), RankOptimizer(), RankOptimizer())
    step = evaluate(synthetic(vpp=2, optimizer=ranks), 0.5)
    assert step.parts["pipeline_bubble"] == pytest.approx(0.003)
    assert step.parts["optimizer"] == pytest.approx(0.31)
    assert step.optimizer_busiest_rank == 1
    assert step.optimizer_imbalance_s == pytest.approx(0.31 - 0.42 / 4)


def test_synthetic_gradient_overlap_window():
    # 10 ms of reduction behind a 2/3 x 2 ms backward window: 10 - 1.333 ms exposed; never less than the bucket.
    inputs = synthetic(grad_comm_s=(0.010,) * 4, grad_bucket_s=(0.001,) * 4)
    assert evaluate(inputs, 0.5).parts["dp_grad_reduce_exposed"] == pytest.approx(0.010 - 2 / 3 * 0.002)
    inputs = synthetic(grad_comm_s=(0.0012,) * 4, grad_bucket_s=(0.001,) * 4)
    assert evaluate(inputs, 0.5).parts["dp_grad_reduce_exposed"] == pytest.approx(0.001)
    assert evaluate(synthetic(grad_comm_s=(0.01,) * 4, overlap_grad_reduce=False), 0.5).parts[
        "dp_grad_reduce_exposed"
    ] == pytest.approx(0.01)


def test_weight_traffic_binds_only_below_the_ridge_by_hand():
    # 1 TFLOP per microbatch: forward, data and weight gradient 1/3 each. The kernel runs at 0.7 x 1e15,
    # so each pass takes 0.476 ms of kernel time; 1 GB of weights at 1 TB/s (1 ms) binds forward and
    # data gradient, 4 GB of main-gradient traffic (4 ms) binds the weight gradient.
    third = 1e12 / 3 / 0.7e15
    bound = synthetic(
        stage_weight_traffic=((WeightTraffic(1e12, 1e9, 4e9),),) * 4, hbm_bytes_per_s=1e12, gemm_kernel_efficiency=0.7
    )
    step = evaluate(bound, 0.5)
    per_mb = 2 * (1e-3 - third) + (4e-3 - third)
    assert step.parts["compute"] == pytest.approx(0.016)
    assert step.parts["gemm_weight_bound"] == pytest.approx(8 * per_mb)
    assert step.parts["pipeline_bubble"] == pytest.approx(3 * (0.002 + per_mb))
    # Above the ridge nothing binds: the step is the FLOPs-only step.
    light = replace(bound, stage_weight_traffic=((WeightTraffic(1e12, 1e8, 1e8),),) * 4)
    assert evaluate(light, 0.5).total_s == pytest.approx(evaluate(synthetic(), 0.5).total_s, rel=1e-15)
    # A calibrated rate above the kernel's is the one the bytes are set against.
    fast = evaluate(bound, 0.9)
    assert fast.parts["gemm_weight_bound"] == pytest.approx(
        8 * (2 * (1e-3 - 1e12 / 3 / 0.9e15) + 4e-3 - 1e12 / 3 / 0.9e15)
    )


def test_weight_traffic_penalises_few_rows_per_expert():
    # Qwen3 30B-A3B on 8 GB300: EP1 MBS1 runs 256 rows per expert GEMM per microbatch (weight-gradient bound);
    # NVIDIA's EP8 MBS8 runs 16384 (compute-bound).
    for overrides, binds in ((("parallel.ep=1", "train.mbs=1"), True), (("parallel.ep=8", "train.mbs=8"), False)):
        _, inputs = _inputs(*overrides, assumptions=ROOFLINE)
        assert (evaluate(inputs, 0.3).parts["gemm_weight_bound"] > 0) == binds, overrides
    _, off = _inputs("parallel.ep=1", "train.mbs=1", assumptions=NO_ROOFLINE)  # the switch off
    assert off.stage_weight_traffic == () and evaluate(off, 0.3).parts["gemm_weight_bound"] == 0.0
    verdict = json.loads((repo_root() / "results" / "projection" / "term_selection.json").read_text())["terms"]
    assert DEFAULT_ASSUMPTIONS.weight_roofline == verdict["weight_roofline"]["stays"]  # the term selection's verdict


def test_bf16_attention_under_fp8_gemms_by_hand():
    # 0.3 TFLOP of each stage's microbatch is attention core run in BF16: it takes 1.62x its 0.6 ms at the FP8 rate.
    inputs = synthetic(stage_bf16_attention_flops_mb=(0.3e12,) * 4, bf16_attention_slowdown=1.2 / 0.74)
    step = evaluate(inputs, 0.5)
    extra = 0.3e12 / 0.5e15 * (1.2 / 0.74 - 1)
    assert step.parts["bf16_attention"] == pytest.approx(8 * extra)
    assert step.parts["pipeline_bubble"] == pytest.approx(3 * (0.002 + extra))


def test_fp8_attention_removes_the_bf16_attention_term():
    # Qwen3 30B-A3B on GB300, MXFP8: NVIDIA's 26.04 preset runs attention in BF16, 26.08's in FP8; BF16 has no term.
    cases = ((["cluster.container=nemo:26.04"], True), (["cluster.container=nemo:26.08"], False), (QWEN_BF16, False))
    for overrides, slower in cases:
        run = compose_run("qwen3_30b_a3b_adamw", overrides)
        inputs = build_inputs(
            resolve(run), interconnect_for(run.cluster.gpu, run.cluster.nvlink_domain_size), DEFAULT_ASSUMPTIONS
        )
        assert (evaluate(inputs, 0.3).parts["bf16_attention"] > 0) == slower, overrides
    # The core is Bridge's causal score and value products: 6 s kv heads per token and layer (GQA).
    model = run.model
    assert attention_core_per_layer_token(model, 4096) == 6 * 4096 * model.kv_channels * model.num_attention_heads


def test_single_gpu_is_gemms_plus_adamw_update():
    run, inputs = _inputs("parallel=single")
    step = evaluate(inputs, 0.5)
    params = parameter_counts(run.model).total
    expected_compute = model_flops_per_step(run) / (0.5 * GB300_BF16)
    expected_optimizer = params * ADAM_BYTES / HBM
    assert step.parts["compute"] == pytest.approx(expected_compute, rel=1e-9)
    assert step.parts["optimizer"] == pytest.approx(expected_optimizer, rel=1e-9)
    # One GPU holds all 128 experts: 8 x 4096 x 8 / 128 = 2048 rows each, s(2048) = 1.019
    slow = (
        sum(inputs.stage_expert_flops_mb) * inputs.microbatches / (0.5 * GB300_BF16) * (inputs.expert_gemm_slowdown - 1)
    )
    assert inputs.expert_gemm_slowdown == pytest.approx(1 + (120 / 2048) ** 1.4) and slow > 0
    assert step.parts["small_expert_gemms"] == pytest.approx(slow, rel=1e-9)
    calls = sum(dense_gemm_calls(run, resolve(run).placement)) * DEFAULT_ASSUMPTIONS.dense_gemm_fixed_s
    assert step.parts["dense_gemm_fixed"] == pytest.approx(inputs.microbatches * calls, rel=1e-9)
    # Every layer's element-wise bytes per token (the inventory), every token of a microbatch, at the HBM bandwidth.
    elementwise = (
        sum(bytes_per_token(run.model, layer) for layer in range(run.model.num_layers))
        * run.train.mbs
        * run.train.seq_length
        / HBM
    )
    assert step.parts["activation_traffic"] == pytest.approx(inputs.microbatches * elementwise, rel=1e-9)
    assert step.total_s == pytest.approx(
        expected_compute
        + expected_optimizer
        + slow
        + step.parts["dense_gemm_fixed"]
        + step.parts["activation_traffic"],
        rel=1e-9,
    )
    for part in (
        "pipeline_bubble",
        "moe_all_to_all",
        "dp_grad_reduce_exposed",
        "param_gather_exposed",
        "fp8_weight_cast",
    ):
        assert step.parts[part] == 0.0


def test_pure_data_parallel_exposed_communication():
    # 8 GPUs, DP8, no overlap: reduce-scatter fp32 gradients + all-gather bf16 parameters, all exposed.
    run, inputs = _inputs(
        "parallel.num_gpus=8",
        "parallel.ep=1",
        "optimizer.overlap_grad_reduce=false",
        "optimizer.overlap_param_gather=false",
        "optimizer.grad_reduce_in_fp32=true",
    )
    params = parameter_counts(run.model).total
    step = evaluate(inputs, 0.5)
    # NCCL's ring latency per collective (8.4 us + 7 steps of 3.4 us over NVLink), one per 40M-element bucket.
    latency = (8.4 + 7 * 3.4) * 1e-6 * math.ceil(params / 40e6)
    assert step.parts["dp_grad_reduce_exposed"] == pytest.approx(7 / 8 * params * 4 / NVLINK + latency, rel=1e-9)
    assert step.parts["param_gather_exposed"] == pytest.approx(7 / 8 * params * 2 / NVLINK + latency, rel=1e-9)
    assert step.parts["optimizer"] == pytest.approx(params / 8 * ADAM_BYTES / HBM, rel=1e-9)
    assert step.parts["compute"] == pytest.approx(model_flops_per_step(run) / 8 / (0.5 * GB300_BF16), rel=1e-9)
    # With Megatron's overlap only the last reduce-scatter bucket and the first all-gather bucket
    # (max(40M, 1M x 8) elements) stay exposed.
    _, overlapped = _inputs("parallel.num_gpus=8", "parallel.ep=1", "optimizer.grad_reduce_in_fp32=true")
    step = evaluate(overlapped, 0.5)
    one = (8.4 + 7 * 3.4) * 1e-6
    assert step.parts["dp_grad_reduce_exposed"] == pytest.approx(7 / 8 * 40e6 * 4 / NVLINK + one, rel=1e-9)
    assert step.parts["param_gather_exposed"] == pytest.approx(7 / 8 * 40e6 * 2 / NVLINK + one, rel=1e-9)


def test_bubble_only_pipeline_fraction():
    run, inputs = _inputs(
        "parallel.num_gpus=4",
        "parallel.pp=4",
        "parallel.vpp=2",
        "parallel.ep=1",
        "train.gbs=32",
        "train.mbs=1",
        assumptions=ROOFLINE,
    )
    step = evaluate(inputs, 0.4)
    m, pp, vpp = 32, 4, 2
    assert inputs.microbatches == m
    # EP1 MBS1: the expert GEMMs are weight-bound and small (256 rows per expert)
    busy = sum(
        step.parts[k]
        for k in ("compute", "gemm_weight_bound", "small_expert_gemms", "dense_gemm_fixed", "activation_traffic")
    )
    assert step.parts["gemm_weight_bound"] > 0
    assert step.parts["pipeline_bubble"] / busy == pytest.approx((pp - 1) / (vpp * m), rel=1e-12)
    slowest = max(inputs.stage_flops_mb)
    assert step.parts["compute"] == pytest.approx(m * slowest / (0.4 * GB300_BF16), rel=1e-12)
    hop = run.train.mbs * run.train.seq_length * run.model.hidden_size * 2 / NVLINK + (8.4 + 3.4) * 1e-6  # + one step
    assert step.parts["pipeline_p2p"] == pytest.approx(2 * (pp - 1) * hop, rel=1e-9)


def test_a_non_interleaved_pipeline_waits_for_every_send():
    """Megatron's non-interleaved 1F1B sends synchronously: every microbatch slot pays its two exchanges."""
    run, inputs = _inputs(
        "parallel.num_gpus=4", "parallel.pp=4", "parallel.vpp=null", "parallel.ep=1", "train.gbs=32", "train.mbs=1"
    )
    step = evaluate(inputs, 0.4)
    m, pp = 32, 4
    hop = run.train.mbs * run.train.seq_length * run.model.hidden_size * 2 / NVLINK + (8.4 + 3.4) * 1e-6
    assert inputs.vpp == 1 and step.parts["pipeline_p2p"] == pytest.approx(2 * (m + pp - 1) * hop, rel=1e-9)


def test_stage_flops_add_up_to_the_model():
    for recipe in ("kimi_k2_muon", "qwen3_30b_a3b_muon", "deepseek_v3_adamw"):
        run = compose_run(recipe, [])
        per_token = sum(w.flops_per_token for w in pipeline_rank_work(run, place(run).stages))
        total = model_flops_per_step(run) / (run.train.gbs * run.train.seq_length)
        assert per_token == pytest.approx(total, rel=1e-12)


def test_collective_formulas_by_hand():
    net = interconnect_for("gb300")
    inside = tuple(range(8))
    # NCCL's ring / Simple latency (src/graph/tuning.cc): 8.4 us + 3.4 us per NVLink step + 9.6 us per network step.
    assert comm.all_reduce_s(1e9, inside, net) == pytest.approx(2 * 7 / 8 * 1e9 / NVLINK + (8.4 + 14 * 3.4) * 1e-6)
    assert comm.reduce_scatter_s(1e9, inside, net) == pytest.approx(7 / 8 * 1e9 / NVLINK + (8.4 + 7 * 3.4) * 1e-6)
    # 128 ranks over two 64-GPU blocks: hierarchical, the cross-block step on 1/64 of the data over the NICs.
    across = tuple(range(128))
    network = 100e9 * 0.85
    latency = (8.4 + (2 * 127 - 2) * 3.4 + 2 * 9.6) * 1e-6
    assert comm.all_reduce_s(1e9, across, net) == pytest.approx(
        2 * 63 / 64 * 1e9 / NVLINK + 2 * 1 / 2 * 1e9 / 64 / network + latency
    )
    # A small collective over many ranks is latency-bound, and a larger group pays more of it.
    assert comm.reduce_scatter_s(1e3, tuple(range(512)), net) > 4 * comm.reduce_scatter_s(1e3, tuple(range(64)), net)
    # All-to-all inside a block: 7/8 of the data leaves the rank over NVLink, at NCCL's measured 8-GPU rate.
    assert comm.all_to_all_s(1e9, inside, net) == pytest.approx(7 / 8 * 1e9 / 383.43e9 + (8.4 + 3.4) * 1e-6)
    assert comm.all_reduce_s(1e9, (3,), net) == 0.0


def test_nccl_all_to_all_is_priced_at_the_published_measurements():
    """Every published run (data/nccl_all_to_all.csv: one NVLink 5 node with a 50 GB/s NIC per GPU, as b200's row of
    interconnect.csv) against the price of its bytes over its GPUs, in nccl-tests' bus bandwidth."""
    net = interconnect_for("b200")
    for m in measurements():
        # The system priced is the system measured: its NVLink generation and rate, and its NIC.
        assert (net.nvlink_generation, net.nvlink_bytes_per_s, net.network_bytes_per_s) == (
            m.nvlink_generation,
            m.nvlink_bytes_per_s,
            m.network_bytes_per_s,
        ), m
        priced = m.bytes_per_gpu / comm.all_to_all_s(m.bytes_per_gpu, tuple(range(m.gpus)), net) * (m.gpus - 1) / m.gpus
        # One node reads the table (plus one step of NCCL's latency, 0.5-1.4 % at 1 GiB); across nodes the NIC price
        # was set before the table and agrees within 7 %.
        assert priced == pytest.approx(m.busbw_bytes_per_s, rel=0.015 if m.nodes == 1 else 0.07), m
    # The more peers, the less of the link: every measured group is dearer per byte than the ring assumption.
    rates = [nvlink_rate(net, members) for members in (2, 3, 4, 8, 64)]
    assert rates == sorted(rates, reverse=True) and rates[-1] == rates[-2] < net.nvlink_effective
    # Unmeasured: NVLink 4 keeps the ring collectives' rate; so does a group of one.
    h100 = interconnect_for("h100")
    assert nvlink_rate(h100, 8) == h100.nvlink_effective
    assert comm.all_to_all_s(1e9, (0, 8), net) == pytest.approx(
        1 / 2 * 1e9 / net.network_effective + (8.4 + 9.6) * 1e-6
    )
    # A point-to-point hop pays one step too, across the network dearer than over NVLink.
    assert comm.p2p_s(0.0, 0, 1, net) == pytest.approx((8.4 + 3.4) * 1e-6)
    assert comm.p2p_s(0.0, 0, 8, net) == pytest.approx((8.4 + 9.6) * 1e-6)


def test_hybridep_published_rates_are_read_in_the_models_count_and_lie_below_its_price():
    """data/hybridep_all_to_all.csv: algorithm bandwidth counts the tokens a rank receives, its own included; the model
    counts the bytes sent to the n - 1 others, so the rate per GPU is the kernel-time mean of BF16 dispatch and combine
    times (n - 1) / n. The step model keeps the ring rate, above every measured group (docs/projection.md section 8)."""
    from optbench.projection import hybridep_all_to_all as hybridep

    rows = hybridep.measurements()
    assert rows and all(m.source and m.ranks >= 8 for m in rows)
    b200 = next(m for m in rows if m.system == "b200")
    assert b200.per_gpu_bytes_per_s == pytest.approx((734.95 + 673.84) / 2 * 7 / 8 * 1e9)
    for gpu in ("b200", "b300", "gb200", "gb300"):
        net = interconnect_for(gpu)
        rates = hybridep.measured_rates(net)
        assert sorted(rates) == [8, 16, 24, 32, 36] and list(rates.values()) == sorted(rates.values(), reverse=True)
        assert rates[8] == pytest.approx(622e9, rel=0.002) and rates[36] == pytest.approx(562e9, rel=0.002)
        assert max(rates.values()) < net.nvlink_effective  # the price the caveat calls "above" the measurement
        # ... and the step model does price the flex dispatcher's NVLink share at that ring rate: 8 ranks, 64 experts
        hit = 1 - math.comb(56, 8) / math.comb(64, 8)
        priced = comm.flex_all_to_all_s(1e9, 8, 64, tuple(range(8)), net)
        assert priced == pytest.approx(1e9 * 7 * hit / net.nvlink_effective, rel=1e-12)
    assert hybridep.measured_rates(interconnect_for("h100")) == {}
    assert "not measured on NVLink 4" in hybridep.price_against_measurement(interconnect_for("h100"))


def test_flex_dispatch_sends_a_token_once_per_rank_and_once_per_remote_domain():
    from math import comb

    net = interconnect_for("gb300")
    inside = tuple(range(8))
    # 128 experts over 8 ranks, top-8: a peer holds one of a token's experts with p = 1 - C(112, 8) / C(128, 8).
    p = 1 - comb(112, 8) / comb(128, 8)
    assert comm.flex_all_to_all_s(1e8, 8, 128, inside, net) == pytest.approx(7 * p * 1e8 / NVLINK)
    assert comm.flex_all_to_all_s(1e8, 8, 128, inside, net) < comm.all_to_all_s(8 * 1e8, inside, net)
    # 8-GPU H100 nodes, EP16 over two: one copy per token to the other node when any of its 8 ranks is hit.
    h100 = interconnect_for("h100")
    ranks = tuple(range(16))
    remote = 1 - comb(64, 8) / comb(128, 8)
    network = comm.flex_all_to_all_s(1e8, 8, 128, ranks, h100)
    assert network == pytest.approx(
        max(7 * (1 - comb(120, 8) / comb(128, 8)) * 1e8 / h100.nvlink_effective, remote * 1e8 / h100.network_effective)
    )
    assert comm.flex_all_to_all_s(1e8, 8, 128, (5,), net) == 0.0


def test_solve_efficiency_inverts_evaluate():
    inputs = synthetic(optimizer=(RankOptimizer(0.0, 0.002, 0.0),) * 4)
    for eff in (0.1, 0.37, 0.9):
        target = evaluate(inputs, eff).total_s
        assert solve_efficiency(inputs, target) == pytest.approx(eff, rel=1e-9)
    with pytest.raises(ValueError, match="cannot reach"):
        solve_efficiency(inputs, 0.001)


def test_small_expert_gemms_by_hand():
    # 0.4 TFLOP of each stage's 1 TFLOP microbatch is routed-expert GEMMs at 120 rows per expert: s = 1 + 1 = 2,
    # so they take twice their 0.8 ms at 0.5 PFLOP/s.
    inputs = synthetic(stage_expert_flops_mb=(0.4e12,) * 4, expert_gemm_slowdown=2.0)
    step = evaluate(inputs, 0.5)
    extra = 0.4e12 / 0.5e15
    assert step.parts["small_expert_gemms"] == pytest.approx(8 * extra)
    assert step.parts["pipeline_bubble"] == pytest.approx(3 * (0.002 + extra))
    assert evaluate(synthetic(stage_expert_flops_mb=(0.4e12,) * 4), 0.5).parts["small_expert_gemms"] == 0.0


def test_rows_per_expert_and_their_slowdown():
    from optbench.projection.stage_comm import expert_gemm_slowdown, rows_per_expert

    # Qwen3 30B-A3B (128 experts, top-8, seq 4096): NVIDIA's EP8 MBS8 runs 16384 rows per expert; EP1 MBS1 256;
    # TP2 with sequence parallelism splits the tokens (ETP1), expert TP2 gathers them again.
    cases = {
        ("parallel.ep=8", "train.mbs=8"): 16384,
        ("parallel.ep=1", "train.mbs=1"): 256,
        ("parallel.ep=2", "train.mbs=8", "parallel.tp=2", "parallel.sequence_parallel=true"): 2048,
        ("parallel.ep=2", "train.mbs=8", "parallel.tp=2", "parallel.sequence_parallel=true", "parallel.etp=2"): 4096,
        ("parallel.ep=2", "train.mbs=8", "parallel.tp=2", "parallel.sequence_parallel=false"): 4096,
    }
    for overrides, rows in cases.items():
        run = compose_run("qwen3_30b_a3b_adamw", [*QWEN_BF16, *overrides])
        assert rows_per_expert(run) == rows, overrides
    a = DEFAULT_ASSUMPTIONS
    run = compose_run("qwen3_30b_a3b_adamw", [*QWEN_BF16, "parallel.ep=1", "train.mbs=1"])
    assert expert_gemm_slowdown(run, a) == pytest.approx(
        1 + (a.small_expert_gemm_rows / 256) ** a.small_expert_gemm_power
    )
    assert expert_gemm_slowdown(run, replace(a, small_expert_gemms=False)) == 1.0
    _, low = _inputs("parallel.ep=1", "train.mbs=1")
    _, high = _inputs("parallel.ep=8", "train.mbs=8")
    assert evaluate(low, 0.3).parts["small_expert_gemms"] > 0.1 * evaluate(low, 0.3).parts["compute"] * 0.3
    assert evaluate(high, 0.3).parts["small_expert_gemms"] < 0.001 * evaluate(high, 0.3).parts["compute"]


def test_the_small_expert_constants_are_the_fit_of_the_committed_measurement():
    """Assumptions.small_expert_gemm_* are what results/bench/grouped_gemm.json fits to: re-measuring there
    without refitting here (or the reverse) fails."""
    import json

    from optbench.bench.grouped_gemm_report import fit_slowdown, slowdown_points
    from optbench.compose.recipe import repo_root

    data = json.loads((repo_root() / "results" / "bench" / "grouped_gemm.json").read_text())
    assert data["measured"], "results/bench/grouped_gemm.json holds no GPU measurement"
    points = slowdown_points(data)
    assert len(points) >= 30
    a = DEFAULT_ASSUMPTIONS
    assert fit_slowdown(points) == (a.small_expert_gemm_rows, a.small_expert_gemm_power)


def test_dense_gemm_calls_pay_their_fixed_cost_per_microbatch_by_hand():
    plain = evaluate(synthetic(), 0.5)
    fixed = evaluate(synthetic(stage_dense_gemm_fixed_s=(1e-3,) * 4), 0.5)
    assert fixed.parts["dense_gemm_fixed"] == pytest.approx(8 * 1e-3)
    # the slowest stage's microbatch grows by 1 ms, in the pipeline bubble too: (pp - 1) / vpp more microbatches
    assert fixed.total_s - plain.total_s == pytest.approx((8 + 3) * 1e-3)


def test_dense_gemm_calls_count_three_per_eager_weight_and_none_a_cuda_graph_replays():
    run = compose_run("qwen3_30b_a3b_adamw", [*QWEN_BF16, "parallel.cuda_graph_scope=[]"])
    layers = run.model.num_layers
    # per layer: qkv, attention output, router; plus the output head (the embedding is a lookup)
    assert dense_gemm_calls(run, resolve(run).placement) == [3 * (3 * layers + 1)]
    attn = compose_run("qwen3_30b_a3b_adamw", [*QWEN_BF16, "parallel.cuda_graph_scope=[attn,moe_router]"])
    assert dense_gemm_calls(attn, resolve(attn).placement) == [3 * 1]
    whole = compose_run("qwen3_30b_a3b_adamw", [*QWEN_BF16, "parallel.cuda_graph_impl=full_iteration"])
    assert dense_gemm_calls(whole, resolve(whole).placement) == [0]


def test_the_dense_gemm_fixed_cost_is_the_fit_of_the_committed_measurement():
    """Assumptions.dense_gemm_fixed_s is what results/bench/dense_gemm.json fits to (to 0.1 us)."""
    import json

    from optbench.bench.dense_gemm_report import fit_fixed_cost
    from optbench.compose.recipe import repo_root

    data = json.loads((repo_root() / "results" / "bench" / "dense_gemm.json").read_text())
    assert data["measured"] and len(data["gemms"]) >= 300
    rate, fixed = fit_fixed_cost(data)
    assert round(fixed * 1e6, 1) == pytest.approx(DEFAULT_ASSUMPTIONS.dense_gemm_fixed_s * 1e6)
    assert 0.5 * 989e12 < rate < 989e12  # the H200's bf16 dense peak bounds the fitted rate


def test_overlapped_tensor_parallel_collectives_expose_only_what_their_gemms_cannot_hide_by_hand():
    # 1 TFLOP per microbatch at 0.5 x 1 PFLOP/s = 2 ms of GEMMs; 3 ms of TP collectives, 1 TFLOP of it TP-split GEMMs
    tp = dict(stage_tp_s=(3e-3,) * 4, stage_tp_gemm_flops_mb=(1e12,) * 4)
    hidden = evaluate(synthetic(**tp, tp_overlap=True), 0.5)
    assert hidden.parts["tensor_parallel"] == pytest.approx(8 * (3e-3 - 2e-3))
    assert evaluate(synthetic(**tp, tp_overlap=False), 0.5).parts["tensor_parallel"] == pytest.approx(8 * 3e-3)
    assert evaluate(synthetic(**tp, tp_overlap=True), 0.25).parts["tensor_parallel"] == 0.0  # 4 ms of GEMMs hide it


def test_the_dense_gemm_bench_times_the_inventorys_weights_split_as_tp_splits_them():
    from optbench.accounting.params import padded_vocab_size
    from optbench.bench.dense_gemm import gemm_shapes

    qwen = compose_run("qwen3_30b_a3b_muon", []).model
    assert gemm_shapes(qwen) == [
        ("self_attention.linear_qkv", 2048, (32 + 2 * 4) * 128, "col"),
        ("self_attention.linear_proj", 32 * 128, 2048, "row"),
        ("output_layer", 2048, padded_vocab_size(qwen), "col"),
    ]
    kimi = dict((name, split) for name, _, _, split in gemm_shapes(compose_run("kimi_k2_muon", []).model))
    assert kimi["self_attention.linear_kv_down_proj"] == "none"  # MLA's down-projections are replicated over TP


def test_element_wise_traffic_is_the_documented_inventory_and_weighs_most_on_thin_models():
    from optbench.accounting.flops import model_flops_per_token
    from optbench.projection.activation_traffic import forward_bytes_per_token

    qwen, deepseek = compose_run("qwen3_30b_a3b_adamw").model, compose_run("deepseek_v3_adamw").model
    h, a, k, f = 2048, 32 * 128, 8, 768  # Qwen3 30B-A3B: hidden, heads x head size, top-k, expert width
    assert forward_bytes_per_token(qwen, 0) == 19 * h + 3 * a + 17 * k * h + 9 * k * f + 2 * h
    assert bytes_per_token(qwen, 0) == 3 * forward_bytes_per_token(qwen, 0)
    h, F = deepseek.hidden_size, deepseek.ffn_hidden_size  # DeepSeek-V3's first layers are dense
    assert forward_bytes_per_token(deepseek, 0) == 19 * h + 3 * 128 * 128 + 3 * h + 9 * F

    def bytes_per_flop(model) -> float:
        return sum(bytes_per_token(model, n) for n in range(model.num_layers)) / model_flops_per_token(model, 4096)

    # A small hidden size and narrow experts: more than twice DeepSeek-V3's element-wise bytes per model FLOP.
    assert bytes_per_flop(qwen) > 2 * bytes_per_flop(deepseek)
    # Off, the step loses exactly that part.
    run, inputs = _inputs("parallel=single")
    net = interconnect_for(run.cluster.gpu, run.cluster.nvlink_domain_size)
    off = build_inputs(resolve(run), net, replace(DEFAULT_ASSUMPTIONS, activation_traffic=False))
    on, without = evaluate(inputs, 0.5), evaluate(off, 0.5)
    assert without.parts["activation_traffic"] == 0 < on.parts["activation_traffic"]
    assert on.total_s - without.total_s == pytest.approx(on.parts["activation_traffic"], rel=1e-9)
