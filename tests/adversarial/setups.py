"""Setup steps of the adversarial corpus (``@name`` words): what earlier runs, crashes and hand edits leave
in a case's results folder before its command runs."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

from adversarial.places import Places, write


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
    "manifest-escape": lambda p: _edit_manifest(
        p, lambda d: _set(d, "files", {"../../../canary.txt": {"bytes": 1, "sha256": "0" * 64}})
    ),
    "manifest-foreign": lambda p: _edit_manifest(p, lambda d: _set(d, "run.model", {"hidden_size": 4096})),
    "manifest-other-step": lambda p: _edit_manifest(p, lambda d: _set(d, "step", 2)),
    "step-is-file": lambda p: (shutil.rmtree(_manifest(p).parent), _manifest(p).parent.write_text("not a folder")),
    "step-is-link": lambda p: (shutil.rmtree(_manifest(p).parent), _manifest(p).parent.symlink_to(p.scratch)),
    "shard-truncated": lambda p: (_manifest(p).parent / "model.pt").write_bytes(b"\x80\x02"),
    "latest-dir": lambda p: (
        (_manifest(p).parents[1] / "latest").unlink(),
        (_manifest(p).parents[1] / "latest").mkdir(),
    ),
    "latest-link": lambda p: (
        (_manifest(p).parents[1] / "latest").unlink(),
        (_manifest(p).parents[1] / "latest").symlink_to(p.scratch / "elsewhere"),
    ),
    "latest-huge": lambda p: (_manifest(p).parents[1] / "latest").write_text("step_" + "0" * 5_000_000),
    "latest-empty": lambda p: (_manifest(p).parents[1] / "latest").write_text(""),
    "latest-binary": lambda p: (_manifest(p).parents[1] / "latest").write_bytes(b"\x00\xff\x00"),
    "latest-escape": lambda p: (_manifest(p).parents[1] / "latest").write_text("../../../canary\n"),
    "ckptdir-file": lambda p: (shutil.rmtree(_manifest(p).parents[1]), _manifest(p).parents[1].write_text("x")),
    "config-list": lambda p: (p.results / "runs" / "saved" / "config.yaml").write_text("- a\n- b\n"),
    "config-binary": lambda p: (p.results / "runs" / "saved" / "config.yaml").write_bytes(bytes(range(256))),
    "config-missing": lambda p: (p.results / "runs" / "saved" / "config.yaml").unlink(),
    "config-bad-yaml": lambda p: (p.results / "runs" / "saved" / "config.yaml").write_text("a: [\n"),
    "config-laughs": lambda p: (p.results / "runs" / "saved" / "config.yaml").write_text(LAUGHS),
    "metrics-bignum": lambda p: write(p.results / "runs" / "saved" / "metrics.jsonl", '{"step": ' + "9" * 5000 + "}\n"),
    "metrics-deep": lambda p: write(p.results / "runs" / "saved" / "metrics.jsonl", "[" * 100_000 + "\n"),
    "metrics-list": lambda p: write(p.results / "runs" / "saved" / "metrics.jsonl", "[1, 2]\n"),
    "summary-list": lambda p: write(p.results / "runs" / "saved" / "summary.json", "[1]"),
    "summary-bignum": lambda p: write(
        p.results / "runs" / "saved" / "summary.json", '{"peak": {"tflops": ' + "9" * 5000 + "}}"
    ),
    "run-is-file": lambda p: write(p.results / "runs" / "stray", "a file among the runs"),
    "runs-is-file": lambda p: (shutil.rmtree(p.results / "runs"), write(p.results / "runs", "x")),
    "plans-is-file": lambda p: (shutil.rmtree(p.results / "plans"), write(p.results / "plans", "x")),
    "plan-is-dir": lambda p: (
        (p.results / "plans" / "kimi_k2_tiny_muon" / "plan.json").unlink(),
        (p.results / "plans" / "kimi_k2_tiny_muon" / "plan.json").mkdir(),
    ),
    "plan-is-link": lambda p: (
        (p.results / "plans" / "kimi_k2_tiny_muon" / "plan.json").unlink(),
        (p.results / "plans" / "kimi_k2_tiny_muon" / "plan.json").symlink_to(p.scratch / "target.json"),
    ),
    "sweep-is-file": lambda p: (
        shutil.rmtree(p.results / "plans" / "qwen3_30b_a3b_muon" / "sweep"),
        write(p.results / "plans" / "qwen3_30b_a3b_muon" / "sweep", "x"),
    ),
    "published-missing": lambda p: shutil.rmtree(p.results / "published"),
    "published-garbage": lambda p: write(p.results / "published" / "published.csv", b"\x00\xff" * 100),
    "unmarked-results": lambda p: (p.results / ".optbench-results").unlink(),
    "user-file-in-results": lambda p: ((p.results / ".optbench-results").unlink(), write(p.results / "mine.txt", "x")),
    "stale-journal": lambda p: write(
        p.results / "plans" / "qwen3_30b_a3b_muon" / ".optbench-journal-999999.json", "{oops"
    ),
    "throughput-is-dir": lambda p: write(p.results / "throughput.md" / "mine.txt", "a file of the user's"),
    "notes-in-corpus": lambda p: write(p.corpus / "NOTES.md", "my notes on this corpus"),
    "strangers-journal": lambda p: (
        write(p.scratch / "victim" / "thesis.tex", "years of work"),
        write(
            p.scratch / "shared" / ".optbench-journal-424242.json",
            json.dumps(
                {
                    "pid": 424242,
                    "host": socket.gethostname(),
                    "state": "started",
                    "entries": [
                        {
                            "path": str(p.scratch / "victim"),
                            "aside": str(p.scratch / ".victim.previous-424242"),
                            "existed": False,
                        }
                    ],
                }
            ),
        ),
    ),
    "model-of-another": lambda p: _reseal(p, "model.pt", _narrowed_model),
    "rank-not-a-rank-file": lambda p: _reseal(p, "rank0.pt", lambda path: torch_save({"not": "a rank file"}, path)),
    # issue 78's round: a checkout the user edits ({root}, reached with ENV:OPTBENCH_ROOT={root}), enroot's login file,
    # the study rebuilt from git, the GPU smoke's results file, hostile run ids
    "root-copy": lambda p: _root(p),
    "root-local-yaml": lambda p: write(_root(p) / "conf" / "local" / "h100.yaml", "account: [oops\n"),
    "root-local-tab": lambda p: write(_root(p) / "conf" / "local" / "h100.yaml", "slurm:\n\taccount: x\n"),
    "root-recipe-yaml": lambda p: write(_root(p) / "recipes" / "my.yaml", "hello: [unclosed\n"),
    "root-recipe-colons": lambda p: write(_root(p) / "recipes" / "my.yaml", "defaults: a: b: c\n  - x\n"),
    "root-no-source": lambda p: shutil.rmtree(_root(p) / "src"),
    "enroot-fifo": lambda p: _enroot(p, lambda path: os.mkfifo(path)),
    "enroot-dir": lambda p: _enroot(p, lambda path: path.mkdir()),
    "enroot-link-to-fifo": lambda p: _enroot(
        p, lambda path: (os.mkfifo(path.with_name("fifo")), path.symlink_to("fifo"))
    ),
    "study-curves-lost": lambda p: (_study_runs(p) / "study2-cpu-adamw-lr0.0003-s1" / "study_curves.json").unlink(),
    "study-curves-strings": lambda p: write(
        _study_runs(p) / "study2-cpu-adamw-lr0.0003-s1" / "study_curves.json",
        json.dumps({"val": [["1", "x"]], "train_loss": [], "step_time_s": [1], "ns_time_s": []}),
    ),
    "study-run-linked": lambda p: _linked_study_run(p),
    "smoke-other-json": lambda p: write(p.results / "bench" / "megatron_one_gpu.json", '{"smokes": [{"arms": [1]}]}'),
    "smoke-list-json": lambda p: write(p.results / "bench" / "megatron_one_gpu.json", "[1, 2]"),
    "smoke-users-page": lambda p: write(p.results / "bench" / "megatron_one_gpu.md", "my notes, not a page of yours"),
    "run-id-hostile": lambda p: _copy_run(p, "saved", "x<img src=x onerror=alert(1)>[a](javascript:alert(1))`"),
    "run-id-cr": lambda p: _copy_run(p, "saved", "line\rbreak|pipe"),
}
"""``@name`` words: how a case's results folder is changed before its command runs."""


