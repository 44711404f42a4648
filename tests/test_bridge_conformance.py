"""Our Bridge path against the real Megatron Bridge and Core of every NeMo container (tests/bridge_env/).

tests/bridge_env/conformance.py runs with each container's real Bridge + Core (``make bridge-env`` builds them:
src/optbench/engine/bridge/cpu_check/environments.py) and reports, for every cluster recipe and both intents composed
for that container: the overrides that did not land, the outcome of Bridge's ``runtime_config_update``, which optimizer
the built config holds, every effective field that differs from NVIDIA's executed preset of that release (with the
documented reason, or none), and the metrics callback driven through Bridge's CallbackManager, GlobalState and
Megatron's Timers; plus two negative controls. This file asserts on those reports. Each container's tests run on
one worker (``xdist_group``), and its report is computed once per session (:func:`report_of`).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

import pytest

from bridge_env.conformance_recipes import RECIPES
from optbench.releases import versions
from optbench.releases.presets import LAYER_WISE_MUON, OURS

ROOT = Path(__file__).resolve().parents[1]
from optbench.engine.bridge.cpu_check.environments import NEXT, TRANSFORMERS, Target, targets  # noqa: E402

REPORT_TIMEOUT_S = 1500
"""How long one container's conformance report may take: about 3 min alone on 2 cores, 7+ beside other work (443 s
seen for the search report). The first test that needs a report computes it inside its own time limit, so every
test of the module gets this limit plus a margin (pyproject's 300 s default killed them on a busy machine)."""
pytestmark = (
    pytest.mark.slow
)  # runs the real Megatron Bridge of every container in its own environment; `make test-fast` skips it
pytestmark = [pytestmark, pytest.mark.timeout(REPORT_TIMEOUT_S + 120)]

TARGETS = targets()
_reports: dict[str, dict] = {}


def per_target(*marks):
    """Parametrize over every target, each on one xdist worker."""
    return pytest.mark.parametrize(
        "target",
        [pytest.param(t, id=t.name, marks=[pytest.mark.xdist_group(f"bridge-{t.name}"), *marks]) for t in TARGETS],
    )


def _session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every xdist worker of this session shares (pytest-N; a worker's own base is pytest-N/popen-gwK)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


DEFAULT = next(t for t in TARGETS if t.name == versions.runnable()[0].name)
"""The default container: the layouts its ``make search`` tries go through its Bridge, in a report of its own on
its own worker (every release's, 1,099 kept layouts over five releases, was run once by hand: docs/projection.md
section 8)."""

CI_SEARCH_STRIDE = 3
"""Every third distinct layout of each searched recipe (in the search's order, so every TP, PP, VPP, CP and EP the
search tries still appears: checked for stride 2 to 4 on 2026-11-29) goes through the default container's Bridge in
CI: about 200 layouts, some 130 of them Bridge builds, 1.5 minutes on 2 cores. All of them (stride 1, about 590
layouts) passed on 2026-11-29; run ``tests/bridge_env/conformance.py --search-only --stride 1`` after changing a
layout rule. (Stride 2 until 2026-11-29: CI on a fresh clone took 29-31 minutes, over its 30-minute budget.)"""

CI_PAIRS = 40
"""Pairs of single-field overrides per recipe CI sends through the default container's Bridge (about a minute: a
composition and a Bridge build each, about half a second apiece; seed 0 draws the first 40 of the 75 CI drew until
2026-11-29); the sweeps that found the pair rules drew 1,500 per recipe and release by hand (docs/cluster.md), and
CI's 150, then 75, found none since."""


def report_of(target: Target, tmp_path_factory: pytest.TempPathFactory, only: str = "") -> dict:
    """The target's report, computed once per session: ``--dist loadgroup`` keeps a group's tests on one worker (it
    silently spread them with pytest 9.2, hence the pin in pyproject.toml), and any other distribution can hand them
    to two, so the first one computes under a lock and the others read its file. ``only``: "search", the report of
    every ``make search`` layout alone; "overrides", that of every single-field override; "pairs", that of a fixed
    sample of pairs of them (:data:`CI_PAIRS` per recipe, seed 0); "job", the job's own check before step 1."""
    key = f"{target.name}{'-' + only if only else ''}"
    if key not in _reports:
        if not target.installed:
            pytest.fail(f"the Bridge environment of {target.name} is missing: run `make setup` (or `make bridge-env`)")
        out = _session_folder(tmp_path_factory) / f"conformance-{key.replace(':', '_')}.json"
        search = {
            "": [],
            "search": ["--search-only", "--stride", str(CI_SEARCH_STRIDE)],
            "overrides": ["--overrides-only"],
            "pairs": ["--overrides-only", "--pairs", str(CI_PAIRS), "--seed", "0"],
            "job": ["--job-check-only"],
        }[only]
        with open(out.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not out.is_file():
                partial = out.with_suffix(".partial")
                done = subprocess.run(
                    [
                        str(target.python),
                        str(ROOT / "tests" / "bridge_env" / "conformance.py"),
                        "--container",
                        target.container,
                        *search,
                        "--out",
                        str(partial),
                    ],
                    capture_output=True,
                    text=True,
                    timeout=REPORT_TIMEOUT_S,
                    cwd=ROOT,
                    env=target.environment(),
                )
                assert done.returncode == 0, done.stderr[-3000:]
                partial.replace(out)
        _reports[key] = json.loads(out.read_text())
    return _reports[key]


def case(report: dict, recipe: str, intent: str) -> dict:
    found = [c for c in report["cases"] if c["recipe"] == recipe and c["intent"] == intent]
    assert len(found) == 1
    assert "error" not in found[0], found[0].get("traceback")
    return found[0]


@per_target()
def test_the_containers_real_bridge_and_core_were_used(target: Target, tmp_path_factory) -> None:
    versions = report_of(target, tmp_path_factory)["versions"]
    assert (versions["megatron-bridge"], versions["megatron-core"]) == (target.bridge, target.core)
    assert versions["transformers"] == (TRANSFORMERS[target.line] or "4.57.6")


@per_target()
@pytest.mark.parametrize("intent", ["reproduce", "train"])
def test_every_override_lands_runtime_config_update_passes_and_the_optimizer_is_the_recipes(
    target: Target, intent: str, tmp_path_factory
) -> None:
    report = report_of(target, tmp_path_factory)
    for recipe in RECIPES:
        c = case(report, recipe, intent)
        assert c["missing"] == [] and c["runtime_config_update"] == "ok" and c["overrides"] > 70, recipe
        optimizer = c["optimizer"]
        if recipe.endswith("_adamw"):  # a real Adam run, whatever the recipe function defaults to (Bridge 0.6: Muon)
            assert optimizer["optimizer.optimizer"] == "adam" and optimizer["ddp.use_distributed_optimizer"], recipe
        else:  # Megatron's Muon refuses the element-wise distributed optimizer
            assert "muon" in optimizer["optimizer.optimizer"] and not optimizer["ddp.use_distributed_optimizer"], recipe


@per_target()
def test_the_plan_names_the_call_and_the_hub_config_the_real_recipe_uses(target: Target, tmp_path_factory) -> None:
    """Read from each release's source (tools/bridge_versions.py markers), checked against its real function: Bridge
    0.6's Kimi K2 takes no optimizer_type (the 26.08 TypeError) and Kimi reads moonshotai/Kimi-K2-Instruct from 0.4."""
    report = report_of(target, tmp_path_factory)
    for recipe in RECIPES:
        for intent in ("reproduce", "train"):
            call = case(report, recipe, intent)["recipe_call"]
            assert call["planned"] == call["accepted"], recipe
            assert call["read_hub"] == ([call["planned_hub"]] if call["planned_hub"] else []), recipe


@per_target()
@pytest.mark.parametrize("intent", ["reproduce", "train"])
def test_effective_config_differs_from_nvidias_executed_preset_only_by_documented_fields(
    target: Target, intent: str, tmp_path_factory
) -> None:
    if target.name == NEXT["name"]:
        pytest.skip(
            f"Bridge {target.bridge}: {NEXT['why']}; its scripts are not in that data either, so there is no "
            "executed preset of it (its library defaults already differ from 0.6.0's)"
        )
    report = report_of(target, tmp_path_factory)
    compared = [case(report, recipe, intent) for recipe in RECIPES if "differences" in case(report, recipe, intent)]
    if not compared:
        pytest.skip(f"no executed NVIDIA preset of Bridge {case(report, RECIPES[0], intent)['preset_release']} yet")
    for c in compared:
        unexplained = [d for d in c["differences"] if not d["reason"]]
        assert unexplained == [], (c["recipe"], unexplained[:5])
        fields = {d["field"] for d in c["differences"]}
        if intent == "reproduce" and not c["adapted_from_adam"]:
            # NVIDIA's own preset: only paths, logging, run length, what Bridge derives from the run length, and
            # Core >= 0.18's spelling of NVIDIA's dist_muon.
            allowed = set(OURS) | {"scheduler.lr_decay_steps", "scheduler.wd_incr_steps"} | set(LAYER_WISE_MUON)
            assert fields <= allowed, (c["recipe"], fields - allowed)
            assert "model.moe_router_force_load_balancing" not in fields and "logger.timing_log_level" not in fields
        if intent == "train":
            assert {"model.moe_router_force_load_balancing", "ddp.check_for_nan_in_grad"} <= fields
            assert fields & {"train.eval_iters", "validation.eval_iters"}  # Bridge >= 0.4 keeps eval in validation
        if c["preset_release"] == "0.3.1":  # the recipes' reference release: every documented departure is there
            from optbench.compose.recipe import compose_run

            documented = set(compose_run(c["recipe"]).preset_departures)
            assert fields & documented == documented


@per_target()
@pytest.mark.parametrize("intent", ["reproduce", "train"])
def test_metrics_callback_runs_on_bridges_own_objects(target: Target, intent: str, tmp_path_factory) -> None:
    report = report_of(target, tmp_path_factory)
    for recipe in RECIPES:
        cb = case(report, recipe, intent)["callback"]
        assert cb["records"] == 3 and cb["summary"] and cb["syncs"] == 4, (
            recipe
        )  # start + one per step at log_interval 1
        if intent == "reproduce":  # the preset's timing level 0: Megatron times no optimizer step, we invent none
            assert cb["timing_log_level"] == 0 and cb["optimizer_time_s"] == [None, None, None], recipe
        else:  # level 1: Bridge's optimizer timer (created by Bridge, read by us) measured the 2 ms step
            assert cb["timing_log_level"] == 1 and all(0.0015 < t < 0.5 for t in cb["optimizer_time_s"]), recipe


@per_target()
def test_the_callback_never_creates_megatrons_optimizer_timer(target: Target, tmp_path_factory) -> None:
    """At timing level 2 a timer created by a callback collides with Bridge's log_level=1 creation; ours is looked
    up."""
    levels = report_of(target, tmp_path_factory)["timer_levels"]
    assert levels["ours"] == "ok"
    assert "does not match already existing log level" in levels["timers_call"]  # the control fails


@per_target()
def test_soap_and_adaptive_muon_land_where_core_has_them_and_are_refused_where_it_would_train_muon(
    target: Target, tmp_path_factory
) -> None:
    """Core >= 0.18 (nemo:26.06+) builds SOAP and AdaMuon from our fields (read back through Megatron's own
    ``_kwargs_from_config``); before, Bridge would train Muon under either name: the plan refuses, naming nemo:26.06.
    Lion for the scalars: only where Core routes muon_scalar_optimizer and ships Emerging-Optimizers >= 0.2."""
    cases = {c["recipe"]: c for c in report_of(target, tmp_path_factory)["emerging"]}
    core = tuple(int(x) for x in target.core.split(".")[:2])
    soap, adaptive = cases["qwen3_30b_a3b_soap"], cases["qwen3_30b_a3b_adaptive_muon"]
    assert soap["supported"] == (core >= (0, 18)) and adaptive["supported"] == (core >= (0, 19))
    for case in (soap, adaptive):
        if not case["supported"]:
            assert case["refusal"] and len(case["refusal"].splitlines()) == 1, case
            assert "arrives with nemo:26.06" in case["refusal"] or "arrives with nemo:26.08" in case["refusal"], case
            continue
        for intent in ("reproduce", "train"):
            c = case[intent]
            assert "error" not in c, c.get("traceback")
            assert c["missing"] == [] and c["runtime_config_update"] == "ok", case["recipe"]
            assert not c["optimizer"]["ddp.use_distributed_optimizer"], case["recipe"]
            assert [d for d in c.get("differences", []) if not d["reason"]] == [], case["recipe"]
    if soap["supported"]:
        for intent in ("reproduce", "train"):
            c = soap[intent]
            assert c["optimizer"]["optimizer.optimizer"] == "soap"
            assert c["constructor"]["shampoo_beta"] == 0.95 and c["constructor"]["use_kl_shampoo"] is True
    if adaptive["supported"]:
        for intent in ("reproduce", "train"):
            c = adaptive[intent]
            assert c["optimizer"]["optimizer.optimizer"] == "adaptive_muon" and c["scalar_optimizer"] == "lion"
            assert {k: c["constructor"][k] for k in ("moment2_method", "beta2", "eps")} == {
                "moment2_method": "adamuon",
                "beta2": 0.95,
                "eps": 1e-8,
            }
            assert c["lion_betas"] == [0.95, 0.98]
    elif core >= (0, 18):  # 26.06: AdaMuon is there, Lion for the scalars is not
        assert "optimizer.scalar_optimizer" in adaptive["refusal"] and "nemo:26.08" in adaptive["refusal"]


@pytest.mark.xdist_group(f"bridge-search-{DEFAULT.name}")
def test_the_default_containers_search_keeps_exactly_the_layouts_bridge_accepts(tmp_path_factory) -> None:
    """Every layout ``make search`` ranks on the default container (valid by our checks, fitting in memory) is one
    its Bridge and Core accept: built from its recipe with our overrides, through ``runtime_config_update`` at the
    search's GPU count; and every one our checks refuse, Bridge or Core refuse too (our adapter never decides it),
    in the config or, for a rule Core asserts only when it builds the model, counted apart (that assertion's text is
    checked in the installed Core by the test below)."""
    for c in report_of(DEFAULT, tmp_path_factory, only="search")["search_layouts"]:
        assert c["bridge_refused"] == [], (c["recipe"], c["bridge_refused"][:3])
        assert c["bridge_accepted_what_we_refuse"] == [], (c["recipe"], c["bridge_accepted_what_we_refuse"][:3])
        assert c["bridge_refused_what_we_refuse"] + c["refused_when_the_model_is_built"] == c["we_refuse"]
        assert c["checked"] >= 20 // CI_SEARCH_STRIDE, c  # every model has some 25-120 such layouts


@pytest.mark.xdist_group(f"bridge-overrides-{DEFAULT.name}")
def test_every_single_field_override_we_accept_the_default_containers_bridge_accepts(tmp_path_factory) -> None:
    """A user's own value, one field at a time (every other word of an enumeration, the other boolean, half a real,
    ...: conformance.single_field_overrides), on the Qwen3 and Kimi K2 recipes: each one our checks pass, the default
    container's Bridge builds and updates, except the documented gaps (conformance.KNOWN_GAPS). Its first run
    (2026-11-26) found seven: a changed train.seq_length was lost on Bridge 0.6 (dataset.seq_length), the expert bias
    with softmax, moe recomputed without a typed granularity under the EP overlap, a per-layer graph scope under
    full-iteration graphs, an FP4 Bridge preset under FP8, DeepEP on GB300, and the local graph implementation; run by
    hand on the other releases, three per-layer scope rules more (docs/cluster.md). The AdamW recipe joined after the
    pairwise sweep (conformance.py --pairs) found its FP8 parameter gather turned off alone refused by Core."""
    for c in report_of(DEFAULT, tmp_path_factory, only="overrides")["typed_overrides"]:
        refused = {r["override"]: r["error"] for r in c["bridge_refused"]}
        assert sorted(refused) == sorted(c["known_gaps"]), (c["recipe"], refused)
        assert c["checked"] >= 70, c  # 79 to 104 on 26.08: AdamW has no Muon section


@pytest.mark.xdist_group(f"bridge-pairs-{DEFAULT.name}")
def test_a_fixed_sample_of_override_pairs_we_accept_the_default_containers_bridge_accepts(tmp_path_factory) -> None:
    """Two of a user's values at once: a fixed sample of pairs of the single-field overrides above (conformance.py
    --pairs, seed 0), each pair our checks pass built and updated by the default container's Bridge. Larger random
    samples run by hand found the two-field rules of releases/precision_rules.py, graph_rules.py and moe_rules.py; this
    one keeps a later change from silently losing one of them."""
    for c in report_of(DEFAULT, tmp_path_factory, only="pairs")["typed_overrides"]:
        refused = {r["override"]: r["error"] for r in c["bridge_refused"]}
        assert refused == {}, (c["recipe"], refused)
        assert c["checked"] >= CI_PAIRS // 3, c  # about half of the pairs pass our checks


@per_target()
def test_negative_controls_are_caught_by_bridge(target: Target, tmp_path_factory) -> None:
    controls = report_of(target, tmp_path_factory)["negative_controls"]
    assert (
        controls["misspelled_key"]["caught"] and "moe_router_force_load_balancng" in controls["misspelled_key"]["error"]
    )
    assert (
        controls["impossible_layout"]["caught"]
        and "pipeline_model_parallel_layout" in controls["impossible_layout"]["error"]
    )


def first_last_bf16_presets(source: Path) -> set[str]:
    """Which of the mixed-precision presets our config offers set ``first_last_layers_bf16 = True`` in that file."""
    import ast

    from optbench.config.field_spec import BRIDGE_MIXED_PRECISION_PRESETS

    text = source.read_text()
    return {
        f.name
        for f in ast.parse(text).body
        if isinstance(f, ast.FunctionDef)
        and f.name in BRIDGE_MIXED_PRECISION_PRESETS
        and "first_last_layers_bf16 = True" in (ast.get_source_segment(text, f) or "")
    }


@pytest.mark.parametrize("target", [t for t in TARGETS if t.name != NEXT["name"]], ids=lambda t: t.name)
def test_moe_graph_and_precision_rules_match_the_installed_bridge_and_core(target: Target) -> None:
    """The MoE, CUDA-graph, recompute and FP8 rules make plan checks (releases/moe_rules.py, graph_rules.py,
    precision_rules.py): the release-dependent ones are read from each Bridge tag (and its pinned Core) by
    tools/bridge_versions.py, and the Bridge and Core the container ships, installed here, assert the same; the
    every-release ones are asserted by every installed release."""
    from optbench.releases.graph_rules import FULL_ITERATION, LOCAL_FULL_ITERATION_ONLY
    from optbench.releases.moe_rules import (
        ANY_BACKEND,
        DEEPEP,
        MOE_RECOMPUTE,
        OVERLAP_GRAPHS_TE_ONLY,
        OVERLAP_MTP_NEEDS_PP,
        RANK_CAPACITY,
    )
    from optbench.releases.precision_rules import FIRST_LAST_BF16_PRESETS
    from optbench.releases import versions

    root = target.overlay or next((target.python.parents[1] / "lib").glob("python3*/site-packages"))
    core = root / "megatron" / "core" / "transformer" / "moe" / "token_dispatcher.py"
    bridge = root / "megatron" / "bridge" / "training" / "comm_overlap.py"
    if not (core.exists() and bridge.exists()):
        pytest.skip(f"Megatron Bridge {target.bridge} / Core {target.core} are not installed (make bridge-env)")
    text = core.read_text()
    container = versions.containers()[target.container]
    assert versions.behaviour(container, ANY_BACKEND) == ("Flex token dispatcher requires TPxEP > 1" in text)
    assert versions.behaviour(container, DEEPEP) == ("DeepEP dispatcher requires TPxEP > 1" in text)
    config = (core.parents[1] / "transformer_config.py").read_text()
    assert versions.behaviour(container, MOE_RECOMPUTE) == (
        "disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm" in config
    )
    assert versions.behaviour(container, FULL_ITERATION) == ('cuda_graph_impl == "full_iteration"' in config)
    ddp = (core.parents[2] / "distributed" / "distributed_data_parallel_config.py").read_text()
    assert "Reuse grad buffer only when keeping params in MXFP8." in ddp, target.core
    assert versions.behaviour(container, OVERLAP_MTP_NEEDS_PP) == (
        "when enabling overlap_moe_expert_parallel_comm with MTP layer" in config
    )
    assert versions.behaviour(container, OVERLAP_GRAPHS_TE_ONLY) == (
        "and CudaGraphScope.moe not in self.cuda_graph_scope" in config
    )
    assert "CUDA graph scope on moe and mlp is not" in config, target.core
    assert versions.behaviour(container, RANK_CAPACITY) == (
        "moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend" in config
    )
    assert "Delayed scaling does not support first / last layer in BF16." in config, target.core
    assert "mla_up_proj in recompute_modules is only supported with" in config, target.core
    assert "Delayed scaling does not support moe_act and layernorm recompute" in config, target.core
    assert ("fp8_output_proj requires fp8_recipe='mxfp8'" in config) == versions.has_field(
        container, "model.fp8_output_proj"
    )
    from optbench.validate.optimizer import MUON_REFUSES_DIST_OPTIMIZER

    optimizers = " ".join(path.read_text() for path in (core.parents[2] / "optimizer").glob("*.py"))
    assert versions.behaviour(container, MUON_REFUSES_DIST_OPTIMIZER) == (
        "muon with dist optimizer is not supported" in optimizers
    )
    parallel = (core.parents[2] / "model_parallel_config.py").read_text()
    assert "Cannot use sequence parallelism without tensor parallelism" in parallel, target.core
    optimizer = (core.parents[2] / "optimizer" / "optimizer_config.py").read_text()
    assert "--use-precision-aware-optimizer only supported with distributed optimizer" in optimizer, target.core
    training = root / "megatron" / "bridge" / "training"
    assert first_last_bf16_presets(training / "mixed_precision.py") == set(FIRST_LAST_BF16_PRESETS), target.bridge
    assert any(
        "reuse_grad_buf_for_mxfp8_param_ag must be set to True" in (training / name).read_text()
        for name in ("config.py", "mixed_precision.py")
    ), target.bridge
    graphs = root / "megatron" / "bridge" / "utils" / "cuda_graph.py"
    assert versions.behaviour(container, LOCAL_FULL_ITERATION_ONLY) == (
        graphs.exists() and 'cuda_graph_impl="local" only for' in graphs.read_text()
    )
    for asserted in (
        "full recompute is only supported with full iteration CUDA graph",
        "moe recompute is not supported with moe_router CUDA graph",
    ):
        assert asserted in config, (target.core, asserted)
    overlap = " ".join(bridge.read_text().split())
    for asserted in (
        "overlap_moe_expert_parallel_comm is only supported when expert_model_parallel_size > 1",
        "must be specified when pipeline_model_parallel_size > 1",
        "disable full recomputation when enabling overlap_moe_expert_parallel_comm",
        "recompute_num_layers must be None when enabling overlap_moe_expert_parallel_comm",
    ):
        assert asserted in overlap, (target.bridge, asserted)


UNSEEN = next(t for t in TARGETS if t.name == NEXT["name"])
"""A Bridge no container we checked ships (0.6.2 with Core 0.19.2): it stands in for an unseen release."""


@pytest.mark.xdist_group(f"bridge-{UNSEEN.name}")
def test_the_unseen_release_stand_in_runs_the_jobs_check_and_stops_on_a_removed_field(tmp_path_factory) -> None:
    """Issue 80 item 2: a plan of an unverified container (the fixture's), run in an environment whose Bridge and Core
    differ from the ones it assumed; the job's check writes conformance.json and trains; with a field the plan sets
    removed from the recipe's config, it stops in one line naming it, and nothing trains."""
    report = report_of(UNSEEN, tmp_path_factory, only="job")["job_check"]
    fixture = report["fixture"]
    ran, removed = report["as_installed"], report["field_removed"]
    assert ran["returned"] == 0 and ran["trained"] is True
    found = ran["conformance"]
    assert found["status"] == "ok" and found["unverified"] is True and found["container"] == fixture["unseen_container"]
    assert found["installed_versions"]["bridge"] == NEXT["bridge"] != found["planned_versions"]["bridge"]
    assert "bridge" in found["versions_differ"] and found["fields_checked"] > 100
    assert found["optimizer"] == {"planned": "muon", "built": "muon"}
    assert removed["trained"] is False and len(removed["error_lines"]) == 1
    assert f"has no field {fixture['field']}, which the plan sets" in removed["error_lines"][0]
    assert removed["conformance"]["status"] == "stopped"
    assert [m["field"] for m in removed["conformance"]["missing_fields"]] == [fixture["field"]]
    # NVIDIA's preset of the same setup: no perf scripts here, then the stand-in of their interface
    assert found["nvidia_preset"]["status"] == "no perf scripts in this container"
    rebuilt = report["nvidia_scripts"]
    assert rebuilt["trained"] is True and rebuilt["conformance"]["status"] == "ok"
    nvidia = rebuilt["conformance"]["nvidia_preset"]
    assert nvidia["status"] == "rebuilt" and nvidia["case"][:6] == [
        "-m",
        "kimi",
        "--model_recipe_name",
        "kimi_k2",
        "-g",
        "gb300",
    ]
    assert nvidia["case"][-2:] == ["--optimizer_type", "muon"] and nvidia["fields_compared"] == found["fields_checked"]
    iters = next(d for d in nvidia["differs"] if d["field"] == "train.train_iters")
    assert iters["nvidia"] == 50 and "reason" in iters  # a documented departure: ours run train.iters
