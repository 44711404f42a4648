"""results/study.{json,md} and results/plots/study_val_loss.png from an analysed study."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from optbench.experiments import study_stats as stats
from optbench.common.machine_load import QUIET_SHARE
from optbench.common.io import atomic_write_json, atomic_write_text
from optbench.common.tables import markdown_table
from optbench.common.outputs import claim
from optbench.config.optimizers import REGISTRY, matrix_labels

ARMS = [arm for e in REGISTRY.values() for arm in e.study_arms]
LABELS = {arm.key: arm.label for arm in ARMS}
COLORS = {arm.key: arm.color for arm in ARMS}
QUIET = QUIET_SHARE


def _label(arm: str) -> str:
    return LABELS.get(arm, arm)


def _iv(value: dict | None, digits: int = 3, scale: float = 1.0, unit: str = "") -> str:
    if value is None:
        return "-"
    return (
        f"{value['mean'] * scale:.{digits}f}{unit} [{value['low'] * scale:.{digits}f}, "
        f"{value['high'] * scale:.{digits}f}]"
        if value["n"] > 1
        else f"{value['mean'] * scale:.{digits}f}{unit} (n=1)"
    )


def _verdict(ratio: dict | None, missed: dict) -> str:
    if missed:
        who = ", ".join(
            f"seed {seed}: {'AdamW' if side == 'adamw' else 'both' if side == 'both' else 'the arm'}"
            for seed, side in missed.items()
        )
        return f"incomplete ({who} missed the target)"
    if ratio is None:
        return "not measurable"
    if ratio["low"] <= 1.0 <= ratio["high"]:
        return "tie (the interval contains 1)"
    return "fewer tokens" if ratio["high"] < 1.0 else "more tokens"


def _difference_verdict(difference: dict | None) -> str:
    if difference is None or difference["n"] < 2:
        return "-"
    if difference["low"] <= 0.0 <= difference["high"]:
        return "tie (the interval contains 0)"
    return "lower than AdamW" if difference["high"] < 0.0 else "higher than AdamW"


def gpu_outlook() -> str:
    """What part of the CPU wall-clock ratio would move on a GPU, from the accounting (no measurement)."""
    from optbench.accounting.flops import model_flops_per_step
    from optbench.accounting.throughput import ns_flops_per_step_total
    from optbench.compose.recipe import compose_run
    from optbench.experiments.study_plan import COMMON, SIZES

    tiny = compose_run("kimi_k2_tiny_muon", [*COMMON, *SIZES["cpu"]])
    kimi = compose_run("kimi_k2_muon", [])
    share = {name: ns_flops_per_step_total(r) / model_flops_per_step(r) for name, r in (("tiny", tiny), ("kimi", kimi))}
    return (
        f"On this proxy at 512 tokens per step, Newton-Schulz executes {share['tiny']:.1f}x the model's own FLOPs per "
        f"step (accounting, textbook count), so Muon's CPU step is several times AdamW's and its time-to-target "
        f"ratio is set by that. At Kimi K2's published scale (256 GB300, 16.8 M tokens per step) Newton-Schulz is "
        f"{100 * share['kimi']:.1f} % of the model FLOPs: there the wall-clock ratio approaches the token ratio plus "
        "a few per cent (NVIDIA measured Muon's model TFLOP/s 2.1 % below AdamW's, blog Table 1). The token "
        "efficiency is what transfers to a GPU; the CPU seconds are not."
    )


SHARED = "*shared*"
"""What a seconds cell says when its runs shared the machine: no figure."""


def _shared(held_out: dict) -> bool:
    """Whether other processes took more than :data:`QUIET` of the machine during one of an arm's held-out runs."""
    return (held_out.get("others_cpu_share_max") or 0.0) > QUIET


