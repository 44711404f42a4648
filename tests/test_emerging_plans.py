"""SOAP, AdaMuon and Lion (for the scalars) in plans: per-container fields and refusals, state memory, FLOPs."""

from __future__ import annotations

import pytest

from conftest import run_cli
from optbench.accounting.optimizer_work import matrix_state_bytes
from optbench.config.optimizers.soap import soap_flops
from optbench.engine.bridge.adapter import override_items
from optbench.compose.recipe import compose_run
from optbench.common.errors import UserError
from optbench.resolve import resolve
from optbench.validate import collect_problems, validate

RESULTS = "results_dir=/nonexistent/optbench-results"
ALL_MATRIX = ("muon", "adaptive_muon", "soap")
NEW_CORE = ("nemo:26.06", "nemo:26.06.01", "nemo:26.08")
OLD_CORE = ("nemo:26.02", "nemo:26.02.01", "nemo:26.04", "nemo:26.04.01")


def _items(recipe: str, *overrides: str) -> dict:
    return dict(override_items(resolve(validate(compose_run(recipe, [RESULTS, *overrides])).run).run))


@pytest.mark.parametrize("container", NEW_CORE)
def test_soap_plans_with_its_fields_where_core_has_it(container):
    items = _items("qwen3_30b_a3b_soap", f"cluster.container={container}")
    assert items["optimizer.optimizer"] == "soap" and items["optimizer.use_layer_wise_distributed_optimizer"] is True
    assert (
        items["optimizer.soap_shampoo_beta"],
        items["optimizer.soap_precondition_frequency"],
        items["optimizer.soap_use_kl_shampoo"],
    ) == (0.95, 1, True)
    assert items["optimizer.use_distributed_optimizer"] is False and "optimizer.muon_momentum" not in items


@pytest.mark.parametrize("container", NEW_CORE)
def test_adaptive_muon_plans_with_muons_fields_and_its_second_moment(container):
    items = _items("qwen3_30b_a3b_adaptive_muon", f"cluster.container={container}")
    assert items["optimizer.optimizer"] == "adaptive_muon" and items["optimizer.muon_momentum"] == 0.95
    assert (
        items["optimizer.adaptive_muon_moment2_method"],
        items["optimizer.adaptive_muon_beta2"],
        items["optimizer.adaptive_muon_eps"],
    ) == ("adamuon", 0.95, 1e-8)
    assert "optimizer.muon_scalar_optimizer" not in items  # adam: every release's default, older ones lack the field


@pytest.mark.parametrize("recipe", ["qwen3_30b_a3b_soap", "qwen3_30b_a3b_adaptive_muon"])
@pytest.mark.parametrize("container", OLD_CORE)
def test_older_containers_would_train_muon_and_are_refused(recipe, container):
    problems = collect_problems(compose_run(recipe, [RESULTS, f"cluster.container={container}"]))
    assert len(problems) == 1 and problems[0].field == "optimizer.name"
    assert "trains Muon" in problems[0].message and "set cluster.container=nemo:26.06" in problems[0].message


def test_the_refusal_is_one_line_with_exit_code_2():
    done = run_cli("plan", "qwen3_30b_a3b_soap", "cluster.container=nemo:26.02", "dryrun=true")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "soap arrives with nemo:26.06" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("container", "why"),
    [
        ("nemo:26.02", "has no muon_scalar_optimizer"),
        ("nemo:26.04.01", "lacks (Megatron asserts >= 0.2)"),
        ("nemo:26.06", "never passes it on: Adam would run"),
    ],
)
def test_lion_for_the_scalars_is_refused_until_26_08(container, why):
    problems = collect_problems(
        compose_run(
            "qwen3_30b_a3b_muon", [RESULTS, f"cluster.container={container}", "optimizer.scalar_optimizer=lion"]
        )
    )
    assert [p.field for p in problems] == ["optimizer.scalar_optimizer"]
    assert why in problems[0].message and "arrives with nemo:26.08" in problems[0].message
    items = _items("qwen3_30b_a3b_muon", "cluster.container=nemo:26.08", "optimizer.scalar_optimizer=lion")
    assert (items["optimizer.muon_scalar_optimizer"], items["optimizer.lion_beta1"], items["optimizer.lion_beta2"]) == (
        "lion",
        0.95,
        0.98,
    )


