"""Benchmark results whose sections come from different machines: each section keeps its provenance, a machine
that cannot measure a section keeps the stored one, ``--gpu-only`` refuses in one line without a GPU, and the
grouped expert-GEMM benchmark's arithmetic and report (run on the CPU with a tiny shape)."""

from __future__ import annotations

import json

import pytest
import torch

from optbench.bench import grouped_gemm
from optbench.__main__ import main as optbench_main
from optbench.bench.grouped_gemm_report import markdown, relative_to_largest_ep, totals
from optbench.bench.sections import kept_line, kept_or_fresh, provenance, provenance_line
from conftest import squeezed


def test_a_measured_section_is_kept_by_a_run_that_cannot_measure_it():
    stored = {"measured": True, "device": "NVIDIA H200", **provenance()}
    fresh = {"measured": False, "reason": "no CUDA device in this run"}
    kept = kept_or_fresh(fresh, stored)
    assert kept["device"] == "NVIDIA H200" and "no CUDA device" in kept["kept"]
    assert kept_line(kept).startswith("Kept from an earlier run") and provenance_line(kept).startswith("Measured by `")
    assert kept_or_fresh(fresh, None) is fresh and kept_or_fresh(fresh, {"measured": False, "reason": "x"}) is fresh
    newer = {"measured": True, "device": "NVIDIA H100"}
    assert kept_or_fresh(newer, stored) is newer and kept_line(newer) == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("argv", [["--gpu-only"], ["--only", "optim", "--gpu-only"]])
def test_gpu_only_without_a_gpu_is_one_line_and_writes_nothing(argv, tmp_path, capsys):
    out = tmp_path / "bench"
    with pytest.raises(SystemExit) as exited:
        optbench_main(["bench", *argv, "--out", str(out)])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("error: --gpu-only: no CUDA device here")
    assert not any(p.name.endswith((".json", ".md")) for p in out.glob("*")) if out.exists() else True


