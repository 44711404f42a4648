"""The per-matrix Muon benchmark (results/bench/muon_matrices.md) and the model terms it measures: the eager-op count
the projection prices is the op count of upstream Muon's step, the small-Gram slowdown is the fit of the committed
H200 measurement, and the benchmark's own code path runs on a CPU."""

from __future__ import annotations

import collections
import json
from dataclasses import replace

import pytest
from torch.utils._python_dispatch import TorchDispatchMode

from optbench.plan.row_runs import COMPOSED_ROWS
from optbench.bench import muon_matrices
from optbench.bench.grouped_gemm_report import fit_slowdown
from optbench.bench.muon_matrices_price import GRAM_GRID, gram_slowdown_points
from optbench.bench.muon_matrices_report import markdown
from optbench.common.checkout import repo_root
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS
from optbench.projection.work import muon_matrix_cost, ns_gram_slowdown
from conftest import squeezed

VIEWS = {"aten.transpose.int", "aten.expand.default", "aten.t.default", "aten.view.default"}


class _AtenOps(TorchDispatchMode):
    """Counts the compute ops a step dispatches (views and the profiler's record_function marks launch nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name not in VIEWS and not name.startswith("profiler."):
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def emerging():
    module, reason = muon_matrices._emerging()
    if module is None:
        pytest.fail(f"{reason}: run `make setup` (or `make bridge-env`)")
    return module


@pytest.mark.parametrize("shape", [(48, 32), (32, 48)])
def test_the_model_counts_the_ops_upstream_muon_issues(shape, emerging):
    """Assumptions' eager-op count per Muon matrix is upstream's: each dispatched compute op of one step, an addmm
    with beta != 0 counted as its copy and its GEMM (the model's count, as the kernels it launches)."""
    params = muon_matrices._parameters(shape, 1, "cpu")
    optimizer = muon_matrices.upstream_muon(params, emerging)
    optimizer.step()
    with _AtenOps() as counted:
        optimizer.step()
    launched = sum(counted.ops.values()) + counted.ops["aten.addmm.default"]
    a = DEFAULT_ASSUMPTIONS
    _, _, ops = muon_matrix_cost(shape[0] * shape[1], ((min(shape), 1.0),), 5, a, 1.0, 1.0)
    assert counted.ops["aten.addmm.default"] == 10 and counted.ops["aten.mm.default"] == 5
    assert launched == ops == 36


def test_the_bench_runs_upstream_muon_and_prices_it(emerging):
    """The GPU code path on a CPU with tiny shapes (priced as an H100): every case timed, priced and rendered."""
    data = {"benchmark": "muon_matrices", **muon_matrices.measure(device="cpu", quick=True)}
    assert data["measured"] and data["priced"] and data["gpu"] == "h100"
    assert all(c["muon"]["seconds"] > 0 and c["adamw"]["seconds"] > 0 for c in data["cases"])
    assert data["per_op"]["device_s"] > 0 and set(data["weighted"]) == {"quick"}
    text = markdown(data)
    assert "| 48 x 32 | quick:expert x2 | 2 |" in squeezed(text) and "us per op** on the device" in text


def test_the_recipe_matrices_are_every_orthogonalized_shape():
    shapes = muon_matrices.recipe_matrices()
    assert shapes[(4096, 7168)]["kimi_k2:expert"] == 23_040  # 384 experts x 60 MoE layers
    assert shapes[(128, 2048)] == {"qwen3_30b_a3b:router": 48}
    assert sum(n for users in shapes.values() for u, n in users.items() if u.startswith("qwen3")) == 12_528


def _committed(gpu_folder: str = "") -> dict:
    """The committed measurement: the fit's (H200, results/bench/) or another GPU's (results/bench/<gpu>/)."""
    path = repo_root() / "results" / "bench" / gpu_folder / "muon_matrices.json"
    data = json.loads(path.read_text())
    assert data["measured"], f"{path} holds no GPU measurement"
    return data


def test_the_small_gram_constants_are_the_fit_of_the_committed_measurement():
    """Assumptions.ns_small_gram_* are what results/bench/muon_matrices.json fits to: re-measuring there without
    refitting here (or the reverse) fails."""
    points = gram_slowdown_points(_committed())
    assert len(points) >= 10
    a = DEFAULT_ASSUMPTIONS
    assert fit_slowdown(points, GRAM_GRID) == (a.ns_small_gram_rows, a.ns_small_gram_power)


@pytest.mark.parametrize("gpu_folder", ["", "h100"])
def test_the_committed_page_is_priced_with_the_current_model(gpu_folder):
    """The committed prices are the model's today (a changed constant re-prices the stored measurement)."""
    data = _committed(gpu_folder)
    a = DEFAULT_ASSUMPTIONS
    assert data["assumptions"] == {k: getattr(a, k) for k in data["assumptions"]}
    assert markdown(data) == (repo_root() / "results" / "bench" / gpu_folder / "muon_matrices.md").read_text()


def test_the_h200_fit_prices_the_h100_within_its_spread():
    """The small-Gram constants were fitted on an H200; the H100's GPU-bound shapes, priced with them, land within
    15 % each and within 3 % over each model's matrices (results/bench/h100/muon_matrices.md)."""
    data = _committed("h100")
    assert data["gpu"] == "h100"
    bound = [c for c in data["cases"] if c["muon"]["host_seconds"] < 0.9 * c["muon"]["seconds"]]
    assert len(bound) >= 10
    assert all(0.85 < c["muon"]["seconds"] / c["price"]["muon_s"] < 1.15 for c in bound)
    assert all(abs(data["weighted"][m]["muon"] - 1) < 0.03 for m in ("kimi_k2", "deepseek_v3"))


def test_a_small_gram_costs_more_per_flop_and_the_switch_removes_it():
    a = DEFAULT_ASSUMPTIONS
    assert ns_gram_slowdown(7168, a) == pytest.approx(1 + (a.ns_small_gram_rows / 7168) ** a.ns_small_gram_power)
    assert ns_gram_slowdown(512, a) > 3 > ns_gram_slowdown(2048, a) > ns_gram_slowdown(7168, a) > 1
    assert ns_gram_slowdown(512, replace(a, ns_small_grams=False)) == 1.0
    calls = ((512, 1e12), (7168, 1e12))
    gemm, _, ops = muon_matrix_cost(10, calls, 5, a, 1e15, 1e12)
    assert gemm == pytest.approx((ns_gram_slowdown(512, a) + ns_gram_slowdown(7168, a)) * 1e-3)
    assert ops == a.muon_ops_per_param + 2 * (a.ns_ops_per_call + 5 * a.ns_ops_per_iteration)


def test_each_qkv_call_has_its_own_gram_and_the_calls_sum_to_the_flops():
    """A split QKV is three orthogonalizations with three Gram sizes; their FLOPs are the parameter's."""
    from optbench.accounting.ns_flops import newton_schulz_calls, local_param_ns_flops
    from optbench.accounting.placement import place
    from optbench.compose.recipe import compose_run

    run = compose_run("qwen3_30b_a3b_muon", ["parallel.tp=2", "parallel.sequence_parallel=true"])
    held = place(run).ranks[0].dense
    for mode in ("blockwise", "duplicated", "distributed"):
        for param in held:
            calls = newton_schulz_calls(param, run.model, run, mode) if param.spec.is_muon else ()
            assert sum(f for _, f in calls) == local_param_ns_flops(param, run.model, run, mode)
            if param.spec.name.endswith("linear_qkv.weight"):
                assert len(calls) == 3
                if mode == "blockwise":  # the local Q block is 2048 x 2048, K and V 256 x 2048
                    assert sorted(g for g, _ in calls) == [256, 256, 2048]


def test_the_projection_prices_the_small_grams_of_a_recipe():
    """Kimi K2's experts (Gram 4096 and 2048) cost more Newton-Schulz time with the slowdown than without."""
    from optbench.compose.recipe import compose_run
    from optbench.projection.interconnect import interconnect_for
    from optbench.projection.work import build_inputs
    from optbench.resolve import resolve

    resolved = resolve(compose_run("kimi_k2_muon", []))
    net = interconnect_for(resolved.run.cluster.gpu, resolved.run.cluster.nvlink_domain_size)
    a = DEFAULT_ASSUMPTIONS

    def ns_seconds(assumptions) -> float:
        return sum(rank.ns_gemm_s for rank in build_inputs(resolved, net, assumptions).optimizer)

    assert 1.1 < ns_seconds(a) / ns_seconds(replace(a, ns_small_grams=False)) < 1.4


def test_the_measured_op_overheads_are_the_committed_measurements():
    ranges = [_committed(folder)["per_op"]["recipe_shapes_s"] for folder in ("", "h100")]
    low, high = min(r[0] for r in ranges), max(r[1] for r in ranges)
    assert DEFAULT_ASSUMPTIONS.eager_op_overhead_measured_s == (round(low, 7), round(high, 7))


def test_a_launch_bound_plan_says_what_the_measured_op_overheads_would_give():
    """Qwen3's Muon overhead is mostly launches: its plan gives the change at both measured ends, worse than at the
    a-priori 10 us; Kimi K2's is Newton-Schulz compute and its plan has no such line."""
    from optbench.compose.recipe import compose_run
    from optbench.plan.counterparts import ComposedCounterparts
    from optbench.projection.plan_fields import projection_summary_lines
    from optbench.projection.project import project
    from optbench.resolve import resolve

    qwen = project(
        resolve(compose_run("qwen3_30b_a3b_muon", [])),
        with_what_ifs=False,
        counterparts=ComposedCounterparts(),
        row_runs=COMPOSED_ROWS,
    )
    measured = qwen.muon_overhead.at_measured_op_overhead
    at_low, at_high = measured.tflops_per_gpu_change_percent
    assert at_high < at_low < qwen.muon_overhead.tflops_per_gpu_change_percent < 0
    line = next(x for x in projection_summary_lines(qwen, "muon") if "launch-bound" in x)
    assert f"{at_low:+.2f} to {at_high:+.2f} %" in line and "13.1-32.1 us per eager op" in line
    kimi = project(
        resolve(compose_run("kimi_k2_muon", [])),
        with_what_ifs=False,
        counterparts=ComposedCounterparts(),
        row_runs=COMPOSED_ROWS,
    )
    assert (
        kimi.muon_overhead.at_measured_op_overhead is None
        and "at_measured_op_overhead" not in kimi.to_json()["muon_overhead"]
    )
