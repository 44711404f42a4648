"""plan.json's projection section, its summary lines, the sweep ranking and the interconnect data."""

from __future__ import annotations

import json
from dataclasses import replace

from pathlib import Path

import pytest

from launch.sweep import plan_sweep
from optbench.accounting.placement import place
from optbench.compose.recipe import compose_run, list_group_options, repo_root
from optbench.catalog.hardware import gpu_catalog
from optbench.plan import build_plan, format_summary
from optbench.projection.interconnect import interconnect_catalog
from optbench.projection.section import ExpectedError, ProjectionSection, Unavailable, projection_from_json
from optbench.projection.expected_error import expected_error_cell
from optbench.projection.ranking import rank_by_projection, ranking_lines
from optbench.projection.twin import twin_recipe
from optbench.resolve import resolve
from optbench.validate import validate
from optbench.engine.bridge.adapter import override_items

FIELDS = ("step_time_s", "tflops_per_gpu", "tflops_per_gpu_with_ns", "mfu", "breakdown_s", "efficiency")


def test_kimi_k2_muon_plan_has_projection_twin_and_decomposition() -> None:
    plan = build_plan(resolve(compose_run("kimi_k2_muon", [])))
    p = plan.projection
    assert isinstance(p, ProjectionSection) and all(field in p.to_json() for field in FIELDS)
    assert ProjectionSection.from_json(json.loads(json.dumps(p.to_json()))).to_json() == p.to_json()  # reads back
    refused = {**p.to_json(), "adamw_twin": {"available": False, "reason": "no twin"}, "muon_overhead": {}}
    read = projection_from_json(refused)  # as a plan.json of before the typed section wrote a twin that did not compose
    assert read.adamw_twin == Unavailable(reason="no twin") and read.muon_overhead is None and read.twin is None
    step = p.step
    assert set(step.mfu) == {"gb300_fp8", "gb300_bf16"}
    assert step.step_time_s == pytest.approx(sum(p.breakdown_s.values()), abs=1e-3)
    assert step.tflops_per_gpu_with_ns > step.tflops_per_gpu
    twin, overhead = p.twin, p.muon_overhead
    assert twin.recipe == "kimi_k2_adamw" and twin.step.tflops_per_gpu > step.tflops_per_gpu
    assert overhead.total_s == pytest.approx(step.step_time_s - twin.step.step_time_s, abs=1e-3)
    assert sum(overhead.parts_s.values()) == pytest.approx(overhead.total_s, abs=1e-4)
    assert overhead.parts_s["newton_schulz_compute"] > 0 and overhead.twin_differs_in == ()
    assert set(p.what_if) >= {"param_gather_overlap", "syrk", "cost_balanced"}
    assert p.what_if["syrk"].win_s > 0
    summary = format_summary(plan)
    assert "  projection  step " in summary and "  vs AdamW    twin kimi_k2_adamw" in summary
    assert "expected error: median " in summary
    # A published row is compared with a plan of its own release only (another release ran other software).
    assert "  published   " not in summary
    typed = ["cluster.container=nemo:26.02"]
    blog = format_summary(build_plan(resolve(compose_run("kimi_k2_muon", typed)), typed))
    assert "published   nvidia_blog_table1 26.02: 1029 model TFLOP/s/GPU; projected" in blog
    # The header is the recipe's description (256 GB300): what the command line changed is named under it.
    assert "  overrides" not in summary
    assert blog.splitlines()[1] == "  overrides   cluster.container=nemo:26.02 (on top of the recipe described above)"


def test_qwen3_adamw_plan_projection() -> None:
    plan = build_plan(resolve(compose_run("qwen3_30b_a3b_adamw", ["cluster.container=nemo:26.02"])))
    p = plan.projection
    assert isinstance(p, ProjectionSection) and all(field in p.to_json() for field in FIELDS)
    assert "adamw_twin" not in p.to_json() and "muon_overhead" not in p.to_json()
    assert p.step.tflops_per_gpu == pytest.approx(713.0, abs=0.01)  # its own calibration anchor
    assert p.step.tflops_per_gpu_with_ns == p.step.tflops_per_gpu


def test_local_engine_needs_no_projection() -> None:
    plan = build_plan(resolve(compose_run("qwen3_moe_tiny_muon", [])))
    assert plan.projection == Unavailable(reason=plan.projection.reason)
    assert "engine=local" in plan.projection.reason
    assert plan.projection.to_json() == {"available": False, "reason": plan.projection.reason}
    assert "  projection  none: engine=local" in format_summary(plan)


def test_twin_keeps_user_overrides_but_not_optimizer_ones() -> None:
    run = compose_run("kimi_k2_muon", ["train.mbs=1", "optimizer.muon.tp_mode=duplicated"])
    assert twin_recipe(run, ["train.mbs=1", "optimizer.muon.tp_mode=duplicated"]) == ("kimi_k2_adamw", ("train.mbs=1",))


