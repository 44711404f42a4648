"""Property-based fuzz of the command line: any override of any schema field, through the real CLI.

For every generated command (``plan``, ``pretrain ... dryrun=true`` or ``sweep ... dryrun=true`` on a
cluster or a local recipe, with one to three overrides drawn across every leaf field of the schema,
the config groups, Hydra's own syntax and raw text), the properties are:

* the command ends with exit code 0 or 2, never another exception (no traceback);
* a refusal prints exactly one ``error: <field>: ...`` line (plus at most the compact
  "and N more problems" line), and with a single override the field named is the one typed (or a
  section holding it, or a field under a typed group);
* a refusal changes no file under the results folder (an earlier plan is kept as it was);
* every JSON file an accepted command writes is strict JSON (no NaN or Infinity);
* each command finishes within :data:`SECONDS_PER_CASE`.

Cases are derandomized (the same examples on every run, so CI cannot flake); set
``OPTBENCH_FUZZ_EXAMPLES`` to run more (e.g. 2000) and ``OPTBENCH_FUZZ_RANDOM=1`` to draw new ones.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import time
import typing
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from optbench.__main__ import main
from optbench.config.domains import DOMAINS, Choice, Integer, Real, leaf_fields
from optbench.config.overrides import CONFIG_GROUPS, field_type, typed_key

pytestmark = pytest.mark.slow  # a property-based fuzz of the command line; `make test-fast` skips it

EXAMPLES = int(os.environ.get("OPTBENCH_FUZZ_EXAMPLES", "160"))
SECONDS_PER_CASE = 20.0
RECIPES = ("kimi_k2_muon", "qwen3_30b_a3b_adamw", "kimi_k2_tiny_muon", "qwen3_moe_tiny_adamw", "deepseek_v3_muon")
FIELDS = [key for key in leaf_fields() if key not in ("results_dir", "dryrun", "debug")]

ERROR_LINE = re.compile(r"^error: ([A-Za-z_][A-Za-z0-9_.\-]*|RECIPE|overrides|arguments): \S")


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------

NASTY_TEXT = [
    "",
    "null",
    "true",
    "a b",
    "x,y",
    "[1,2]",
    "{a: 1}",
    "${oc.env:HOME}",
    "'quoted'",
    '"dq"',
    "a\\b",
    "${missing.key}",
    "\u00e9t\u00e9",
    "x\ny",
    "../../etc",
    "$(rm -rf /)",
    "a" * 300,
]


def _numbers(key: str) -> st.SearchStrategy[str]:
    domain = DOMAINS.get(key)
    picks = [
        "-1",
        "0",
        "1",
        "2",
        "3",
        "7",
        "8",
        "64",
        "1024",
        "10**6",
        "1000000000000",
        "1" + "0" * 30,
        "1.5",
        "nan",
        "inf",
        "-inf",
        "1e400",
        "true",
        "abc",
    ]
    if isinstance(domain, Integer):
        picks += [str(domain.low), str(domain.high), str(domain.high + 1), str(domain.low - 1)]
    if isinstance(domain, Real):
        picks += [repr(b) for b in (domain.low, domain.high) if b is not None] + ["1e-12", "0.999", "1e308"]
    return st.one_of(st.sampled_from(picks), st.integers(-(10**6), 10**7).map(str), st.floats(allow_nan=True).map(repr))


def _words(key: str) -> st.SearchStrategy[str]:
    domain = DOMAINS.get(key)
    words = list(domain.words()) if isinstance(domain, Choice) else []
    return st.one_of(st.sampled_from(words or ["x"]), st.sampled_from(NASTY_TEXT), st.text(max_size=12))


def _lists(key: str) -> st.SearchStrategy[str]:
    return st.sampled_from(
        [
            "[]",
            "null",
            "[a]",
            "[[embedding,decoder]]",
            "[[embedding],[decoder,loss]]",
            "[1,2]",
            "['--mpi=pmix']",
            "[mla_up_proj]",
            "[moe_router,moe_preprocess]",
            "[foo]",
            "{a: 1}",
        ]
    )


def _value(key: str) -> st.SearchStrategy[str]:
    kind = field_type(key)
    origin = typing.get_origin(kind)
    if kind is bool:
        return st.sampled_from(["true", "false", "True", "yes", "1", "on", "maybe", "null", "${oc.env:HOME}"])
    if kind in (int, float):
        return _numbers(key)
    if origin in (list, typing.List):
        return _lists(key)
    if origin in (dict, typing.Dict):
        return st.sampled_from(["{}", "{A: b}", "{1BAD: x}", "{A: {B: 1}}", "null"])
    return _words(key)


def _assignment(key: str) -> st.SearchStrategy[str]:
    return _value(key).map(lambda value: f"{key}={value}")


GROUP_OVERRIDES = st.one_of(
    st.sampled_from(CONFIG_GROUPS).flatmap(
        lambda g: st.sampled_from([f"{g}=nope", f"{g}=null", f"~{g}", f"{g}=[a,b]", f"{g}="])
    ),
    st.sampled_from(
        [
            "cluster=h100",
            "cluster=local",
            "precision=fp8_cs",
            "precision=fp16",
            "optimizer=adamw",
            "optimizer=muon",
            "parallel=single",
            "data=indexed",
            "data=mock",
            "logger=none",
            "model=kimi_k2/tiny",
            "train=tiny",
            "parallel=kimi_k2/gb300_256",
        ]
    ),
)
SYNTAX = st.sampled_from(
    [
        "~parallel.tp",
        "+parallel.tp=2",
        "++parallel.tp=2",
        "parallel.tp@pkg=2",
        "hydra.job.name=x",
        "hydra/launcher=basic",
        "parallel.ep=32,64",
        "parallel.ep=range(1,100000)",
        "parallel.tpp=2",
        "+train.gbs_typo=3",
        "recipe=kimi_k2_adamw",
        "recipe=../../x",
        "recipe=",
        "noequals",
        "--foo",
        "=1",
        "a=b=c",
        "parallel.tp='1'",
        "parallel.pp=${parallel.tp}",
        "model.num_layers=${oc.decode:'61'}",
        "+cluster.env.HF_TOKEN=x",
        "+cluster.env.1BAD=x",
        "cluster.env.X=${oc.env:HOME}",
        "description=${oc.env:HOME}",
        "run_id=a/b",
        "run_id=" + "r" * 300,
        "parallel.pipeline_layout.0.0=embeding",
        "optimizer.muon.ns_steps=7",
        "parallel.num_gpus=1000000000000",
        "model.num_layers=100000000",
        "parallel.vpp=1000000",
        "model.num_moe_experts=4096",
        "train.gbs=" + "9" * 31,
        "parallel.pp=8",
        "parallel.pp=8 parallel.ep=32",
    ]
)
OVERRIDE = st.one_of(
    st.sampled_from(FIELDS).flatmap(_assignment),
    st.sampled_from(FIELDS).flatmap(_assignment),
    st.sampled_from(FIELDS).flatmap(_assignment),
    GROUP_OVERRIDES,
    SYNTAX,
    st.text(max_size=30),
)


def _results_dir_value(tmp: Path) -> st.SearchStrategy[list[str]]:
    """Mostly no override; sometimes a results_dir that must be refused (or a fresh folder, which is fine)."""
    return st.one_of(
        st.just([]),
        st.sampled_from(
            [
                str(tmp / "a_file"),
                "/dev/null",
                "/proc/x",
                str(tmp / ("d" * 300)),
                str(tmp / "a_file" / "x"),
                str(tmp / "fresh"),
            ]
        ).map(lambda v: [f"results_dir={v}"]),
    )


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------


def _snapshot(root: Path) -> dict[str, str]:
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            files[str(path.relative_to(root))] = hashlib.sha1(path.read_bytes()).hexdigest()
    return files


def _strict(text: str) -> object:
    def refuse(constant: str) -> float:
        raise ValueError(f"non-strict JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def _names_typed_field(field: str, typed: list[str]) -> bool:
    if not typed:  # the text named no key (``0``, ``=1``): the error is about the overrides as a whole
        return field == "overrides"
    return any(field == key or field.startswith(key + ".") or key.startswith(field + ".") for key in typed)


def run_cli(argv: list[str]) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - started


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder holding an earlier plan of every fuzzed recipe, and a file to aim results_dir at."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "a_file").write_text("not a folder\n")
    results = root / "results"
    for recipe in RECIPES:
        code, _, err, _ = run_cli(["plan", recipe, f"results_dir={results}"])
        assert code == 0, err
    return root


def check_case(arena: Path, command: str, recipe: str, overrides: list[str]) -> None:
    results = arena / "results"
    before = _snapshot(results)
    argv = [command, recipe, f"results_dir={results}", *overrides]
    if command != "plan":
        argv.append("dryrun=true")  # never train or submit for real
    code, _, err, seconds = run_cli(argv)
    context = f"{' '.join(argv)!r}: exit {code}, {seconds:.1f} s, stderr {err[-600:]!r}"
    assert seconds < SECONDS_PER_CASE, context
    assert code in (0, 2), context
    assert "Traceback" not in err, context
    if code == 2:
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and ERROR_LINE.match(errors[0]), context
        lines = [line for line in err.splitlines() if not line.startswith("note:")]
        assert len(lines) <= 2 and (len(lines) == 1 or lines[1].startswith("  and ")), context
        typed = [typed_key(o) for o in overrides if typed_key(o)]
        field = ERROR_LINE.match(errors[0]).group(1)
        if len(overrides) == 1 and command == "plan":
            assert _names_typed_field(field, typed), context
        assert _snapshot(results) == before, context
    else:
        for path in (arena / "results").rglob("*.json"):
            _strict(path.read_text())


# ---------------------------------------------------------------------------------------------
# The properties
# ---------------------------------------------------------------------------------------------

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("OPTBENCH_FUZZ_RANDOM") != "1",
    database=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),  # no "explain": it traces every line, slowly
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(data=st.data())
def test_plan_with_any_overrides_exits_0_or_2_with_one_line_and_keeps_earlier_files(arena: Path, data) -> None:
    recipe = data.draw(st.sampled_from(RECIPES), label="recipe")
    overrides = data.draw(st.lists(OVERRIDE, min_size=1, max_size=3), label="overrides")
    overrides += data.draw(_results_dir_value(arena), label="results_dir")
    check_case(arena, "plan", recipe, overrides)


@settings(FUZZ, max_examples=max(10, EXAMPLES // 8))
@given(data=st.data())
def test_dry_run_pretrain_and_sweep_with_any_overrides(arena: Path, data) -> None:
    command = data.draw(st.sampled_from(["pretrain", "sweep"]), label="command")
    recipe = data.draw(st.sampled_from(RECIPES), label="recipe")
    overrides = data.draw(st.lists(OVERRIDE, min_size=1, max_size=2), label="overrides")
    if command == "sweep":
        overrides.append(data.draw(st.sampled_from(["train.seed=1,2", "parallel.ep=32,64", "optimizer.lr=1e-3,2e-3"])))
    check_case(arena, command, recipe, overrides)


def test_the_fuzzed_fields_cover_the_schema() -> None:
    """Every leaf field is drawn (results_dir, dryrun and debug are set by the harness itself)."""
    assert set(FIELDS) | {"results_dir", "dryrun", "debug"} == set(leaf_fields())