def _header(study: dict, command: str, stamp: str) -> list[str]:
    m, v = study["machine"], study.get("validation")
    loads = [h.get("others_cpu_share_max") for h in study["held_out"].values()]
    busiest = max((x for x in loads if x is not None), default=None)
    lines = [
        f"# {matrix_labels()} vs AdamW, learning rates tuned, on real text",
        "",
        f"Command: `{command}`; last run finished {stamp}; {study['runs']} runs, {study['seconds'] / 60:.0f} min of "
        "training wall clock in all. Every run's summary and curves are committed (`results/runs/study*/`): "
        "`make study` with no new runs rebuilds this page byte for byte.",
        f"Data: pydocs (CPython's documentation, 512-token BPE, near-duplicate documents removed before the split). "
        f"Size `{study['size']}`: `{' '.join([*study['size_overrides'], *study['extra_overrides']])}`; "
        f"{study['horizon_tokens']:,.0f} training tokens per run.",
    ]
    if v:
        lines.append(
            f"Validation: the same {v['sequences']:,} sequences ({v['tokens_predicted']:,} predicted tokens) for "
            f"every run and seed (`data.valid_seed={v['valid_seed']}`), from the held-out documents of split "
            f"`{v['split']}` ({v['split_tokens']:,} tokens); {v['seen_in_training']['sequences']} of them "
            f"({100 * v['seen_in_training']['share']:.1f} %) have {v['seen_in_training']['rule']}."
        )
    lines += [
        f"Machine: {m['device']}; model computed in {m['precision']}; Newton-Schulz products (Muon, AdaMuon) "
        + (
            f"`fp32_matmul_prec=auto` -> `{m['ns_precision']}` "
            f"({'bf16' if m['ns_precision'] == 'medium' else 'fp32'}); "
            if m["ns_precision"]
            else "`fp32_matmul_prec=auto`, resolved as the runs' CPU allowed and not recorded by "
            "these runs (docs/results.md); "
        )
        + "".join(f"{e.label}'s products fp32; " for e in REGISTRY.values() if e.products_precision)
        + f"Python {m['python']}. AdamW is torch.optim.AdamW (fp32)."
        + (
            f" Other processes took at most {100 * busiest:.0f} % of the machine during a held-out run"
            + (
                f"; seconds of an arm whose held-out runs shared the machine (more than {100 * QUIET:.0f} %) are not "
                "reported (*shared*): only quiet-machine seconds are."
                if busiest > QUIET
                else "."
            )
            if busiest is not None
            else ""
        ),
        f"Seeds: learning rate chosen on {study['tuning_seeds']}, everything below measured on held-out "
        f"{study['held_out_seeds']}. Intervals: 95 % Student t over seeds; ratios: geometric mean of per-seed "
        "ratios (same seed = same initialisation and data order). Every tuning curve is in study.json "
        "(`tuning_curves`): the targets re-derive from it (`study_stats.rederive_targets`).",
    ]
    return lines


