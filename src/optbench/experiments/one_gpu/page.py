"""results/bench/megatron_one_gpu.md from its JSON: what the real Megatron did on a lent GPU, beside the projection.

    python -m optbench gpu-smoke-page [results/bench/megatron_one_gpu.json]

Every number is read from the file :mod:`optbench.experiments.one_gpu` wrote on the GPU (our callback's summary of each
run, and the projection its plan.json made of the same setup on that GPU); nothing is measured here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from optbench.common.errors import Problem, UserError
from optbench.common.tables import markdown_table


def _arms(data: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for smoke in data["smokes"]:
        for arm in smoke["arms"]:
            yield smoke, arm


def label(optimizer: str, extra: list[str] | tuple[str, ...] = ()) -> str:
    """An arm's name on the page: its optimizer, and the overrides a variant invocation added (``--set``)."""
    return f"{optimizer} ({' '.join(extra)})" if extra else optimizer


def finished(data: dict[str, Any], loop: str = "core") -> dict[str, dict[str, Any]]:
    """Label -> the last finished arm of ``loop`` (one with our callback's summary)."""
    return {
        label(arm["optimizer"], arm.get("extra", ())): arm
        for _, arm in _arms(data)
        if arm["loop"] == loop and arm.get("summary")
    }


def _pct(value: float) -> str:
    return f"{value:+.0%}"


def _run_rows(done: dict[str, dict[str, Any]]) -> list[list[str]]:
    rows = []
    for name, arm in done.items():
        s, p = arm["summary"], arm["projection"] or {}
        optimizer_projected = (p.get("breakdown_s") or {}).get("optimizer")
        rows.append(
            [
                name,
                _started(arm),
                f"{len(arm['records'])}",
                f"{s['initial_loss']:.3f} -> {s['final_loss']:.3f}",
                f"{s['step_time_s']:.3f}",
                f"{p.get('step_time_s', float('nan')):.3f}",
                f"{s['step_time_s'] / p['step_time_s']:.1f}x" if p.get("step_time_s") else "-",
                f"{s['optimizer_time_s']:.3f}",
                f"{optimizer_projected:.3f}" if optimizer_projected is not None else "-",
                f"{s['optimizer_share']:.0%}",
                f"{optimizer_projected / p['step_time_s']:.0%}" if optimizer_projected else "-",
                f"{s['tflops_per_gpu']:.1f}",
                f"{p.get('tflops_per_gpu', float('nan')):.1f}",
                f"{s['mfu'][s['peak']['key']]:.1%} of {s['peak']['key']}",
                f"{s['peak_memory_gb']:.1f}",
            ]
        )
    return rows


def _gap_lines(done: dict[str, dict[str, Any]]) -> list[str]:
    if not {"muon", "adamw"} <= set(done):
        return ["Muon vs AdamW: not both measured."]
    muon, adamw = done["muon"], done["adamw"]
    measured = adamw["summary"]["step_time_s"] / muon["summary"]["step_time_s"] - 1
    projected = adamw["projection"]["step_time_s"] / muon["projection"]["step_time_s"] - 1
    return [
        f"Muon vs AdamW, model TFLOP/s per GPU (step time ratio): measured {_pct(measured)}, projected "
        f"{_pct(projected)}."
    ]


def markdown(data: dict[str, Any]) -> str:
    smokes = data["smokes"]
    first = smokes[0]
    done = finished(data)
    lines = [
        TITLE,
        "",
        f"{first['device']}, Python {first['python']}, "
        + ", ".join(f"{k} {v}" for k, v in first["versions"].items() if v)
        + ("" if first["versions"].get("transformer-engine") else ", no Transformer Engine")
        + ". "
        + (data.get("about", "") + ". " if data.get("about") else ""),
        "",
        "Invocations: " + "; ".join(f"`{s['command']}` ({s['date']})" for s in smokes) + ".",
        "",
        "## Finished runs: Megatron Core's step as Bridge builds it, our callback's summary beside the projection",
        "",
        "Setup: " + _setup(done),
        "",
        *_finished_table(done),
        "",
        *_gap_lines(done),
        "",
        "Measured cells: the median over the steps after the warm-up our callback skips (summary.json's statistic); "
        "the projection is the plan's own (`make plan` of the same overrides on this GPU). An optimizer followed by "
        "overrides is a variant arm (`--set`), run to see which setting moves the step. Each lease is another "
        "machine of the same GPU model: compare step times of arms started in one lease (minutes apart), not across "
        "leases." + _repeats(data),
        "",
        *_bridge_section(data),
        "## Every arm",
        "",
        *markdown_table(
            ["optimizer", "loop", "status", "what stopped it", "seconds"],
            [
                [label(a["optimizer"], a.get("extra", ())), a["loop"], a["status"], _stopped(a), f"{a['wall_s']}"]
                for _, a in _arms(data)
            ],
        ),
        "",
        "## What the smoke changes in the recipe to run without Transformer Engine",
        "",
        *markdown_table(
            ["field", "recipe", "smoke", "why"],
            [[c["field"], str(c["recipe"]), str(c["smoke"]), c["why"]] for c in _changes(data)],
        ),
        "",
        "## Our callback's records (the Muon run, every fifth step)",
        "",
        "```",
        *[
            json.dumps({k: r[k] for k in ("step", "loss", "step_time_s", "optimizer_time_s", "tflops_per_gpu", "mfu")})
            for r in (done.get("muon") or {}).get("records", [])[::5]
        ],
        "```",
        "",
    ]
    return "\n".join(lines)


