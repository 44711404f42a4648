"""The all-to-all benchmark (results/bench/all_to_all.md): it sends the bytes the step model prices, its price is the
model's, a measurement at that price gives back the assumed NVLink efficiency, and its harness runs on a CPU."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from optbench.bench import all_to_all
from optbench.bench.all_to_all_report import markdown, summary
from optbench.compose.recipe import compose_run
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS
from optbench.projection.interconnect import interconnect_for
from optbench.projection.nccl_all_to_all import nvlink_rate
from optbench.projection.stage_comm import stage_comm


def test_the_recipes_cases_send_topk_copies_of_a_microbatch_in_bf16():
    cases = {c["case"]: c for c in all_to_all.recipe_cases(quick=False)}
    # Qwen3-30B-A3B: 4096 tokens x top-8 x hidden 2048 x 2 bytes; Kimi K2 and DeepSeek-V3: hidden 7168, top-8
    assert cases["qwen3_30b_a3b MBS 1"]["send_bytes"] == 4096 * 8 * 2048 * 2
    assert cases["qwen3_30b_a3b MBS 8"]["send_bytes"] == 8 * 4096 * 8 * 2048 * 2
    assert cases["kimi_k2 MBS 2"]["send_bytes"] == cases["deepseek_v3 MBS 2"]["send_bytes"] == 2 * 4096 * 8 * 7168 * 2
    assert [c["case"] for c in cases.values() if "model" not in c] == [f"sweep {m} MiB" for m in all_to_all.SWEEP_MIB]


def test_the_price_is_the_step_models_all_to_all_of_the_same_bytes():
    """What the model charges a pipeline rank per MoE layer and microbatch (4 all-to-alls) is 4 x the bench's price of
    the recipe's case: the bench measures the very term the search trades against a lower EP."""
    run = compose_run(
        "qwen3_30b_a3b_muon",
        [
            "cluster=h100",
            "precision=bf16",
            "parallel.num_gpus=8",
            "parallel.ep=8",
            "parallel.pp=1",
            "parallel.vpp=1",
            "train.mbs=2",
            "parallel.moe_token_dispatcher=alltoall",
        ],
    )
    net = interconnect_for("h100")
    ep_s, _, _ = stage_comm(run, net, DEFAULT_ASSUMPTIONS, [SimpleNamespace(moe_layers=1, layers=1)], 8)
    case = {c["case"]: c for c in all_to_all.recipe_cases(quick=False)}["qwen3_30b_a3b MBS 2"]
    priced = all_to_all.price({"sent_bytes": case["send_bytes"], "seconds": 1.0}, 8, "h100")
    assert ep_s[0] == pytest.approx(4 * priced["model_s"], rel=1e-12)
    # by hand: 7/8 of the bytes leave each rank at 450 GB/s x 0.80, after one step of NCCL's latency over NVLink
    assert priced["model_s"] == pytest.approx(
        case["send_bytes"] * 7 / 8 / (450e9 * 0.80) + (8.4 + 3.4) * 1e-6, rel=1e-12
    )


@pytest.mark.parametrize("gpu", ["b200", "h100"])  # NVLink 5: NCCL's published rate; NVLink 4: the ring assumption
def test_a_measurement_at_the_models_price_gives_back_the_assumed_efficiency(gpu):
    sent = 64 * 2**20
    net = interconnect_for(gpu)
    assumed = nvlink_rate(net, 8) / net.nvlink_bytes_per_s
    assert assumed == pytest.approx(383.43 / 900 if gpu == "b200" else net.nvlink_efficiency)
    model_s = all_to_all.price({"sent_bytes": sent, "seconds": 1.0}, 8, gpu)["model_s"]
    at_price = all_to_all.price({"sent_bytes": sent, "seconds": model_s}, 8, gpu)
    assert at_price["measured_over_model"] == pytest.approx(1.0)
    assert at_price["nvlink_efficiency_measured"] == pytest.approx(assumed)
    slower = all_to_all.price({"sent_bytes": sent, "seconds": 2 * model_s}, 8, gpu)
    latency = (8.4 + 3.4) * 1e-6
    assert slower["nvlink_efficiency_measured"] == pytest.approx(
        assumed * (model_s - latency) / (2 * model_s - latency)
    )