def markdown(study: dict, command: str, stamp: str) -> str:
    sweep = [
        [_label(arm), f"{float(lr):g}", _iv(point), "**chosen**" if float(lr) == winner["lr"] else ""]
        for arm, winner in study["winners"].items()
        for lr, point in winner["grid"].items()
    ]
    lines = [
        *_header(study, command, stamp),
        "",
        "## Learning-rate sweep (final validation loss, tuning seeds)",
        "",
        *markdown_table(["arm", "lr", "final val loss, mean [95 % CI]", ""], sweep),
    ]
    edge = [_label(arm) for arm, winner in study["winners"].items() if winner.get("at_grid_edge")]
    if edge:
        lines += ["", f"Chosen at the edge of its grid (the optimum may lie beyond it): {', '.join(edge)}."]
    budgets = next(iter(study["held_out"].values()))["budgets"]
    lines += [
        "",
        "## Held-out seeds: validation loss at fixed token budgets",
        "",
        *markdown_table(
            ["arm (lr)", *(f"{float(b):.0%} of the tokens" for b in budgets)],
            [
                [f"{_label(arm)} ({study['winners'][arm]['lr']:g})", *(_iv(h["budgets"][b]) for b in budgets)]
                for arm, h in study["held_out"].items()
            ],
        ),
    ]
    lines += [
        "",
        "## End of training: final validation loss minus AdamW's (held-out seeds, paired)",
        "",
        *markdown_table(
            ["arm", "difference [95 % CI]", "verdict"],
            [
                [_label(arm), _iv(versus["final_val_difference"]), _difference_verdict(versus["final_val_difference"])]
                for arm, versus in study["vs_adamw"].items()
            ],
        ),
    ]
    reached = []
    for arm, h in study["held_out"].items():
        quiet = not _shared(h)
        for target, t in h["targets"].items():
            reached.append(
                [
                    _label(arm),
                    f"{float(target):.3f}",
                    f"{t['reached']}/{h['seeds']}",
                    _iv(t["tokens"], 1, 1e-3),
                    _iv(t["seconds"], 1) if quiet else SHARED,
                    _iv(h["step_time_s"], 3) if quiet else SHARED,
                    _iv(h["ns_share_of_step"], 2),
                ]
            )
    lines += [
        "",
        f"## Held-out seeds: tokens and training seconds to target ({study['target_rule']})",
        "",
        *markdown_table(
            [
                "arm",
                "target",
                "reached",
                "tokens (k), mean [95 % CI]",
                "training s, mean [95 % CI]",
                "step s",
                "NS share of step",
            ],
            reached,
        ),
    ]
    adamw_shared = _shared(study["held_out"]["adamw"])
    ratios = [
        [
            _label(arm),
            f"{float(target):.3f}",
            f"{r['pairs']}/{len(study['held_out_seeds'])}",
            _iv(r["tokens"], 3),
            _verdict(r["tokens"], r["missed"]),
            SHARED if adamw_shared or _shared(study["held_out"][arm]) else _iv(r["seconds"], 2),
        ]
        for arm, versus in study["vs_adamw"].items()
        for target, r in versus["targets"].items()
    ]
    lines += [
        "",
        "## Each arm / AdamW (held-out seeds, paired by seed)",
        "",
        *markdown_table(
            [
                "arm",
                "target",
                "pairs",
                "tokens ratio [95 % CI]",
                "token efficiency",
                "seconds ratio [95 % CI] (this CPU)",
            ],
            ratios,
        ),
    ]
    lines += [
        "",
        "A pair counts only when both sides reached the target; a seed where one side did not is named "
        '("incomplete"), never dropped silently.',
        "",
        "**Wall clock.** " + gpu_outlook(),
        "",
        "![held-out validation loss](plots/study_val_loss.png)",
        "",
    ]
    return "\n".join(lines)


def plot(study: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, sweep) = plt.subplots(1, 2, figsize=(11, 4))
    tokens_per_step = study["horizon_tokens"] / max(
        s for runs in study["curves"].values() for v in runs.values() for s, _ in v
    )
    for arm, runs in study["curves"].items():
        for index, points in enumerate(runs.values()):
            curves.plot(
                [s * tokens_per_step / 1e3 for s, _ in points],
                [v for _, v in points],
                color=COLORS.get(arm),
                alpha=0.7,
                label=f"{_label(arm)} (lr {study['winners'][arm]['lr']:g})" if index == 0 else None,
            )
        grid = study["winners"][arm]["grid"]
        rates = sorted(grid, key=float)
        sweep.errorbar(
            [float(r) for r in rates],
            [grid[r]["mean"] for r in rates],
            yerr=[
                [grid[r]["mean"] - grid[r]["low"] for r in rates],
                [grid[r]["high"] - grid[r]["mean"] for r in rates],
            ],
            marker="o",
            capsize=3,
            color=COLORS.get(arm),
            label=_label(arm),
        )
    for target in study["targets"]:
        curves.axhline(target, color="black", linestyle="--", linewidth=0.7)
    curves.set(xlabel="tokens (k)", ylabel="validation loss", title="held-out seeds")
    sweep.set(
        xscale="log", xlabel="learning rate", ylabel="final validation loss", title="sweep, tuning seeds (95 % CI)"
    )
    for axis in (curves, sweep):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def run_stamp(study: dict) -> str:
    """When the study's last run finished (UTC): the page's date is its data's, not the hour it was rebuilt."""
    finished = study.get("last_run_finished")
    if not finished:
        return "unknown"
    return _dt.datetime.fromisoformat(finished).astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