def test_soap_on_tensor_parallel_shards_is_refused_in_reproduce_and_taken_in_train():
    layout = ["parallel.tp=2", "parallel.sequence_parallel=true", "parallel.num_gpus=16"]
    problems = collect_problems(compose_run("qwen3_30b_a3b_soap", [RESULTS, *layout]))
    assert any(p.field == "optimizer.name" and "each tensor-parallel shard alone" in p.message for p in problems)
    train = collect_problems(compose_run("qwen3_30b_a3b_soap", [RESULTS, *layout, "intent=train"]))
    assert not any("tensor-parallel shard" in p.message for p in train)
    from optbench.plan import build_plan, format_summary  # taken, and the plan says what it is

    typed = [RESULTS, *layout, "intent=train"]
    text = format_summary(build_plan(validate(compose_run("qwen3_30b_a3b_soap", typed)), typed))
    assert "warning: tp2 shards preconditioned alone, not SOAP on the full matrices" in text


def test_soap_checkpoints_are_refused_with_the_reason():
    problems = collect_problems(compose_run("qwen3_30b_a3b_soap", [RESULTS, "train.save_interval=100"]))
    assert [p.field for p in problems] == ["train.save_interval"] and "not parameter-shaped" in problems[0].message


def test_kimi_k2_soap_is_refused_naming_the_optimizer_state():
    with pytest.raises(UserError) as err:
        validate(compose_run("kimi_k2_muon", [RESULTS, "optimizer=soap"]))
    assert "largest term: optimizer_state" in str(err.value) and "exceeds the 288 GB HBM" in str(err.value)


def test_soap_state_and_flops_per_matrix():
    soap = compose_run("qwen3_30b_a3b_soap", [RESULTS]).optimizer
    muon = compose_run("qwen3_30b_a3b_muon", [RESULTS]).optimizer
    adaptive = compose_run("qwen3_30b_a3b_adaptive_muon", [RESULTS]).optimizer
    m, n = 1536, 2048
    assert matrix_state_bytes(soap, (m, n)) == 4 * (3 * m * n + 2 * m * m + 2 * n * n)
    assert matrix_state_bytes(muon, (m, n)) == 8 * m * n and matrix_state_bytes(adaptive, (m, n)) == 12 * m * n
    cross = m * m * n + m * n * n
    every_step = 4 * cross + 4 * m**3 + 4 * n**3 + 4 * cross
    refresh = 4 * cross + 4 * m**3 + 4 * n**3
    assert soap_flops(m, n).gemm == every_step + refresh and soap_flops(m, n).qr == pytest.approx(8 / 3 * (m**3 + n**3))
    assert soap_flops(m, n, precondition_frequency=4).gemm == every_step + refresh / 4
    assert soap_flops(m, n, kl_shampoo=False).gemm == 4 * cross + 2 * cross + refresh


def test_plan_prices_soap_and_adaptive_muon_against_their_adamw_twin():
    """The optimizer step is priced from each optimizer's own work (SOAP: its products at the TF32 rate and QR on
    CUDA cores; AdaMuon: Muon's plus the second moment), and the AdamW twin is the model's AdamW recipe."""
    from optbench.plan import build_plan, format_summary

    plans = {}
    for recipe in ("qwen3_30b_a3b_muon", "qwen3_30b_a3b_adaptive_muon", "qwen3_30b_a3b_soap"):
        plans[recipe] = build_plan(validate(compose_run(recipe, [RESULTS])), [], compare=ALL_MATRIX)
    muon, adaptive, soap = (plans[r].projection for r in plans)
    step = {
        name: sum(p.optimizer_mean_s.values()) for name, p in (("muon", muon), ("adaptive", adaptive), ("soap", soap))
    }
    assert step["adaptive"] > step["muon"] and step["soap"] > step["adaptive"]
    assert soap.twin.recipe.startswith("qwen3_30b_a3b_adamw")
    assert soap.muon_overhead.parts_s["newton_schulz_compute"] > 0 and soap.what_if is None
    text = format_summary(plans["qwen3_30b_a3b_soap"])
    assert "SOAP FLOPs" in text and " SOAP = " in text and "SOAP's matrix products and QR" in text
    assert "optimizer_state" in text and "no SOAP preset for this model" in text
    # Side by side: every plan lists the three matrix optimizers against the same AdamW twin, each from its recipe.
    sides = [{s.optimizer: s for s in plans[r].projection.optimizers} for r in plans]
    assert all(list(side) == ["muon", "adaptive_muon", "soap"] for side in sides)
    change = {name: sides[0][name].tflops_per_gpu_change_percent for name in sides[0]}
    assert all(side[name].tflops_per_gpu_change_percent == change[name] for side in sides for name in side)
    assert change["soap"] < change["adaptive_muon"] < change["muon"] < 0
    assert sides[0]["soap"].recipe == "qwen3_30b_a3b_soap" and sides[2]["soap"].recipe == "this run"
    assert (
        sides[0]["soap"].optimizer_state_gb
        > sides[0]["adaptive_muon"].optimizer_state_gb
        > sides[0]["muon"].optimizer_state_gb
    )
    assert "  optimizers  model TFLOP/s/GPU vs the AdamW twin" in text and "AdaMuon -" in text


