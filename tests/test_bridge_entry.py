"""The in-container entry point, with a fake Bridge API (Bridge cannot be imported here).

What runs here: reading the resolved config, computing the setup, the order of the calls into
Bridge, the callback registration, the error path, and running the file by path as the job does.
What does not: Bridge's recipe functions and ``pretrain`` themselves (they need the NeMo container).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import ON_0_3_1, REPO
from test_bridge_source import bridge_override_module, stand_in_container

from optbench.engine.bridge.adapter import bridge_setup
from optbench.engine.bridge.entry import build_config_container, run_bridge
from optbench.compose.recipe import compose_run
from optbench.common.errors import UserError
from optbench.plan import build_plan
from optbench.resolve import resolve
from optbench.runs import save_resolved_config
from optbench.validate import validate


class FakeManager:
    def __init__(self) -> None:
        self.registered: dict[str, Any] = {}

    def register(self, event: str, fn: Any) -> None:
        self.registered[event] = fn


class FakeBridge:
    """Records every call the entry point makes into Bridge, in order."""

    def __init__(self, comm_overlap: Any = None, apply: Any = None, installed: str | None = "0.3.1") -> None:
        self.calls: list[tuple[str, Any]] = []
        self.installed = installed
        self.comm_overlap = comm_overlap
        self.apply = apply
        self.manager = FakeManager()

    def recipe_function(self, recipe):
        def recipe_fn(**kwargs):
            self.calls.append(("recipe", (recipe.module, recipe.function, kwargs)))
            return SimpleNamespace(mixed_precision="bf16_mixed", comm_overlap=self.comm_overlap)

        return recipe_fn

    def mixed_precision(self, preset):
        self.calls.append(("mixed_precision", preset))
        return f"preset:{preset}"

    def new_section(self, name):
        self.calls.append(("new_section", name))
        return f"new:{name}"

    def apply_overrides(self, config, overrides):
        self.calls.append(("overrides", list(overrides)))
        return self.apply(config, overrides) if self.apply else config

    def callback_manager(self):
        return self.manager

    def installed_versions(self):
        return {"bridge": self.installed, "core": "0.16.1", "emerging_optimizers": "0.1.0"}

    def pretrain(self, config, callbacks):
        self.calls.append(("pretrain", (config, callbacks)))


class StandInBridge(FakeBridge):
    """The recipe builds a config with exactly Bridge 0.3.1's field names, and Bridge's own override function applies
    the plan to it: what the job's checks read in a container."""

    def __init__(self, *, without: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.without = without

    def recipe_function(self, recipe):
        def recipe_fn(**kwargs):
            self.calls.append(("recipe", (recipe.module, recipe.function, kwargs)))
            self.built = stand_in_container("kimi_k2", without=self.without)
            return self.built

        return recipe_fn

    def mixed_precision(self, preset):
        self.calls.append(("mixed_precision", preset))
        return self.built.mixed_precision  # the preset's section, with Bridge's field names

    def apply_overrides(self, config, overrides):
        self.calls.append(("overrides", list(overrides)))
        return bridge_override_module().process_config_with_overrides(config, cli_overrides=list(overrides))


def test_config_container_is_built_in_bridges_order(tmp_path: Path) -> None:
    setup = bridge_setup(resolve(compose_run("qwen3_30b_a3b_muon", [ON_0_3_1, f"results_dir={tmp_path}"])).run)
    fake = FakeBridge()
    config = build_config_container(setup, fake)
    assert [name for name, _ in fake.calls] == ["recipe", "mixed_precision", "new_section", "overrides"]
    assert fake.calls[0][1] == ("megatron.bridge.recipes.qwen.qwen3_moe", "qwen3_30b_a3b_pretrain_config", {})
    assert config.mixed_precision == "preset:bf16_with_mxfp8_mixed" and config.comm_overlap == "new:comm_overlap"
    assert fake.calls[-1][1] == list(setup.overrides)


def test_an_existing_comm_overlap_section_is_kept(tmp_path: Path) -> None:
    setup = bridge_setup(resolve(compose_run("kimi_k2_muon", [ON_0_3_1, f"results_dir={tmp_path}"])).run)
    fake = FakeBridge(comm_overlap="recipe's own")
    config = build_config_container(setup, fake)
    assert config.comm_overlap == "recipe's own" and "new_section" not in [name for name, _ in fake.calls]
    assert fake.calls[0][1][2] == {"optimizer_type": "muon"}


def _job_folder(tmp_path: Path, *overrides: str) -> Path:
    """A job folder as the launcher leaves it: config.yaml and plan.json side by side; returns config.yaml."""
    resolved = validate(
        compose_run("kimi_k2_muon", [ON_0_3_1, f"results_dir={tmp_path}", "run_id=entry-test", *overrides])
    )
    folder = tmp_path / "runs" / "entry-test"
    path = save_resolved_config(resolved.run, folder / "config.yaml")
    (folder / "plan.json").write_text(json.dumps(build_plan(resolved).to_json()))
    return path


def test_run_bridge_applies_the_plans_overrides_and_registers_the_callback(tmp_path: Path) -> None:
    path = _job_folder(tmp_path)
    fake = StandInBridge()
    assert run_bridge(path, api=fake) == 0
    name, (config, callbacks) = fake.calls[-1]
    assert name == "pretrain" and callbacks is fake.manager
    assert set(fake.manager.registered) == {"on_train_start", "on_train_step_end", "on_train_end"}
    assert config.optimizer.optimizer == "dist_muon" and config.ddp.use_distributed_optimizer is False
    assert config.model.pipeline_model_parallel_size == 4 and config.train.global_batch_size == 4096
    assert config.logger.wandb_exp_name == "entry-test"
    recorded = json.loads((path.parent / "plan.json").read_text())["bridge"]["overrides"]
    assert [c for c in fake.calls if c[0] == "overrides"] == [("overrides", recorded)]
    report = json.loads((path.parent / "conformance.json").read_text())
    assert report["status"] == "ok" and report["missing_fields"] == [] and report["values_not_landed"] == []
    assert report["fields_checked"] == len(recorded) and report["optimizer"] == {
        "planned": "dist_muon",
        "built": "dist_muon",
    }
    assert report["installed_versions"]["bridge"] == report["planned_versions"]["bridge"] == "0.3.1"


def test_a_field_the_container_lacks_stops_the_job_before_step_1_in_one_line(tmp_path: Path) -> None:
    """A release that dropped a field the plan sets (as Core 0.19.0's adaptive Muon lacks scale_mode): the job writes
    conformance.json, stops in one line naming the field, and never calls pretrain."""
    path = _job_folder(tmp_path)
    fake = StandInBridge(without=("optimizer.muon_scale_mode",))
    with pytest.raises(UserError) as caught:
        run_bridge(path, api=fake)
    (line,) = caught.value.lines()
    assert "has no field optimizer.muon_scale_mode, which the plan sets" in line and "nothing was trained" in line
    assert not any(name in ("overrides", "pretrain") for name, _ in fake.calls)
    report = json.loads((path.parent / "conformance.json").read_text())
    assert report["status"] == "stopped" and [m["field"] for m in report["missing_fields"]] == [
        "optimizer.muon_scale_mode"
    ]


def test_an_optimizer_other_than_the_plans_stops_the_job(tmp_path: Path) -> None:
    path = _job_folder(tmp_path)

    class AdamBridge(StandInBridge):
        def apply_overrides(self, config, overrides):
            config = super().apply_overrides(config, overrides)
            config.optimizer.optimizer = "adam"  # a release whose recipe resets the optimizer after the overrides
            return config

    fake = AdamBridge()
    with pytest.raises(UserError) as caught:
        run_bridge(path, api=fake)
    assert (
        "optimizer.optimizer: the plan runs dist_muon but this container's Megatron Bridge built 'adam'"
        in caught.value.lines()[0]
    )
    assert not any(name == "pretrain" for name, _ in fake.calls)
    assert json.loads((path.parent / "conformance.json").read_text())["status"] == "stopped"


def test_a_value_of_another_kind_is_listed_not_fatal() -> None:
    from optbench.engine.bridge import conformance

    report = conformance.Conformance("nemo:x", {"bridge": "0.3.1"}, {"bridge": "0.3.1"}, False, "m.f")
    config = SimpleNamespace(train=SimpleNamespace(train_iters=10, note="text", flag=True), env_vars={})
    conformance.check_fields(
        report,
        config,
        [
            "train.train_iters=abc",
            "train.note=5",
            "train.flag=true",
            "train.note=null",
            "++env_vars.X=1",
            "train.gone=1",
            "++absent.Y=2",
        ],
    )
    assert [d["field"] for d in report.kind_differs] == ["train.train_iters", "train.note"]
    assert [m["field"] for m in report.missing] == ["train.gone", "absent.Y"]
    assert report.fields_checked == 7 and report.status == "differs"


def test_the_job_applies_what_the_plan_recorded_not_a_recomputation(tmp_path: Path) -> None:
    path = _job_folder(tmp_path)
    plan = json.loads((path.parent / "plan.json").read_text())
    plan["bridge"]["overrides"].append("train.train_iters=7")  # the plan, not config.yaml, decides
    (path.parent / "plan.json").write_text(json.dumps(plan))
    fake = StandInBridge()
    run_bridge(path, api=fake)
    assert dict(fake.calls)["overrides"][-1] == "train.train_iters=7"


@pytest.mark.parametrize(
    "change, fragment",
    [
        ("missing", "error: plan: no plan.json in "),
        ("version", "is plan format 0, this checkout reads format 1; plan again"),
        (
            "release",
            "error: cluster.container: the plan was made for nemo:26.02.01 (Megatron Bridge 0.3.1) but this "
            "environment has Megatron Bridge 0.6.0; run the job in the nemo:26.02.01 image",
        ),
    ],
)
def test_a_job_refuses_a_plan_it_cannot_apply_in_one_line(tmp_path: Path, change: str, fragment: str) -> None:
    path = _job_folder(tmp_path)
    plan_file = path.parent / "plan.json"
    if change == "missing":
        plan_file.unlink()
    elif change == "version":
        plan_file.write_text(json.dumps({**json.loads(plan_file.read_text()), "plan_version": 0}))
    fake = FakeBridge(installed="0.6.0" if change == "release" else "0.3.1")
    with pytest.raises(UserError) as caught:
        run_bridge(path, api=fake)
    assert fragment in caught.value.lines()[0] and len(caught.value.lines()) == 1
    assert not any(name == "pretrain" for name, _ in fake.calls)


def test_entry_runs_by_path_without_an_install_and_fails_in_one_line(tmp_path: Path) -> None:
    """The job runs ``python <checkout>/src/optbench/engine/bridge/entry.py <config>`` from another directory.

    ``-S`` skips site processing, so the editable install of optbench is invisible: only the entry's
    own bootstrap can find the package; third-party packages come from PYTHONPATH as in a container.
    """
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    done = subprocess.run(
        [
            sys.executable,
            "-S",
            str(REPO / "src" / "optbench" / "engine" / "bridge" / "entry.py"),
            str(tmp_path / "missing.yaml"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": site_packages},
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: config: no resolved config at {tmp_path / 'missing.yaml'}"]


def test_nvidia_s_preset_rebuilt_in_the_job_never_stops_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's rebuild of NVIDIA's preset from the container's perf scripts records a failure of NVIDIA's code in
    one line and lets the run go on; a precision NVIDIA's scripts have no case for is said, not tried."""
    from optbench.engine.bridge import conformance, nvidia_preset

    run = resolve(compose_run("qwen3_30b_a3b_adamw", [ON_0_3_1])).run
    monkeypatch.setattr(nvidia_preset, "find_scripts", lambda: None)
    assert conformance.with_nvidia(run, None, [])["status"] == "no perf scripts in this container"
    monkeypatch.setattr(nvidia_preset, "find_scripts", lambda: tmp_path)

    def broken(case: list[str], optimizer: str, scripts: Path) -> Any:
        assert case == ["-m", "qwen", "--model_recipe_name", "qwen3_30b_a3b", "-g", "gb300", "-c", "fp8_mx"] + [
            "-ng",
            "8",
            "-gn",
            "4",
        ]
        raise ImportError("No module named 'argument_parser'\nmore lines")

    monkeypatch.setattr(nvidia_preset, "rebuilt", broken)
    failed = conformance.with_nvidia(run, None, [])
    assert failed["status"] == "failed" and failed["error"] == "ImportError: No module named 'argument_parser'"
    fp16 = resolve(compose_run("qwen3_30b_a3b_adamw", [ON_0_3_1, "precision=fp16", "intent=train"])).run
    assert conformance.with_nvidia(fp16, None, [])["status"] == "NVIDIA's scripts have no fp16 case"
