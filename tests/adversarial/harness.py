"""Run one line of the adversarial corpus (corpus.txt) as a user would, and check what it did.

A line is ``<expect> <target> <words...>`` (shell quoting): ``expect`` is ``ok`` (exit 0) or
``refused`` / ``refused:<field>`` (exit 2, one ``error: <field>: ...`` line); ``target`` is a make
target. ``plan``, ``pretrain``, ``sweep``, ``data`` and ``table`` run in this process exactly as
``make <target> <words>`` reaches Python (the Makefile's environment: OPTBENCH_MAKE_OVERRIDES with
make's escaping, and OPTBENCH_RECIPE; the dispatcher reads both); ``make`` runs the real make
(Makefile-level cases). ``@name`` words are setup steps applied to the case's results folder before the
command (corrupted checkpoints, read-only files). Placeholders in braces are paths of the world below.

Every case runs with its working directory in a fake checkout inside a **canary tree** (user files, a
folder, a file, a symbolic link, a character device made with mknod, a FIFO, the input corpus, crafted
logs) and with secrets in the environment. Checks: the exit code, no traceback, no secret printed or
written, every canary as it was, nothing a setup put in the scratch folder gone; for a refusal also the
results folder and the scratch folder as they were.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adversarial.places import Places, write
from adversarial.setups import apply_setups
from conftest import MICRO_KIMI, MICRO_VOCAB

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).with_name("corpus.txt")
SECRETS = {
    "WANDB_API_KEY": "wk-adv-0123456789abcdef",
    "SBATCH_ACCOUNT": "acct-adv-hidden-42",
    "HF_TOKEN": "hf_advtoken42xyz",
    "GITHUB_TOKEN": "Gh_MiXeD_CaSe_77",
}
"""Each must stay out of every output and file in any letter case (a typed word may be lower-cased before it is
printed: issue 78 item 2); GITHUB_TOKEN is the mixed-case one, ``{mixedsecret}`` in the corpus."""
MICRO = [
    *MICRO_KIMI,
    *MICRO_VOCAB,
    "train.gbs=8",
    "train.mbs=2",
    "train.seq_length=32",
    "train.warmup_iters=1",
    "train.lr_decay_iters=6",
    "logger=none",
]
"""``{micro}``: a 2-layer Kimi K2 proxy that trains a step in well under a second."""
TARGETS = ("plan", "pretrain", "sweep", "search", "data", "table", "study", "gpu-smoke", "make")
CORPORA = (CORPUS, CORPUS.with_name("corpus_surfaces.txt"))
"""corpus.txt (the first three rounds) and corpus_surfaces.txt (issue 78's round: edited YAML, the GPU smoke, the
study from git, damaged data, mixed-case secrets, OPTBENCH_ROOT, enroot's credentials)."""


@dataclass(frozen=True)
class Case:
    """One corpus line."""

    number: int
    expect: str
    """'ok', 'refused', or 'any' (either; the fuzz tests, whose inputs are drawn)."""
    field: str | None
    """The field a refusal must name (None: any)."""
    target: str
    words: tuple[str, ...]
    text: str

    corpus: str = "corpus"

    @property
    def id(self) -> str:
        prefix = "" if self.corpus == "corpus" else f"{self.corpus}:"
        return f"{prefix}{self.number}:{self.text[:70]}"


def load_corpus(path: Path = CORPUS) -> list[Case]:
    cases = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        expect, target, *words = shlex.split(line)
        expect, _, field = expect.partition(":")
        assert expect in ("ok", "refused") and target in TARGETS, f"{path.name}:{number}: {line}"
        cases.append(Case(number, expect, field or None, target, tuple(words), line.strip(), path.stem))
    return cases


def load_corpora() -> list[Case]:
    return [case for path in CORPORA for case in load_corpus(path)]


# -------------------------------------------------------------------------------------------------
# The world: canary tree, baseline results, crafted logs
# -------------------------------------------------------------------------------------------------


ITERATION = (
    " [2026-04-01 12:00:0{i}] iteration {i:8d}/     100 | consumed samples: {s} | elapsed time per iteration "
    "(ms): 12920.3 | throughput per GPU (TFLOP/s/GPU): 1037.0 | learning rate: 3.000000E-04 | global batch "
    "size:  4096 | lm loss: 9.876543E+00 | loss scale: 1.0 |"
)
LOGS: dict[str, bytes] = {
    "good": "\n".join(ITERATION.format(i=i, s=i * 4096) for i in range(1, 6)).encode() + b"\n",
    "steptime": b"Step Time : 12.92s GPU utilization: 1037.0MODEL_TFLOP/s/GPU\n" * 5,
    "empty": b"",
    "binary": bytes(range(256)) * 64,
    "digits": b" iteration " + b"7" * 5000 + b"/ 100 | lm loss: 1.0 |\n",
    "bignumber": b" iteration 3/ 100 | elapsed time per iteration (ms): " + b"9" * 5000 + b" | lm loss: 1.0 |\n",
    "longline": b" iteration 1/ 2 | a" + b" " * 500_000 + b"x\n",
    "noline": b"x" * 2_000_000,
    "manybars": b" iteration 1/ 2 |" * 200_000 + b"\n",
    "negative": b" iteration 1/ 2 | elapsed time per iteration (ms): -5 | throughput per GPU (TFLOP/s/GPU): -1 |\n",
    "nan": b"Step Time : nans GPU utilization: infMODEL_TFLOP/s/GPU\n iteration 1/ 2 | lm loss: nan |\n",
    "restarts": "\n".join(ITERATION.format(i=i % 3 + 1, s=i) for i in range(9)).encode() + b"\n",
    "utf16": "Step Time : 1.0s GPU utilization: 5.0MODEL_TFLOP/s/GPU\n".encode("utf-16"),
    "secret": (ITERATION.format(i=1, s=1) + " wandb key wk-adv-0123456789abcdef\n").encode(),
    "nul": b"\x00" * 100_000,
    "crlf": b"Step Time : 12.92s GPU utilization: 1037.0MODEL_TFLOP/s/GPU\r\n" * 3,
}
"""``{log:<name>}``: raw Megatron Bridge logs, from ordinary to hostile."""


@dataclass(frozen=True)
class World:
    """What every case starts from (built once per test process)."""

    root: Path
    canary: Path
    """Never to be changed by any case."""
    baseline: Path
    """The results folder each case gets a copy of."""
    corpus: Path
    """An earlier ``make data`` output each case gets a copy of."""
    tokenizer: Path
    device_kind: str


def _make_device(path: Path) -> str:
    """A character device like /dev/null (root only), else a FIFO: something that is not a file or folder."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        return "char device 1:3"
    except (PermissionError, OSError):
        os.mkfifo(path)
        return "fifo (mknod not permitted)"


def build_canary(root: Path) -> tuple[Path, str]:
    canary = root / "canary"
    write(canary / "checkout" / "recipes" / "mine.yaml", "# a recipe of the user's\n")
    write(canary / "checkout" / "conf" / "model" / "mine.yaml", "name: mine\n")
    write(canary / "checkout" / "src" / "keep.py", "print('keep')\n")
    write(canary / "checkout" / "README.md", "the user's checkout\n")
    write(canary / "input" / "a.txt", "The quick brown fox jumps over the lazy dog. " * 20)
    write(canary / "input" / "b.txt", "Pack my box with five dozen liquor jugs. " * 20)
    write(canary / "input" / "sub" / "c.jsonl", json.dumps({"text": "Sphinx of black quartz, judge my vow."}) + "\n")
    write(canary / "badinput" / "bad.jsonl", '{"text": 1}\n{not json\n')
    write(canary / "userdir" / "notes.txt", "my notes\n")
    write(canary / "userdir" / "deep" / "data.bin", bytes(range(256)))
    write(canary / "userfile.txt", "a file of the user's\n")
    write(canary / "results-like" / "runs" / "mine.txt", "looks like results but is not optbench's\n")
    (canary / "dev").mkdir()
    kind = _make_device(canary / "dev" / "null")
    os.mkfifo(canary / "dev" / "fifo")
    (canary / "link").symlink_to(canary / "userdir")
    for name, content in LOGS.items():
        write(canary / "logs" / f"{name}.log", content)
    return canary, kind


def snapshot(root: Path) -> dict[str, Any]:
    """Every entry under ``root`` (links not followed): kind, mode and content hash, device number or target."""
    found: dict[str, Any] = {}
    if not root.exists() and not root.is_symlink():
        return found
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files]:
            path = Path(top) / name
            info = os.lstat(path)
            key = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                found[key] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                found[key] = ("file", stat.S_IMODE(info.st_mode), hashlib.sha1(path.read_bytes()).hexdigest())
            elif stat.S_ISDIR(info.st_mode):
                found[key] = ("dir", stat.S_IMODE(info.st_mode))
            else:
                found[key] = ("special", info.st_mode, info.st_rdev)
    return found


def texts(*roots: Path) -> str:
    """Everything under the given folders as text (to grep for secrets)."""
    parts = []
    for root in roots:
        if root.is_dir():
            for top, _, files in os.walk(root, followlinks=False):
                for name in files:
                    path = Path(top) / name
                    if path.is_file() and not path.is_symlink():
                        parts.append(path.read_bytes()[:5_000_000].decode("utf-8", "replace"))
    return "\n".join(parts)


# -------------------------------------------------------------------------------------------------
# One case
# -------------------------------------------------------------------------------------------------


def expand(word: str, world: World, places: Places) -> list[str]:
    """A corpus word with its placeholders replaced ({micro} becomes several words)."""
    if word == "{micro}":
        return list(MICRO)
    values = {
        "canary": world.canary,
        "checkout": world.canary / "checkout",
        "input": world.canary / "input",
        "badinput": world.canary / "badinput",
        "userdir": world.canary / "userdir",
        "userfile": world.canary / "userfile.txt",
        "device": world.canary / "dev" / "null",
        "fifo": world.canary / "dev" / "fifo",
        "link": world.canary / "link",
        "resultslike": world.canary / "results-like",
        "logs": world.canary / "logs",
        "results": places.results,
        "scratch": places.scratch,
        "corpus": places.corpus,
        "tokenizer": world.tokenizer,
        "repo": REPO,
        "x300": "x" * 300,
        "x5000": "x" * 5000,
        "d5000": "9" * 5000,
        "account": SECRETS["SBATCH_ACCOUNT"],
        "wandbkey": SECRETS["WANDB_API_KEY"],
        "nl": "\n",
        "cr": "\r",
        "mixedsecret": SECRETS["GITHUB_TOKEN"],
        "root": places.scratch / "root",
    }
    for name, value in values.items():
        word = word.replace("{" + name + "}", str(value))
    while "{log:" in word:
        start = word.index("{log:")
        end = word.index("}", start)
        word = word[:start] + str(world.canary / "logs" / f"{word[start + 5 : end]}.log") + word[end + 1 :]
    return [word]


def make_escaped(words: list[str]) -> str:
    """``$(MAKEOVERRIDES)`` as GNU Make writes it: newest first, spaces and backslashes escaped, ``$`` doubled."""
    escaped = [w.replace("\\", "\\\\").replace(" ", "\\ ").replace("$", "$$") for w in words]
    return " ".join(reversed(escaped))


ENV_WORD = "ENV:"
"""``ENV:NAME=value``: a variable of the user's shell for the case (OPTBENCH_ROOT, ENROOT_CONFIG_PATH), not a word."""


def environment(case: Case, words: list[str], places: Places) -> dict[str, str]:
    """The variables the Makefile exports for ``make <target> <words>`` (the typed words, RECIPE)."""
    upper = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words if "=" in w and w.split("=", 1)[0].isupper()}
    env = {"OPTBENCH_MAKE_OVERRIDES": make_escaped(words), "OPTBENCH_RECIPE": upper.get("RECIPE", "kimi_k2_tiny_muon")}
    if case.target in ("table", "study"):
        env["OPTBENCH_RESULTS_DIR"] = str(places.results)
    return env


