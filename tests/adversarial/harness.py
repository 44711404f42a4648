"""Run one line of the adversarial corpus (corpus.txt) as a user would, and check what it did.

A line is ``<expect> <target> <words...>`` (shell quoting): ``expect`` is ``ok`` (exit 0) or
``refused`` / ``refused:<field>`` (exit 2, one ``error: <field>: ...`` line); ``target`` is a make
target. ``plan``, ``pretrain``, ``sweep``, ``data`` and ``table`` run in this process exactly as
``make <target> <words>`` reaches Python (the Makefile's environment: OPTBENCH_MAKE_OVERRIDES with
make's escaping, OPTBENCH_RECIPE, OPTBENCH_DATA_*, OPTBENCH_TABLE_*); ``make`` runs the real make
(Makefile-level cases). ``@name`` words are setup steps applied to the case's results folder before the
command (corrupted checkpoints, read-only files). Placeholders in braces are paths of the world below.

Every case runs with its working directory in a fake checkout inside a **canary tree** (user files, a
folder, a file, a symbolic link, a character device made with mknod, a FIFO, the input corpus, crafted
logs) and with secrets in the environment. Checks: the exit code, no traceback, no secret printed or
written, every canary as it was; for a refusal also the results folder and the scratch folder as they were.
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

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).with_name("corpus.txt")
SECRETS = {
    "WANDB_API_KEY": "wk-adv-0123456789abcdef",
    "SBATCH_ACCOUNT": "acct-adv-hidden-42",
    "HF_TOKEN": "hf_advtoken42xyz",
}
MICRO = [
    "model.num_layers=2", "model.hidden_size=64", "model.ffn_hidden_size=128", "model.num_moe_experts=4",
    "model.moe_ffn_hidden_size=32", "model.moe_shared_expert_intermediate_size=32", "model.moe_router_topk=2",
    "model.q_lora_rank=32", "model.kv_lora_rank=16", "model.qk_head_dim=16", "model.qk_pos_emb_head_dim=8",
    "model.v_head_dim=16", "model.vocab_size=256", "data.vocab_size=128", "train.gbs=8", "train.mbs=2",
    "train.seq_length=32", "train.warmup_iters=1", "train.lr_decay_iters=6", "logger=none",
]
"""``{micro}``: a 2-layer Kimi K2 proxy that trains a step in well under a second."""
TARGETS = ("plan", "pretrain", "sweep", "data", "table", "make")


@dataclass(frozen=True)
class Case:
    """One corpus line."""

    number: int
    expect: str
    """'ok' or 'refused'."""
    field: str | None
    """The field a refusal must name (None: any)."""
    target: str
    words: tuple[str, ...]
    text: str

    @property
    def id(self) -> str:
        return f"{self.number}:{self.text[:70]}"


def load_corpus(path: Path = CORPUS) -> list[Case]:
    cases = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        expect, target, *words = shlex.split(line)
        expect, _, field = expect.partition(":")
        assert expect in ("ok", "refused") and target in TARGETS, f"corpus.txt:{number}: {line}"
        cases.append(Case(number, expect, field or None, target, tuple(words), line.strip()))
    return cases


# -------------------------------------------------------------------------------------------------
# The world: canary tree, baseline results, crafted logs
# -------------------------------------------------------------------------------------------------


def _write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return path


ITERATION = (" [2026-04-01 12:00:0{i}] iteration {i:8d}/     100 | consumed samples: {s} | elapsed time per iteration "
             "(ms): 12920.3 | throughput per GPU (TFLOP/s/GPU): 1037.0 | learning rate: 3.000000E-04 | global batch "
             "size:  4096 | lm loss: 9.876543E+00 | loss scale: 1.0 |")
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
    _write(canary / "checkout" / "recipes" / "mine.yaml", "# a recipe of the user's\n")
    _write(canary / "checkout" / "conf" / "model" / "mine.yaml", "name: mine\n")
    _write(canary / "checkout" / "src" / "keep.py", "print('keep')\n")
    _write(canary / "checkout" / "README.md", "the user's checkout\n")
    _write(canary / "input" / "a.txt", "The quick brown fox jumps over the lazy dog. " * 20)
    _write(canary / "input" / "b.txt", "Pack my box with five dozen liquor jugs. " * 20)
    _write(canary / "input" / "sub" / "c.jsonl", json.dumps({"text": "Sphinx of black quartz, judge my vow."}) + "\n")
    _write(canary / "badinput" / "bad.jsonl", '{"text": 1}\n{not json\n')
    _write(canary / "userdir" / "notes.txt", "my notes\n")
    _write(canary / "userdir" / "deep" / "data.bin", bytes(range(256)))
    _write(canary / "userfile.txt", "a file of the user's\n")
    _write(canary / "results-like" / "runs" / "mine.txt", "looks like results but is not optbench's\n")
    (canary / "dev").mkdir()
    kind = _make_device(canary / "dev" / "null")
    os.mkfifo(canary / "dev" / "fifo")
    (canary / "link").symlink_to(canary / "userdir")
    for name, content in LOGS.items():
        _write(canary / "logs" / f"{name}.log", content)
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


@dataclass(frozen=True)
class Places:
    """The paths of one case."""

    results: Path
    scratch: Path
    corpus: Path


def expand(word: str, world: World, places: Places) -> list[str]:
    """A corpus word with its placeholders replaced ({micro} becomes several words)."""
    if word == "{micro}":
        return list(MICRO)
    values = {
        "canary": world.canary, "checkout": world.canary / "checkout", "input": world.canary / "input",
        "badinput": world.canary / "badinput", "userdir": world.canary / "userdir", "userfile": world.canary / "userfile.txt",
        "device": world.canary / "dev" / "null", "fifo": world.canary / "dev" / "fifo", "link": world.canary / "link",
        "resultslike": world.canary / "results-like", "logs": world.canary / "logs", "results": places.results,
        "scratch": places.scratch, "corpus": places.corpus, "tokenizer": world.tokenizer, "repo": REPO,
        "x300": "x" * 300, "x5000": "x" * 5000, "account": SECRETS["SBATCH_ACCOUNT"], "wandbkey": SECRETS["WANDB_API_KEY"],
        "nl": "\n",
    }
    for name, value in values.items():
        word = word.replace("{" + name + "}", str(value))
    while "{log:" in word:
        start = word.index("{log:")
        end = word.index("}", start)
        word = word[:start] + str(world.canary / "logs" / f"{word[start + 5:end]}.log") + word[end + 1:]
    return [word]


def make_escaped(words: list[str]) -> str:
    """``$(MAKEOVERRIDES)`` as GNU Make writes it: newest first, spaces and backslashes escaped, ``$`` doubled."""
    escaped = [w.replace("\\", "\\\\").replace(" ", "\\ ").replace("$", "$$") for w in words]
    return " ".join(reversed(escaped))


UPPER_ENV = {
    "data": {"INPUT": "OPTBENCH_DATA_INPUT", "OUT": "OPTBENCH_DATA_OUT", "TOKENIZER": "OPTBENCH_DATA_TOKENIZER",
             "VOCAB": "OPTBENCH_DATA_VOCAB"},
    "table": {"WARMUP": "OPTBENCH_TABLE_WARMUP", "LOGS": "OPTBENCH_TABLE_LOGS"},
}


def environment(case: Case, words: list[str], places: Places) -> dict[str, str]:
    """The variables the Makefile exports for ``make <target> <words>``."""
    upper = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words if "=" in w and w.split("=", 1)[0].isupper()}
    env = {"OPTBENCH_MAKE_OVERRIDES": make_escaped(words), "OPTBENCH_RECIPE": upper.get("RECIPE", "kimi_k2_tiny_muon")}
    for name, variable in UPPER_ENV.get(case.target, {}).items():
        env[variable] = upper.get(name, "")
    if case.target == "table":
        env["OPTBENCH_RESULTS_DIR"] = str(places.results)
    return env


def run_in_process(case: Case, words: list[str]) -> int:
    """The Python side of ``make <target>`` in this process; its exit code."""
    if case.target in ("plan", "pretrain", "sweep"):
        from launch.cli import main

        argv = [case.target, "--from-make"]
    elif case.target == "data":
        from optbench.corpus.__main__ import main

        argv = ["--from-make"]
    else:
        from optbench.report.__main__ import main

        argv = ["table", "--from-make"]
    try:
        return int(main(argv) or 0)
    except SystemExit as stop:
        return int(stop.code or 0)


def run_make(words: list[str]) -> tuple[int, str, str]:
    import subprocess

    done = subprocess.run(["make", "--no-print-directory", f"PY={sys.executable}", *words], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


def copy_results(world: World, places: Places) -> None:
    shutil.copytree(world.baseline, places.results, symlinks=True)
    shutil.copytree(world.corpus, places.corpus, symlinks=True)
    places.scratch.mkdir()


# -------------------------------------------------------------------------------------------------
# Setup steps (@name): what earlier runs, crashes and hand edits leave behind
# -------------------------------------------------------------------------------------------------


def _manifest(places: Places) -> Path:
    return places.results / "checkpoints" / "saved" / "step_000004" / "manifest.json"


def _edit_manifest(places: Places, change) -> None:
    path = _manifest(places)
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _set(data: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.replace("model.pt", "model\0pt").split(".")
    parents, last = [p.replace("\0", ".") for p in parents], last.replace("\0", ".")
    for part in parents:
        data = data[part]
    data[last] = value


SETUPS = {
    "manifest-list": lambda p: _manifest(p).write_text("[]"),
    "manifest-int": lambda p: _manifest(p).write_text("7"),
    "manifest-null": lambda p: _manifest(p).write_text("null"),
    "manifest-garbage": lambda p: _manifest(p).write_bytes(b"\xff\xfe{{{" * 10),
    "manifest-deep": lambda p: _manifest(p).write_text("[" * 100_000),
    "manifest-bignum": lambda p: _manifest(p).write_text('{"step": ' + "9" * 5000 + ', "world": 1, "files": {}}'),
    "manifest-huge": lambda p: _manifest(p).write_text('{"pad": "' + "x" * 3_000_000 + '"}'),
    "manifest-missing": lambda p: _manifest(p).unlink(),
    "manifest-is-dir": lambda p: (_manifest(p).unlink(), _manifest(p).mkdir()),
    "manifest-null-bytes": lambda p: _edit_manifest(p, lambda d: _set(d, "files.model.pt.bytes", None)),
    "manifest-string-step": lambda p: _edit_manifest(p, lambda d: _set(d, "step", "4")),
    "manifest-float-world": lambda p: _edit_manifest(p, lambda d: _set(d, "world", 1.0)),
    "manifest-files-list": lambda p: _edit_manifest(p, lambda d: _set(d, "files", ["model.pt"])),
    "manifest-bad-sha": lambda p: _edit_manifest(p, lambda d: _set(d, "files.model.pt.sha256", "zz")),
    "manifest-escape": lambda p: _edit_manifest(p, lambda d: _set(d, "files", {"../../../canary.txt": {"bytes": 1, "sha256": "0" * 64}})),
    "manifest-foreign": lambda p: _edit_manifest(p, lambda d: _set(d, "run.model", {"hidden_size": 4096})),
    "manifest-other-step": lambda p: _edit_manifest(p, lambda d: _set(d, "step", 2)),
    "step-is-file": lambda p: (shutil.rmtree(_manifest(p).parent), _manifest(p).parent.write_text("not a folder")),
    "step-is-link": lambda p: (shutil.rmtree(_manifest(p).parent), _manifest(p).parent.symlink_to(p.scratch)),
    "shard-truncated": lambda p: (_manifest(p).parent / "model.pt").write_bytes(b"\x80\x02"),
    "latest-dir": lambda p: ((_manifest(p).parents[1] / "latest").unlink(), (_manifest(p).parents[1] / "latest").mkdir()),
    "latest-link": lambda p: ((_manifest(p).parents[1] / "latest").unlink(),
                              (_manifest(p).parents[1] / "latest").symlink_to(p.scratch / "elsewhere")),
    "latest-huge": lambda p: (_manifest(p).parents[1] / "latest").write_text("step_" + "0" * 5_000_000),
    "latest-empty": lambda p: (_manifest(p).parents[1] / "latest").write_text(""),
    "latest-binary": lambda p: (_manifest(p).parents[1] / "latest").write_bytes(b"\x00\xff\x00"),
    "latest-escape": lambda p: (_manifest(p).parents[1] / "latest").write_text("../../../canary\n"),
    "ckptdir-file": lambda p: (shutil.rmtree(_manifest(p).parents[1]), _manifest(p).parents[1].write_text("x")),
    "config-list": lambda p: (p.results / "runs" / "saved" / "config.yaml").write_text("- a\n- b\n"),
    "config-binary": lambda p: (p.results / "runs" / "saved" / "config.yaml").write_bytes(bytes(range(256))),
    "config-missing": lambda p: (p.results / "runs" / "saved" / "config.yaml").unlink(),
    "config-bad-yaml": lambda p: (p.results / "runs" / "saved" / "config.yaml").write_text("a: [\n"),
    "metrics-bignum": lambda p: _write(p.results / "runs" / "saved" / "metrics.jsonl", '{"step": ' + "9" * 5000 + "}\n"),
    "metrics-deep": lambda p: _write(p.results / "runs" / "saved" / "metrics.jsonl", "[" * 100_000 + "\n"),
    "metrics-list": lambda p: _write(p.results / "runs" / "saved" / "metrics.jsonl", "[1, 2]\n"),
    "summary-list": lambda p: _write(p.results / "runs" / "saved" / "summary.json", "[1]"),
    "summary-bignum": lambda p: _write(p.results / "runs" / "saved" / "summary.json", '{"peak": {"tflops": ' + "9" * 5000 + "}}"),
    "run-is-file": lambda p: _write(p.results / "runs" / "stray", "a file among the runs"),
    "runs-is-file": lambda p: (shutil.rmtree(p.results / "runs"), _write(p.results / "runs", "x")),
    "plans-is-file": lambda p: (shutil.rmtree(p.results / "plans"), _write(p.results / "plans", "x")),
    "plan-is-dir": lambda p: ((p.results / "plans" / "kimi_k2_tiny_muon" / "plan.json").unlink(),
                              (p.results / "plans" / "kimi_k2_tiny_muon" / "plan.json").mkdir()),
    "plan-is-link": lambda p: ((p.results / "plans" / "kimi_k2_tiny_muon" / "plan.json").unlink(),
                               (p.results / "plans" / "kimi_k2_tiny_muon" / "plan.json").symlink_to(p.scratch / "target.json")),
    "sweep-is-file": lambda p: (shutil.rmtree(p.results / "plans" / "qwen3_30b_a3b_muon" / "sweep"),
                                _write(p.results / "plans" / "qwen3_30b_a3b_muon" / "sweep", "x")),
    "published-missing": lambda p: shutil.rmtree(p.results / "published"),
    "published-garbage": lambda p: _write(p.results / "published" / "published.csv", b"\x00\xff" * 100),
    "unmarked-results": lambda p: (p.results / ".optbench-results").unlink(),
    "user-file-in-results": lambda p: ((p.results / ".optbench-results").unlink(), _write(p.results / "mine.txt", "x")),
    "stale-journal": lambda p: _write(p.results / "plans" / "qwen3_30b_a3b_muon" / ".optbench-journal-999999.json", "{oops"),
}
"""``@name`` words: how a case's results folder is changed before its command runs."""


def apply_setups(names: list[str], places: Places) -> None:
    for name in names:
        SETUPS[name](places)
