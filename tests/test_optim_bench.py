"""The optimizer benchmark writes real measurements with the keys the issue asks for (quick smoke run)."""

from __future__ import annotations

import json

import pytest
import torch

from optbench.bench.__main__ import main


@pytest.fixture(scope="module")
def quick_bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    threads = torch.get_num_threads()
    try:
        assert main(["--only", "optim", "--quick", "--threads", "1", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    return json.loads((out / "optim.json").read_text()), (out / "optim.md").read_text()


@pytest.mark.timeout(240)
def test_bench_writes_measured_step_times(quick_bench):
    data, markdown = quick_bench
    cpu = data["cpu"]
    assert cpu["threads"] == 1 and data["quick"] is True
    for key in ("muon_step_s", "torch_muon_step_s", "speedup_vs_torch_muon", "muon_vs_adamw_training_step"):
        assert cpu[key] > 0, key
    assert cpu["speedup_vs_torch_muon"] == pytest.approx(cpu["torch_muon_step_s"] / cpu["muon_step_s"])
    for proxy in ("kimi_k2_tiny", "qwen3_moe_tiny"):
        model = cpu["models"][proxy]
        assert model["muon_matrices"] > model["muon_parameters"], "3-D expert stacks are split for torch.optim.Muon"
        assert all(t > 0 for t in model["median_step_s"].values())
    emulated = data["cpu_avx2_emulated"]
    assert emulated["speedup_vs_torch_muon"] > 0 and emulated["environment"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert emulated["models"]["kimi_k2_tiny"]["auto_precision"] == "highest", "no AMX for oneDNN: fp32 products"
    for section in (cpu, emulated):  # the attainable ceiling: NS FLOPs at the CPU's measured GEMM rate
        ceiling = section["ceiling"]["proxies"]["kimi_k2_tiny"]
        assert ceiling["ns_floor_s"] > 0 and ceiling["ns_gflop_per_step"] > 0
        assert ceiling["max_speedup_vs_torch_muon"] == pytest.approx(section["torch_muon_step_s"] / ceiling["ns_floor_s"])
    assert "Ceiling:" in markdown and "no implementation can step more than" in markdown
    assert cpu["syrk"] and all(r["plain_s"] > 0 and r["syrk_s"] > 0 for r in cpu["syrk"])
    if not torch.cuda.is_available():
        assert data["gpu"]["measured"] is False and "no CUDA device" in data["gpu"]["reason"]
    assert "# Optimizer benchmark" in markdown and "torch.optim.Muon" in markdown
    assert "python -m optbench.bench" in data["command"]


def test_bench_imbalance_section(quick_bench):
    data, _ = quick_bench
    for model in ("kimi_k2", "qwen3_30b_a3b"):
        v = data["imbalance"][model]
        assert 1.0 <= v["lower_bound"] <= v["cost_aware"] <= v["pingpong"], model
        assert v["cost_aware"] <= 1.05 * v["lower_bound"], model


def test_unknown_benchmark_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--only", "nope"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --only: unknown benchmark 'nope'; choose one of ")
    assert "optim" in err[0]