def run_in_process(case: Case, words: list[str]) -> int:
    """The Python side of ``make <target>`` in this process (the dispatcher, as the Makefile calls it); its exit
    code."""
    from optbench.__main__ import main

    argv = [case.target, *words] if case.target == "gpu-smoke" else [case.target, "--from-make"]  # SMOKE="<words>"
    try:
        return int(main(argv) or 0)
    except SystemExit as stop:
        return int(stop.code or 0)


def run_make(words: list[str]) -> tuple[int, str, str]:
    import subprocess

    from conftest import make_environment

    done = subprocess.run(
        ["make", "--no-print-directory", f"PY={sys.executable}", *words],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=make_environment(),
    )
    return done.returncode, done.stdout, done.stderr


def copy_results(world: World, places: Places) -> None:
    shutil.copytree(world.baseline, places.results, symlinks=True)
    shutil.copytree(world.corpus, places.corpus, symlinks=True)
    places.scratch.mkdir()


# -------------------------------------------------------------------------------------------------
# The world, built once per test module, and one case run with every check
# -------------------------------------------------------------------------------------------------


def build_world(root: Path) -> World:
    """The canary tree and the baseline results (a plan, a dry-run job, a sweep, a run with checkpoints)."""
    import torch

    from launch.cli import main
    from optbench.corpus.prepare import Part, prepare
    from optbench.common.outputs import claim

    canary, kind = build_canary(root)
    baseline = claim(root / "baseline", "results_dir", "results")
    (baseline / "published").mkdir(parents=True)
    published = REPO / "results" / "published"
    rows = (published / "published.csv").read_text().splitlines()
    (baseline / "published" / "published.csv").write_text("\n".join(rows[:3]) + "\n")
    shutil.copy(published / "sources.csv", baseline / "published" / "sources.csv")
    saved = {name: os.environ.get(name) for name in ("OMP_NUM_THREADS", *SECRETS)}
    os.environ.update({"OMP_NUM_THREADS": "1", **SECRETS})
    threads = torch.get_num_threads()
    try:
        for argv in (
            ["plan", "kimi_k2_tiny_muon"],
            ["pretrain", "qwen3_30b_a3b_muon", "dryrun=true"],
            ["sweep", "qwen3_30b_a3b_muon", "parallel.ep=4,8", "dryrun=true"],
            ["pretrain", "kimi_k2_tiny_muon", *MICRO, "train.iters=4", "train.save_interval=2", "run_id=saved"],
        ):
            assert main([*argv, f"results_dir={baseline}"]) == 0, argv
    finally:
        torch.set_num_threads(threads)
        for name, value in saved.items():
            os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)
    corpus = root / "corpus"
    manifest = prepare([Part("earlier", ["an earlier corpus document " * 10])], corpus, vocab_size=300)
    return World(root, canary, baseline, corpus, Path(manifest["tokenizer"]["path"]) / "tokenizer.json", kind)


