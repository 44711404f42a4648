"""plan.json and the plan summary carry FLOPs per token, Newton-Schulz FLOPs per TP mode, memory and implied TFLOP/s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_make
from optbench.report.ns_report import blog_comparison
from optbench.compose.recipe import compose_run

ACCOUNTING_FIELDS = {
    "model_flops_per_token",
    "model_flops_per_step",
    "ns_flops_per_step_per_gpu",
    "memory_per_gpu_gb",
    "peaks",
    "throughput_at",
}


def _plan(recipe: str, results_dir: Path, *overrides: str) -> tuple[dict, str]:
    done = run_make("plan", f"RECIPE={recipe}", *overrides, f"results_dir={results_dir}")
    assert done.returncode == 0, done.stderr
    return json.loads((results_dir / "plans" / recipe / "plan.json").read_text()), done.stdout


def test_kimi_k2_muon_plan(results_dir: Path) -> None:
    plan, summary = _plan("kimi_k2_muon", results_dir)
    assert ACCOUNTING_FIELDS <= plan.keys()
    assert plan["model_flops_per_token"] == pytest.approx(2.045e11, rel=1e-3)
    ns = plan["ns_flops_per_step_per_gpu"]
    assert ns["recipe_tp_mode"] == "blockwise"
    for mode in ("blockwise", "duplicated", "distributed"):
        assert ns[mode]["max"] >= ns[mode]["mean"] > ns[mode]["syrk_mean"] > 0
    memory = plan["memory_per_gpu_gb"]
    assert memory["fits"] and memory["hbm"] == 288 and len(memory["stage_totals"]) == 4
    assert set(memory["breakdown"]) >= {"weights", "gradients", "optimizer_state", "activations", "allowance"}
    blog = next(t for t in plan["throughput_at"] if t.get("published_ns_tflops_per_gpu"))
    assert blog["tflops_per_gpu"] == pytest.approx(1029, abs=0.01)  # the step time is the blog's model-only figure
    assert 0 < blog["ns_tflops_per_gpu"] < blog["published_ns_tflops_per_gpu"]
    bridge = next(t for t in plan["throughput_at"] if t["published"] == "bridge_perf_summary 26.02.01")
    assert bridge["tflops_per_gpu"] == pytest.approx(1037, abs=0.5)
    assert set(bridge["mfu"]) == {"gb300_fp8", "gb300_bf16"}
    for text in ("FLOPs       2.045e+11 per token", "NS FLOPs", "blockwise*", "memory", "fits", "gb300_fp8 5000"):
        assert text in summary


def test_qwen3_adamw_plan_and_a_user_step_time(results_dir: Path) -> None:
    plan, summary = _plan("qwen3_30b_a3b_adamw", results_dir, "step_time_s=10")
    assert ACCOUNTING_FIELDS <= plan.keys()
    assert plan["model_flops_per_token"] == pytest.approx(2.30e10, rel=2e-3)
    assert plan["ns_flops_per_step_per_gpu"]["blockwise"]["max"] == 0
    mine = plan["throughput_at"][0]
    assert mine["basis"] == "step_time_s=10" and mine["ns_tflops_per_gpu"] == 0
    assert mine["tflops_per_gpu"] == pytest.approx(plan["model_flops_per_step"] / 10 / 8 / 1e12, rel=1e-3)
    assert "step_time_s=10 -> step 10.00 s" in summary and "memory" in summary


def test_bad_step_time_is_one_line() -> None:
    done = run_make("plan", "RECIPE=qwen3_30b_a3b_adamw", "step_time_s=-1")
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [
        "error: step_time_s: must be a finite number in (0, 1e+06], got -1.0"
    ]


@pytest.mark.slow  # several seconds: `make test` runs it
def test_blog_ns_comparison_is_computed_not_fitted() -> None:
    rows = dict((name, ours) for name, ours, _ in blog_comparison(compose_run("kimi_k2_muon"), 1029, 51))
    textbook = rows["ours: textbook 4s^2l+2s^3, recipe TP mode, mean over GPUs"]
    assert 20 < textbook < 35  # about half of the blog's 51 (results/published/published.csv)
    assert rows["multiply-add counted as 4 FLOPs (x2)"] == pytest.approx(2 * textbook)
    assert rows["busiest GPU instead of the mean"] >= textbook > rows["SYRK kernel (3s^2l+s^3)"]
