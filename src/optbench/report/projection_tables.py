"""``python -m optbench projection-tables``: the Muon projection at the published layouts, as tables and a chart.

For every Muon recipe whose setup has a published model-only Muon figure (NVIDIA's blog Table 1:
Kimi K2 and Qwen3 30B-A3B on GB300), it writes

* ``results/projection/projection.md`` (and ``.json``): the calibration, the predicted Muon model-only
  TFLOP/s next to the published figure with the error, the decomposition of Muon's overhead over its
  AdamW twin, the what-ifs, and how the prediction moves with each a-priori constant;
* ``results/plots/projection_muon_overhead.png``: where the overhead comes from, and what parameter-gather
  overlap, SYRK kernels and cost-based balancing would each win.

Nothing is fitted to a Muon figure: the sensitivity table re-projects with other a-priori values,
the efficiency is always re-calibrated on AdamW only.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from optbench.common.make_args import results_parser
from optbench.compose.recipe import compose_run
from optbench.common.io import atomic_write_json, atomic_write_text
from optbench.common.tables import markdown_table
from optbench.common.outputs import claim
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS, EAGER_OP_OVERHEAD_MEASURED_ON, Assumptions
from optbench.plan.counterparts import ComposedCounterparts
from optbench.plan.row_runs import COMPOSED_ROWS
from optbench.projection.project import project
from optbench.projection.section import ProjectionSection, PublishedComparison
from optbench.resolve import resolve

RECIPES = ("kimi_k2_muon", "qwen3_30b_a3b_muon")
BLOG = "nvidia_blog_table1"
BLOG_CONTAINER = "cluster.container=nemo:26.02"
"""The blog's release: its rows are compared with projections of that release."""
PARTS = ("newton_schulz_compute", "kernel_launch", "elementwise_update", "imbalance", "communication", "other")
WHAT_IFS = ("param_gather_overlap", "syrk", "cost_balanced", "all_three", "no_launch_overhead")
SENSITIVITY = (
    ("default", {}),
    ("ns_gemm_efficiency=0.5", {"ns_gemm_efficiency": 0.5}),
    ("ns_gemm_efficiency=0.6", {"ns_gemm_efficiency": 0.6}),
    ("ns_gemm_efficiency=0.8", {"ns_gemm_efficiency": 0.8}),
    ("ns_gemm_efficiency=0.9", {"ns_gemm_efficiency": 0.9}),
    ("ns_gemm_efficiency=calibrated model efficiency", {"ns_gemm_efficiency": None}),
    ("eager_op_overhead=5 us", {"eager_op_overhead_s": 5e-6}),
    ("eager_op_overhead=20 us", {"eager_op_overhead_s": 20e-6}),
    ("eager_op_overhead=0 (no launch cost)", {"eager_op_overhead_s": 0.0}),
    ("no small-Gram slowdown (every NS GEMM at ns_gemm_efficiency)", {"ns_small_grams": False}),
)


def measured_op_overheads(base: Assumptions) -> tuple[tuple[str, dict[str, float]], ...]:
    """Sensitivity rows at the lowest and highest host time per eager op measured for the recipes' launch-bound
    matrices (``Assumptions.eager_op_overhead_measured_s``)."""
    return tuple(
        (
            f"eager_op_overhead={s * 1e6:.1f} us ({end} measured, {EAGER_OP_OVERHEAD_MEASURED_ON})",
            {"eager_op_overhead_s": s},
        )
        for end, s in zip(("lowest", "highest"), base.eager_op_overhead_measured_s)
    )


def _blog(p: ProjectionSection) -> PublishedComparison | None:
    return next((row for row in p.compared_with_published if row.published.startswith(BLOG)), None)


def collect(recipes: tuple[str, ...] = RECIPES, base: Assumptions = DEFAULT_ASSUMPTIONS) -> dict[str, Any]:
    """Projection, decomposition, what-ifs and sensitivity of every recipe."""
    out: dict[str, Any] = {"assumptions": base.as_dict(), "recipes": {}}
    for recipe in recipes:
        run = resolve(compose_run(recipe, [BLOG_CONTAINER]))
        p = project(
            run, [BLOG_CONTAINER], assumptions=base, counterparts=ComposedCounterparts(), row_runs=COMPOSED_ROWS
        )
        if not isinstance(p, ProjectionSection):
            out["recipes"][recipe] = p.to_json()
            continue
        rows = []
        for label, change in (*SENSITIVITY, *measured_op_overheads(base)):
            if change.get("ns_gemm_efficiency", 0.0) is None:
                change = {"ns_gemm_efficiency": p.efficiency.value}
            # Only the run's own figure is read here: no twin is composed for it.
            q = project(
                run, [BLOG_CONTAINER], assumptions=replace(base, **change), with_what_ifs=False, row_runs=COMPOSED_ROWS
            )
            blog = _blog(q) if isinstance(q, ProjectionSection) else None
            rows.append(
                {
                    "setting": label,
                    "tflops_per_gpu": q.step.tflops_per_gpu if isinstance(q, ProjectionSection) else None,
                    "error_percent": blog.error_percent if blog else None,
                }
            )
        blog = _blog(p)
        out["recipes"][recipe] = {
            "available": True,
            "projection": p.to_json(),
            "blog": blog.to_json() if blog else None,
            "sensitivity": rows,
        }
    return out


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f}"


