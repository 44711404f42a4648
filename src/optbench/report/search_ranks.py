"""Where NVIDIA's own layout ranks in our layout search, for every published row (``make search-ranks``).

No anchor knows the search: for each row of the validated domain (:mod:`optbench.projection.validation`) the
search runs at the row's configuration (its release's executed preset, GPU count and GPU) and the rank of the
row's own layout is recorded (1 = best; points the model prices alike share a rank), with its projected
throughput beside the best layout's: a rank says little where hundreds of layouts lie within a few per cent.
Rows that share a configuration share one search. Writes ``results/projection/search_ranks.{md,json}``; with
``MODELS=`` only those models' rows are searched again and the other rows are kept from the last run's table.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from optbench.common.make_args import results_parser
from optbench.common.checkout import repo_root
from optbench.common.errors import Problem, UserError
from optbench.common.tables import markdown_table
from optbench.common.io import atomic_write_json, atomic_write_text
from optbench.common.outputs import claim
from optbench.projection.calibration import row_id
from optbench.plan.row_runs import COMPOSED_ROWS
from optbench.projection.release_drift import consecutive_releases
from optbench.plan.search import (
    AT_ITS_EP,
    Point,
    point_of_run,
    search,
)
from optbench.plan.search_standing import (
    rank_at_fixed,
    rank_with_headroom,
    ranked_of,
    standing_of,
)
from optbench.catalog.published import PublishedRow, default_published_dir, load_published
from optbench.common.replace import replacing

MAX_TABLE_BYTES = 16 << 20
"""The committed table is about 100 KB: a larger search_ranks.json was not written by this command."""
TOP = 5
"""The issue's bar: NVIDIA's layout in our top 5."""

WITHIN_PERCENT = (3, 5, 10)
"""Bands of the gap to the search's best in which NVIDIA's layout is counted (beside the out-of-sample error a
search's ranks stand on, leave one layout out: results/projection/validation.md)."""


HEADROOM = (0.9, 0.8, 0.7)
"""Stricter memory rules tried beside the search's own (estimate <= HBM): every layout but NVIDIA's whose estimate
exceeds this share of HBM is dropped. Our estimate is +-20 %, so a layout the search keeps may not fit; if that
were why NVIDIA's layouts rank low, a stricter rule would lift them."""


def record(row: str, own: Point, result: dict[str, Any], seconds: float, command: str) -> dict[str, Any]:
    """One row's standing: NVIDIA's layout's rank and projected throughput beside our best, its memory estimate's
    share of HBM, and its rank under each stricter memory rule of :data:`HEADROOM`."""
    standing, at_ep = standing_of(result, own), rank_at_fixed(result, own, AT_ITS_EP)
    entry: dict[str, Any] = {
        "row": row,
        "layout": own.label,
        "rank": None,
        "valid_points": result["valid"],
        "candidates": result["candidates"],
        "seconds": round(seconds, 1),
        "command": command,
    }
    if standing is not None:
        entry.update(
            rank=standing.rank,
            tflops_per_gpu=standing.tflops_per_gpu,
            best_layout=standing.best.label,
            best_tflops_per_gpu=standing.best_tflops_per_gpu,
            gap_to_best_percent=standing.gap_to_best_percent,
            best_has_lower_ep=standing.best.ep < own.ep,
            memory_share=_rounded(ranked_of(result, own).memory_share),
            rank_with_headroom={str(share): rank_with_headroom(result, own, share) for share in HEADROOM},
            rank_at_its_ep=at_ep.rank,
            layouts_at_its_ep=at_ep.layouts,
        )
    return entry


def _rounded(share: float | None) -> float | None:
    return None if share is None else round(share, 3)


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How many rows have NVIDIA's layout in our top 5, within each band of our best, and behind a lower EP."""
    ranked = [r for r in records if r["rank"] is not None]
    in_top = sum(1 for r in ranked if r["rank"] <= TOP)
    behind = [r for r in ranked if r["rank"] > TOP]
    return {
        "rows": records,
        "in_top": in_top,
        "top": TOP,
        "share_in_top": round(in_top / len(records), 3) if records else None,
        "within_percent_of_best": {
            str(band): sum(1 for r in ranked if r["gap_to_best_percent"] >= -band) for band in WITHIN_PERCENT
        },
        "median_gap_to_best_percent": round(statistics.median(r["gap_to_best_percent"] for r in ranked), 2)
        if ranked
        else None,
        "outside_top_behind_lower_ep": sum(1 for r in behind if r["best_has_lower_ep"]),
        "in_top_at_its_ep": sum(1 for r in ranked if r["rank_at_its_ep"] <= TOP),
        "outside_top": len(behind),
        "in_top_with_headroom": {
            str(share): sum(1 for r in ranked if r["rank_with_headroom"][str(share)] <= TOP) for share in HEADROOM
        },
        "memory_share_range": _share_range([r["memory_share"] for r in ranked if r["memory_share"] is not None]),
    }


def _share_range(shares: list[float]) -> dict[str, float] | None:
    """Lowest, median and highest share of HBM that NVIDIA's layouts take by our estimate."""
    return {"min": min(shares), "median": round(statistics.median(shares), 3), "max": max(shares)} if shares else None


def layout_changes(searched: list[tuple[PublishedRow, Point, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every change of layout NVIDIA made between consecutive releases of one setup (source, model, GPU, GPU count,
    precision, optimizer): the published change, and how the search at the earlier and at the later release's
    configuration ranks and projects the new layout against the old. NVIDIA's own later figure is the judge: did
    the search prefer the layout NVIDIA moved to? (At the earlier configuration the new layout runs without the
    later release's other changes; at the later one the old layout may be invalid, e.g. a non-interleaved pipeline
    once the EP all-to-all is overlapped.)"""
    changes = []
    for (before, old, earlier), (after, new, later) in consecutive_releases(searched, lambda entry: entry[0]):
        if old != new:
            changes.append(
                {
                    "from_row": row_id(before),
                    "to_row": row_id(after),
                    "from_layout": old.label,
                    "to_layout": new.label,
                    "published_change_percent": round(100 * (after.tflops_per_gpu / before.tflops_per_gpu - 1), 1),
                    "at_earlier_release": _judged(earlier, old, new),
                    "at_later_release": _judged(later, old, new),
                }
            )
    return changes


def _judged(result: dict[str, Any], old: Point, new: Point) -> dict[str, Any]:
    """The two layouts' ranks in one search and the projected change from the old to the new (None: not valid)."""
    was, now = ranked_of(result, old), ranked_of(result, new)

    def rank(point: Point, found) -> int | str:
        if found is not None:
            return found.rank
        return "outside the search" if point not in result.get("space", (point,)) else "dropped"

    return {
        "from_rank": rank(old, was),
        "to_rank": rank(new, now),
        "projected_change_percent": round(100 * (now.tflops_per_gpu / was.tflops_per_gpu - 1), 1)
        if was and now
        else None,
    }


def ranks(rows: list[PublishedRow], models: set[str] | None = None) -> dict[str, Any]:
    """One record per row of the domain (rows that share a configuration share one search), and the summary."""
    records, searches, searched = [], {}, []
    for row in rows:
        config, resolved = COMPOSED_ROWS.config(row), COMPOSED_ROWS.run(row)
        if isinstance(config, str) or isinstance(resolved, str) or not config.in_domain:
            continue
        if models and row.model not in models:
            continue
        key = config.overrides + (config.recipe,)
        if key not in searches:
            print(f"  searching the layouts of {row_id(row)} ({len(searches) + 1} of the searches)", flush=True)
            start = time.perf_counter()
            searches[key] = (search(resolved.run, top=0), time.perf_counter() - start)
        result, seconds = searches[key]
        own = point_of_run(resolved.run)
        records.append(record(row_id(row), own, result, seconds, config.command))
        searched.append((row, own, result))
    return {**summary(records), "layout_changes": layout_changes(searched)}


def earlier_table(path: Path, rows: list[PublishedRow], models: set[str]) -> dict[str, Any]:
    """The last run's table, whose other models' rows ``MODELS=`` keeps: refused in one line, before any search, when
    it is not one this command wrote (unreadable, another shape, or without those models' rows)."""

    def refused(why: str) -> UserError:
        return UserError(
            Problem(
                "MODELS",
                f"cannot keep the other models' rows: {path} {why}; run make search-ranks "
                "without MODELS (it searches every row)",
            )
        )

    try:
        if path.stat().st_size > MAX_TABLE_BYTES:
            raise refused(f"is over {MAX_TABLE_BYTES >> 20} MB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise refused(f"is unreadable ({type(err).__name__})") from None
    table_rows = data.get("rows") if isinstance(data, dict) else None
    changes = data.get("layout_changes") if isinstance(data, dict) else None
    if not (
        isinstance(table_rows, list)
        and isinstance(changes, list)
        and all(isinstance(r, dict) and isinstance(r.get("row"), str) for r in table_rows)
        and all(isinstance(c, dict) and isinstance(c.get("from_row"), str) for c in changes)
    ):
        raise refused("does not have the shape this command writes (rows and layout_changes)")
    others = {row.model for row in rows} - models
    if others and not any(r["row"] in {row_id(row) for row in rows if row.model in others} for r in table_rows):
        raise refused(f"holds no row of {', '.join(sorted(others))}")
    return data


def merged(
    fresh: dict[str, Any], earlier: dict[str, Any], rows: list[PublishedRow], models: set[str]
) -> dict[str, Any]:
    """``fresh`` (the rows of ``models``, searched now) with the other models' rows and layout changes of the
    ``earlier`` table (the last run's search_ranks.json), in published-row order, the summary counted over all:
    ``make search-ranks MODELS=...`` refreshes those models and keeps the rest of the table."""
    model_of = {row_id(row): row.model for row in rows}
    kept = [r for r in earlier.get("rows", []) if model_of.get(r["row"]) not in models]
    order = {row_id(row): index for index, row in enumerate(rows)}
    records = sorted([*kept, *fresh["rows"]], key=lambda r: order.get(r["row"], len(order)))
    changes = [c for c in earlier.get("layout_changes", []) if model_of.get(c["from_row"]) not in models]
    changes = sorted([*changes, *fresh["layout_changes"]], key=lambda c: order.get(c["from_row"], len(order)))
    return {**summary(records), "layout_changes": changes}


def markdown(data: dict[str, Any]) -> str:
    rows = data["rows"]
    within = ", ".join(f"{n} within {band} %" for band, n in data["within_percent_of_best"].items())
    lines = [
        "# Where NVIDIA's layout ranks in our layout search",
        "",
        "<!-- generated by `make search-ranks`; do not edit by hand -->",
        "",
        f"NVIDIA's layout in our top {data['top']}: **{data['in_top']} of {len(rows)} rows**"
        + (f" ({100 * data['share_in_top']:.0f} %)." if rows else ".")
        + " Search space and rules: docs/projection.md section 8.",
        "",
        f"Its projected throughput against our best layout's at the same configuration: {within} (of {len(rows)});"
        f" median gap {data['median_gap_to_best_percent']} %. Of the {data['outside_top']} rows where it is outside"
        f" our top {data['top']}, our best layout has a lower EP on {data['outside_top_behind_lower_ep']}.",
        "",
        f"Among the layouts of its own EP only (`make search FIX=ep`: the all-to-all a lower EP saves is priced, for"
        " the flex dispatcher of NVIDIA's presets above HybridEP's published kernel rate), NVIDIA's layout is "
        f"in our top {data['top']} on **{data['in_top_at_its_ep']} of {len(rows)} rows**."
        f" This is not the bar above, which stays at {data['in_top']}: it says where the search's error lies.",
        "",
        *_headroom_lines(data),
        *_change_lines(data.get("layout_changes", [])),
    ]
    cells = []
    for r in rows:
        if r["rank"] is None:
            cells.append([r["row"], r["layout"], "not valid", r["valid_points"], *["-"] * 6, r["seconds"]])
            continue
        share = "-" if r["memory_share"] is None else f"{100 * r['memory_share']:.0f} %"
        cells.append(
            [
                r["row"],
                r["layout"],
                r["rank"],
                r["valid_points"],
                f"{r['rank_at_its_ep']} of {r['layouts_at_its_ep']}",
                f"{r['tflops_per_gpu']:.1f}",
                share,
                r["best_layout"],
                f"{r['best_tflops_per_gpu']:.1f}",
                f"{r['gap_to_best_percent']:+.2f} %",
                r["seconds"],
            ]
        )
    lines += markdown_table(
        [
            "row",
            "NVIDIA's layout",
            "rank",
            "valid layouts",
            "rank at its EP",
            "its TFLOP/s/GPU",
            "its memory (of HBM)",
            "our best",
            "best's TFLOP/s/GPU",
            "gap",
            "search s",
        ],
        cells,
    )
    return "\n".join(lines) + "\n"


def _headroom_lines(data: dict[str, Any]) -> list[str]:
    """The stricter memory rules, in one paragraph: is a layout that may not fit why NVIDIA's ranks low?"""
    spread = data["memory_share_range"]
    if spread is None:
        return []
    stricter = ", ".join(f"{100 * float(share):.0f} % of HBM: {n}" for share, n in data["in_top_with_headroom"].items())
    return [
        f"Memory: NVIDIA's layouts take {100 * spread['min']:.0f} to {100 * spread['max']:.0f} % of HBM by our estimate"
        f" (median {100 * spread['median']:.0f} %; +-20 %). Dropping every other layout whose estimate exceeds a"
        f" stricter share, NVIDIA's layout would be in our top {data['top']} on: {stricter} (of "
        f"{len(data['rows'])} rows).",
        "",
    ]


def _change_lines(changes: list[dict[str, Any]]) -> list[str]:
    """NVIDIA's own layout changes, each judged by its published figures, beside what the search says of them."""
    if not changes:
        return []

    def agreed(where: str) -> int:
        return sum(
            1
            for c in changes
            if c[where]["projected_change_percent"] is not None
            and (c[where]["projected_change_percent"] > 0) == (c["published_change_percent"] > 0)
        )

    def judged(j: dict[str, Any]) -> str:
        projected = "-" if j["projected_change_percent"] is None else f"{j['projected_change_percent']:+.1f} %"
        return f"{j['from_rank']} -> {j['to_rank']}, {projected}"

    n = len(changes)
    lines = [
        f"NVIDIA changed a setup's layout between consecutive releases {n} time{'' if n == 1 else 's'}. The search"
        f" moves the same way as NVIDIA's published figure (both up or both down) on {agreed('at_earlier_release')}"
        f" of them at the earlier release's configuration and on {agreed('at_later_release')} at the later one's (a"
        ' release also changes other settings, so the published change is not the layout\'s alone; "dropped": the'
        " search drops that layout there, invalid under that release's settings or over HBM by the estimate;"
        ' "outside the search": a value the search does not try there, such as a VPP other than 1, 2, 4 and the'
        " preset's).",
        "",
    ]
    lines += markdown_table(
        [
            "from row",
            "to",
            "NVIDIA's layout: from",
            "to",
            "published change",
            "search at the earlier release: rank from -> to, projected change",
            "at the later release",
        ],
        [
            [
                c["from_row"],
                c["to_row"].split()[1],
                c["from_layout"],
                c["to_layout"],
                f"{c['published_change_percent']:+.1f} %",
                judged(c["at_earlier_release"]),
                judged(c["at_later_release"]),
            ]
            for c in changes
        ],
    )
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    parser = results_parser("search-ranks", __doc__)
    parser.add_argument(
        "--models",
        default="",
        help="comma-separated models (default: every model); the others' rows are kept from the last run",
    )
    args = parser.parse_args(argv)
    models = {m for m in args.models.split(",") if m} or None
    rows = load_published(default_published_dir(repo_root() / "results"))
    known = sorted({row.model for row in rows})
    unknown = sorted((models or set()) - set(known))
    if unknown:  # else a typo would replace the committed table with an empty one
        raise UserError(Problem("MODELS", f"no published rows of {', '.join(unknown)}; models: {', '.join(known)}"))
    results = claim(args.results, "--results", "results")
    earlier, last = results / "projection" / "search_ranks.json", None
    if models and earlier.is_file():  # the other models' rows stay as the last run left them; read before searching
        last = earlier_table(earlier, rows, models)
    data = ranks(rows, models)
    if last is not None:
        data = merged(data, last, rows, models)
    text = markdown(data)
    md, js = results / "projection" / "search_ranks.md", results / "projection" / "search_ranks.json"
    with replacing(files=[md, js]):  # the table and its data together, or neither
        atomic_write_text(md, text)
        atomic_write_json(js, data)
    print(text)
    for path in (md, js):
        print(f"wrote {path}")
    return 0
