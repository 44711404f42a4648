"""``make plan CHECK=bridge``: a plan built with its container's real Megatron Bridge and Core on this CPU.

The fast tests hold the launcher's side (the option, its refusals, the one line a refusing report comes to);
the slow ones run the real Bridge of the default container (``make bridge-env``) on a plan it takes and on one
whose world size it refuses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, marked_results, run_make
from launch.bridge_check import SCRIPT, refusal, report_lines, wanted_check
from optbench.engine.bridge.cpu_check import environments
from optbench.common.errors import UserError
from optbench.releases import versions

OK = {
    "container": "nemo:26.08",
    "megatron_bridge": "0.6.0",
    "megatron_core": "0.19.0",
    "gpu": "gb300",
    "world_size": 8,
    "overrides": 134,
    "plan_matches_checkout": True,
    "build": "ok",
    "missing": [],
    "runtime_config_update": "ok",
    "warnings": ["UserWarning: moe_hybridep_num_sms is deprecated."],
    "seconds": 1.2,
    "wall_s": 7.5,
}


def test_check_takes_bridge_or_nothing() -> None:
    assert wanted_check("") is False and wanted_check("bridge") is True
    with pytest.raises(UserError) as refused:
        wanted_check("brigde")
    [line] = refused.value.lines()
    assert line.startswith("error: CHECK: 'brigde' is not a check; CHECK=bridge")


def test_a_report_bridge_took_refuses_nothing_and_prints_its_verdict_and_warnings() -> None:
    assert refusal(OK) is None
    lines = report_lines(OK)
    assert "134 of 134 overrides read back; runtime_config_update passed at world size 8 on gb300" in lines[0]
    assert "nemo:26.08 (Megatron Bridge 0.6.0, Core 0.19.0)" in lines[0]
    assert lines[1].strip() == "warned: UserWarning: moe_hybridep_num_sms is deprecated."


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"build": "OverridesError: Failed to parse"},
            "Megatron Bridge 0.6.0 (nemo:26.08) could not build this plan's config: OverridesError",
        ),
        (
            {"missing": [{"field": "model.tp", "expected": 2, "actual": 1}]},
            "1 override(s) did not land in Megatron Bridge 0.6.0 (nemo:26.08)'s config; first model.tp=2: it holds 1",
        ),
        (
            {"runtime_config_update": "AssertionError: world size"},
            "refuses this plan at world size 8: AssertionError: world size; change the setting it names",
        ),
        (
            {"plan_matches_checkout": False},
            "the plan's overrides are not what this checkout derives from its config; plan again",
        ),
    ],
)
def test_a_refusing_report_comes_to_one_line(change: dict, expected: str) -> None:
    assert expected in refusal({**OK, **change})


def test_a_local_engine_plan_is_not_checked(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "optbench",
            "plan",
            "kimi_k2_tiny_muon",
            "--check",
            "bridge",
            f"results_dir={marked_results(tmp_path / 'results')}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("error: CHECK: CHECK=bridge checks a Megatron Bridge plan and this run's engine is local")
    )


def test_a_missing_bridge_environment_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from optbench import __main__ as cli

    monkeypatch.setattr(
        environments,
        "BASES",
        {name: (tmp_path / name, requirements) for name, (_, requirements) in environments.BASES.items()},
    )
    with pytest.raises(SystemExit) as exited:
        cli.main(
            ["plan", "qwen3_30b_a3b_muon", "--check", "bridge", f"results_dir={marked_results(tmp_path / 'results')}"]
        )
    assert exited.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(
        "error: CHECK: the Megatron Bridge 0.6.0 environment of nemo:26.08 is not built on this machine; "
        "run `make bridge-env`"
    )


@pytest.mark.slow  # a whole sweep / search through the CLI
def test_a_sweep_point_bridge_refuses_is_listed_invalid_and_neither_ranked_nor_rendered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from launch import bridge_check
    from optbench import __main__ as cli

    sent = []

    def fake_check(items):
        sent.extend(plan.mbs for _, plan in items)
        return [OK, {**OK, "runtime_config_update": "AssertionError: micro batch"}]

    monkeypatch.setattr(bridge_check, "check_plans", fake_check)
    results = marked_results(tmp_path / "results")
    assert (
        cli.main(
            [
                "sweep",
                "qwen3_30b_a3b_muon",
                "train.mbs=4,8",
                "dryrun=true",
                "--check",
                "bridge",
                f"results_dir={results}",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert sent == [4, 8]
    assert "  passed   mbs4  134 of 134 overrides read back" in out and "  refused  mbs8  134 of 134" in out
    assert "  warned (every point): UserWarning: moe_hybridep_num_sms is deprecated." in out
    assert (
        "  invalid  mbs8  error: bridge: Megatron Bridge 0.6.0 (nemo:26.08) refuses this plan at world size 8: "
        "AssertionError: micro batch"
    ) in out
    folder = results / "plans" / "qwen3_30b_a3b_muon" / "sweep"
    points = {p["name"]: p for p in json.loads((folder / "sweep.json").read_text())["points"]}
    assert points["mbs4"]["valid"] and not points["mbs8"]["valid"]
    assert points["mbs8"]["problems"][0].startswith("error: bridge: ")
    assert (folder / "mbs4" / "sbatch.sh").is_file() and not (folder / "mbs8").exists()


@pytest.mark.slow  # a whole sweep / search through the CLI
def test_make_search_check_bridge_plans_the_ten_best_as_make_plan_would_and_records_what_bridge_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from launch import bridge_check
    from optbench import __main__ as cli

    sent = []

    def fake_check(items):
        sent.extend((plan.layout.tp, plan.layout.ep, plan.mbs, run.parallel.sequence_parallel) for run, plan in items)
        return [{**OK, "runtime_config_update": "AssertionError: no"} if i == 2 else OK for i in range(len(items))]

    monkeypatch.setattr(bridge_check, "check_plans", fake_check)
    results = marked_results(tmp_path / "results")
    assert cli.main(["search", "qwen3_30b_a3b_muon", "--check", "bridge", f"results_dir={results}"]) == 0
    out = capsys.readouterr().out
    top = json.loads((results / "plans" / "qwen3_30b_a3b_muon" / "search.json").read_text())["top"]
    # Each row's own layout was planned (TP > 1 with sequence parallelism, as Megatron needs for MoE).
    assert sent == [
        (
            int(r["layout"].split()[0][2:]),
            int(r["layout"].split()[4][2:]),
            int(r["layout"].split()[5][3:]),
            r["layout"].split()[0] != "TP1",
        )
        for r in top
    ]
    assert [r["bridge_check"] == "passed" for r in top] == [i != 2 for i in range(10)]
    assert top[2]["bridge_check"].startswith("Megatron Bridge 0.6.0 (nemo:26.08) refuses this plan at world size 8")
    assert "  Bridge check: nemo:26.08 (Megatron Bridge 0.6.0, Core 0.19.0) on this CPU, 10 plans in 7.5 s" in out
    assert f"    refused  #{top[2]['rank']} {top[2]['layout']}" in out


def _default_target() -> environments.Target:
    target = next(t for t in environments.targets() if t.name == versions.runnable()[0].name)
    if not target.installed:
        pytest.fail(f"the Bridge environment of {target.name} is missing: run `make setup` (or `make bridge-env`)")
    return target


@pytest.mark.slow
@pytest.mark.timeout(900 + 120)  # CHECK=bridge's own limit (launch.bridge_check.TIMEOUT_S), plus planning
def test_make_plan_check_bridge_runs_the_plan_through_the_default_containers_real_bridge(tmp_path: Path) -> None:
    target = _default_target()
    done = run_make(
        "plan",
        "RECIPE=qwen3_30b_a3b_muon",
        "CHECK=bridge",
        "parallel.moe_token_dispatcher=alltoall",
        f"results_dir={marked_results(tmp_path / 'results')}",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    [line] = [line for line in lines if line.startswith("  bridge check ")]
    assert f"{target.name} (Megatron Bridge {target.bridge}, Core {target.core})" in line
    # Said before the 20-60 s import, not only after it:
    assert lines.index(
        f"  checking 1 plan(s) with the real Megatron Bridge and Core of {target.name} on this CPU "
        "(importing them takes most of the 20-60 s)"
    ) < lines.index(line)
    assert "runtime_config_update passed at world size 8 on gb300" in line


@pytest.mark.slow
@pytest.mark.timeout(900 + 120)  # the check's own limit, plus planning: one setting holds both on a busy machine
def test_one_bridge_process_checks_several_plans_and_refuses_the_one_whose_batch_its_world_size_does_not_divide(
    tmp_path: Path,
) -> None:
    target = _default_target()
    results = marked_results(tmp_path / "results")
    planned = subprocess.run(
        [sys.executable, "-m", "optbench", "plan", "qwen3_30b_a3b_muon", f"results_dir={results}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert planned.returncode == 0, planned.stderr
    plan = json.loads((results / "plans" / "qwen3_30b_a3b_muon" / "plan.json").read_text())
    folders = [tmp_path / "edited", tmp_path / "as_planned"]  # the refused one first: it must not spoil the next
    for folder, world_size in zip(folders, (12, plan["world_size"])):
        folder.mkdir()
        (folder / "plan.json").write_text(json.dumps({**plan, "world_size": world_size}))
    out = tmp_path / "reports.json"
    done = subprocess.run(
        [str(target.python), str(SCRIPT), *map(str, folders), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env=target.environment(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    edited, as_planned = json.loads(out.read_text())
    assert edited["build"] == "ok" and edited["missing"] == []
    assert edited["runtime_config_update"].startswith("AssertionError")
    assert "refuses this plan at world size 12: AssertionError" in refusal(edited)
    assert as_planned["runtime_config_update"] == "ok" and refusal(as_planned) is None
    # What Megatron warned about for the first plan it warns about again for the second (recorded per plan, not once):
    # the refused update stopped before the rest of its warnings.
    assert as_planned["world_size"] == plan["world_size"] and set(edited["warnings"]) < set(as_planned["warnings"])


@pytest.mark.slow
def test_make_sweep_check_bridge_checks_every_valid_point_in_one_bridge_process(tmp_path: Path) -> None:
    target = _default_target()
    done = run_make(
        "sweep",
        "RECIPE=qwen3_30b_a3b_muon",
        "CHECK=bridge",
        "parallel.moe_token_dispatcher=alltoall",
        "train.mbs=4,8",
        "parallel.ep=8,64",
        "dryrun=true",
        f"results_dir={marked_results(tmp_path / 'results')}",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("Bridge check: "))
    assert f"{target.name} (Megatron Bridge {target.bridge}, Core {target.core}) on this CPU, 2 plans in " in header
    checked = [line.split()[:2] for line in lines if line.startswith(("  passed ", "  refused "))]
    assert checked == [["passed", "mbs4-ep8"], ["passed", "mbs8-ep8"]]  # EP64 > 8 GPUs: refused by our checks, not sent
    assert sum(line.startswith("  invalid  mbs") for line in lines) == 2


def test_the_check_never_writes_over_an_existing_report_path(tmp_path: Path) -> None:
    """Run as a process of its own: importing the check installs the stand-ins (stubbed modules, a faked GPU)."""
    canary = tmp_path / "canary"
    canary.write_text("keep")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--out", str(canary)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and canary.read_text() == "keep"
    assert done.stderr.strip() == f"error: --out: {canary} exists; name a new file for the report"
