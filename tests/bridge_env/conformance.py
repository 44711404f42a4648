"""Our Bridge path against the real Megatron Bridge 0.3.1, on a CPU: one JSON report for every cluster recipe.

Run with the Bridge environment's interpreter (``.venv-bridge/bin/python tests/bridge_env/conformance.py``);
``tests/test_bridge_conformance.py`` runs it and asserts on the report. For every cluster recipe and both
intents it:

1. composes and validates our run, and builds the ConfigContainer exactly as the job's entry point does
   (``optbench.engine.bridge.entry.build_config_container`` with the real ``BridgeAPI``: the real recipe function,
   the mixed-precision preset, Bridge's own ``process_config_with_overrides``);
2. reads every override back from the container (``missing``: a key that does not exist or a value that
   did not land);
3. runs Bridge's ``runtime_config_update`` with the plan's world size (mixed precision, comm overlap,
   ``ConfigContainer.validate``, Megatron Core's ``TransformerConfig.__post_init__``, layout checks);
4. compares the effective config field by field with NVIDIA's (tests/fixtures/nvidia/<preset>/effective.json,
   written by tools/nvidia_presets.py from NVIDIA's own scripts);
5. drives ``MetricsCallback`` through Bridge's real ``CallbackManager``, ``GlobalState`` and Megatron's
   ``Timers`` for a few steps, creating the optimizer timer as Bridge's train step does;

and runs two negative controls (a misspelled override key, an impossible pipeline layout).

``--job-check-only`` runs the job's own check instead (``entry.run_bridge`` with its conformance step, training
replaced by a record): this environment stands in for a release we never checked, planned as the fixture's
unverified container, once as it is and once with the fixture's field removed from the recipe's config.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tools"))  # nvidia_presets.flat_config: the same flattening as NVIDIA's fixtures

from optbench.engine.bridge.cpu_check import stand_ins  # noqa: E402  (before anything imports Bridge or Megatron Core)
from optbench.engine.bridge.readback import comparable, lookup, read_back  # noqa: E402
from optbench.engine.bridge.nvidia_preset import SCRIPTS_VARIABLE  # noqa: E402
from optbench.engine.bridge.cpu_check.runtime import update_at  # noqa: E402
from conformance_recipes import RECIPES, as_nvidia_ran_it  # noqa: E402  (beside this script, which runs by path)

INTENTS = ("reproduce", "train")
OPTIMIZER_IDENTITY = ("optimizer.optimizer", "ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer")
"""What makes a run Adam or Muon after Bridge's runtime update (Bridge 0.6's Kimi recipe is Muon unless overridden)."""
FIXTURES = ROOT / "tests" / "fixtures" / "nvidia"
REMOVED_FIELD = ROOT / "tests" / "fixtures" / "conformance" / "removed_field.json"
STUB = ROOT / "tests" / "fixtures" / "conformance" / "nvidia_scripts"
"""A stand-in of the interface of NVIDIA's perf scripts the job's check calls (its README says what it does)."""


def flat(config: Any) -> dict[str, Any]:
    from nvidia_presets import flat_config

    return flat_config(config)


def compare(ours: dict[str, Any], nvidia: dict[str, Any]) -> list[dict[str, Any]]:
    from optbench.releases.presets import normalised

    out = []
    for key in sorted(set(ours) | set(nvidia)):
        a, b = ours.get(key, "<absent>"), nvidia.get(key, "<absent>")
        if normalised(a) != normalised(b):
            out.append({"field": key, "ours": a, "nvidia": b})
    return out


class CpuProbe:
    """The callback's device calls on a CPU (Bridge's objects around it are real)."""

    def __init__(self) -> None:
        self.syncs = 0

    def rank_and_world(self):
        return 0, 1

    def synchronize(self):
        self.syncs += 1

    def peak_memory_gb(self):
        return 0.0

    def max_over_ranks(self, value):
        return value

    def device_name(self):
        return "cpu (conformance test)"


def timer_levels() -> dict[str, Any]:
    """At timing level 2, reading the optimizer timer the old way (``timers("optimizer")`` before Bridge creates it)
    makes Bridge's own ``timers("optimizer", log_level=1)`` fail Megatron's level check; our lookup does not."""
    from megatron.core.timers import Timers

    from optbench.engine.bridge.callback import optimizer_seconds

    out = {}
    for name, read in (("ours", optimizer_seconds), ("timers_call", lambda timers: timers("optimizer"))):
        timers = Timers(2, "minmax")
        read(timers)  # on_train_start, before Bridge's first train step
        try:
            timers("optimizer", log_level=1)  # Bridge's train_step
            out[name] = "ok"
        except AssertionError as err:
            out[name] = f"AssertionError: {err}"
    return out


def drive_callback(run: Any, config: Any, steps: int = 3) -> dict[str, Any]:
    """Bridge's event sequence for a few steps with its real CallbackManager, GlobalState and Timers."""
    import torch
    from megatron.bridge.training.callbacks import CallbackContext, CallbackManager
    from megatron.bridge.training.state import GlobalState

    from optbench.engine.bridge.callback import MetricsCallback
    from optbench.runs import run_dir

    state = GlobalState()
    state.cfg = config
    manager = CallbackManager()
    probe = CpuProbe()
    callback = MetricsCallback(run, probe=probe)
    callback.register(manager)
    optimizer = SimpleNamespace(param_groups=[{"lr": 3e-4, "is_decoupled_lr": False}])

    def context(**extra: Any) -> Any:
        return CallbackContext(state=state, model=[], optimizer=optimizer, **extra)

    manager.fire("on_train_start", context())
    for _ in range(steps):
        timer = state.timers("optimizer", log_level=1)  # as Bridge's train_step creates it
        timer.start()
        time.sleep(0.002)
        timer.stop()
        manager.fire(
            "on_train_step_end", context(loss_dict={"lm loss": torch.tensor(2.0)}, grad_norm=1.0, skipped_iter=False)
        )
        state.train_state.step += 1
    manager.fire("on_train_end", context())
    folder = run_dir(run)
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return {
        "timing_log_level": config.logger.timing_log_level,
        "records": len(records),
        "optimizer_time_s": [r["optimizer_time_s"] for r in records],
        "syncs": probe.syncs,
        "summary": (folder / "summary.json").is_file(),
    }