def test_a_run_resolved_like_another_shares_its_placement_only_when_it_places_alike() -> None:
    """The AdamW twin and the side-by-side siblings reuse the Muon run's placement (placing Kimi K2's
    parameters is most of a plan's time); a run with another layout must place its own."""
    muon = resolve(compose_run("kimi_k2_muon", []))
    twin = resolve(compose_run("kimi_k2_adamw", []), like=muon)
    assert twin.placement is muon.placement
    other = resolve(compose_run("kimi_k2_adamw", ["parallel.ep=32"]), like=muon)
    assert other.placement is not muon.placement
    assert other.placement == place(other.run)
    # A calibration anchor may differ from the run in fields that shape nothing (init_method_std): it places alike.
    anchor = resolve(compose_run("kimi_k2_adamw", ["model.init_method_std=0.01"]), like=muon)
    assert anchor.placement is muon.placement
    wider = resolve(compose_run("kimi_k2_adamw", ["model.moe_ffn_hidden_size=4096"]), like=muon)
    assert wider.placement is not muon.placement
    # The twin places alike but has another optimizer: its optimizer work is its own.
    assert twin.work_of is None and twin.optimizer_state_bytes != muon.optimizer_state_bytes


def test_a_run_that_differs_only_in_its_micro_batch_shares_the_optimizer_work_and_gets_the_same_numbers() -> None:
    """A layout search's neighbours at another MBS read the placement, Newton-Schulz work and optimizer state of
    the point before; every number equals what resolving the run afresh gives."""
    muon = resolve(compose_run("qwen3_30b_a3b_muon", []))
    for overrides in (["train.mbs=4"], ["train.mbs=4", "parallel.ep=4"], ["train.mbs=4", "optimizer.muon.ns_steps=4"]):
        run = compose_run("qwen3_30b_a3b_muon", overrides)
        shared, fresh = resolve(run, like=muon), resolve(run)
        assert (shared.work_of is muon) == (overrides == ["train.mbs=4"]), overrides
        assert shared.rank_ns == fresh.rank_ns and shared.optimizer_state_bytes == fresh.optimizer_state_bytes
        assert shared.memory == fresh.memory
        assert [(g.ranks, g.items) for g in shared.groups_syrk] == [(g.ranks, g.items) for g in fresh.groups_syrk]


def test_sweep_points_ranked_by_projected_throughput(tmp_path: Path) -> None:
    points = plan_sweep("qwen3_30b_a3b_muon", ["train.mbs=4,8", f"results_dir={tmp_path}"])
    valid = [(p.name, p.plan.layout, p.plan.projection) for p in points if p.valid]
    assert len(valid) == 2
    ranked = rank_by_projection(valid)
    tflops = [projection.step.tflops_per_gpu for _, _, projection in ranked]
    assert tflops == sorted(tflops, reverse=True)
    lines = ranking_lines(valid)
    assert lines[0].startswith("Projected throughput")
    assert lines[2].split()[:2] == ["1", ranked[0][0]] and lines[3].split()[:2] == ["2", ranked[1][0]]
    # Each point states the expected error of its own case, and a point within it of the best is marked a tie.
    for line, (_, _, projection) in zip(lines[2:4], ranked):
        error = projection.expected_error
        assert (
            expected_error_cell(error) in line and f"{error.median_abs_error_percent:.1f} % ({error.scheme}" in line
        ), line
    # A tie: the published figures the two 80 % bands allow overlap (each point its own band).
    (low_1, high_1), (low_2, high_2) = (
        tuple(e / 100 for e in p.expected_error.band.error_percent) for _, _, p in ranked
    )
    tie = tflops[1] / (1 + low_2) >= tflops[0] / (1 + high_1)
    assert lines[3].rstrip().endswith("~") == tie
    assert any(line.startswith("  ~ ties      1 point whose 80 % band overlaps") for line in lines) == tie
    bands = [100 * max(abs(low_1), high_1)] * 2
    close = replace(ranked[1][2], step=replace(ranked[1][2].step, tflops_per_gpu=tflops[0] * (1 - bands[0] / 200)))
    far = replace(
        ranked[1][2], step=replace(ranked[1][2].step, tflops_per_gpu=tflops[0] * (1 + low_1) / (1 + high_2) * 0.9)
    )
    assert ranking_lines([ranked[0], (ranked[1][0], ranked[1][1], close)])[3].rstrip().endswith("~")
    assert not ranking_lines([ranked[0], (ranked[1][0], ranked[1][1], far)])[3].rstrip().endswith("~")
    unranked = ranking_lines([("x", valid[0][1], Unavailable(reason="not calibrated"))])
    assert unranked[-1].endswith("x: not ranked (not calibrated)")
    assert not any(line.startswith("  note:") for line in lines)
    crossing = replace(valid[1][2], expected_error=ExpectedError(measured=False, reason="crosses precision"))
    noted = ranking_lines([valid[0], (valid[1][0], valid[1][1], crossing)])
    assert any(line.startswith(f"  note: {valid[1][0]} carries the efficiency across precision") for line in noted)
    moved = replace(
        valid[1][2], expected_error=ExpectedError(rows=52, median_abs_error_percent=8.0, scheme="leave one setup out")
    )
    noted = ranking_lines([valid[0], (valid[1][0], valid[1][1], moved)])
    note = next(line for line in noted if line.startswith("  note:"))
    assert note.startswith(
        f"  note: {valid[1][0]} carries the efficiency from the carried table (expected error median "
        "8.0 % over 52 rows, leave one setup out"
    )
    unmeasured = replace(
        valid[1][2], expected_error=ExpectedError(measured=False, scheme="leave one model out", reason="none")
    )
    noted = ranking_lines([valid[0], (valid[1][0], valid[1][1], unmeasured)])
    assert [line for line in noted if "note:" in line] == [
        f"  note: {valid[1][0]} carries the efficiency from the carried table (expected error not measured;"
        " docs/projection.md section 7): its place beside the others is a first guess"
    ]


