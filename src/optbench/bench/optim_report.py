"""results/bench/optim.md: the optimizer benchmark's numbers as tables, each labelled with precision,
threads, machine and load."""

from __future__ import annotations

from optbench.bench.optim_timing import PRECISIONS
from optbench.bench.sections import section_notes
from optbench.common.tables import markdown_table

VARIANTS = (("ours_{p}", "ours"), ("ours_{p}_syrk", "ours + SYRK"), ("torch_{p}", "torch.optim.Muon"))


def _ms(seconds: float) -> str:
    """Milliseconds with one decimal, or two significant digits below 0.1 ms (a GPU bound: 0.036)."""
    return f"{seconds * 1e3:.1f}" if seconds >= 1e-4 else f"{seconds * 1e3:.2g}"


def _cell(spread: dict) -> str:
    """Median with the interquartile range, in ms."""
    return f"{_ms(spread['median'])} ({_ms(spread['q1'])}-{_ms(spread['q3'])})"


def _peaks_line(peaks: dict) -> str:
    parts = [
        f"{p} {v['gflops']:,.0f} GFLOP/s = {v['threads']} x {v['clock_ghz']:.2f} GHz x {v['flops_per_cycle']} "
        f"FLOP/cycle ({v['isa']})"
        for p, v in peaks.items()
    ]
    return "; ".join(parts)


def _block(block: dict) -> list[str]:
    load = block["load_average_1min"]
    others = block.get("others_cpu_share")
    busy = f"{100 * others:.0f} %" if others is not None else "unknown"
    return [
        f"### {block['threads']} thread(s)",
        "",
        f"Peak (the bound's denominator): {_peaks_line(block['peaks']) or 'unknown ISA: no bound'}.",
        f"Clock {next(iter(block['peaks'].values()))['clock_source'] if block['peaks'] else ''}; "
        f"load average {load['before']:.1f} before, {load['after']:.1f} after; other processes used {busy} of the "
        "machine's CPU time during the block.",
        "",
        *_table(block["models"]),
    ]


def _gpu_block(gpu: dict) -> list[str]:
    peaks = "; ".join(f"{p} {v['gflops'] / 1e3:,.0f} TFLOP/s dense ({v['source']})" for p, v in gpu["peaks"].items())
    return [
        f"Device: {gpu['device']}. Peak (the bound's denominator): {peaks or 'not in the GPU catalog: no bound'}; "
        "fp32 rows have no bound (a GPU's fp32 GEMMs run on TF32 tensor cores or CUDA cores depending on settings).",
        *section_notes(gpu),
        "",
        *_table(gpu["models"]),
    ]


def _table(models: dict) -> list[str]:
    cells = []
    for proxy, m in models.items():
        for p in PRECISIONS:
            for pattern, label in VARIANTS:
                name = pattern.format(p=p)
                flops = m["executed_gflop"]["syrk" if name.endswith("_syrk") else "plain"]
                bound = m.get("bound_s", {}).get(name)
                ratio = f"{m['ratio_to_bound'][name]:.2f}x" if bound else "-"
                speed = {"ours": m["speedup_vs_torch"][p], "ours + SYRK": m["speedup_vs_torch_syrk"][p]}.get(label)
                cells.append(
                    [
                        proxy,
                        p,
                        label,
                        _cell(m["step_s"][name]),
                        f"{flops:.1f}",
                        _ms(bound) if bound else "-",
                        ratio,
                        f"{speed:.2f}x" if speed is not None else "-",
                    ]
                )
        cells.append(
            [
                proxy,
                "default",
                "full optimizer step, Muon (auto) / AdamW",
                f"{_cell(m['step_s']['training_step_muon'])} / {_cell(m['step_s']['training_step_adamw'])}",
                "",
                "",
                "",
                f"Muon/AdamW {m['muon_vs_adamw_training_step']:.1f}x",
            ]
        )
    return markdown_table(
        [
            "proxy",
            "precision",
            "variant",
            "step ms, median (IQR)",
            "executed GFLOP",
            "bound ms",
            "x bound",
            "speedup vs torch",
        ],
        cells,
    )


def markdown(data: dict) -> str:
    cpu, gpu = data["cpu"], data["gpu"]
    lines = [
        "# Optimizer benchmark",
        "",
        f"Command (CPU and imbalance sections; a measured GPU section names its own): `{data['command']}` "
        f"(`make bench`), {data['created']}, torch {data['torch']}, Python {data['python']}"
        + (" (QUICK smoke run: shrunk models, few rounds)" if data["quick"] else ""),
        "",
        "One Muon step (momentum, Newton-Schulz, update) on each tiny proxy's parameters with fixed random "
        "gradients, ours against torch.optim.Muon **at equal precision**: bf16 = ours with "
        "`fp32_matmul_prec=medium` vs torch.optim.Muon as shipped; fp32 = ours with `highest` vs torch.optim.Muon's "
        "own code with its bf16 cast replaced by an fp32 copy (torch has no fp32 option). Variants interleaved "
        "round by round; median and interquartile range over the rounds. *Bound* = the variant's executed "
        "Newton-Schulz GFLOP (SYRK's blocked triangles counted as executed) at the cores' theoretical peak: no "
        "implementation can take less; *x bound* = median / bound.",
        "",
        f"## CPU: {cpu['cpu_model']}, {cpu['logical_cpus']} logical CPUs; `auto` precision here: "
        f"{cpu['auto_precision']}",
        "",
    ]
    for block in cpu["blocks"]:
        lines += [*_block(block), ""]
    lines += ["## GPU", ""]
    if gpu["measured"]:
        lines += _gpu_block(gpu)
    else:
        lines.append(f"Not measured: {gpu['reason']}.")
    lines += [
        "",
        "## Layer-wise load imbalance (NS FLOPs per step, max / mean over ranks; from shapes)",
        "",
    ]
    cells = []
    for model, v in data["imbalance"].items():
        lay, dealt = v["layout"], v["dealt_part_only"]
        cells.append(
            [
                model,
                f"{lay['gpus']} GPUs TP{lay['tp']} PP{lay['pp']} EP{lay['ep']} DP{lay['dp']} EDP{lay['edp']}",
                f"{v['pingpong']:.4f}",
                f"{v['cost_aware']:.4f}",
                f"{v['lower_bound']:.4f}",
                f"{dealt['pingpong']:.3f} / {dealt['cost_aware']:.3f} / {dealt['lower_bound']:.3f}",
            ]
        )
    lines += markdown_table(
        [
            "model",
            "layout",
            "ping-pong",
            "cost-aware",
            "lower bound",
            "dealt part only: ping-pong / cost-aware / bound",
        ],
        cells,
    )
    lines += ["", "## Targets", ""]
    lines += [f"- {'met' if met else 'MISSED'}: {target}" for target, met in data["targets"].items()]
    return "\n".join(lines) + "\n"
