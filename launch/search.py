"""``make search RECIPE=<recipe> [overrides] [FIX=ep,mbs] [HBM=0.9] [CHECK=bridge]``: every valid layout of the
recipe's model at its GPU count, ranked; ``FIX`` holds the named dimensions at the composed run's values, ``HBM`` drops
the layouts whose memory estimate takes more than that share of the GPU's memory, ``CHECK=bridge`` sends the ten best
through the container's real Megatron Bridge (as ``make plan ... CHECK=bridge`` would each).

Composes the recipe (and, for Muon, its AdamW twin) once, runs :func:`optbench.plan.search.search`,
prints the ten best layouts (step time, model TFLOP/s per GPU, memory, Muon vs AdamW at the same layout),
where the recipe's own layout ranks, and writes everything to ``results/plans/<recipe>/search.json``.
"""

from __future__ import annotations

from collections.abc import Sequence

from optbench.compose.recipe import compose_run
from optbench.common.errors import Problem, UserError
from optbench.common.io import atomic_write_json
from optbench.plan import build_plan, claim_results, plan_path
from optbench.plan.counterparts import compose_twin
from optbench.projection.expected_error import expected_error_text
from optbench.projection.hybridep_all_to_all import price_against_measurement
from optbench.projection.interconnect import Interconnect, interconnect_for
from optbench.projection.nccl_all_to_all import measured_on as nccl_measured
from optbench.projection.twin import TwinMismatch
from optbench.plan.search import (
    AT_ITS_EP,
    Point,
    fixed_dimensions,
    hbm_share,
    nothing_valid,
    point_of_run,
    search,
    within_expected_error,
)
from optbench.plan.search_standing import (
    Among,
    Standing,
    rank_at_fixed,
    standing_of,
)
from optbench.common.tables import console_table
from optbench.validate import validate

HBM_WARNING = 0.9
"""Layouts whose memory estimate is above this share of the GPU's HBM are marked (the estimate is +-20 %)."""


def all_to_all_prices(net: Interconnect | None) -> str:
    """How the two dispatchers' all-to-alls are priced over the run's NVLink, for the search's caveat."""
    if net is None:
        return "for both dispatchers at the ring collectives' NVLink rate"
    nccl = (
        "its published rates (src/optbench/data/nccl_all_to_all.csv)"
        if nccl_measured(net)
        else f"the ring collectives' rate (no published NCCL all-to-all on NVLink {net.nvlink_generation})"
    )
    return (
        f"for the flex dispatcher (HybridEP, DeepEP: NVIDIA's presets) at {price_against_measurement(net)};"
        f" NCCL's (moe_token_dispatcher=alltoall) at {nccl}"
    )