def _count_compositions(monkeypatch) -> list[str]:
    """Every composition from here on, by recipe: each module that imported compose_run gets a counting one."""
    import sys

    from optbench.compose import recipe as recipes

    composed, real = [], recipes.compose_run

    def counting(recipe, *args, **kwargs):
        composed.append(recipe)
        return real(recipe, *args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "compose_run", None) is real:
            monkeypatch.setattr(module, "compose_run", counting)
    return composed


@pytest.mark.parametrize("recipe", ["kimi_k2_muon", "qwen3_30b_a3b_muon", "qwen3_30b_a3b_soap"])
def test_a_matrix_optimizer_plan_composes_the_run_and_its_adamw_twin_only(monkeypatch, recipe):
    """The calibration reads results/projection/anchors.json (no anchor composed); the side by side is opt-in
    (COMPARE), one more composition per optimizer named."""
    from optbench.plan import build_plan

    composed = _count_compositions(monkeypatch)
    resolved = validate(compose_run(recipe, []))
    plain = build_plan(resolved, []).projection
    assert composed == [recipe, recipe.rsplit("_", 1)[0].removesuffix("_adaptive") + "_adamw"]
    assert plain.optimizers is None and plain.twin.step.tflops_per_gpu > 0
    assert plain.efficiency.status == "calibrated"
    composed.clear()
    others = tuple(name for name in ALL_MATRIX if name != resolved.run.optimizer.name)
    both = build_plan(resolved, [], compare=others).projection
    assert len(composed) == 1 + len(others)  # the twin again, and one per optimizer named
    assert [s.optimizer for s in both.optimizers] == list(ALL_MATRIX)
    assert both.step.tflops_per_gpu == plain.step.tflops_per_gpu


@pytest.mark.parametrize(
    "compare, says",
    [
        ("lion", "COMPARE: 'lion' is not a matrix optimizer"),
        (
            "soap",
            "COMPARE: projects matrix optimizers beside a matrix-optimizer run's AdamW twin; "
            "qwen3_30b_a3b_adamw trains adamw",
        ),
    ],
)
def test_a_bad_compare_is_one_line(compare, says):
    result = run_cli("plan", "qwen3_30b_a3b_adamw", RESULTS, "--compare", compare)
    assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr


def test_side_by_side_names_why_a_sibling_has_no_number():
    from optbench.plan import build_plan

    typed = [RESULTS, "cluster.container=nemo:26.02"]
    old = {
        s.optimizer: s
        for s in build_plan(
            validate(compose_run("qwen3_30b_a3b_muon", typed)), typed, compare=ALL_MATRIX
        ).projection.optimizers
    }
    assert old["muon"].available and not old["soap"].available and "soap arrives with nemo:26.06" in old["soap"].reason
    kimi = {
        s.optimizer: s
        for s in build_plan(
            validate(compose_run("kimi_k2_muon", [RESULTS])), [], compare=("soap", "adaptive_muon")
        ).projection.optimizers
    }
    assert not kimi["soap"].available and "largest term: optimizer_state" in kimi["soap"].reason
    assert kimi["adaptive_muon"].available and kimi["adaptive_muon"].recipe == "kimi_k2_muon optimizer=adaptive_muon"


def test_the_support_table_is_what_plan_accepts():
    """Every container row of docs/optimizer.md's SOAP/AdaMuon/Lion table against the refusals validation gives."""
    from conftest import REPO
    from optbench.releases import versions

    text = (
        (REPO / "docs" / "optimizer.md")
        .read_text()
        .split("## SOAP, AdaMuon and Lion per container", 1)[1]
        .split("\n## ", 1)[0]
    )
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| nemo:")]
    assert [r[0] for r in rows] == [c.name for c in reversed(versions.runnable())]
    for container, components, adamw, muon, adaptive, soap, lion in rows:
        target = versions.containers()[container]
        assert (
            components
            == f"{target.bridge} / {target.core.removesuffix('rc0')} / {versions.emerging_optimizers(target)}"
        )
        for recipe, extra, cell in (
            ("qwen3_30b_a3b_adamw", [], adamw),
            ("qwen3_30b_a3b_muon", [], muon),
            ("qwen3_30b_a3b_adaptive_muon", [], adaptive),
            ("qwen3_30b_a3b_soap", [], soap),
            ("qwen3_30b_a3b_muon", ["optimizer.scalar_optimizer=lion"], lion),
        ):
            problems = collect_problems(compose_run(recipe, [RESULTS, f"cluster.container={container}", *extra]))
            assert (cell == "yes") == (problems == []), (container, recipe, cell, problems)


