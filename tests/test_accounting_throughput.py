"""Peaks with their sources, MFU labels, and the throughput a step time implies."""

from __future__ import annotations

import pytest

from optbench.accounting.flops import model_flops_per_step
from optbench.accounting.ns_flops import rank_ns_flops
from optbench.accounting.peaks import Peak, mfu, peaks_for
from optbench.accounting.throughput import step_throughput, step_time_for_tflops, step_time_for_tokens
from optbench.compose.recipe import compose_run
from optbench.config.schema import PrecisionConfig


def test_fp8_runs_report_the_fp8_peak_first_and_the_bf16_peak() -> None:
    mxfp8 = PrecisionConfig(name="mxfp8", fp8="e4m3", fp8_recipe="mxfp8", peak="fp8")
    peaks = peaks_for("gb300", mxfp8)
    assert [p.key for p in peaks] == ["gb300_fp8", "gb300_bf16"]
    assert [p.tflops for p in peaks] == [5000, 2500]
    assert "mxfp8" in peaks[0].label and "5000" in peaks[0].label and "GB300" in peaks[0].source
    fp8_cs = PrecisionConfig(name="fp8_cs", fp8="hybrid", fp8_recipe="tensorwise", peak="fp8")
    assert [(p.key, p.tflops) for p in peaks_for("h100", fp8_cs)] == [("h100_fp8", 1979), ("h100_bf16", 989)]
    bf16_first = PrecisionConfig(name="mxfp8", fp8="e4m3", fp8_recipe="mxfp8", peak="bf16")
    assert [p.key for p in peaks_for("b200", bf16_first)] == ["b200_bf16", "b200_fp8"]


def test_nvfp4_runs_report_the_fp4_peak_first_and_the_bf16_peak() -> None:
    nvfp4 = PrecisionConfig(name="nvfp4", fp4="e2m1", fp4_recipe="nvfp4", peak="fp4")
    peaks = peaks_for("gb300", nvfp4)
    assert [(p.key, p.tflops) for p in peaks] == [("gb300_fp4", 15000), ("gb300_bf16", 2500)]
    assert "nvfp4" in peaks[0].label
    assert [(p.key, p.tflops) for p in peaks_for("gb200", nvfp4)] == [("gb200_fp4", 10000), ("gb200_bf16", 2500)]


def test_bf16_runs_have_one_peak_and_unknown_gpus_none() -> None:
    bf16 = PrecisionConfig(name="bf16")
    assert [(p.key, p.tflops) for p in peaks_for("gb200", bf16)] == [("gb200_bf16", 2500)]
    assert peaks_for("cpu", bf16) == [] and peaks_for("auto", bf16) == []


def test_mfu_is_named_by_peak() -> None:
    peaks = [Peak("a", "x_fp8", 2000.0, "s"), Peak("b", "x_bf16", 1000.0, "s")]
    assert mfu(500.0, peaks) == {"x_fp8": 0.25, "x_bf16": 0.5}


def test_bridge_step_time_gives_bridges_tflops_and_our_ns_on_top() -> None:
    run = compose_run("kimi_k2_muon")
    step = step_time_for_tokens(run, 5072)
    t = step_throughput(run, step)
    assert t.tokens_per_s_per_gpu == pytest.approx(5072)
    assert t.tflops_per_gpu == pytest.approx(1037.1, abs=0.05)
    assert t.ns_tflops_per_gpu == pytest.approx(sum(rank_ns_flops(run)) / step / 256 / 1e12)
    assert t.tflops_per_gpu_with_ns == pytest.approx(t.tflops_per_gpu + t.ns_tflops_per_gpu)
    assert set(t.mfu) == {"gb300_fp8", "gb300_bf16"}
    assert t.mfu["gb300_bf16"] == pytest.approx(t.tflops_per_gpu / 2500)
    assert t.mfu_with_ns["gb300_fp8"] == pytest.approx(t.tflops_per_gpu_with_ns / 5000)
    assert step_time_for_tflops(run, t.tflops_per_gpu) == pytest.approx(step)


def test_local_engine_passes_its_own_peak_and_process_count() -> None:
    run = compose_run("qwen3_moe_tiny_adamw")
    measured = Peak("cpu fp32 measured 0.5 TFLOP/s", "cpu_fp32_measured", 0.5, "make bench")
    t = step_throughput(run, 2.0, peaks=[measured], world_size=2)
    assert t.tflops_per_gpu == pytest.approx(model_flops_per_step(run) / 2.0 / 2 / 1e12)
    assert t.ns_tflops_per_gpu == 0.0
    assert t.mfu == {"cpu_fp32_measured": pytest.approx(t.tflops_per_gpu / 0.5)}
    assert t.peaks == [measured]
    with pytest.raises(ValueError):
        step_throughput(run, 0.0)
