"""The README's figures come out of the commands it shows beside them: each is run here and must print them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _plan(tmp_path: Path, recipe: str, *overrides: str) -> str:
    # The results folder from the environment, not an override: the plan's twin line repeats the overrides typed.
    done = subprocess.run(
        [sys.executable, "-m", "optbench", "plan", recipe, *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OPTBENCH_RESULTS_DIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_line_of_the_plan_excerpt_is_what_make_plan_prints(tmp_path: Path) -> None:
    block = README.split("$ make plan RECIPE=kimi_k2_muon ", 1)[1].split("```", 1)[0]
    shown = [line for line in block.splitlines()[1:] if line.strip()]
    assert len(shown) >= 10
    printed = set(_plan(tmp_path, "kimi_k2_muon").splitlines())
    assert [line for line in shown if line not in printed] == []


@pytest.mark.parametrize("model, recipe", [("Kimi K2", "kimi_k2_muon"), ("Qwen3 30B-A3B", "qwen3_30b_a3b_muon")])
def test_the_headline_muon_figures_are_what_their_commands_print(tmp_path: Path, model: str, recipe: str) -> None:
    figure = re.search(rf"{re.escape(model)} ([\d.]+) vs (?:published )?(\d+) \(([-+]?[\d.]+) %\)", README)
    assert figure is not None, model
    command = f"make plan RECIPE={recipe} cluster.container=nemo:26.02"
    assert command in README
    projected, published, error = figure.groups()
    out = _plan(tmp_path, recipe, "cluster.container=nemo:26.02")
    assert (
        f"published   nvidia_blog_table1 26.02: {published} model TFLOP/s/GPU; projected {projected} ({error} %)" in out
    )


def test_the_default_containers_figure_the_readme_names_is_printed(tmp_path: Path) -> None:
    shown = re.search(
        r"make plan RECIPE=qwen3_30b_a3b_muon cluster.container=nemo:26.02 +# the default container, "
        r"nemo:(\S+), prints ([\d.]+)",
        README,
    )
    assert shown is not None
    container, projected = shown.groups()
    out = _plan(tmp_path, "qwen3_30b_a3b_muon")
    assert f"nemo:{container}" in out and "  projection  step " in out and f": {projected} model + " in out


def test_make_projection_writes_results_only_and_the_readme_block_is_the_committed_validations() -> None:
    """A user's `make projection` never rewrites README.md or docs/ (`make docs-projection` is the maintainers'), and
    the committed block is what the committed results/projection/validation.json gives: regenerated together."""
    import json

    from optbench.report.validation_report import with_block

    user = subprocess.run(["make", "-n", "projection"], cwd=REPO, capture_output=True, text=True, timeout=60).stdout
    maintainer = subprocess.run(
        ["make", "-n", "docs-projection"], cwd=REPO, capture_output=True, text=True, timeout=60
    ).stdout
    from optbench.__main__ import COMMANDS

    assert "-m optbench projection " in user and "-m optbench docs-projection " in maintainer
    assert "--update-docs" not in COMMANDS["projection"].words and "--update-docs" in COMMANDS["docs-projection"].words
    data = json.loads((REPO / "results" / "projection" / "validation.json").read_text(encoding="utf-8"))
    for name in ("README.md", "docs/projection.md"):
        text = (REPO / name).read_text(encoding="utf-8")
        assert with_block(text, data) == text, f"{name}: run make docs-projection and commit it with validation.json"


def test_the_search_ranks_the_readme_quotes_are_make_search_ranks_output() -> None:
    """'NVIDIA's own layout is in its top 5 for N of M published rows, but for none of <model>'s K' is what the
    committed results/projection/search_ranks.json (make search-ranks) holds."""
    import json

    data = json.loads((REPO / "results" / "projection" / "search_ranks.json").read_text(encoding="utf-8"))
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    rows = data["rows"]
    assert f"in its top {data['top']} for {data['in_top']} of {len(rows)} published rows" in readme
    keys = {"Llama 3 70B": "llama3_70b", "Qwen3 235B-A22B": "qwen3_235b_a22b", "GPT-OSS 120B": "gpt_oss_120b"}
    quoted = re.findall(rf"(\d+|none) of ({'|'.join(keys)})'s (\d+)", readme)
    assert len(quoted) == 3, quoted
    for in_top, model, count in quoted:
        mine = [r for r in rows if r["row"].split()[2] == keys[model]]
        top = sum(r["rank"] is not None and r["rank"] <= data["top"] for r in mine)
        assert (len(mine), top) == (int(count), 0 if in_top == "none" else int(in_top)), model