def markdown(data: dict[str, Any]) -> str:
    """The tables of docs/projection.md, generated."""
    ok = {r: v for r, v in data["recipes"].items() if v["available"]}
    lines = [
        "<!-- generated by `python -m optbench projection-tables`; do not edit by hand -->",
        "",
        "### Prediction at the published layouts (GB300, MXFP8)",
        "",
    ]
    cells = []
    for recipe, v in ok.items():
        p, blog = v["projection"], v["blog"]
        published = f"{blog['published_model_tflops_per_gpu']:g} ({blog['published']})" if blog else "none"
        cells.append(
            [
                recipe,
                p["efficiency"]["calibrated_on"],
                f"{p['efficiency']['value']:.3f} of {p['efficiency']['of_peak']}",
                f"{p['adamw_twin']['tflops_per_gpu']:.1f}",
                f"{p['tflops_per_gpu']:.1f} (+ {p['ns_tflops_per_gpu']:.1f} NS)",
                published,
                f"{blog['error_percent']:+.2f} %" if blog else "-",
            ]
        )
    lines += markdown_table(
        [
            "recipe",
            "calibrated on (AdamW)",
            "GEMM efficiency",
            "AdamW twin TFLOP/s",
            "Muon projected (model-only)",
            "published Muon (model-only)",
            "error",
        ],
        cells,
    )
    overhead = [
        [
            recipe,
            f"{v['projection']['adamw_twin']['step_time_s']:.3f} / {v['projection']['step_time_s']:.3f}",
            *(_ms(v["projection"]["muon_overhead"]["parts_s"][k]) for k in PARTS),
            _ms(v["projection"]["muon_overhead"]["total_s"]),
        ]
        for recipe, v in ok.items()
    ]
    lines += [
        "",
        "### Where Muon's overhead comes from (ms per step, Muon minus its AdamW twin)",
        "",
        *markdown_table(["recipe", "step AdamW / Muon (s)", *PARTS, "total"], overhead),
    ]
    wins = [
        [recipe, *(f"{w[k]['tflops_per_gpu']:.1f} ({w[k]['win_percent']:+.2f} %)" for k in WHAT_IFS)]
        for recipe, w in ((recipe, v["projection"]["what_if"]) for recipe, v in ok.items())
    ]
    lines += [
        "",
        "### What each technique would win (model-only TFLOP/s per GPU, % over today's Muon)",
        "",
        *markdown_table(["recipe", *WHAT_IFS], wins),
    ]
    settings = [row["setting"] for row in next(iter(ok.values()))["sensitivity"]] if ok else []
    sensitivity = []
    for index, setting in enumerate(settings):
        cells = []
        for v in ok.values():
            row = v["sensitivity"][index]
            error = f"{row['error_percent']:+.2f} %" if row["error_percent"] is not None else "-"
            cells.append(f"{row['tflops_per_gpu']:.1f} ({error})")
        sensitivity.append([setting, *cells])
    lines += [
        "",
        "### Sensitivity to the a-priori constants (AdamW re-calibrated each time; no Muon fitting)",
        "",
        *markdown_table(["setting", *(f"{r} TFLOP/s (error)" for r in ok)], sensitivity),
    ]
    return "\n".join(lines) + "\n"


def chart(data: dict[str, Any], path: Path) -> Path:
    """Two panels: the overhead decomposition (stacked, ms) and the what-if wins (%)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = {r: v for r, v in data["recipes"].items() if v["available"]}
    names = list(ok)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    bottoms_pos = [0.0] * len(names)
    bottoms_neg = [0.0] * len(names)
    for part in PARTS:
        values = [1000 * ok[n]["projection"]["muon_overhead"]["parts_s"][part] for n in names]
        bottoms = [bp if v >= 0 else bn for v, bp, bn in zip(values, bottoms_pos, bottoms_neg)]
        left.bar(names, values, bottom=bottoms, label=part.replace("_", " "))
        bottoms_pos = [bp + max(v, 0) for v, bp in zip(values, bottoms_pos)]
        bottoms_neg = [bn + min(v, 0) for v, bn in zip(values, bottoms_neg)]
    left.set_ylabel("ms per step over the AdamW twin")
    left.set_title("Muon's overhead by cause (model)")
    left.legend(fontsize=8)
    width = 0.8 / len(WHAT_IFS)
    for i, scenario in enumerate(WHAT_IFS):
        xs = [j + (i - (len(WHAT_IFS) - 1) / 2) * width for j in range(len(names))]
        right.bar(
            xs,
            [ok[n]["projection"]["what_if"][scenario]["win_percent"] for n in names],
            width,
            label=scenario.replace("_", " "),
        )
    right.set_xticks(range(len(names)), names)
    right.set_ylabel("model TFLOP/s per GPU gain, %")
    right.set_title("What each technique would win (model)")
    right.legend(fontsize=8)
    fig.suptitle("Muon vs AdamW at the published GB300 layouts: projected (docs/projection.md)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = results_parser("projection-tables", __doc__)
    args = parser.parse_args(argv)
    results = claim(args.results, "--results", "results")
    data = collect()
    text = markdown(data)
    md = atomic_write_text(results / "projection" / "projection.md", text)
    js = atomic_write_json(results / "projection" / "projection.json", data)
    png = chart(data, results / "plots" / "projection_muon_overhead.png")
    print(text)
    for path in (md, js, png):
        print(f"wrote {path}")
    return 0