def execute(case: Case, world: World, tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    """Run one case as ``make`` would and assert every property of the module docstring."""
    places = Places(tmp_path / "results", tmp_path / "scratch", tmp_path / "corpus")
    copy_results(world, places)
    words = [w for word in case.words if not word.startswith(("@", ENV_WORD)) for w in expand(word, world, places)]
    shell = dict(
        w.split("=", 1)
        for word in case.words
        if word.startswith(ENV_WORD)
        for w in expand(word[len(ENV_WORD) :], world, places)
    )
    apply_setups([word[1:] for word in case.words if word.startswith("@")], places)
    if case.target in ("plan", "pretrain", "sweep", "search") and not any(w.startswith("results_dir=") for w in words):
        words.append(f"results_dir={places.results}")
    for name, value in {**SECRETS, "OMP_NUM_THREADS": "1", **shell}.items():
        monkeypatch.setenv(name, value)
    if case.target == "gpu-smoke" and not any(w.startswith("--out") for w in words):
        words.append(f"--out={places.results / 'bench' / 'megatron_one_gpu.json'}")
    monkeypatch.delenv("OPTBENCH_COMMAND", raising=False)
    monkeypatch.chdir(world.canary / "checkout")
    canary, results, scratch = snapshot(world.canary), snapshot(places.results), snapshot(places.scratch)
    if case.target == "make":
        code, out, err = run_make(words)
    else:
        for name, value in environment(case, words, places).items():
            monkeypatch.setenv(name, value)
        code = run_in_process(case, words)
        out, err = capsys.readouterr()
    shown = f"{case.text}\n--- exit {code}\n{out[-2000:]}\n--- stderr\n{err[-2000:]}"
    assert "Traceback" not in out + err, shown
    if case.expect == "any":
        assert code in (0, 2), shown
    else:
        assert code == (0 if case.expect == "ok" else 2), shown
    if code == 2 and case.target != "make":
        lines = err.strip().splitlines()
        assert lines and lines[0].startswith("error: ") and len(lines) <= 2, shown
        if case.field:
            assert lines[0].startswith(f"error: {case.field}: "), shown
    written = texts(places.results, places.scratch, places.corpus)
    for secret in SECRETS.values():  # in any letter case: a typed word may be lower-cased before it is printed
        assert secret.casefold() not in (out + err).casefold(), f"secret printed: {shown}"
        assert secret.casefold() not in written.casefold(), f"secret written: {case.text}"
    assert snapshot(world.canary) == canary, f"a canary changed: {shown}"
    lost = set(scratch) - set(snapshot(places.scratch))
    assert not lost, f"what the scratch folder held before is gone ({sorted(lost)[:3]}): {shown}"
    if code == 2:
        assert snapshot(places.results) == results, f"a refusal changed results/: {shown}"
        assert snapshot(places.scratch) == scratch, f"a refusal changed the scratch folder: {shown}"
