"""The optimizer benchmark writes real measurements with the keys the issue asks for (quick smoke run)."""

from __future__ import annotations

import json

import pytest
import torch

from optbench.__main__ import main as optbench_main
from conftest import squeezed

pytestmark = pytest.mark.slow  # times optimizer steps; `make test-fast` skips it
ONE_BENCH = pytest.mark.xdist_group("quick-optim-bench")
"""The tests that read the module's quick bench run on one worker, so that it runs once (about 10 s)."""


@pytest.fixture(scope="module")
def quick_bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    threads = torch.get_num_threads()
    try:
        assert optbench_main(["bench", "--only", "optim", "--quick", "--threads", "1", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    return json.loads((out / "optim.json").read_text()), (out / "optim.md").read_text()


@ONE_BENCH
@pytest.mark.timeout(240)
def test_bench_compares_at_equal_precision_against_a_peak_bound(quick_bench):
    data, markdown = quick_bench
    cpu = data["cpu"]
    assert data["quick"] is True and [b["threads"] for b in cpu["blocks"]][0] == 1
    for block in cpu["blocks"]:
        assert block["others_cpu_share"] is None or 0 <= block["others_cpu_share"] <= 1
        for precision, peak in block["peaks"].items():
            assert peak["gflops"] == pytest.approx(block["threads"] * peak["clock_ghz"] * peak["flops_per_cycle"])
            assert peak["clock_ghz"] >= max(peak["clock_ghz_before_after"]) - 1e-9  # the higher clock: the safer bound
        for proxy in ("kimi_k2_tiny", "qwen3_moe_tiny"):
            model = block["models"][proxy]
            for p in ("bf16", "fp32"):
                ours, theirs = model["step_s"][f"ours_{p}"]["median"], model["step_s"][f"torch_{p}"]["median"]
                assert model["speedup_vs_torch"][p] == pytest.approx(theirs / ours)
                if p in block["peaks"]:  # a bound is a bound: nothing ran faster than the executed FLOPs at peak
                    assert model["ratio_to_bound"][f"ours_{p}"] >= 1 and model["ratio_to_bound"][f"torch_{p}"] >= 1
            assert model["executed_gflop"]["syrk"] <= model["executed_gflop"]["plain"]  # blocks of >= 128 rows only
            assert model["muon_matrices"] > 0
    if not torch.cuda.is_available():
        assert data["gpu"]["measured"] is False and "no CUDA device" in data["gpu"]["reason"]
    assert "at equal precision" in markdown and "x bound" in markdown and "torch.optim.Muon" in markdown
    assert any(t.startswith("ours faster than torch.optim.Muon at equal precision") for t in data["targets"])
    assert "python -m optbench bench" in data["command"]


def test_torch_muon_in_fp32_is_torchs_algorithm_without_the_bf16_cast():
    from optbench.bench.optim_timing import torch_muon_fp32

    generator = torch.Generator().manual_seed(0)
    weights = [torch.nn.Parameter(torch.randn(8, 16, generator=generator)) for _ in range(2)]
    copies = [torch.nn.Parameter(w.detach().clone()) for w in weights]
    for w, c in zip(weights, copies):
        w.grad = c.grad = torch.randn(8, 16, generator=generator)
    bf16, fp32 = torch.optim.Muon(weights, lr=0.1), torch.optim.Muon(copies, lr=0.1)
    bf16.step()
    with torch_muon_fp32():
        fp32.step()
    difference = max((w - c).abs().max().item() for w, c in zip(weights, copies))
    assert 0 < difference < 0.05  # the same update up to bf16 rounding
    import torch.optim._muon as module

    assert module._zeropower_via_newtonschulz.__name__ == "_zeropower_via_newtonschulz"  # restored


@ONE_BENCH
def test_bench_imbalance_section(quick_bench):
    data, _ = quick_bench
    for model in ("kimi_k2", "qwen3_30b_a3b"):
        v = data["imbalance"][model]
        assert 1.0 <= v["lower_bound"] <= v["cost_aware"] <= v["pingpong"], model
        assert v["cost_aware"] <= 1.05 * v["lower_bound"], model


def test_unknown_benchmark_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit) as exited:
        optbench_main(["bench", "--only", "nope"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --only: unknown benchmark 'nope'; choose one of ")
    assert "optim" in err[0]


def test_emerging_bench_times_ours_and_emerging_optimizers_against_a_bound(tmp_path):
    out, threads = tmp_path / "bench", torch.get_num_threads()
    try:
        assert optbench_main(["bench", "--only", "emerging", "--quick", "--threads", "1", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    data = json.loads((out / "emerging.json").read_text())
    assert data["measured"] is True, data.get("reason")
    for block in data["blocks"]:
        for m in block["models"].values():
            assert set(m["speedup_vs_upstream"]) == {"soap", "adamuon", "lion"}
            assert all(s["median"] > 0 for s in m["step_s"].values()) and m["executed_gflop"]["soap"] > 0
            if block["peak"] is not None:
                assert all(ratio > 1.0 for ratio in m["ratio_to_bound"].values())  # a bound is never beaten
    assert "| 1 | kimi_k2_tiny | soap |" in squeezed((out / "emerging.md").read_text())


def test_gpu_section_renders_with_its_own_provenance_and_bound():
    """The GPU section's code path, run on the CPU (the device name is not in the GPU catalog: no bound),
    rendered into the stored result as ``--gpu-only`` does."""
    from optbench.bench import optim
    from optbench.bench.optim_report import markdown

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        gpu = optim.gpu_measurement("cpu", quick=True)
    finally:
        torch.set_num_threads(threads)
    stored = json.loads((optim.Path(__file__).parents[1] / "results" / "bench" / "optim.json").read_text())
    data = {**stored, "gpu": gpu}
    data["targets"] = optim._targets(data["cpu"]["blocks"], gpu, data["imbalance"])
    text = markdown(data)
    section = text[text.index("## GPU") : text.index("## Layer-wise")]
    assert "Device: cpu." in section and "no bound" in section and "Measured by `" in section
    assert "| kimi_k2_tiny | bf16 | ours |" in squeezed(section)
    assert "ours >= 3x torch.optim.Muon, GPU bf16, kimi_k2_tiny" in data["targets"]
