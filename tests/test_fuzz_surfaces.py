"""Property-based fuzz of the surfaces beyond overrides: ``make data`` options and paths, ``make table LOGS=``
with drawn log text, resuming over drawn checkpoint manifests and pointers, container/image pairs.

Each drawn command runs through the adversarial harness (tests/adversarial/harness.py) with its canary
tree, secrets in the environment and the same checks: exit 0 or 2, no traceback, one error line, no
secret printed or written, every canary intact, a refusal changes no file. Derandomized like
test_fuzz_overrides (``OPTBENCH_FUZZ_EXAMPLES``, ``OPTBENCH_FUZZ_RANDOM=1``).
"""

from __future__ import annotations

import json
import os
import shlex

import pytest
from adversarial.harness import Case, World, build_world, execute
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow  # a property-based fuzz of every command surface; `make test-fast` skips it

EXAMPLES = int(os.environ.get("OPTBENCH_FUZZ_EXAMPLES", "160")) // 6
FUZZ = settings(
    max_examples=max(10, EXAMPLES),
    deadline=None,
    derandomize=os.environ.get("OPTBENCH_FUZZ_RANDOM") != "1",
    database=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
PLACES = [
    "{canary}",
    "{checkout}",
    "{checkout}/conf",
    "{input}",
    "{input}/sub",
    "{userdir}",
    "{userfile}",
    "{device}",
    "{fifo}",
    "{link}",
    "{resultslike}",
    "{results}",
    "{results}/runs",
    "{corpus}",
    "{scratch}",
    "/",
    "/dev/null",
    "/proc/self",
    "/sys",
    "/etc",
    ".",
    "..",
    "{repo}/src",
    "{logs}",
]
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
"""No NUL: no command line or environment variable can carry one (make passes values through the environment)."""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("fuzz-surfaces"))


def _run(
    world: World,
    tmp_path_factory: pytest.TempPathFactory,
    capsys,
    target: str,
    words: list[str],
    setups: list[str] = (),
) -> None:
    case = Case(
        0, "any", None, target, (*words, *(f"@{s}" for s in setups)), " ".join(map(shlex.quote, [target, *words]))
    )
    with pytest.MonkeyPatch.context() as monkeypatch:
        execute(case, world, tmp_path_factory.mktemp("case"), capsys, monkeypatch)


def _path(scratch_share: float = 0.5) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(PLACES), TEXT.map(lambda t: "{scratch}/" + t.replace("{", "(")))


@FUZZ
@given(data=st.data())
def test_make_data_with_drawn_paths_and_options(world, tmp_path_factory, capsys, data) -> None:
    words = [
        f"INPUT={data.draw(st.one_of(st.sampled_from(['{input}', '{badinput}', '{link}']), _path()))}",
        f"OUT={data.draw(_path())}",
    ]
    if data.draw(st.booleans()):
        words.append(f"TOKENIZER={data.draw(st.one_of(st.just('{tokenizer}'), _path()))}")
    if data.draw(st.booleans()):
        words.append(f"VOCAB={data.draw(st.one_of(st.integers(-5, 2**21).map(str), TEXT))}")
    _run(world, tmp_path_factory, capsys, "data", words)


LOG_PIECES = [
    " iteration ",
    "10",
    "/",
    " 100 |",
    " elapsed time per iteration (ms): ",
    "12920.3",
    " | ",
    "throughput per GPU (TFLOP/s/GPU): ",
    "1037.0",
    " lm loss: ",
    "nan",
    "inf",
    "-1",
    "1e400",
    "9" * 400,
    "Step Time : ",
    "12.92s GPU utilization: ",
    "MODEL_TFLOP/s/GPU",
    "\n",
    "\r\n",
    "\x00",
    "[2026-04-01 12:00:00]",
    "[rank3]: ",
    " " * 200,
    "|" * 50,
    "wk-adv-0123456789abcdef",
]


@FUZZ
@given(data=st.data())
def test_make_table_with_drawn_log_text(world, tmp_path_factory, capsys, data) -> None:
    pieces = data.draw(st.lists(st.one_of(st.sampled_from(LOG_PIECES), TEXT), max_size=60))
    log = tmp_path_factory.mktemp("log") / "drawn.log"
    log.write_text(
        "".join(pieces) * data.draw(st.sampled_from([1, 3, 200])), encoding="utf-8", errors="surrogateescape"
    )
    words = [f"LOGS={log}"] + ([f"WARMUP={data.draw(st.integers(0, 5))}"] if data.draw(st.booleans()) else [])
    _run(world, tmp_path_factory, capsys, "table", words)


JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)
MANIFEST_KEYS = st.fixed_dictionaries({}, optional={"step": JSON, "world": JSON, "files": JSON, "run": JSON})
RESUME = [
    "RECIPE=kimi_k2_tiny_muon",
    "{micro}",
    "train.iters=6",
    "train.save_interval=2",
    "run_id=saved",
    "resume=true",
]


@FUZZ
@given(data=st.data())
def test_resume_over_drawn_manifests_and_pointers(world, tmp_path_factory, capsys, data, monkeypatch) -> None:
    from adversarial import setups

    manifest = data.draw(st.one_of(JSON, MANIFEST_KEYS))
    latest = data.draw(
        st.one_of(st.none(), st.binary(max_size=80), st.sampled_from([b"step_000004\n", b"step_000002"]))
    )

    def corrupt(places) -> None:
        root = places.results / "checkpoints" / "saved"
        (root / "step_000004" / "manifest.json").write_text(json.dumps(manifest))
        if latest is not None:
            (root / "latest").write_bytes(latest)

    monkeypatch.setitem(setups.SETUPS, "drawn", corrupt)
    _run(world, tmp_path_factory, capsys, "pretrain", list(RESUME), ["drawn"])


CONTAINERS = [
    "nemo:26.02",
    "nemo:26.02.01",
    "nemo:26.04",
    "nemo:26.04.01",
    "nemo:26.06",
    "nemo:26.06.01",
    "nemo:26.08",
    "nemo:25.11",
    "nemo:99.99",
    "NEMO:26.02",
]


@FUZZ
@given(data=st.data())
def test_container_and_image_pairs(world, tmp_path_factory, capsys, data) -> None:
    container = data.draw(st.one_of(st.sampled_from(CONTAINERS), TEXT), label="container")
    words = ["RECIPE=qwen3_30b_a3b_adamw", f"cluster.container='{container}'".replace("\\", "")]
    if data.draw(st.booleans()):
        image = data.draw(
            st.one_of(st.sampled_from(CONTAINERS).map(lambda c: f"nvcr.io/nvidia/{c}"), TEXT), label="image"
        )
        words.append(f"cluster.container_image='{image}'".replace("\\", ""))
    _run(world, tmp_path_factory, capsys, data.draw(st.sampled_from(["plan", "pretrain"])), [*words, "dryrun=true"])
