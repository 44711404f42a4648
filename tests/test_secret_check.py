"""The composition's secret check (optbench.common.redact.secret_problems) on fields of every type: an interpolation
that reaches the account or a credential variable is refused whatever the field's type (a typed field fails to
validate the marker and its error quotes it), one that reaches nothing secret composes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, marked_results
from optbench.compose.recipe import compose_run
from optbench.common.errors import UserError
from optbench.common.redact import REDACTED, is_secret_name

SECRETS = {"WANDB_API_KEY": "wk-0123456789abcdef", "SBATCH_ACCOUNT": "acct-hidden-77", "HF_TOKEN": "hf_tokenvalue42"}

REACHING = [
    ("parallel.tp", "parallel.tp=${oc.env:WANDB_API_KEY}"),  # int
    ("train.mbs", "train.mbs=${cluster.account}"),  # int, through the account
    ("model.qk_layernorm", "model.qk_layernorm=${oc.env:HF_TOKEN}"),  # bool
    ("parallel.moe_token_dispatcher", "parallel.moe_token_dispatcher=${cluster.account}"),  # a string of a domain
    ("optimizer.lr", "optimizer.lr=${oc.env:SBATCH_ACCOUNT}"),  # float
    ("train.seed", "train.seed=${oc.env:SBATCH_ACCOUNT,3}"),  # set: the default is not taken
    ("description", "description=${oc.select:cluster.account,1}"),
    ("description", "description=${cluster}"),  # a whole section holding the account
    ("logger.wandb_tags.0", "logger.wandb_tags=[${oc.env:HF_TOKEN}]"),  # an item of a list
]


@pytest.fixture(autouse=True)
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(("field", "override"), REACHING, ids=[o for _, o in REACHING])
def test_an_interpolation_reaching_a_secret_is_refused_in_a_field_of_any_type(field: str, override: str) -> None:
    with pytest.raises(UserError) as refused:
        compose_run("kimi_k2_muon", [override])
    [line] = refused.value.lines()
    assert line.startswith(f"error: {field}: interpolates a secret") and not any(v in line for v in SECRETS.values())


@pytest.mark.parametrize(
    "override",
    [
        "parallel.pp=${oc.env:OPTBENCH_NO_SUCH_VARIABLE,8}",
        "description=x${cluster.partition}",
        "description=${parallel.ep}",
    ],
)
def test_an_interpolation_reaching_nothing_secret_composes(override: str) -> None:
    compose_run("kimi_k2_muon", [override])


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "GITHUB_TOKEN",
        "AWS_SESSION_TOKEN",
        "cluster.env.HF_TOKEN",
        "WANDB_API_KEY",
        "SBATCH_ACCOUNT",
        "cluster.account",
        "DB_PASSWORD",
        "TOKEN",
    ],
)
def test_credential_names_are_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "parallel.moe_token_dispatcher",
        "model.moe_token_dispatcher_type",
        "moe_token_drop_policy",
        "pad_token_id",
        "tokens_per_step",
        "data.tokenizer",
        "TOKENIZERS_PARALLELISM",
    ],
)
def test_a_models_words_for_its_tokens_are_not_secret(name: str) -> None:
    assert not is_secret_name(name)


def test_a_typed_dispatcher_reaches_the_plans_bridge_overrides_as_typed(tmp_path: Path) -> None:
    """It once made its value a secret: the plan's Bridge overrides read <redacted>, which the job cannot parse."""
    results = marked_results(tmp_path / "results")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "optbench",
            "plan",
            "qwen3_30b_a3b_muon",
            "parallel.moe_token_dispatcher=alltoall",
            f"results_dir={results}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads((results / "plans" / "qwen3_30b_a3b_muon" / "plan.json").read_text())
    assert "model.moe_token_dispatcher_type=alltoall" in plan["bridge"]["overrides"]
    assert not [o for o in plan["bridge"]["overrides"] if REDACTED in o]
    assert plan["overrides"][0] == "parallel.moe_token_dispatcher=alltoall"
    assert plan["config"]["parallel"]["moe_token_dispatcher"] == "alltoall"


def test_no_piece_of_a_secret_survives_an_error_line_that_cuts_a_typed_word(monkeypatch):
    """A typed word cut to fit an error line was cut before it was redacted: 'make plan EP=<prefix><account>' printed
    the first 20 characters, half of the account, which the output's redaction (whole secrets only) let through; so
    could Hydra's message about a long unreadable override, cut at 160 characters inside the secret."""
    from optbench.common.make_args import words_from_make
    from optbench.config.overrides import check_syntax

    secret = "AcctLongSecretValue1234567890"
    monkeypatch.setenv("SBATCH_ACCOUNT", secret)
    pieces = {secret[i : i + 8].casefold() for i in range(len(secret) - 7)}
    with pytest.raises(UserError) as refused:
        words_from_make(
            "plan", {"CHECK": "--check"}, True, True, {"OPTBENCH_MAKE_OVERRIDES": f"EP=abcdefghij{secret.lower()}"}
        )
    [line] = refused.value.report()
    assert "parallel.ep=" in line and not any(p in line.casefold() for p in pieces), line
    for padding in range(140, 170, 3):  # Hydra's message cut anywhere around the secret
        [problem] = check_syntax([f"cluster.partition=[{'A' * padding}{secret}"])
        assert not any(p in str(problem).casefold() for p in pieces), (padding, str(problem))
