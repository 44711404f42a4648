"""results/study.{json,md} and results/plots/study_val_loss.png from an analysed study."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from optbench.machine_load import QUIET_SHARE
from optbench.io import atomic_write_json, atomic_write_text
from optbench.tables import markdown_table
from optbench.outputs import claim

LABELS = {"adamw": "AdamW", "muon_spectral": "Muon, spectral scale", "muon_moonlight": "Muon, Moonlight 0.2 scale",
          "adaptive_muon": "AdaMuon", "soap": "SOAP"}
COLORS = {"adamw": "tab:blue", "muon_spectral": "tab:red", "muon_moonlight": "tab:orange", "adaptive_muon": "tab:purple",
          "soap": "tab:green"}
QUIET = QUIET_SHARE


def _label(arm: str) -> str:
    return LABELS.get(arm, arm)


def _iv(value: dict | None, digits: int = 3, scale: float = 1.0, unit: str = "") -> str:
    if value is None:
        return "-"
    return (f"{value['mean'] * scale:.{digits}f}{unit} [{value['low'] * scale:.{digits}f}, {value['high'] * scale:.{digits}f}]"
            if value["n"] > 1 else f"{value['mean'] * scale:.{digits}f}{unit} (n=1)")


def _verdict(ratio: dict | None, missed: dict) -> str:
    if missed:
        who = ", ".join(f"seed {seed}: {'AdamW' if side == 'adamw' else 'both' if side == 'both' else 'the arm'}"
                        for seed, side in missed.items())
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


def _header(study: dict, command: str, stamp: str) -> list[str]:
    m, v = study["machine"], study.get("validation")
    loads = [h.get("others_cpu_share_max") for h in study["held_out"].values()]
    busiest = max((x for x in loads if x is not None), default=None)
    lines = [
        "# Muon, AdaMuon and SOAP vs AdamW, learning rates tuned, on real text",
        "",
        f"Command: `{command}`, {stamp}; {study['runs']} runs, {study['seconds'] / 60:.0f} min of training wall clock in all.",
        f"Data: pydocs (CPython's documentation, 512-token BPE, near-duplicate documents removed before the split). "
        f"Size `{study['size']}`: `{' '.join([*study['size_overrides'], *study['extra_overrides']])}`; "
        f"{study['horizon_tokens']:,.0f} training tokens per run.",
    ]
    if v:
        lines.append(
            f"Validation: the same {v['sequences']:,} sequences ({v['tokens_predicted']:,} predicted tokens) for every run "
            f"and seed (`data.valid_seed={v['valid_seed']}`), from the held-out documents of split `{v['split']}` "
            f"({v['split_tokens']:,} tokens); {v['seen_in_training']['sequences']} of them "
            f"({100 * v['seen_in_training']['share']:.1f} %) have {v['seen_in_training']['rule']}.")
    lines += [
        f"Machine: {m['device']}; model computed in {m['precision']}; Newton-Schulz products (Muon, AdaMuon) "
        f"`fp32_matmul_prec=auto` -> `{m['ns_precision']}` ({'bf16' if m['ns_precision'] == 'medium' else 'fp32'}); "
        f"SOAP's products fp32; Python {m['python']}. AdamW is torch.optim.AdamW (fp32)."
        + (f" Other processes took at most {100 * busiest:.0f} % of the machine during a held-out run"
           + (" (seconds flagged *shared* below)." if busiest > QUIET else ".") if busiest is not None else ""),
        f"Seeds: learning rate chosen on {study['tuning_seeds']}, everything below measured on held-out "
        f"{study['held_out_seeds']}. Intervals: 95 % Student t over seeds; ratios: geometric mean of per-seed "
        "ratios (same seed = same initialisation and data order). Every tuning curve is in study.json "
        "(`tuning_curves`): the targets re-derive from it (`study_stats.rederive_targets`).",
    ]
    return lines


def markdown(study: dict, command: str, stamp: str) -> str:
    sweep = [[_label(arm), f"{float(lr):g}", _iv(point), "**chosen**" if float(lr) == winner["lr"] else ""]
             for arm, winner in study["winners"].items() for lr, point in winner["grid"].items()]
    lines = [*_header(study, command, stamp), "",
             "## Learning-rate sweep (final validation loss, tuning seeds)", "",
             *markdown_table(["arm", "lr", "final val loss, mean [95 % CI]", ""], sweep)]
    edge = [_label(arm) for arm, winner in study["winners"].items() if winner.get("at_grid_edge")]
    if edge:
        lines += ["", f"Chosen at the edge of its grid (the optimum may lie beyond it): {', '.join(edge)}."]
    budgets = next(iter(study["held_out"].values()))["budgets"]
    lines += ["", "## Held-out seeds: validation loss at fixed token budgets", "",
              *markdown_table(["arm (lr)", *(f"{float(b):.0%} of the tokens" for b in budgets)],
                     [[f"{_label(arm)} ({study['winners'][arm]['lr']:g})", *(_iv(h["budgets"][b]) for b in budgets)]
                      for arm, h in study["held_out"].items()])]
    lines += ["", "## End of training: final validation loss minus AdamW's (held-out seeds, paired)", "",
              *markdown_table(["arm", "difference [95 % CI]", "verdict"],
                     [[_label(arm), _iv(versus["final_val_difference"]), _difference_verdict(versus["final_val_difference"])]
                      for arm, versus in study["vs_adamw"].items()])]
    reached = []
    for arm, h in study["held_out"].items():
        shared = " *shared*" if (h.get("others_cpu_share_max") or 0.0) > QUIET else ""
        for target, t in h["targets"].items():
            reached.append([_label(arm), f"{float(target):.3f}", f"{t['reached']}/{h['seeds']}", _iv(t["tokens"], 1, 1e-3),
                            f"{_iv(t['seconds'], 1)}{shared}", _iv(h["step_time_s"], 3), _iv(h["ns_share_of_step"], 2)])
    lines += ["", f"## Held-out seeds: tokens and training seconds to target ({study['target_rule']})", "",
              *markdown_table(["arm", "target", "reached", "tokens (k), mean [95 % CI]", "training s, mean [95 % CI]", "step s",
                      "NS share of step"], reached)]
    ratios = [[_label(arm), f"{float(target):.3f}", f"{r['pairs']}/{len(study['held_out_seeds'])}", _iv(r["tokens"], 3),
               _verdict(r["tokens"], r["missed"]), _iv(r["seconds"], 2)]
              for arm, versus in study["vs_adamw"].items() for target, r in versus["targets"].items()]
    lines += ["", "## Each arm / AdamW (held-out seeds, paired by seed)", "",
              *markdown_table(["arm", "target", "pairs", "tokens ratio [95 % CI]", "token efficiency",
                      "seconds ratio [95 % CI] (this CPU)"], ratios)]
    lines += ["", "A pair counts only when both sides reached the target; a seed where one side did not is named "
              "(\"incomplete\"), never dropped silently.",
              "", "**Wall clock.** " + gpu_outlook(), "", "![held-out validation loss](plots/study_val_loss.png)", ""]
    return "\n".join(lines)


def plot(study: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, sweep) = plt.subplots(1, 2, figsize=(11, 4))
    tokens_per_step = study["horizon_tokens"] / max(s for runs in study["curves"].values() for v in runs.values() for s, _ in v)
    for arm, runs in study["curves"].items():
        for index, points in enumerate(runs.values()):
            curves.plot([s * tokens_per_step / 1e3 for s, _ in points], [v for _, v in points], color=COLORS.get(arm),
                        alpha=0.7, label=f"{_label(arm)} (lr {study['winners'][arm]['lr']:g})" if index == 0 else None)
        grid = study["winners"][arm]["grid"]
        rates = sorted(grid, key=float)
        sweep.errorbar([float(r) for r in rates], [grid[r]["mean"] for r in rates],
                       yerr=[[grid[r]["mean"] - grid[r]["low"] for r in rates], [grid[r]["high"] - grid[r]["mean"] for r in rates]],
                       marker="o", capsize=3, color=COLORS.get(arm), label=_label(arm))
    for target in study["targets"]:
        curves.axhline(target, color="black", linestyle="--", linewidth=0.7)
    curves.set(xlabel="tokens (k)", ylabel="validation loss", title="held-out seeds")
    sweep.set(xscale="log", xlabel="learning rate", ylabel="final validation loss", title="sweep, tuning seeds (95 % CI)")
    for axis in (curves, sweep):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write_study(study: dict, results_dir: str | Path, command: str, now: _dt.datetime | None = None) -> list[Path]:
    results = claim(results_dir, "results_dir", "results")
    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    return [
        atomic_write_json(results / "study.json", {**study, "command": command, "created": stamp}),
        atomic_write_text(results / "study.md", markdown(study, command, stamp)),
        plot(study, results / "plots" / "study_val_loss.png"),
    ]