def _root(places: Places) -> Path:
    """A checkout of the user's (recipes/ and conf/ copied, optbench's source linked) at {root}, made once."""
    from adversarial.harness import REPO

    root = places.scratch / "root"
    if not root.exists():
        shutil.copytree(REPO / "recipes", root / "recipes")
        shutil.copytree(
            REPO / "conf",
            root / "conf",
            ignore=lambda top, names: [n for n in names if top.endswith("local") and n.endswith(".yaml")],
        )
        (root / "src").mkdir()
        (root / "src" / "optbench").symlink_to(REPO / "src" / "optbench")
    return root


def _enroot(places: Places, make) -> None:
    """{scratch}/enroot/.credentials as something that is not a file (ENV:ENROOT_CONFIG_PATH={scratch}/enroot)."""
    folder = places.scratch / "enroot"
    folder.mkdir(exist_ok=True)
    make(folder / ".credentials")


def _study_runs(places: Places) -> Path:
    """The committed study's runs (summary, config, curves: what git holds) copied into the case's results/runs."""
    from adversarial.harness import REPO

    for source in (REPO / "results" / "runs").glob("study2-cpu-*"):
        if (source / "summary.json").is_file():
            shutil.copytree(source, places.results / "runs" / source.name)
    return places.results / "runs"


def _linked_study_run(places: Places) -> None:
    """One study run folder a link to a copy in the scratch folder, its curves lost and its metrics without a curve."""
    runs = _study_runs(places)
    run = runs / "study2-cpu-adamw-lr0.0003-s1"
    moved = shutil.move(str(run), str(places.scratch / run.name))
    run.symlink_to(moved)
    (Path(moved) / "study_curves.json").unlink()
    write(Path(moved) / "metrics.jsonl", '{"step": 1, "loss": 5.0, "step_time_s": 0.1}\n')


def _copy_run(places: Places, name: str, new: str) -> None:
    shutil.copytree(places.results / "runs" / name, places.results / "runs" / new)


def torch_save(obj: Any, path: Path) -> None:
    import torch

    torch.save(obj, path)


def _narrowed_model(path: Path) -> None:
    """The checkpoint's model.pt as another model's: its output layer one row narrower."""
    import torch

    weights = torch.load(path, map_location="cpu", weights_only=True)
    weights["lm_head.weight"] = weights["lm_head.weight"][:-1]
    torch.save(weights, path)


def _reseal(places: Places, name: str, change) -> None:
    """Change one file of the saved checkpoint and record its new size and hash, as a save would have: the
    checkpoint is complete by its manifest, and only loading it shows it does not fit."""
    import hashlib

    folder = _manifest(places).parent
    change(folder / name)
    data = (folder / name).read_bytes()
    _edit_manifest(
        places, lambda d: d["files"].__setitem__(name, {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    )


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi")
)
"""A billion laughs: nine lines of YAML aliases that expand to 9^9 nodes."""


def apply_setups(names: list[str], places: Places) -> None:
    for name in names:
        SETUPS[name](places)