def test_gpu_only_names_the_benchmarks_that_have_a_gpu_section(capsys):
    with pytest.raises(SystemExit) as exited:
        optbench_main(["bench", "--only", "emerging", "--gpu-only"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: --gpu-only: 'emerging' has no GPU section; choose one of grouped_gemm, dense_gemm, "
        "muon_matrices, all_to_all, optim, pretrain"
    )


def test_rows_per_expert_keep_the_work_per_gpu_whatever_the_ep():
    # Qwen3-30B-A3B: 128 experts, 4096 tokens x top-8 per GPU: G x M = 32768 at every EP
    for ep in (1, 2, 4, 8, 16, 32, 64):
        assert (128 // ep) * grouped_gemm.rows_per_expert(32_768, ep, 128) == 32_768
    assert grouped_gemm.rows_per_expert(32_768, 1, 384) == 80  # 85.3 rounded to the kernels' 16-row alignment
    assert grouped_gemm.rows_per_expert(64, 1, 384) == grouped_gemm.ROW_ALIGNMENT


def test_the_model_floor_is_the_slower_of_compute_and_hbm():
    flops, peak, hbm = 2 * 256 * 2048 * 1536, 989e12, 4.8e12
    nbytes = grouped_gemm.pass_bytes(1, 256, 2048, 1536, 2.0)
    assert nbytes["forward"] == (256 * 2048 + 2048 * 1536) * 2 + 256 * 1536 * 2
    compute = flops / (0.7 * peak)
    assert grouped_gemm.model_floor_s(flops, nbytes["forward"], peak, hbm, 0.7) == max(compute, nbytes["forward"] / hbm)
    assert grouped_gemm.model_floor_s(flops, 1.0, peak, hbm, 0.7) == pytest.approx(compute)


def test_totals_sum_both_gemms_and_three_passes_and_compare_at_equal_work():
    def case(ep, gemm, seconds, flops=1e12):
        return {
            "model": "m",
            "precision": "bf16",
            "routed_tokens": 4096,
            "ep": ep,
            "groups": 8 // ep,
            "rows": 512 * ep,
            "gemm": gemm,
            "flops_per_pass": flops,
            "seconds": {p: seconds for p in grouped_gemm.PASSES},
            "model_floor_s": {p: seconds / 2 for p in grouped_gemm.PASSES},
        }

    cases = [
        case(1, "fc1", 3e-3),
        case(1, "fc2", 3e-3),
        case(8, "fc1", 2e-3),
        case(8, "fc2", 2e-3),
        {**case(2, "fc1", 1e-3), "seconds": {}, "errors": {"forward": "no kernel"}},
        {
            "model": "m",
            "precision": "bf16",
            "routed_tokens": 4096,
            "ep": 4,
            "groups": 2,
            "rows": 2048,
            "gemm": "fc1",
            "skipped": "operands 99 GB",
        },
    ]
    rows = totals(cases)
    one = rows[("m", "bf16", 4096, 1)]
    assert one["seconds"] == pytest.approx(6 * 3e-3) and one["flops"] == pytest.approx(6e12)
    assert one["floor_s"] == pytest.approx(one["seconds"] / 2)
    assert rows[("m", "bf16", 4096, 2)]["problem"] == "forward: no kernel"
    assert rows[("m", "bf16", 4096, 4)]["problem"] == "skipped: operands 99 GB"
    relative = relative_to_largest_ep(rows)
    assert relative[("m", "bf16", 4096, 1)] == pytest.approx(1.5) and relative[("m", "bf16", 4096, 8)] == 1.0
    assert set(relative) == {("m", "bf16", 4096, 1), ("m", "bf16", 4096, 8)}


def test_grouped_gemm_bench_runs_its_kernels_and_reports(tmp_path):
    """The same code path as on a GPU, on the CPU with a tiny shape (bf16 grouped GEMMs run there; FP8 does not
    and is reported as not measured, with torch's reason)."""
    data = {"benchmark": "grouped_gemm", **grouped_gemm.measure(device="cpu", quick=True, gpu="h200")}
    bf16 = [c for c in data["cases"] if c["precision"] == "bf16"]
    assert bf16 and all(set(c["seconds"]) == set(grouped_gemm.PASSES) and "errors" not in c for c in bf16)
    assert all(s > 0 for c in bf16 for s in c["seconds"].values())
    text = markdown(data)
    assert "## quick, bf16" in text and "| 64 | 8 | 1 | 64 |" in squeezed(text) and "1.00x |" in squeezed(text)
    assert "Measured by `" in text and "0.70 x peak" in text


def test_bench_on_a_cpu_keeps_the_stored_gpu_measurement(tmp_path):
    out = tmp_path / "bench"
    out.mkdir()
    (out / ".optbench-results").touch()  # an earlier bench's folder
    stored = {"benchmark": "grouped_gemm", **grouped_gemm.measure(device="cpu", quick=True, gpu="h200")}
    (out / "grouped_gemm.json").write_text(json.dumps(stored))
    if torch.cuda.is_available():
        pytest.skip("a GPU here would remeasure")
    assert optbench_main(["bench", "--only", "grouped_gemm", "--out", str(out)]) == 0
    written = json.loads((out / "grouped_gemm.json").read_text())
    assert written["cases"] == stored["cases"] and "no CUDA device" in written["kept"]
    assert (
        "Kept from an earlier run: not remeasured by this run (no CUDA device" in (out / "grouped_gemm.md").read_text()
    )


@pytest.mark.slow
def test_a_run_past_its_time_is_stopped_with_its_process_group(tmp_path):
    """A GPU lent for minutes must not hang on a run: make, the launcher and the trainer stop together."""
    from pathlib import Path

    from optbench.bench.pretrain import timed_pretrain

    def running() -> list[str]:
        """Processes whose environment names this test's folder (the overrides reach Python through it)."""
        found = []
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                if str(tmp_path).encode() in environ.read_bytes():
                    found.append(environ.parent.name)
            except OSError:
                continue
        return found

    result = timed_pretrain(None, [], tmp_path, "stopped", timeout_s=3)
    assert result["exit_code"] is None and result["error"][0] == "stopped after 3 s"
    assert running() == []


@pytest.mark.parametrize(
    "name",
    [
        "optim",
        "pretrain",
        "grouped_gemm",
        "callback",
        "emerging",
        "muon_matrices",
        "all_to_all",
        "dense_gemm",
        "h100/grouped_gemm",
        "h100/muon_matrices",
    ],
)
def test_each_committed_bench_page_is_the_rendering_of_its_json(name):
    """results/bench/<name>.md is what the current code renders from <name>.json: no hand edit, and no renderer
    change left unapplied to the committed pages (a GPU section measured elsewhere included)."""
    from optbench.bench import (
        all_to_all_report,
        callback,
        dense_gemm_report,
        emerging,
        muon_matrices_report,
        optim_report,
        pretrain,
    )
    from optbench.compose.recipe import repo_root

    render = {
        "optim": optim_report.markdown,
        "pretrain": pretrain.markdown,
        "grouped_gemm": markdown,
        "callback": callback.markdown,
        "emerging": emerging._markdown,
        "muon_matrices": muon_matrices_report.markdown,
        "all_to_all": all_to_all_report.markdown,
        "dense_gemm": dense_gemm_report.markdown,
    }[name.rsplit("/", 1)[-1]]
    folder = repo_root() / "results" / "bench"
    assert render(json.loads((folder / f"{name}.json").read_text())) == (folder / f"{name}.md").read_text()