def _repeats(data: dict[str, Any]) -> str:
    """The same plain Core-loop arm measured in more than one invocation: how far its step time moved."""
    seen: dict[str, list[str]] = {}
    for _, arm in _arms(data):
        if arm["loop"] == "core" and arm.get("summary") and not arm.get("extra"):
            seen.setdefault(arm["optimizer"], []).append(f"{arm['summary']['step_time_s']:.3f} s ({_started(arm)})")
    repeated = [f"{name} {', '.join(times)}" for name, times in seen.items() if len(times) > 1]
    return f" The same arm in several invocations: {'; '.join(repeated)}." if repeated else ""


def _started(arm: dict[str, Any]) -> str:
    """When the arm's invocation started (its run id's stamp, UTC): invocations of one lease share a machine."""
    day, clock = arm["run_id"].rsplit("-", 2)[-2:]
    return f"{day[6:8]}.{day[4:6]}. {clock[:2]}:{clock[2:4]}"


def _finished_table(done: dict[str, dict[str, Any]]) -> list[str]:
    return markdown_table(
        [
            "optimizer",
            "started (UTC)",
            "steps",
            "loss first -> last",
            "step s",
            "projected s",
            "measured / projected",
            "optimizer s",
            "projected",
            "optimizer share",
            "projected",
            "model TFLOP/s/GPU",
            "projected",
            "MFU",
            "peak GB",
        ],
        _run_rows(done),
    )


def _bridge_section(data: dict[str, Any]) -> list[str]:
    """Runs of Bridge's own ``pretrain()`` (the cluster job's call), where any finished: on Bridge's mock data, so
    their loss is not the Core loop's learnable stream."""
    done = finished(data, "bridge")
    if not done:
        return []
    return [
        "## Finished runs: Bridge's own pretrain(), as the cluster job calls it",
        "",
        "Setup: " + _setup(done) + " Data: Bridge's mock dataset, not the Core loop's stream: losses do not "
        "compare across the two tables.",
        "",
        *_finished_table(done),
        "",
        *_gap_lines(done),
        "",
    ]


def _setup(done: dict[str, dict[str, Any]]) -> str:
    if not done:
        return "no run finished."
    plan = next(iter(done.values()))["plan"]
    model = plan["model"]
    layout = " ".join(f"{k.upper()}{v}" for k, v in plan["layout"].items())
    return (
        f"{model['name']} scaled by the smoke ({model['total_params'] / 1e6:.0f} M parameters, "
        f"{model['active_params'] / 1e6:.0f} M active), {layout}, GBS {plan['gbs']} = MBS {plan['mbs']} x "
        f"{plan['num_microbatches']} micro-batches, "
        f"sequence {plan['seq_length']}, {plan['precision']}, on {plan['gpu']}."
    )


def _stopped(arm: dict[str, Any]) -> str:
    """The error, and where it is only an exit code, the first ERROR line Megatron logged before it."""
    error = arm.get("error") or "-"
    if arm.get("records") and arm["status"] != "ok":  # stopped after training, e.g. in Bridge's final evaluation
        error = f"{error}, after {len(arm['records'])} steps were recorded"
    if error.startswith("SystemExit"):
        logged = next((line for line in arm.get("log_tail", []) if line.startswith("ERROR:")), None)
        error = f"{error} after {logged}" if logged else error
    return error[:200]


def _changes(data: dict[str, Any]) -> list[dict[str, Any]]:
    for _, arm in _arms(data):
        if arm.get("changes"):
            return arm["changes"]
    return []


TITLE = "# The real Megatron on one GPU (`make gpu-smoke`)"


def check_page(path: Path) -> None:
    """The .md beside ``path`` may be replaced only when it is a page of this kind (or absent)."""
    page = path.with_suffix(".md")
    if page.exists() and not (page.is_file() and page.read_text(errors="replace").startswith(TITLE)):
        raise UserError(Problem("--out", f"{page} exists and is not a gpu-smoke page; name another --out"))


MAX_RESULT_BYTES = 64 << 20
"""A results file of many leases is a few MB; anything larger is not one."""


def read_result(path: Path, option: str) -> dict[str, Any]:
    """The gpu-smoke results file at ``path``, checked by rendering it: anything the page cannot render (another
    JSON, a damaged or hand-edited file) is one line naming ``option``, before anything is written."""
    try:
        if path.is_symlink() or not path.is_file():
            raise ValueError("not a regular file")
        if path.stat().st_size > MAX_RESULT_BYTES:
            raise ValueError(f"over {MAX_RESULT_BYTES >> 20} MB")
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("smokes"), list) or not data["smokes"]:
            raise ValueError("no invocations")
        markdown(data)
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        IndexError,
        AttributeError,
        ZeroDivisionError,
        RecursionError,
    ) as err:
        reason = " ".join(str(err).split())[:80] or type(err).__name__
        raise UserError(
            Problem(
                option,
                f"{path} is not a gpu-smoke result this page can render ({reason}); name "
                "another file (make gpu-smoke writes one)",
            )
        ) from None
    return data


def write(path: Path) -> str:
    """Render ``path`` (the JSON) into the .md beside it; what was written."""
    from optbench.common.io import atomic_write_text

    check_page(path)
    data = read_result(path, "json")
    atomic_write_text(path.with_suffix(".md"), markdown(data))
    return f"wrote {path.with_suffix('.md')}"


def main(argv: list[str] | None = None) -> int:

    import argparse

    parser = argparse.ArgumentParser(prog="python -m optbench gpu-smoke-page", description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="?", default="results/bench/megatron_one_gpu.json", help="the gpu-smoke result")
    path = Path(parser.parse_args(argv).json)
    if path.suffix != ".json":
        raise UserError(Problem("json", f"{path} is not a .json file; the page is written beside one as .md"))
    print(write(path))
    return 0