HEADLINE_BEGIN, HEADLINE_END = "<!-- make study: begin -->", "<!-- make study: end -->"
"""docs/results.md's block that ``make study`` rewrites: the headline, every target in it."""


def headline(study: dict) -> str:
    """The study's result at every target, not only the best: each arm's final loss against AdamW's and its tokens
    to each target as a ratio to AdamW's (held-out seeds, paired), as docs/results.md shows it."""
    targets = study["targets"]
    rows = []
    for arm, h in study["held_out"].items():
        versus = study["vs_adamw"].get(arm)
        cells = [f"{_label(arm)} ({study['winners'][arm]['lr']:g})", _iv(h["budgets"][max(h["budgets"], key=float)])]
        if versus is None:
            rows.append([*cells, "(the baseline)", *("1" for _ in targets)])
            continue
        difference = versus["final_val_difference"]
        cells.append(f"{_iv(difference)}: {_difference_verdict(difference).split(' (')[0]}")
        for target in targets:
            r = versus["targets"][f"{target:.4f}"]
            cells.append(f"{_iv(r['tokens'])}: {_verdict(r['tokens'], r['missed']).split(' (')[0]}")
        rows.append(cells)
    winners = "; ".join(
        f"{_label(arm)} {w['lr']:g}" + (" (at its grid's edge)" if w.get("at_grid_edge") else "")
        for arm, w in study["winners"].items()
    )
    header = [
        "arm (lr)",
        "final val loss",
        "minus AdamW's",
        *(f"tokens / AdamW's to {t:.3f} ({f:.0%})" for t, f in zip(targets, stats.TARGET_FRACTIONS)),
    ]
    return "\n".join(
        [
            HEADLINE_BEGIN,
            "",
            f"Generated by `make study` from results/study.json: {study['runs']} runs, {study['seconds'] / 60:.0f} "
            f"min of training wall clock, the last finished {run_stamp(study)}. Learning rates chosen on tuning seeds "
            f"{study['tuning_seeds']}: {winners}. Measured on held-out seeds {study['held_out_seeds']}, 95 % t "
            "intervals, ratios paired by seed; each target is the validation loss every arm's winner reached on "
            "average (tuning seeds) by that share of the horizon.",
            "",
            *markdown_table(header, rows),
            "",
            HEADLINE_END,
        ]
    )


def with_headline(text: str, study: dict) -> str:
    """``text`` (docs/results.md) with its generated block rewritten; unchanged without the block's markers."""
    if HEADLINE_BEGIN not in text or HEADLINE_END not in text:
        return text
    head, rest = text.split(HEADLINE_BEGIN, 1)
    return head + headline(study) + rest.split(HEADLINE_END, 1)[1]


def write_study(study: dict, results_dir: str | Path, command: str, docs: Path | None = None) -> list[Path]:
    """results/study.{json,md}, the plot, and ``docs`` (docs/results.md) with its headline block rewritten."""
    results = claim(results_dir, "results_dir", "results")
    stamp = run_stamp(study)
    written = [
        atomic_write_json(results / "study.json", {**study, "command": command, "created": stamp}),
        atomic_write_text(results / "study.md", markdown(study, command, stamp)),
        plot(study, results / "plots" / "study_val_loss.png"),
    ]
    if docs is not None and docs.is_file():
        old = docs.read_text(encoding="utf-8")
        new = with_headline(old, study)
        if new != old:
            written.append(atomic_write_text(docs, new))
    return written
