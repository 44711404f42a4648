"""The command line as a user types it: make targets, override forwarding, plan.json, exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO, run_cli, run_make
from optbench.common.make_args import overrides_from_make, split_make_words
from optbench.common.exits import exit_on_user_error

pytestmark = pytest.mark.slow  # runs the launcher in subprocesses; `make test-fast` skips it

PLAN_FIELDS = {
    "recipe",
    "overrides",
    "world_size",
    "nodes",
    "gpus_per_node",
    "gpu",
    "precision",
    "layout",
    "gbs",
    "mbs",
    "seq_length",
    "num_microbatches",
    "model",
    "optimizer",
}


def test_make_plan_kimi_k2_muon_shows_the_published_layout(results_dir: Path) -> None:
    done = run_make("plan", "RECIPE=kimi_k2_muon", f"results_dir={results_dir}")
    assert done.returncode == 0, done.stderr
    assert "256 = 64 nodes x 4 GB300" in done.stdout
    assert "TP1 PP4 VPP4 CP1 EP64 ETP1 | DP64" in done.stdout
    plan = json.loads((results_dir / "plans" / "kimi_k2_muon" / "plan.json").read_text())
    assert PLAN_FIELDS <= plan.keys()
    assert plan["layout"] == {"tp": 1, "pp": 4, "vpp": 4, "cp": 1, "ep": 64, "etp": 1, "dp": 64, "edp": 1}
    assert (plan["world_size"], plan["nodes"], plan["gpus_per_node"], plan["gpu"]) == (256, 64, 4, "gb300")
    assert (plan["gbs"], plan["mbs"], plan["seq_length"], plan["num_microbatches"]) == (4096, 2, 4096, 32)
    assert plan["optimizer"]["name"] == "muon" and plan["optimizer"]["muon"]["layer_wise"] is True
    assert plan["model"]["name"] == "kimi_k2" and plan["model"]["total_params"] > 1e12


def test_make_forwards_overrides_exactly_as_typed(results_dir: Path) -> None:
    done = run_make(
        "plan", "RECIPE=kimi_k2_muon", "parallel.pp=8", "parallel.ep=32", "parallel.vpp=2", f"results_dir={results_dir}"
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads((results_dir / "plans" / "kimi_k2_muon" / "plan.json").read_text())
    assert plan["layout"]["pp"] == 8 and plan["layout"]["ep"] == 32 and plan["layout"]["dp"] == 32
    assert plan["overrides"][:3] == ["parallel.pp=8", "parallel.ep=32", "parallel.vpp=2"]


def test_later_override_wins_as_in_hydra(results_dir: Path) -> None:
    done = run_make(
        "plan", "RECIPE=qwen3_moe_tiny_muon", "train.iters=5", "train.iters=7", f"results_dir={results_dir}"
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads((results_dir / "plans" / "qwen3_moe_tiny_muon" / "plan.json").read_text())
    assert plan["config"]["train"]["iters"] == 7


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_make_plan_bad_ep_fails_in_one_line() -> None:
    done = run_make("plan", "RECIPE=kimi_k2_muon", "parallel.ep=48")
    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert line.startswith("error: parallel.ep:") and "must divide tp*cp*dp" in line


def test_make_plan_misspelled_key_fails_in_one_line() -> None:
    done = run_make("plan", "RECIPE=kimi_k2_muon", "parallel.tpp=2")
    assert done.returncode == 2
    assert _one_error_line(done.stderr).startswith("error: parallel.tpp: unknown key (did you mean tp?)")


def test_unknown_recipe_lists_the_recipes() -> None:
    done = run_cli("plan", "kimi_k3_muon")
    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert "kimi_k2_muon" in line and "qwen3_30b_a3b_adamw" in line


def test_debug_true_shows_the_traceback() -> None:
    done = run_cli("plan", "kimi_k2_muon", "parallel.ep=48", "debug=true")
    assert done.returncode != 0 and "Traceback" in done.stderr


def test_invalid_run_leaves_the_previous_plan_untouched(results_dir: Path) -> None:
    assert run_cli("plan", "kimi_k2_muon", f"results_dir={results_dir}").returncode == 0
    path = results_dir / "plans" / "kimi_k2_muon" / "plan.json"
    before = path.read_bytes()
    assert run_cli("plan", "kimi_k2_muon", "parallel.ep=48", f"results_dir={results_dir}").returncode == 2
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["plan.json"]


def test_account_never_reaches_the_plan(results_dir: Path) -> None:
    secret = "acct-7f3e9c-secret"
    done = run_cli("plan", "kimi_k2_muon", f"results_dir={results_dir}", env={"SBATCH_ACCOUNT": secret})
    assert done.returncode == 0, done.stderr
    text = (results_dir / "plans" / "kimi_k2_muon" / "plan.json").read_text()
    assert secret not in text and secret not in done.stdout
    assert json.loads(text)["config"]["cluster"]["account"] == "<redacted>"


def test_make_help_documents_every_target() -> None:
    done = run_make("help")
    assert done.returncode == 0
    targets = set(re.findall(r"^([a-z][a-zA-Z_-]*):", (REPO / "Makefile").read_text(), re.M))
    listed = {line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ") and line.split()}
    assert targets <= listed, targets - listed


def test_split_make_words_undoes_make_escaping() -> None:
    assert split_make_words(r"q=[1,\ 2] a.b=c\\d x=y") == ["q=[1, 2]", r"a.b=c\d", "x=y"]


def test_overrides_from_make_drop_make_variables_and_restore_order() -> None:
    env = {"OPTBENCH_MAKE_OVERRIDES": r"b=2 RECIPE=kimi_k2_muon a=1 PY=/usr/bin/python"}
    assert overrides_from_make(env) == ["a=1", "b=2"]


def test_ctrl_c_is_one_line_with_the_shells_code(capsys) -> None:
    with pytest.raises(SystemExit) as exited, exit_on_user_error():
        raise KeyboardInterrupt
    assert exited.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("interrupted (Ctrl-C):") and "resume=true run_id=" in err[0]
    with pytest.raises(KeyboardInterrupt), exit_on_user_error(debug=True):  # debug=true keeps the traceback
        raise KeyboardInterrupt


def test_a_reader_that_leaves_the_pipe_ends_the_command_quietly(results_dir: Path) -> None:
    """`make search | head`: the output's reader is gone before the command prints; no traceback, the shell's 141."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "launch", "plan", "kimi_k2_tiny_muon", f"results_dir={results_dir}"]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # composing takes a second: every line it prints meets a pipe with no reader
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 141 and stderr == ""