@contextlib.contextmanager
def hub_configs_read() -> Iterator[list[str]]:
    """The Hugging Face model ids whose config the code inside reads (transformers' AutoConfig, as Bridge does)."""
    import transformers

    seen: list[str] = []
    original = transformers.AutoConfig.from_pretrained.__func__

    def recording(cls, name, *args, **kwargs):
        seen.append(str(name))
        return original(cls, name, *args, **kwargs)

    transformers.AutoConfig.from_pretrained = classmethod(recording)
    try:
        yield seen
    finally:
        transformers.AutoConfig.from_pretrained = classmethod(original)


def check_case(recipe: str, intent: str, results: Path, container: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    from optbench.releases import presets
    from optbench.engine.bridge.adapter import bridge_setup, override_items
    from optbench.engine.bridge.entry import BridgeAPI, accepted_kwargs, build_config_container
    from optbench.compose.recipe import compose_run
    from optbench.validate import validate

    run = compose_run(
        recipe,
        [
            f"intent={intent}",
            f"results_dir={results}",
            f"run_id={recipe}-{intent}",
            f"cluster.container={container}",
            *as_nvidia_ran_it(recipe, container),
            *extra,
        ],
    )
    run = validate(run).run
    stand_ins.install(run.cluster.gpu)
    setup = bridge_setup(run)
    api = BridgeAPI()
    function = api.recipe_function(setup.recipe)
    with hub_configs_read() as hub:
        config = build_config_container(setup, api)
    report: dict[str, Any] = {
        "recipe": recipe,
        "intent": intent,
        "preset": setup.preset and setup.preset["key"],
        "adapted_from_adam": bool(setup.preset and setup.preset["adapted_from_adam"]),
        "overrides": len(setup.overrides),
    }
    # What the plan says the job calls and reads (from the release's source) against the real function.
    report["recipe_call"] = {
        "planned": setup.recipe.kwargs,
        "accepted": accepted_kwargs(function, setup.recipe.kwargs),
        "planned_hub": setup.recipe.hf_config,
        "read_hub": sorted(set(hub)),
    }
    report["missing"] = read_back(config, override_items(run))
    update_at(config, run.parallel.num_gpus)
    report["optimizer"] = {key: comparable(lookup(config, key)) for key in OPTIMIZER_IDENTITY}
    report["runtime_config_update"] = "ok"
    report["preset_release"] = presets.release_of(run)
    fixture = FIXTURES / report["preset_release"] / str(report["preset"]).replace("/", "__") / "effective.json"
    if fixture.is_file():
        differences = compare(flat(config), json.loads(fixture.read_text()))
        for d in differences:
            d["reason"] = (
                presets.OURS.get(d["field"])
                or presets.departure_reasons(run).get(d["field"])
                or presets.derived_reason(d["field"], intent, report["adapted_from_adam"])
            )
        report["differences"] = differences
    report["callback"] = drive_callback(run, config)
    if extra or run.optimizer.name in EMERGING_CLASSES:
        report["_config"] = config  # the caller reads the built optimizer config, then drops it
    return report


EMERGING = {
    "qwen3_30b_a3b_soap": ("soap", ()),
    "qwen3_30b_a3b_adaptive_muon": ("adaptive_muon", ("optimizer.scalar_optimizer=lion",)),
}
"""Recipes of Megatron Core's emerging optimizers (>= 0.18), with the overrides each is checked with."""
EMERGING_CLASSES = {
    "soap": ("soap", "emerging_optimizers.soap", "SOAP"),
    "adaptive_muon": ("adaptive_muon", "megatron.core.optimizer.emerging_optimizers", "TensorParallelAdaptiveMuon"),
}
"""Optimizer -> (Megatron's kwargs prefix, module, class) whose constructor Megatron fills from OptimizerConfig."""


def constructor_kwargs(config: Any, optimizer: str) -> dict[str, Any]:
    """What Megatron Core's emerging-optimizer registry passes to the optimizer's constructor, read with its own
    ``_kwargs_from_config`` from the config Bridge built (the containers' Emerging-Optimizers is replaced by 0.3.0)."""
    import importlib

    from megatron.core.optimizer.emerging_optimizers import _kwargs_from_config

    prefix, module, name = EMERGING_CLASSES[optimizer]
    kwargs = _kwargs_from_config(getattr(importlib.import_module(module), name), prefix, config.optimizer)
    return {key: comparable(value) for key, value in kwargs.items()}


def emerging_cases(results: Path, container: str) -> list[dict[str, Any]]:
    """SOAP and AdaMuon (with Lion for the scalars): their fields land where Core has them; elsewhere the plan is a
    one-line refusal naming the first container that has them."""
    from optbench.releases.emerging_fields import has_optimizer, runs_lion_for_scalars
    from optbench.compose.recipe import compose_run
    from optbench.common.errors import UserError
    from optbench.releases import versions
    from optbench.validate import validate

    cases = []
    for recipe, (optimizer, extra) in EMERGING.items():
        run = compose_run(recipe, [f"results_dir={results}", f"cluster.container={container}", *extra])
        target = versions.container_of(run)
        supported = has_optimizer(target, optimizer) and (
            "optimizer.scalar_optimizer=lion" not in extra or runs_lion_for_scalars(target)
        )
        case: dict[str, Any] = {"recipe": recipe, "extra": list(extra), "supported": supported}
        if not supported:
            try:
                validate(run)
                case["refusal"] = None
            except UserError as err:
                case["refusal"] = str(err)
            cases.append(case)
            continue
        for intent in INTENTS:
            try:
                report = check_case(recipe, intent, results, container, extra)
                config = report.pop("_config")
                report["constructor"] = constructor_kwargs(config, optimizer)
                report["scalar_optimizer"] = comparable(lookup(config, "optimizer.muon_scalar_optimizer"))
                report["lion_betas"] = [comparable(lookup(config, f"optimizer.lion_beta{i}")) for i in (1, 2)]
                case[intent] = report
            except Exception as err:
                case[intent] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-2000:]}
        cases.append(case)
    return cases


