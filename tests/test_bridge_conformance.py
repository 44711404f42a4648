"""Our Bridge path against the real Megatron Bridge 0.3.1 + Megatron Core 0.16.1 (in .venv-bridge).

tests/bridge_env/conformance.py runs in the Bridge environment that ``make setup`` creates (its own
virtual environment: Bridge pins transformers < 5) and reports, for every cluster recipe and both intents,
the overrides that did not land, the outcome of Bridge's runtime_config_update, every effective field that
differs from NVIDIA's preset (with the documented reason, or none), and the metrics callback driven through
Bridge's CallbackManager, GlobalState and Megatron's Timers. This file asserts on that report.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from optbench.bridge.presets import OURS, RECIPE_DEPARTURES

ROOT = Path(__file__).resolve().parents[1]
BRIDGE_PYTHON = ROOT / ".venv-bridge" / "bin" / "python"
RECIPES = ("kimi_k2_muon", "kimi_k2_adamw", "qwen3_30b_a3b_muon", "qwen3_30b_a3b_adamw", "deepseek_v3_muon",
           "deepseek_v3_adamw")
pytestmark = pytest.mark.xdist_group("bridge")  # one worker runs the (20 s) report once


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    if not BRIDGE_PYTHON.is_file():
        pytest.fail(".venv-bridge is missing: run `make setup` (or `make bridge-env`)")
    out = tmp_path_factory.mktemp("conformance") / "report.json"
    done = subprocess.run([str(BRIDGE_PYTHON), str(ROOT / "tests" / "bridge_env" / "conformance.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def case(report: dict, recipe: str, intent: str) -> dict:
    found = [c for c in report["cases"] if c["recipe"] == recipe and c["intent"] == intent]
    assert len(found) == 1
    assert "error" not in found[0], found[0].get("traceback")
    return found[0]


def test_the_real_bridge_and_core_were_used(report: dict) -> None:
    assert report["versions"]["megatron-bridge"] == "0.3.1" and report["versions"]["megatron-core"] == "0.16.1"


@pytest.mark.parametrize("intent", ["reproduce", "train"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_override_lands_and_runtime_config_update_passes(report: dict, recipe: str, intent: str) -> None:
    c = case(report, recipe, intent)
    assert c["missing"] == [] and c["runtime_config_update"] == "ok" and c["overrides"] > 90


@pytest.mark.parametrize("intent", ["reproduce", "train"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_effective_config_differs_from_nvidia_only_by_documented_fields(report: dict, recipe: str, intent: str) -> None:
    c = case(report, recipe, intent)
    unexplained = [d for d in c["differences"] if not d["reason"]]
    assert unexplained == []
    fields = {d["field"] for d in c["differences"]}
    if intent == "reproduce" and not c["adapted_from_adam"]:
        # NVIDIA's own preset: only paths, logging, run length and what Bridge derives from the run length.
        assert fields <= set(OURS) | {"scheduler.lr_decay_steps", "scheduler.wd_incr_steps"}
        assert "model.moe_router_force_load_balancing" not in fields and "logger.timing_log_level" not in fields
    if intent == "train":
        assert {"model.moe_router_force_load_balancing", "ddp.check_for_nan_in_grad", "train.eval_iters"} <= fields
    assert fields & set(RECIPE_DEPARTURES.get(recipe, {})) == set(RECIPE_DEPARTURES.get(recipe, {}))


@pytest.mark.parametrize("intent", ["reproduce", "train"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_metrics_callback_runs_on_bridges_own_objects(report: dict, recipe: str, intent: str) -> None:
    cb = case(report, recipe, intent)["callback"]
    assert cb["records"] == 3 and cb["summary"] and cb["syncs"] == 4  # start + one per step at log_interval 1
    if intent == "reproduce":  # the preset's timing level 0: Megatron times no optimizer step, we invent none
        assert cb["timing_log_level"] == 0 and cb["optimizer_time_s"] == [None, None, None]
    else:  # level 1: Bridge's optimizer timer (created by Bridge, read by us) measured the 2 ms step
        assert cb["timing_log_level"] == 1 and all(0.0015 < t < 0.5 for t in cb["optimizer_time_s"])


def test_the_callback_never_creates_megatrons_optimizer_timer(report: dict) -> None:
    """At timing level 2 a timer created by a callback collides with Bridge's log_level=1 creation; ours is looked up."""
    assert report["timer_levels"]["ours"] == "ok"
    assert "does not match already existing log level" in report["timer_levels"]["timers_call"]  # the control fails


def test_negative_controls_are_caught_by_bridge(report: dict) -> None:
    controls = report["negative_controls"]
    assert controls["misspelled_key"]["caught"] and "moe_router_force_load_balancng" in controls["misspelled_key"]["error"]
    assert controls["impossible_layout"]["caught"] and "pipeline_model_parallel_layout" in controls["impossible_layout"]["error"]