def search_lines(
    recipe: str, result: dict, own_point: Point, own: Standing | None, at_ep: Among | None, prices: str
) -> list[str]:
    """The printed report of a search (``at_ep``: the recipe's layout among the layouts of its EP; ``prices``: how
    the all-to-alls are priced on the run's GPU, :func:`all_to_all_prices`)."""
    fixed = ", ".join(f"{name.upper()} {value}" for name, value in result["fixed"].items())
    share = result.get("max_hbm_share")
    within = f" (memory estimate at most {100 * share:g} % of HBM: HBM={share:g})" if share is not None else ""
    lines = [
        f"Layout search: {recipe}: {result['candidates']} layouts{f' at {fixed} (FIX)' if fixed else ''},"
        f" {result['valid']} valid and projected{within}, in {result['seconds']:.0f} s (docs/projection.md section 8)",
    ]
    cells = []
    for row in result["top"]:
        marks = " ".join(
            m
            for m, on in (
                ("~", row.get("within_expected_error_of_best")),
                ("!", (row.get("hbm_percent") or 0) > 100 * HBM_WARNING),
            )
            if on
        )
        hbm = f"{row['hbm_percent']:.0f} %" if row.get("hbm_percent") is not None else "-"
        cells.append(
            [
                row["rank"],
                row["layout"],
                f"{row['step_time_s']:.2f}",
                f"{row['tflops_per_gpu']:.1f}",
                f"{row['memory_gb']:.1f}",
                hbm,
                marks,
                f"{row['muon_vs_adamw_percent']:+.2f} %" if "muon_vs_adamw_percent" in row else "-",
            ]
        )
    lines += console_table(
        ["#", "layout", "step s", "model TFLOP/s", "memory GB", "of HBM", "", "Muon vs AdamW"],
        cells,
        ("right", "left", "right", "right", "right", "right", "left", "right"),
    )
    expected = result.get("expected_error")
    if expected is not None and expected.median_abs_error_percent is not None:
        band = expected.band
        how = (
            f"their 80 % bands ({band.error_percent[0]:+.1f} to {band.error_percent[1]:+.1f} %, {band.scheme}) overlap"
            f" the best's"
            if band is not None and len(band.error_percent) == 2
            else f"they project within the expected error (median {expected.median_abs_error_percent:.1f} %,"
            f" {expected.scheme}) of the best"
        )
        lines.append(
            f"  ~ ties      {result['within_expected_error_of_best']} layouts tie with the best: {how}; the model "
            "does not resolve their order"
            + (
                f"; ! above {100 * HBM_WARNING:g} % of HBM by an estimate of +-20 %: may not fit"
                if any((r.get("hbm_percent") or 0) > 100 * HBM_WARNING for r in result["top"])
                else ""
            )
        )
        stability = result.get("top_stability") or []
        if stability:
            lines.append(
                "  top 3       under the band, "
                + ", ".join(
                    f"#{i} overlaps {n} other layout{'' if n == 1 else 's'}" for i, n in enumerate(stability, start=1)
                )
                + (": the top 3 are stable" if not any(stability) else ": any of those could run fastest")
            )
    where = "not a valid point of the search"
    if result.get("own_problem") is not None:
        where += f" ({result['own_problem']})"
    if own is not None:
        where = (
            f"rank {own.rank} of {result['valid']} (equal projections share a rank), {own.tflops_per_gpu:.1f}"
            f" TFLOP/s/GPU, {own.gap_to_best_percent:+.2f} % from the best"
        )
        if within_expected_error(own.tflops_per_gpu, own.best_tflops_per_gpu, expected):
            where += ": its band overlaps the best's, a tie (~)"
        if "ep" not in result["fixed"] and at_ep is not None:
            where += f"; among the {at_ep.layouts} layouts of its EP {own_point.ep}, rank {at_ep.rank} (FIX=ep)"
    lines.append(f"  recipe's own layout {own_point.label}: {where}")
    if result.get("efficiency"):
        efficiency = result["efficiency"]
        lines.append(
            f"  efficiency  {efficiency.value:.3f} of {efficiency.of_peak}, {efficiency.status} on"
            f" {efficiency.calibrated_on}; {expected_error_text(result.get('expected_error'))}"
        )
    if "ep" not in result["fixed"]:
        lines.append(
            f"  caveat      the all-to-all a lower EP saves is priced from bandwidths: {prices}; expert GEMMs with "
            "few rows are measured (results/bench/grouped_gemm.md): layouts that shrink or drop the MoE all-to-all "
            "(low EP) can rank higher than they run; NVIDIA's own layouts rank as in "
            "results/projection/search_ranks.md; FIX=ep ranks the layouts at this EP only"
        )
    if "mbs" not in result["fixed"]:
        lines.append(
            "  caveat      the model prices a microbatch by its FLOPs, bytes, the pipeline bubble and each dense GEMM"
            " call's fixed cost (none where a CUDA graph replays the launches), nothing else per microbatch: a"
            " smaller MBS can rank higher than it runs (NVIDIA's own MBS changes: results/projection/search_ranks.md);"
            " FIX=mbs holds the recipe's"
        )
    for reason, count in sorted(result["dropped"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  dropped {count:>4}: {reason}")
    return lines


def check_best(recipe: str, overrides: Sequence[str], rows: list[dict]) -> None:
    """``CHECK=bridge``: each of the best layouts planned as ``make plan`` plans it (the recipe, the user's overrides,
    the row's), through its container's real Bridge in one process; each row records what Bridge said."""
    from launch.bridge_check import check_plans, checked_lines, refusal

    items, named = [], []
    for row in rows:
        typed = [*overrides, *row["overrides"]]
        try:
            resolved = validate(compose_run(recipe, typed))
        except UserError as err:  # the recipe's own layout is kept whatever its memory estimate: make plan refuses it
            row["bridge_check"] = f"not planned: {err.lines()[0].removeprefix('error: ')}"
            print(f"  #{row['rank']} {row['layout']}: {row['bridge_check']}")
            continue
        items.append((resolved.run, build_plan(resolved, typed)))
        named.append(row)
    if not items:
        return
    reports = check_plans(items)
    for line in checked_lines([f"#{row['rank']} {row['layout']}" for row in named], reports, "layout"):
        print(f"  {line}")
    for row, report in zip(named, reports):
        row["bridge_check"] = refusal(report) or "passed"


def run_search(recipe: str, overrides: Sequence[str], fix: str = "", hbm: str = "", check: bool = False) -> int:
    fixed, max_hbm = fixed_dimensions(fix), hbm_share(hbm)  # before composing: a typo costs nothing
    run = compose_run(recipe, overrides)
    if run.engine != "megatron_bridge" or run.cluster.gpu == "auto":
        raise UserError(
            Problem(
                "RECIPE",
                f"{recipe} runs on the local engine (it measures itself, nothing to project); "
                "search a cluster recipe, e.g. make search RECIPE=qwen3_30b_a3b_muon",
            )
        )
    if check:  # before the search: a missing Bridge environment costs nothing
        from launch.bridge_check import environment_for

        environment_for(run)
    adamw = None
    if run.optimizer.matrix_optimizer:
        try:
            adamw = compose_twin(run, overrides)[2]
        except TwinMismatch:
            raise
        except UserError:
            adamw = None
    result = search(run, adamw, fixed=fixed, max_hbm=max_hbm)
    if not result["valid"]:
        raise UserError(nothing_valid(run, result))  # before anything is printed or written
    own = point_of_run(run)
    standing, at_ep = standing_of(result, own), rank_at_fixed(result, own, AT_ITS_EP)
    prices = all_to_all_prices(interconnect_for(run.cluster.gpu, run.cluster.nvlink_domain_size))
    for line in search_lines(recipe, result, own, standing, at_ep, prices):
        print(line)
    if check:
        check_best(recipe, overrides, result["top"])
    claim_results(run)
    path = plan_path(run).with_name("search.json")
    record = {k: v for k, v in result.items() if k not in ("ranked", "first_problems", "space", "own_problem")}
    record.update(
        recipe=recipe,
        overrides=list(overrides),
        own_layout=own.label,
        own_rank=standing.rank if standing else None,
        own_gap_to_best_percent=standing.gap_to_best_percent if standing else None,
        own_rank_at_its_ep=at_ep.rank if at_ep else None,
        own_problem=str(result["own_problem"]) if result["own_problem"] else None,
    )
    for key in ("efficiency", "expected_error"):  # the projection's typed records, as plan.json writes them
        record[key] = record[key].to_json() if record[key] is not None else None
    print(f"  search.json {atomic_write_json(path, record)}")
    return 0