@pytest.mark.parametrize("container", ["nemo:26.06", "nemo:26.08"])
@pytest.mark.parametrize("method", ["adamuon", "normuon"])
def test_a_scale_adamuon_divides_out_again_is_refused(container, method):
    """Emerging-Optimizers 0.2.0 applies Muon's scale before the second moment, which divides it out: a typed
    extra_scale_factor would change nothing (the local engine's AdaMuon, the same semantics, shows it below)."""
    run = compose_run(
        "qwen3_30b_a3b_adaptive_muon",
        [
            f"cluster.container={container}",
            "optimizer.muon.extra_scale_factor=0.2",
            f"optimizer.adaptive_muon.moment2_method={method}",
        ],
    )
    [problem] = [p for p in collect_problems(run) if p.field == "optimizer.muon.extra_scale_factor"]
    assert problem.message.startswith(f"changes nothing for AdaMuon with Emerging-Optimizers 0.2.0 ({container})")
    assert not [
        p
        for p in collect_problems(compose_run("qwen3_30b_a3b_adaptive_muon", [f"cluster.container={container}"]))
        if p.field == "optimizer.muon.extra_scale_factor"
    ]


@pytest.mark.parametrize("method", ["adamuon", "normuon"])
def test_adamuon_before_emerging_optimizers_0_3_is_scale_free(method):
    """The reason above, on the local engine's AdaMuon: the same gradients with scale 1 and 0.2 give the same update
    up to eps (and differ once the scale applies after the second moment, as 0.3.0 does). Measured on an AVX512
    machine, 2026-11-28: AdaMuon 0.15 % apart before the second moment against 400 % after it."""
    import torch

    from optbench.optim.adaptive_muon import AdaptiveMuon

    def step(extra: float, after: bool) -> torch.Tensor:
        torch.manual_seed(0)
        weight = torch.nn.Parameter(torch.randn(24, 16))
        weight.grad = torch.randn(24, 16)
        before = weight.detach().clone()
        AdaptiveMuon(
            [weight], lr=0.1, moment2_method=method, extra_scale_factor=extra, scale_after_moment2=after
        ).step()
        return weight.detach() - before

    assert torch.allclose(step(1.0, False), step(0.2, False), rtol=5e-3, atol=1e-6)  # eps and fp32 rounding
    assert not torch.allclose(step(1.0, True), step(0.2, True), rtol=1e-2)


def test_normuon_checkpoints_are_refused_with_the_reason_and_adamuons_taken():
    """NorMuon's reduced second moment cannot pass Core's torch_dist shape assert; AdaMuon's is parameter-shaped."""
    typed = [RESULTS, "train.save_interval=100", "cluster.container=nemo:26.08"]
    problems = collect_problems(
        compose_run("qwen3_30b_a3b_adaptive_muon", [*typed, "optimizer.adaptive_muon.moment2_method=normuon"])
    )
    assert [p.field for p in problems] == ["train.save_interval"] and "make_sharded_optimizer_tensor" in problems[
        0
    ].message
    assert collect_problems(compose_run("qwen3_30b_a3b_adaptive_muon", typed)) == []


def test_a_plan_that_crosses_precision_composes_no_published_pair(monkeypatch):
    """A BF16 Kimi K2 plan has no BF16 anchor: its efficiency crosses from MXFP8 at the BF16/FP8 rate ratio of
    NVIDIA's pairs, read from the rates make projection committed (results/projection/anchors.json), so the plan
    composes the run and its twin, and solves no pair row. The ratio's and the calibration's caches are emptied
    first (the rows' compositions, shared with other tests, are kept), and solving a row live fails the test."""
    from optbench.plan import build_plan
    from optbench.projection import calibration

    for cached in (calibration._calibrate, calibration._precision_ratio):
        cached.cache_clear()

    def solved_live(row, *args):
        raise AssertionError(f"solved {row.label} live")

    monkeypatch.setattr(calibration, "live_rate", solved_live)
    composed = _count_compositions(monkeypatch)
    typed = ["precision=bf16"]
    projection = build_plan(validate(compose_run("kimi_k2_muon", typed)), typed).projection
    assert composed == ["kimi_k2_muon", "kimi_k2_adamw"]
    ratio = projection.efficiency.precision_ratio
    assert len(ratio.pairs) == 2 and 0.5 < ratio.value < 1