SEARCH_RECIPES = ("kimi_k2_muon", "deepseek_v3_muon", "qwen3_30b_a3b_muon")
"""Whose ``make search`` layouts go through Bridge (the AdamW recipes search the same layouts)."""


BUILD_TIME = "asserts so when the model is built"
"""How our refusal of a rule Core asserts only when it builds the model (the flex dispatcher on one expert rank,
releases/moe_rules.py) says so: ``runtime_config_update`` never reaches it, and the rule's text is checked in each
installed Core by tests/test_bridge_conformance.py instead."""


def bridge_verdict(run: Any) -> str | None:
    """None when Bridge builds and updates the run's config (at its GPU count), else what refused it."""
    from optbench.engine.bridge.adapter import bridge_setup
    from optbench.engine.bridge.entry import BridgeAPI, build_config_container
    from optbench.common.errors import UserError

    try:
        config = build_config_container(bridge_setup(run), BridgeAPI())
        update_at(config, run.parallel.num_gpus)
        return None
    except UserError as err:  # our adapter, not Bridge: no verdict
        return f"ours: {err.lines()[0]}"
    except Exception as err:  # what Bridge or Core raises is the point
        return f"{type(err).__name__}: {str(err)[:300]}"


def search_layout_cases(results: Path, container: str, stride: int = 1) -> list[dict[str, Any]]:
    """Our validity against Bridge's on every layout ``make search`` tries: each one it keeps (valid by our checks,
    fitting in memory) must pass Bridge's recipe with our overrides and ``runtime_config_update``, and each one our
    checks refuse must be refused by Bridge or Core too. One micro-batch size per layout: the search keeps only
    those with GBS divisible by MBS x DP, which is all Bridge's config checks ask of it; memory is not a config
    check, and a rule Core asserts when it builds the model is counted apart (``refused_when_the_model_is_built``).
    ``stride``: every that many-th distinct layout, in the search's own order (1: all of them; each costs a Bridge
    build of about half a second)."""
    from optbench.compose.recipe import compose_run
    from optbench.common.errors import UserError
    from optbench.plan.search import at, points
    from optbench.validate import validate

    cases = []
    for recipe in SEARCH_RECIPES:
        run = compose_run(recipe, [f"results_dir={results}", "run_id=search", f"cluster.container={container}"])
        stand_ins.install(run.cluster.gpu)
        forced = dataclasses.replace(run, force=True)  # the search checks memory itself, as here
        candidates = list(points(run))
        kept: set[tuple[int, ...]] = set()
        ours_refused: set[tuple[int, ...]] = set()
        order: dict[tuple[int, ...], int] = {}  # each distinct layout's place, for the stride
        case: dict[str, Any] = {
            "recipe": recipe,
            "candidates": len(candidates),
            "bridge_refused": [],
            "bridge_accepted_what_we_refuse": [],
            "bridge_refused_what_we_refuse": 0,
            "refused_when_the_model_is_built": 0,
            "stride": stride,
        }
        for point in candidates:
            layout = (point.tp, point.pp, point.vpp, point.cp, point.ep)
            if order.setdefault(layout, len(order)) % stride or layout in kept or layout in ours_refused:
                continue  # another micro-batch size of a layout whose first did not fit is still tried
            moved = at(forced, point)
            try:
                resolved = validate(moved)
            except UserError as err:
                ours_refused.add(layout)
                verdict = bridge_verdict(moved)
                if verdict is None and BUILD_TIME in err.lines()[0]:
                    case["refused_when_the_model_is_built"] += 1  # Core asserts it past the config (moe_rules.py)
                elif verdict is None or verdict.startswith("ours: "):
                    case["bridge_accepted_what_we_refuse"].append(
                        {"layout": point.label, "ours": err.lines()[0], "bridge": verdict}
                    )
                else:
                    case["bridge_refused_what_we_refuse"] += 1
                continue
            if not resolved.memory.fits:
                continue
            kept.add(layout)
            verdict = bridge_verdict(resolved.run)
            if verdict is not None:
                case["bridge_refused"].append({"layout": point.label, "error": verdict})
        cases.append({**case, "checked": len(kept), "we_refuse": len(ours_refused)})
    return cases


