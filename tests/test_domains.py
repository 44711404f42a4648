"""Every field has a domain; values outside it, and overrides that mean nothing, are refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import run_cli
from optbench.compose.recipe import compose_run
from optbench.config.domains import DOMAINS, MAX_EXPERT_LAYERS, Folder, leaf_fields
from optbench.common.errors import Problem, UserError
from optbench.common.io import atomic_write_json, dumps_strict
from optbench.metrics.jsonl import JsonlAppender
from optbench.validate import collect_problems


def problems(recipe: str, *overrides: str) -> list[Problem]:
    try:
        run = compose_run(recipe, list(overrides))
    except UserError as err:
        return err.problems
    return collect_problems(run)


def first(recipe: str, *overrides: str) -> str:
    found = problems(recipe, *overrides)
    assert found, f"{overrides} was accepted"
    return str(found[0].named_for([o.split("=")[0].lstrip("+~") for o in overrides]))


def test_every_leaf_field_has_exactly_one_domain() -> None:
    assert set(DOMAINS) == set(leaf_fields())


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("parallel.tp=0", "parallel.tp: must be a whole number from 1 to 1,024, got 0"),
        ("parallel.cp=0", "parallel.cp: must be a whole number from 1 to 1,024, got 0"),
        ("parallel.vpp=-1", "parallel.vpp: must be a whole number from 1 to 256, got -1"),
        ("model.ffn_hidden_size=0", "model.ffn_hidden_size: must be a whole number from 1"),
        ("model.kv_lora_rank=-1", "model.kv_lora_rank: must be a whole number from 1"),
        ("optimizer.lr=nan", "optimizer.lr: must be a finite number in (0, 10], got nan"),
        ("optimizer.weight_decay=-0.1", "optimizer.weight_decay: must be a finite number in [0, 10], got -0.1"),
        ("optimizer.clip_grad=inf", "optimizer.clip_grad: must be a finite number"),
        ("optimizer.adam_eps=0", "optimizer.adam_eps: must be a finite number in (0, 1]"),
        ("model.rotary_base=-inf", "model.rotary_base: must be a finite number"),
        ("model.init_method_std=0", "model.init_method_std: must be a finite number in (0, 10]"),
        ("model.layernorm_epsilon=1", "model.layernorm_epsilon: must be a finite number in (0, 1)"),
        ("model.moe_aux_loss_coeff=-1", "model.moe_aux_loss_coeff: must be a finite number in [0, 100]"),
        ("optimizer.muon.extra_scale_factor=nan", "optimizer.muon.extra_scale_factor: must be a finite number"),
        ("step_time_s=-1", "step_time_s: must be a finite number in (0, 1e+06], got -1"),
        ("train.gbs=" + "1" + "0" * 30, "train.gbs: must be a whole number from 1 to 1,048,576"),
        ("parallel.num_gpus=1000000000000", "parallel.num_gpus: must be a whole number from 1 to 32,768"),
        ("model.num_layers=100000000", "model.num_layers: must be a whole number from 1 to 1,024"),
        ("parallel.vpp=1000000", "parallel.vpp: must be a whole number from 1 to 256"),
        ("cluster.time=soon", "cluster.time: 'soon' is not a Slurm time"),
        ("cluster.mem=lots", "cluster.mem: 'lots' is not a Slurm memory size"),
        ("logger.wandb_project='a/b'", "logger.wandb_project: 'a/b' is not a wandb name"),
        (
            "precision.fp8_recipe=fancy",
            "precision.fp8_recipe: 'fancy' is not one of delayed, tensorwise, mxfp8, blockwise",
        ),
        (
            "parallel.recompute_modules=[everything]",
            "parallel.recompute_modules.0: 'everything' is not one of core_attn",
        ),
        ("data.path=[[a,b]]", "data.path.0: expected text"),
        ("run_id=" + "r" * 300, "run_id: must be 1 to 128 characters long, got 300"),
    ],
)
def test_values_outside_their_domain_are_refused_with_field_value_and_range(override: str, expected: str) -> None:
    assert first("kimi_k2_muon", override).startswith(expected)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("parallel.sequence_parallel=yes", "parallel.sequence_parallel: expected true or false, got 'yes'"),
        ("dryrun=1", "dryrun: expected true or false, got '1'"),
        ("force=on", "force: expected true or false, got 'on'"),
        ("~parallel.tp", "parallel.tp: cannot be deleted with '~'"),
        ("parallel.tp@x=2", "parallel.tp: package overrides"),
        ("hydra.job.name=x", "hydra.job.name: Hydra's own settings are fixed"),
        ("+parallel.tp=2", "parallel.tp: already exists; set it without the '+'"),
        ("optimizer=null", "optimizer: choose an option of the optimizer group by name"),
        ("model.name=foo", "model.name: cannot be set on its own: it names the model preset"),
        ("recipe=kimi_k2_adamw", "recipe: cannot be set on its own"),
        ("optimizer.muon.assignment=cost_aware", "optimizer.muon.assignment: Megatron Bridge up to"),
        ("data.vocab_size=256", "data.vocab_size: has no effect on Megatron Bridge"),
        ("parallel.ep=32,64", "parallel.ep: a comma-separated value is a sweep"),
    ],
)
def test_overrides_that_bypass_the_schema_or_mean_nothing_are_refused(override: str, expected: str) -> None:
    assert first("kimi_k2_muon", override).startswith(expected)


@pytest.mark.parametrize(
    "override",
    ["parallel.recompute_granularity=full", "logger.log_throughput=false", "cluster.time=02:00:00", "+cluster.env.X=1"],
)
def test_settings_the_local_engine_never_reads_are_refused_there(override: str) -> None:
    key = override.split("=")[0].lstrip("+")
    assert first("kimi_k2_tiny_muon", override).startswith(f"{key}: has no effect on")


def test_cross_field_rules() -> None:
    assert first("kimi_k2_muon", "optimizer.min_lr=1").startswith(
        "optimizer.min_lr: must not exceed optimizer.lr=0.0003"
    )
    assert first("kimi_k2_tiny_muon", "optimizer.muon.ns_steps=7").startswith(
        "optimizer.muon.ns_steps: must be a multiple of 5 with the quintic coefficients"
    )
    assert problems("kimi_k2_tiny_muon", "optimizer.muon.ns_steps=7", "optimizer.muon.coefficients=simple") == []
    layers = MAX_EXPERT_LAYERS // 256 + 1
    assert first("deepseek_v3_muon", f"model.num_layers={layers}", "parallel.pipeline_layout=null").startswith(
        f"model.num_layers: {layers} layers x 256 experts"
    )
    assert first("kimi_k2_muon", "model.moe_router_num_groups=5").startswith(
        "model.moe_router_num_groups: 384 experts do not split into 5 routing groups"
    )
    assert first("kimi_k2_muon", "parallel.pp=64", "parallel.vpp=1", "parallel.ep=4").startswith(
        "parallel.pp: pp*vpp = 64*1 = 64 virtual stages for 61 decoder layers"
    )


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["parallel.tp=3"], "parallel.tp"),  # the world-size rule is reported on num_gpus, named on what was typed
        (["parallel.num_gpus=384"], "parallel.num_gpus"),  # ep must divide dp
        (["train.mbs=3"], "train.mbs"),
        (["cluster=h100"], "cluster"),  # mxfp8 on Hopper
        (["model.num_layers=62"], "model.num_layers"),  # the pipeline layout no longer places every layer
        (["train.mbs=64"], "train.mbs"),  # memory
    ],
)
def test_the_error_line_names_the_field_the_user_typed(overrides: list[str], field: str) -> None:
    assert first("kimi_k2_muon", *overrides).startswith(f"{field}: ")


def test_several_problems_give_one_error_line_and_one_compact_line(tmp_path: Path) -> None:
    done = run_cli(
        "plan", "kimi_k2_muon", "parallel.tp=0", "optimizer.lr=nan", "train.gbs=0", f"results_dir={tmp_path}"
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0] == "error: parallel.tp: must be a whole number from 1 to 1,024, got 0"
    assert lines[1] == "  and 2 more problems (optimizer.lr, train.gbs); debug=true lists them all"
    assert len(lines) == 2 and not (tmp_path / "plans").exists()


def test_a_bad_option_is_one_line_not_argparse_usage(tmp_path: Path) -> None:
    done = run_cli("plan", "kimi_k2_muon", "--foo", f"results_dir={tmp_path}")
    assert done.returncode == 2 and done.stderr == "error: overrides: '--foo' is not key=value; e.g. parallel.pp=8\n"
    done = run_cli("frobnicate")
    assert (
        done.returncode == 2
        and len(done.stderr.splitlines()) == 1
        and done.stderr.startswith("error: command: 'frobnicate'")
    )


@pytest.mark.parametrize("where", ["a_file", "a_file/below", "/dev/null", "/proc/optbench", "/" + "x" * 300])
def test_results_dir_must_be_a_folder_that_can_hold_results(tmp_path: Path, where: str) -> None:
    (tmp_path / "a_file").write_text("x")
    path = where if where.startswith("/") else str(tmp_path / where)
    [problem] = list(Folder().problems("results_dir", path))
    assert problem.field == "results_dir"
    assert list(Folder().problems("results_dir", str(tmp_path / "new" / "folder"))) == []


def test_writers_emit_strict_json(tmp_path: Path) -> None:
    data = {"loss": math.nan, "rate": [math.inf, -math.inf, 1.5], "nested": {"x": float("nan")}}
    assert json.loads(dumps_strict(data)) == {"loss": None, "rate": [None, None, 1.5], "nested": {"x": None}}
    atomic_write_json(tmp_path / "a.json", data)
    appender = JsonlAppender(tmp_path / "m.jsonl")
    appender.append({"step": 1, "loss": math.nan})
    appender.close()
    for path in (tmp_path / "a.json", tmp_path / "m.jsonl"):
        for line in path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]:
            json.loads(line, parse_constant=lambda c: pytest.fail(f"{path}: {c}"))