def test_fewer_than_two_gpus_is_not_a_measurement_and_the_page_says_how_to_get_one():
    result = all_to_all.measure(device_count=1)
    assert result == {"measured": False, "reason": "an all-to-all needs 2 or more GPUs in one node; this one has 1"}
    page = markdown({"benchmark": "all_to_all", **result})
    assert "Not measured: an all-to-all needs 2 or more GPUs in one node; this one has 1." in page
    assert "make bench-gpu" in page


def test_the_page_summarizes_the_recipes_cases_not_the_sweep():
    def case(name, ratio, model="m"):
        return {
            "case": name,
            "model": model,
            "sent_bytes": 2**20,
            "seconds": ratio * 1e-3,
            "spread": [1e-3, 2e-3],
            "arrived": True,
            "model_s": 1e-3,
            "measured_over_model": ratio,
            "achieved_gb_s": 100.0,
            "nvlink_efficiency_measured": 0.5,
        }

    data = {
        "measured": True,
        "device": "GPU",
        "ranks": 8,
        "backend": "nccl",
        "nccl": "2.27.3",
        "host_cpu": "x86",
        "gpu": "h100",
        "nvlink_gb_s_per_direction": 450.0,
        "assumed_nvlink_efficiency": 0.8,
        "cases": [case("a", 1.2), case("b", 1.6), case("c", 1.3), case("sweep", 9.0, model=None)],
    }
    assert summary(data) == {"median": 1.3, "low": 1.2, "high": 1.6, "cases": 3}
    page = markdown(data)
    assert "**1.30x** the model's price (median; 1.20-1.60x)" in page
    assert page.count("\n| ") == 5  # header + 4 cases


@pytest.mark.slow  # two spawned processes
def test_the_harness_runs_on_two_cpu_processes_and_the_data_arrives_permuted():
    result = all_to_all.measure(quick=True, backend="gloo", device_count=2)
    assert result["measured"] and result["ranks"] == 2 and result["gpu"] is None
    assert [c["send_bytes"] for c in result["cases"]] == list(all_to_all.QUICK_BYTES)
    for c in result["cases"]:
        assert c["arrived"] and c["seconds"] > 0 and c["sent_bytes"] == c["send_bytes"]
        assert "model_s" not in c
    page = markdown(json.loads(json.dumps(result)))
    assert "Not priced: a CPU run checks the harness" in page and "did not arrive" not in page


def test_a_collective_that_does_not_permute_is_caught():
    import torch

    class Identity:
        """A 'collective' that hands each rank its own data back."""

        ReduceOp = SimpleNamespace(MAX="max", MIN="min")

        def all_to_all_single(self, received, sent):
            received.copy_(sent)

        def barrier(self):
            pass

        def all_reduce(self, tensor, op):
            pass

    timed = all_to_all._time_case(Identity(), torch, 4096, 0, 2, torch.device("cpu"))
    assert not timed["arrived"] and timed["seconds"] > 0


def test_ranks_that_fail_are_recorded_as_not_measured(monkeypatch):
    def failing(*args):
        raise RuntimeError("Traceback ...\nNCCL error: unhandled system error")

    monkeypatch.setattr(all_to_all, "_run_ranks", failing)
    result = all_to_all.measure(quick=True, backend="gloo", device_count=2)
    assert result == {"measured": False, "reason": "the 2 ranks failed: NCCL error: unhandled system error"}


def test_a_gpu_machine_that_cannot_measure_it_records_why_and_the_command(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    all_to_all.run(tmp_path)
    data = json.loads((tmp_path / "all_to_all.json").read_text())
    assert data["measured"] is False and Path(data["command"].split()[0]).name.startswith("python")
    assert data["reason"] == "an all-to-all needs 2 or more GPUs in one node; this one has 1"
    assert (tmp_path / "all_to_all.md").read_text() == markdown(data)