OVERRIDE_RECIPES = ("qwen3_30b_a3b_muon", "kimi_k2_muon", "qwen3_30b_a3b_adamw", "deepseek_v3_adamw")
"""Recipes every single-field override is tried on (Qwen3 on 8 GPUs, Kimi K2 on 256: MLA, layer-wise Muon; Qwen3 with
AdamW: the baseline's distributed optimizer and FP8 parameter all-gather, which layer-wise Muon refuses; DeepSeek-V3
with AdamW: MTP, dense first layers, Bridge's precision-aware Adam and, from 26.06, NVIDIA's FP8 output projection)."""
KNOWN_GAPS: dict[str, str] = {}
"""Single-field overrides our checks pass and the default container's Bridge refuses, each with why it is not refused
yet. None now: the last, ``parallel.cuda_graph_impl=local`` on Bridge 0.6, is refused since its marker was read from
the fetched tags (releases/graph_rules.py)."""


def single_field_overrides(run: Any) -> list[str]:
    """One override per other value of every field the Bridge engine reads: each other word of an enumeration, the
    other boolean, half of a real number, twice a count outside the layout, and each single CUDA-graph or recompute
    module. The layout's integers are left to ``make search`` (search_layout_cases); names, paths and labels are not
    values."""
    from optbench.config.field_spec import BRIDGE
    from optbench.config.field_table import TABLE, value_at

    def text(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return f"[{','.join(value)}]" if isinstance(value, list) else str(value)

    found = []
    for key, spec in TABLE.items():
        if not spec.readers & BRIDGE:
            continue
        kind, (known, value) = type(spec.domain).__name__, value_at(run, key)
        if not known:
            continue
        others: list[Any] = []
        if kind == "Choice":
            others = [word for word in spec.domain.words() if word != value]
        elif kind == "Flag":
            others = [not value] if isinstance(value, bool) else [True, False]
        elif kind == "Real":
            others = [value * 0.5 if value else 0.5]
        elif kind == "Integer" and not key.startswith(("parallel.", "model.")):
            others = [value * 2 if value else 1]
        elif kind == "Items" and key in ("parallel.recompute_modules", "parallel.cuda_graph_scope"):
            others = [[word] for word in spec.domain.item.words()]
        found += [f"{key}={text(other)}" for other in others]
    return found


def typed_override_cases(
    results: Path,
    container: str,
    pairs: int = 0,
    seed: int = 0,
    recipes: Sequence[str] = OVERRIDE_RECIPES,
    arity: int = 2,
    over_refusals: bool = False,
) -> list[dict[str, Any]]:
    """Every single-field override (:func:`single_field_overrides`) of each recipe that our checks pass (memory aside,
    force=true) must pass the real Bridge's recipe with our overrides and ``runtime_config_update``: the user's own
    values, where the recipes above try NVIDIA's. What Bridge refuses is listed with its error. ``pairs``: instead,
    that many pairs of them on two different fields per recipe, drawn with ``seed`` (the rules two fields make); with
    ``arity`` 3 or more, that many tuples of as many fields.

    ``over_refusals``: the other direction too. Each override our validation refuses (after composing: a value
    outside its field's domain never reaches Bridge's types) is sent to Bridge as composed, and what Bridge
    accepts is listed under ``bridge_accepted_what_we_refuse`` with our one line, to be read against the product's
    own rules (a layout Core refuses only when it builds the model, a setting our engine cannot honour): a
    review aid, never a pass/fail, since some of our refusals are rules Bridge does not hold."""
    import random

    from optbench.compose.recipe import compose_run
    from optbench.config.overrides import typed_key
    from optbench.common.errors import UserError
    from optbench.validate import validate

    cases = []
    for recipe in recipes:
        common = [f"results_dir={results}", "run_id=overrides", f"cluster.container={container}", "force=true"]
        base = compose_run(recipe, common)
        singles = single_field_overrides(base)
        tried: list[list[str]] = [[o] for o in singles]
        if pairs and arity == 2:
            draw = random.Random(f"{seed}-{recipe}")
            every = [[a, b] for i, a in enumerate(singles) for b in singles[i + 1 :] if typed_key(a) != typed_key(b)]
            tried = draw.sample(every, min(pairs, len(every)))
        elif pairs:  # tuples of more fields: too many to list, so drawn one at a time (distinct fields, no repeats)
            draw, drawn = random.Random(f"{seed}-{recipe}-{arity}"), set()
            while len(drawn) < pairs:
                pick = tuple(sorted(draw.sample(singles, arity)))
                if len({typed_key(o) for o in pick}) == arity:
                    drawn.add(pick)
            tried = [list(pick) for pick in sorted(drawn)]
        case: dict[str, Any] = {
            "recipe": recipe,
            "checked": 0,
            "we_refuse": 0,
            "bridge_refused": [],
            "known_gaps": KNOWN_GAPS,
        }
        if over_refusals:
            case["bridge_accepted_what_we_refuse"] = []
        for typed in tried:
            composed = None
            try:
                composed = compose_run(recipe, [*common, *typed])
                run = validate(composed).run
            except UserError as err:
                case["we_refuse"] += 1
                if over_refusals and composed is not None and _bridge_accepts(composed):
                    case["bridge_accepted_what_we_refuse"].append({"override": " ".join(typed), "ours": err.lines()[0]})
                continue
            verdict = _verdict_on_its_gpu(run)
            if verdict is not None and verdict.startswith("ours: "):  # the plan refuses it in one line (adapter)
                case["we_refuse"] += 1
                continue
            case["checked"] += 1
            if verdict is not None:
                case["bridge_refused"].append({"override": " ".join(typed), "error": verdict})
        cases.append(case)
    return cases


def _verdict_on_its_gpu(run: Any) -> str | None:
    """:func:`bridge_verdict` with the stand-ins faking the run's own GPU (a tried ``cluster.gpu=b200`` included:
    Bridge checks the device; a GPU outside our catalog keeps the last one's)."""
    from optbench.catalog.hardware import gpu_catalog

    if run.cluster.gpu in gpu_catalog():
        stand_ins.install(run.cluster.gpu)
    return bridge_verdict(run)


def _bridge_accepts(run: Any) -> bool:
    """Whether Bridge builds and updates a run our validation refused (our adapter may refuse it too: not Bridge's
    acceptance)."""
    try:
        return _verdict_on_its_gpu(run) is None
    except Exception:  # noqa: BLE001 - a run our checks refuse may break the adapter anywhere: not an acceptance
        return False


def negative_controls(results: Path, container: str) -> dict[str, Any]:
    """A misspelled key and an impossible pipeline layout must both fail inside Bridge."""
    from optbench.engine.bridge.adapter import bridge_setup
    from optbench.engine.bridge.entry import BridgeAPI, build_config_container
    from optbench.compose.recipe import compose_run

    run = compose_run("kimi_k2_muon", [f"results_dir={results}", "run_id=negative", f"cluster.container={container}"])
    stand_ins.install(run.cluster.gpu)
    setup = bridge_setup(run)
    out = {}
    for name, extra, update in (
        ("misspelled_key", "model.moe_router_force_load_balancng=true", False),
        ("impossible_layout", "model.pipeline_model_parallel_layout=[[embedding,decoder],[decoder,loss]]", True),
    ):
        try:
            config = build_config_container(
                type(setup)(setup.recipe, setup.mixed_precision, (*setup.overrides, extra)), BridgeAPI()
            )
            if update:
                update_at(config, run.parallel.num_gpus)
            out[name] = {"caught": False}
        except Exception as err:  # what Bridge raises is the point
            out[name] = {"caught": True, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
    return out


def without_field(config: Any, dotted: str) -> Any:
    """``config`` with the section field ``dotted`` gone, as a release that dropped it would build it: the section
    becomes an instance of a dataclass of the other fields (none with a class default, so the name is truly absent)."""
    section_name, name = dotted.split(".")
    section = getattr(config, section_name)
    kept = [f for f in dataclasses.fields(section) if f.name != name]
    cls = dataclasses.make_dataclass(type(section).__name__, [(f.name, Any) for f in kept])
    copy = object.__new__(cls)
    copy.__dict__.update({k: v for k, v in vars(section).items() if k != name})
    setattr(config, section_name, copy)
    return config


def job_check_cases(results: Path) -> dict[str, Any]:
    """The job's check before step 1, in this environment standing in for the fixture's unseen release."""
    from optbench.compose.recipe import compose_run
    from optbench.common.errors import UserError
    from optbench.engine.bridge.entry import BridgeAPI, run_bridge
    from optbench.plan import build_plan
    from optbench.runs import save_resolved_config
    from optbench.validate import validate

    fixture = json.loads(REMOVED_FIELD.read_text())

    class NoTraining(BridgeAPI):
        trained = False

        def pretrain(self, config: Any, callbacks: Any) -> None:
            NoTraining.trained = True

    class Removed(NoTraining):
        def recipe_function(self, recipe: Any) -> Any:
            function = super().recipe_function(recipe)

            def without(**kwargs: Any) -> Any:
                return without_field(function(**kwargs), fixture["field"])

            without.__signature__ = inspect.signature(function)
            return without

    out: dict[str, Any] = {"fixture": fixture}
    cases = (("as_installed", NoTraining, None), ("field_removed", Removed, None), ("nvidia_scripts", NoTraining, STUB))
    for name, api, scripts in cases:
        os.environ.pop(SCRIPTS_VARIABLE, None)
        if scripts:
            os.environ[SCRIPTS_VARIABLE] = str(scripts)
        run_id = f"job-{name}"
        resolved = validate(
            compose_run(
                fixture["recipe"],
                [
                    f"results_dir={results}",
                    f"run_id={run_id}",
                    f"cluster.container={fixture['unseen_container']}",
                    "cluster.unverified_container=true",
                ],
            )
        )
        stand_ins.install(resolved.run.cluster.gpu)
        folder = results / "runs" / run_id
        path = save_resolved_config(resolved.run, folder / "config.yaml")
        (folder / "plan.json").write_text(json.dumps(build_plan(resolved).to_json()))
        api.trained = False
        case: dict[str, Any] = {}
        try:
            case["returned"] = run_bridge(path, api=api())
        except UserError as err:
            case["error_lines"] = err.lines()
        case["trained"] = api.trained
        conformance_file = folder / "conformance.json"
        case["conformance"] = json.loads(conformance_file.read_text()) if conformance_file.is_file() else None
        out[name] = case
    os.environ.pop(SCRIPTS_VARIABLE, None)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the JSON report here (default: stdout)")
    parser.add_argument("--recipes", nargs="*", default=list(RECIPES))
    parser.add_argument(
        "--container", default="nemo:26.02.01", help="the NeMo container whose Bridge and Core are installed"
    )
    parser.add_argument(
        "--overrides-only",
        action="store_true",
        help="report only whether Bridge takes every single-field override our checks pass",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=0,
        help="with --overrides-only: that many random pairs of single-field overrides per recipe instead",
    )
    parser.add_argument("--seed", type=int, default=0, help="the seed the --pairs are drawn with")
    parser.add_argument("--arity", type=int, default=2, help="with --pairs: fields per drawn tuple (2: pairs)")
    parser.add_argument(
        "--override-recipes",
        nargs="*",
        default=list(OVERRIDE_RECIPES),
        help="with --overrides-only: the recipes whose overrides are tried",
    )
    parser.add_argument(
        "--over-refusals",
        action="store_true",
        help="with --overrides-only: also send what our checks refuse to Bridge and list what it accepts",
    )
    parser.add_argument(
        "--search-only",
        action="store_true",
        help="report only whether Bridge judges the make search layouts as our checks do",
    )
    parser.add_argument(
        "--job-check-only",
        action="store_true",
        help="report only the job's own check before step 1, this environment standing in for an unseen release",
    )
    parser.add_argument(
        "--stride", type=int, default=1, help="with --search-only: every that many-th distinct layout (default 1: all)"
    )
    args = parser.parse_args()
    if args.stride < 1:
        parser.error(f"--stride: {args.stride} is not a layout count; give 1 (every layout) or more")
    from optbench.engine.bridge.cpu_check import hf_cache

    started = time.perf_counter()
    report: dict[str, Any] = {"cases": [], "versions": {}}
    with tempfile.TemporaryDirectory() as tmp:
        hf_cache.use(Path(tmp) / "hf")
        from optbench.common.outputs import claim

        claim(Path(tmp) / "results", "results_dir", "results")  # the cases write into it before composing again
        only = args.search_only or args.overrides_only or args.job_check_only
        for recipe in [] if only else args.recipes:
            for intent in INTENTS:
                try:
                    report["cases"].append(check_case(recipe, intent, Path(tmp) / "results", args.container))
                except Exception as err:
                    report["cases"].append(
                        {
                            "recipe": recipe,
                            "intent": intent,
                            "error": f"{type(err).__name__}: {err}",
                            "traceback": traceback.format_exc()[-2000:],
                        }
                    )
        if args.job_check_only:
            report["job_check"] = job_check_cases(Path(tmp) / "results")
        elif args.search_only:
            report["search_layouts"] = search_layout_cases(Path(tmp) / "results", args.container, args.stride)
        elif args.overrides_only:
            report["typed_overrides"] = typed_override_cases(
                Path(tmp) / "results",
                args.container,
                args.pairs,
                args.seed,
                args.override_recipes,
                args.arity,
                args.over_refusals,
            )
        else:
            report["emerging"] = emerging_cases(Path(tmp) / "results", args.container)
            report["negative_controls"] = negative_controls(Path(tmp) / "results", args.container)
            report["timer_levels"] = timer_levels()
    from importlib.metadata import version

    report["versions"] = {name: version(name) for name in ("megatron-bridge", "megatron-core", "torch", "transformers")}
    report["seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(report, indent=1, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