def test_interconnect_rows_cover_the_gpu_catalog_and_agree_with_cluster_presets() -> None:
    import yaml

    catalog = interconnect_catalog()
    assert set(catalog) == set(gpu_catalog())
    for row in catalog.values():
        assert all(row.sources) and row.confidence
        assert 0 < row.nvlink_efficiency <= 1 and 0 < row.network_efficiency <= 1 and 0 < row.hbm_efficiency <= 1
        assert row.aligned_block_gpus <= row.nvlink_domain_gpus
    for name in list_group_options("cluster"):
        cluster = yaml.safe_load((repo_root() / "conf" / "cluster" / f"{name}.yaml").read_text())
        if cluster["gpu"] in catalog:
            assert cluster["nvlink_domain_size"] == catalog[cluster["gpu"]].nvlink_domain_gpus, name
    assert catalog["gb300"].network_bytes_per_s == 100e9 and catalog["h100"].nvlink_bytes_per_s == 450e9


def test_the_projection_composes_nothing_it_is_handed(monkeypatch):
    """Issue 79 item 4: the planner composes the run and its AdamW twin first and hands them down; projecting them
    (the band, the twin, the siblings' absence, the what-ifs) calls neither our composition nor Hydra's."""
    import hydra

    from optbench.compose.recipe import compose_run
    from optbench.plan.counterparts import compose_twin
    from optbench.plan.row_runs import COMPOSED_ROWS
    from optbench.projection.project import project
    from optbench.resolve import resolve
    from optbench.validate import validate

    resolved = validate(compose_run("kimi_k2_muon", []))
    twin = resolve(compose_twin(resolved.run, [])[2], like=resolved)

    class Handed:
        def recipes(self):
            return ["kimi_k2_muon", "kimi_k2_adamw"]

        def twin(self, recipe, overrides, like):
            return twin

        def sibling(self, recipe, overrides, like):
            raise AssertionError("no sibling was asked for")

    calls = []
    monkeypatch.setattr(hydra, "compose", lambda *a, **k: calls.append(a) or pytest.fail("hydra.compose was called"))
    import sys

    for module in list(sys.modules.values()):
        if getattr(module, "compose_run", None) is compose_run:
            monkeypatch.setattr(module, "compose_run", lambda *a, **k: pytest.fail("compose_run was called"))
    projection = project(resolved, counterparts=Handed(), row_runs=COMPOSED_ROWS)
    assert projection.twin is not None and projection.expected_error.band.tflops_per_gpu and calls == []


def test_a_preset_running_megatron_fsdp_is_planned_with_its_collectives_and_sharded_memory():
    """Llama 3 70B's FP8 preset on GB300 runs Megatron FSDP (TP1 PP1, DP 64): the run holds it
    (parallel.megatron_fsdp), Bridge gets what NVIDIA's launcher sets beside it, the memory estimate shards the
    weights and gradients, and the step prices the per-microbatch gathers (hidden behind the GEMMs here)."""
    overrides = ["precision=fp8_cs", "cluster.container=nemo:26.04.01", "force=true"]
    resolved = validate(compose_run("llama3_70b_adamw", overrides))
    assert resolved.run.parallel.megatron_fsdp and resolved.layout.dp == 64
    sent = dict(override_items(resolved.run))
    assert sent["ddp.use_megatron_fsdp"] is True and sent["ddp.data_parallel_sharding_strategy"] == "optim_grads_params"
    assert sent["checkpoint.ckpt_format"] == "fsdp_dtensor"
    memory = resolved.memory.breakdown_gb
    assert memory["fsdp_buffers"] > 0 and memory["weights"] < 140 / 64 * 1.1  # 70 B bf16 weights over 64 GPUs
    projection = build_plan(resolved, overrides).projection
    assert projection.available and projection.breakdown_s["fsdp_exposed"] == 0.0  # hidden behind the GEMMs
    assert projection.breakdown_s["dp_grad_reduce_exposed"] == 0.0  # reduced every microbatch, none after the step
    assert 0 < projection.breakdown_s["param_gather_exposed"] < 0.01  # the first layer's gather only
    ddp = validate(compose_run("llama3_70b_adamw", [*overrides, "parallel.megatron_fsdp=false"]))
    assert "fsdp_buffers" not in ddp.memory.breakdown_gb or ddp.memory.breakdown_gb["fsdp_buffers"] == 0
    assert ddp.memory.breakdown_gb["weights"] > 30
