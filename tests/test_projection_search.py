"""The layout search: its space, its layouts, its floor under the memory estimate, its tie-aware ranks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_make, squeezed

from optbench.plan.row_runs import COMPOSED_ROWS
from optbench.accounting.params import parameter_counts
from optbench.compose.recipe import compose_run
from optbench.common.errors import Problem, UserError
from optbench.projection.project import project
from optbench.plan.search import (
    DIMENSIONS,
    Point,
    Ranked,
    _tied_ranks,
    at,
    fixed_dimensions,
    hbm_share,
    nothing_valid,
    over_share_reason,
    parameter_floor_gb,
    point_of_run,
    points,
    search,
)
from optbench.report.search_ranks import markdown, record, summary
from optbench.plan.search_standing import (
    rank_at_fixed,
    rank_with_headroom,
    standing_of,
)
from optbench.resolve import resolve
from optbench.validate import validate

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def kimi():
    return compose_run("kimi_k2_muon", [])


def test_the_space_holds_the_recipe_layout_and_only_layouts_that_divide(kimi):
    space = list(points(kimi))
    assert point_of_run(kimi) in space
    world, m = kimi.parallel.num_gpus, kimi.model
    for p in space:
        assert world % (p.tp * p.cp * p.pp) == 0 and m.num_attention_heads % p.tp == 0
        assert m.num_moe_experts % p.ep == 0 and kimi.train.gbs % (p.mbs * world // (p.tp * p.cp * p.pp)) == 0
        assert p.vpp == 1 or p.pp > 1
    assert {p.cp for p in space} == {1}  # 4096-token sequences: no CP 2


def test_a_point_keeps_its_own_pipeline_layout_or_balances_a_new_one(kimi):
    own = point_of_run(kimi)
    assert at(kimi, own).parallel.pipeline_layout == kimi.parallel.pipeline_layout
    other = next(p for p in points(kimi) if (p.pp, p.vpp) == (8, 2))
    moved = resolve(at(kimi, other))
    assert len(moved.stage_layers) == 16 and sum(moved.stage_layers) == kimi.model.num_layers
    assert moved.run.parallel.sequence_parallel == (other.tp > 1)


def test_the_parameter_floor_is_under_the_memory_estimate(kimi):
    counts = parameter_counts(kimi.model)
    for point in [point_of_run(kimi), *list(points(kimi))[::97]]:
        resolved = resolve(at(kimi, point))
        assert parameter_floor_gb(kimi, point, counts) <= resolved.memory.total_gb


def test_a_fixed_dimension_keeps_the_recipe_value_and_leaves_the_rest_of_the_space_as_it_was(kimi):
    full, own = list(points(kimi)), point_of_run(kimi)
    for fixed in ({"ep"}, {"ep", "mbs"}, {"tp", "pp", "vpp", "cp", "ep", "mbs"}):
        kept = list(points(kimi, frozenset(fixed)))
        assert kept == [p for p in full if all(getattr(p, name) == getattr(own, name) for name in fixed)]
    assert list(points(kimi, frozenset(DIMENSIONS))) == [own]
    assert fixed_dimensions(" EP, mbs ,") == {"ep", "mbs"} and fixed_dimensions("") == frozenset()
    with pytest.raises(UserError) as err:
        fixed_dimensions("ep,dp")
    assert err.value.lines() == [
        "error: FIX: no search dimension 'dp'; fix any of tp, pp, vpp, cp, ep, mbs, "
        "comma-separated (e.g. FIX=ep,mbs): each keeps the composed run's value"
    ]


@pytest.mark.slow  # two searches of Qwen3 30B-A3B on 8 GB300 (a few seconds)
def test_the_rank_at_its_ep_is_the_rank_a_search_at_that_ep_gives():
    run = compose_run("qwen3_30b_a3b_adamw", ["cluster.container=nemo:26.04"])
    full, at_ep = search(run, top=0), search(run, top=0, fixed=frozenset({"ep"}))
    assert at_ep["fixed"] == {"ep": 8} and full["fixed"] == {}
    assert [r.point.ep for r in at_ep["ranked"]] == [8] * at_ep["valid"] and at_ep["valid"] < full["valid"]
    for entry in at_ep["ranked"]:
        assert rank_at_fixed(full, entry.point, frozenset({"ep"})) == (entry.rank, at_ep["valid"])
    assert rank_at_fixed(full, Point(3, 1, 1, 1, 8, 8), frozenset({"ep"})) is None


@pytest.mark.parametrize("text", ["abc", "0", "-0.5", "1.01", "90", "nan", "inf", "0.9.1"])
def test_an_hbm_share_is_a_fraction_up_to_one_or_a_one_line_refusal(text):
    assert hbm_share("") is None and hbm_share(" 0.9 ") == 0.9 and hbm_share("1") == 1.0
    with pytest.raises(UserError) as err:
        hbm_share(text)
    [line] = err.value.lines()
    assert line.startswith(
        f"error: HBM: '{text}' is not a share of the GPU's memory; give a fraction above 0 and at most 1"
    )


def test_a_search_left_empty_by_hbm_names_hbm_even_where_more_layouts_were_invalid():
    run = compose_run("qwen3_30b_a3b_muon", [])
    ep = Problem("parallel.ep", "EP-communication overlap needs expert parallelism")
    result = {
        "candidates": 216,
        "max_hbm_share": 0.05,
        "first_problems": {"invalid: parallel.ep": ep},
        "dropped": {"invalid: parallel.ep": 116, over_share_reason(0.05): 97, "does not fit in memory": 3},
    }
    problem = nothing_valid(run, result)
    assert (problem.field, problem.message) == (
        "HBM",
        "no layout of qwen3_30b_a3b on 8 gb300 (288 GB each) stays within "
        "HBM=0.05 of its memory: 100 of the 216 layouts exceed that, the other 116 "
        "are invalid; allow a larger share or use more GPUs",
    )
    # without HBM, the most common invalid point's problem, as before
    without = {**result, "max_hbm_share": None, "dropped": {"invalid: parallel.ep": 116, "does not fit in memory": 3}}
    assert nothing_valid(run, without) is ep


@pytest.mark.slow  # three searches of Qwen3 30B-A3B on 8 GB300 (a few seconds)
def test_hbm_keeps_exactly_the_layouts_estimated_within_that_share_and_the_recipes_own():
    run = compose_run("qwen3_30b_a3b_muon", [])
    full, within, whole = search(run, top=0), search(run, top=0, max_hbm=0.8), search(run, top=0, max_hbm=1.0)
    own = point_of_run(run)
    assert [(r.point, r.rank) for r in whole["ranked"]] == [(r.point, r.rank) for r in full["ranked"]]  # 1 = fits
    assert {r.point for r in within["ranked"]} == {
        r.point for r in full["ranked"] if r.memory_share <= 0.8 or r.point == own
    }
    assert within["max_hbm_share"] == 0.8 and full["max_hbm_share"] is None
    assert within["dropped"]["over 80 % of HBM by the memory estimate (HBM=0.8)"] == full["valid"] - within["valid"] > 0
    # the rank make search-ranks reports under a stricter memory rule is the rank this search gives
    assert standing_of(within, own).rank == rank_with_headroom(full, own, 0.8)


def test_points_priced_alike_share_a_rank():
    assert _tied_ranks([1000.0, 1000.0, 990.0, 980.004, 980.001]) == [1, 1, 3, 4, 4]


@pytest.mark.slow  # about a minute: every layout of Qwen3 30B-A3B on 8 GB300, and the command
@pytest.mark.timeout(600 + 120)  # the search subprocess's own limit, plus replanning its rows
def test_make_search_ranks_every_valid_layout(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "optbench", "search", "qwen3_30b_a3b_muon", f"results_dir={tmp_path / 'results'}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert "recipe's own layout TP1 PP1 VPP1 CP1 EP8 MBS8: rank" in out.stdout
    saved = json.loads((tmp_path / "results" / "plans" / "qwen3_30b_a3b_muon" / "search.json").read_text())
    assert saved["own_rank"] >= 1 and len(saved["top"]) == 10
    assert saved["valid"] + sum(saved["dropped"].values()) == saved["candidates"]
    assert [row["rank"] for row in saved["top"]] == sorted(row["rank"] for row in saved["top"])
    assert all("muon_vs_adamw_percent" in row for row in saved["top"])
    # Every point shares one calibrated efficiency: the search says which, and the error its figures carry.
    assert saved["efficiency"]["status"] == "calibrated"
    # The layouts it ranks are ones nobody published: the figure of leaving one layout out, and its ties marked.
    assert saved["expected_error"]["scheme"] == "leave one layout out"
    low, high = (e / 100 for e in saved["expected_error"]["band"]["error_percent"])
    best = saved["top"][0]["tflops_per_gpu"]
    # Ties by band overlap: a layout whose band's top reaches the best's band's bottom.
    floor = best * (1 + low) / (1 + high)
    assert all(row["within_expected_error_of_best"] == (row["tflops_per_gpu"] >= floor) for row in saved["top"])
    assert (
        f"layouts tie with the best: their 80 % bands ({100 * low:+.1f} to {100 * high:+.1f} %, leave one layout out)"
        " overlap the best's" in out.stdout
    )
    assert len(saved["top_stability"]) == 3 and "  top 3       under the band, #1 overlaps " in out.stdout
    # The recipe's own layout says whether it ties with the best, as the table's ~ does.
    own_line = next(line for line in out.stdout.splitlines() if "recipe's own layout" in line)
    gap = float(re.search(r"([+-]\d+\.\d+) % from the best", own_line).group(1))
    assert ("its band overlaps the best's, a tie (~)" in own_line) == ((1 + gap / 100) >= (1 + low) / (1 + high)), (
        own_line
    )
    assert all(0 < row["hbm_percent"] < 200 for row in saved["top"])
    assert f"  efficiency  {saved['efficiency']['value']:.3f} of gb300_fp8, calibrated on " in out.stdout
    assert saved["fixed"] == {} and "FIX=ep ranks the layouts at this EP only" in out.stdout
    assert "a smaller MBS can rank higher than it runs" in out.stdout
    # GB300's NVLink 5: the flex dispatcher's price beside HybridEP's published kernel rate
    # (data/hybridep_all_to_all.csv)
    assert (
        "for the flex dispatcher (HybridEP, DeepEP: NVIDIA's presets) at the ring collectives' 720 GB/s per GPU over"
        " NVLink, above HybridEP's published kernel rate (622 GB/s among 8 GPUs, 562 among 36"
    ) in out.stdout
    assert "; among the 12 layouts of its EP 8, rank 1 (FIX=ep)" in out.stdout and saved["own_rank_at_its_ep"] == 1
    # Each row's overrides are its make plan command: planned that way, the same layout and the same projection
    # (TP > 1 rows included, which need sequence parallelism for MoE).
    assert any(row["layout"].startswith("TP2") for row in saved["top"])
    for row in saved["top"]:
        planned = validate(compose_run("qwen3_30b_a3b_muon", row["overrides"]))
        assert (
            project(planned, with_what_ifs=False, row_runs=COMPOSED_ROWS).step.tflops_per_gpu == row["tflops_per_gpu"]
        ), row


def test_make_search_fix_holds_the_named_dimensions_and_refuses_an_unknown_one(tmp_path):
    # FIX=tp in the shell's environment is not typed after make: the command line's wins
    out = run_make(
        "search", "RECIPE=qwen3_30b_a3b_muon", f"results_dir={tmp_path / 'results'}", "FIX=ep,MBS", env={"FIX": "tp"}
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Layout search: qwen3_30b_a3b_muon: 3 layouts at EP 8, MBS 8 (FIX), 3 valid")
    assert "caveat" not in out.stdout  # neither the all-to-all a lower EP saves nor a smaller MBS is in this search
    saved = json.loads((tmp_path / "results" / "plans" / "qwen3_30b_a3b_muon" / "search.json").read_text())
    assert (
        saved["fixed"] == {"ep": 8, "mbs": 8}
        and [row["layout"].split()[4:] for row in saved["top"]] == [["EP8", "MBS8"]] * 3
    )
    bad = run_make("search", "RECIPE=qwen3_30b_a3b_muon", f"results_dir={tmp_path / 'other'}", "FIX=ep,dp")
    assert bad.returncode == 2 and bad.stdout == "" and not (tmp_path / "other").exists()
    assert (
        bad.stderr.startswith("error: FIX: no search dimension 'dp'; ") and bad.stderr.count("\n") == 2
    )  # + make's line
    bad = run_make(
        "search", "RECIPE=qwen3_30b_a3b_muon", f"results_dir={tmp_path / 'other'}", "HBM=1.2", env={"HBM": "0.9"}
    )
    assert bad.returncode == 2 and bad.stdout == "" and not (tmp_path / "other").exists()
    assert (
        bad.stderr.startswith("error: HBM: '1.2' is not a share of the GPU's memory; ") and bad.stderr.count("\n") == 2
    )


def test_make_search_hbm_drops_the_layouts_over_that_share_and_says_so(tmp_path):
    out = run_make(
        "search", "RECIPE=qwen3_30b_a3b_muon", f"results_dir={tmp_path / 'results'}", "FIX=ep,mbs", "HBM=0.5"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(
        "Layout search: qwen3_30b_a3b_muon: 3 layouts at EP 8, MBS 8 (FIX), 2 valid and projected "
        "(memory estimate at most 50 % of HBM: HBM=0.5)"
    )
    assert "  dropped    1: over 50 % of HBM by the memory estimate (HBM=0.5)" in out.stdout
    saved = json.loads((tmp_path / "results" / "plans" / "qwen3_30b_a3b_muon" / "search.json").read_text())
    assert saved["max_hbm_share"] == 0.5 and all(
        row["memory_gb"] <= 0.5 * 288 or row["layout"] == saved["own_layout"] for row in saved["top"]
    )


def test_a_local_recipe_is_refused_in_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "optbench", "search", "kimi_k2_tiny_muon"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and out.stderr.startswith(
        "error: RECIPE: kimi_k2_tiny_muon runs on the local"
    )


@pytest.mark.parametrize(
    "recipe, overrides, line",
    [
        (
            "kimi_k2_muon",
            ["parallel.num_gpus=8"],
            "error: parallel.num_gpus: no layout of kimi_k2 fits in memory on 8 gb300 (288 GB each): all ",
        ),
        (
            "qwen3_30b_a3b_muon",
            ["parallel.num_gpus=12"],
            "error: parallel.num_gpus: no layout of the search splits train.gbs=512 over 12 GPUs",
        ),
        ("qwen3_30b_a3b_muon", ["cluster=h100"], "error: cluster: mxfp8 needs a Blackwell GPU"),  # what make plan says
    ],
)
def test_a_search_with_no_valid_layout_says_why_in_one_line_and_writes_nothing(recipe, overrides, line, tmp_path):
    results = tmp_path / "results"
    out = subprocess.run(
        [sys.executable, "-m", "optbench", "search", recipe, *overrides, f"results_dir={results}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert out.stderr.strip().count("\n") == 0 and out.stderr.startswith(line), out.stderr
    assert not results.exists()


def test_search_ranks_records_the_gap_to_the_best_and_counts_the_bands():
    """NVIDIA's layout's standing: rank, projected throughput, gap to our best, and whether the best has a lower EP."""
    nvidia, low_ep, other = Point(1, 1, 1, 1, 8, 8), Point(1, 1, 1, 1, 1, 4), Point(2, 1, 1, 1, 8, 8)
    result = {
        "valid": 3,
        "candidates": 4,
        "ranked": [Ranked(1, low_ep, 800.0, 0.95), Ranked(2, other, 780.0, 0.75), Ranked(3, nvidia, 760.0, 0.85)],
    }
    entry = record("row a", nvidia, result, 1.0, "make plan ...")
    assert (entry["rank"], entry["best_layout"], entry["gap_to_best_percent"]) == (3, low_ep.label, -5.0)
    assert entry["best_has_lower_ep"] is True
    # A stricter memory rule drops the others above it, never NVIDIA's own layout (85 % of HBM here).
    assert entry["memory_share"] == 0.85 and entry["rank_with_headroom"] == {"0.9": 2, "0.8": 2, "0.7": 1}
    # Among the layouts of its own EP (8: itself and `other`) it is second.
    assert (entry["rank_at_its_ep"], entry["layouts_at_its_ep"]) == (2, 2)
    missing = record("row b", Point(4, 1, 1, 1, 8, 8), result, 1.0, "make plan ...")
    assert missing["rank"] is None and "gap_to_best_percent" not in missing
    best = record("row c", low_ep, result, 1.0, "make plan ...")
    tied = record(
        "row d", other, {**result, "ranked": [Ranked(1, low_ep, 800.0, 0.5), Ranked(1, other, 799.996, 0.5)]}, 1.0, ""
    )
    assert (tied["best_layout"], tied["gap_to_best_percent"], tied["best_has_lower_ep"]) == (other.label, 0.0, False)
    assert str(tied["gap_to_best_percent"]) == "0.0"
    data = summary([entry, missing, best])
    assert data["in_top"] == 2 and data["within_percent_of_best"] == {"3": 1, "5": 2, "10": 2}
    assert data["outside_top"] == 0 and data["median_gap_to_best_percent"] == -2.5
    assert data["in_top_with_headroom"] == {"0.9": 2, "0.8": 2, "0.7": 2} and data["in_top_at_its_ep"] == 2
    assert data["memory_share_range"] == {"min": 0.85, "max": 0.95, "median": 0.9}
    assert "NVIDIA's layouts take 85 to 95 % of HBM by our estimate (median 90 %" in markdown(data)
    assert (
        "| row a | TP1 PP1 VPP1 CP1 EP8 MBS8 | 3 | 3 | 2 of 2 | 760.0 | 85 % | TP1 PP1 VPP1 CP1 EP1 MBS4 | 800.0 |"
        " -5.00 % |" in squeezed(markdown(data))
    )
    assert (
        "NVIDIA's layout is in our top 5 on **2 of 3 rows**. This is not the bar above, which stays at 2"
        in markdown(data)
    )


def test_search_ranks_of_some_models_keep_the_other_models_rows_in_published_order():
    """MODELS= searches those models again and keeps the rest of the last table (it used to replace the table)."""
    from optbench.projection.calibration import row_id
    from optbench.report.search_ranks import merged
    from optbench.catalog.published import default_published_dir, load_published

    rows = load_published(default_published_dir(REPO / "results"))
    kimi = [row_id(r) for r in rows if r.model == "kimi_k2"][:2]
    qwen = [row_id(r) for r in rows if r.model == "qwen3_30b_a3b"][:2]
    nvidia, best = Point(1, 1, 1, 1, 8, 8), Point(1, 1, 1, 1, 1, 4)
    result = {"valid": 2, "candidates": 2, "ranked": [Ranked(1, best, 800.0, 0.9), Ranked(2, nvidia, 760.0, 0.8)]}
    first = record(kimi[0], nvidia, result, 1.0, "")
    earlier = {
        **summary([first, record(qwen[0], nvidia, result, 1.0, ""), record(qwen[1], best, result, 1.0, "")]),
        "layout_changes": [{"from_row": qwen[0]}, {"from_row": kimi[0]}],
    }
    fresh = {
        **summary([record(kimi[0], best, result, 1.0, ""), record(kimi[1], best, result, 1.0, "")]),
        "layout_changes": [],
    }
    data = merged(fresh, earlier, rows, {"kimi_k2"})
    order = [row_id(r) for r in rows]
    assert [r["row"] for r in data["rows"]] == sorted([*kimi, *qwen], key=order.index)
    assert {r["row"]: r["rank"] for r in data["rows"]} == {kimi[0]: 1, kimi[1]: 1, qwen[0]: 2, qwen[1]: 1}
    assert data["in_top"] == 4 and data["layout_changes"] == [{"from_row": qwen[0]}]


def test_make_search_ranks_refuses_an_unknown_model_and_a_foreign_folder_in_one_line(tmp_path):
    """Neither a typo in MODELS (it would replace the table with an empty one) nor a folder optbench did not
    create gets a traceback, and nothing is written."""
    foreign = tmp_path / "theirs"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("keep")
    for args, field in (
        (["--results", str(tmp_path / "ours"), "--models", "qwen3"], "MODELS"),
        (["--results", str(foreign), "--models", "qwen3_30b_a3b"], "--results"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "optbench", "search-ranks", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 2 and out.stdout == "", out.stderr
        assert out.stderr.strip().count("\n") == 0 and out.stderr.startswith(f"error: {field}: "), out.stderr
    assert [p.name for p in foreign.iterdir()] == ["keep.txt"] and not (tmp_path / "ours").exists()


def test_search_ranks_judges_the_search_by_nvidias_own_layout_changes():
    """Each change of layout between consecutive releases of one setup, its published change beside what the search
    at the earlier release said of the two layouts; a layout that does not change is no change."""
    import dataclasses

    from optbench.report.search_ranks import layout_changes
    from optbench.catalog.published import default_published_dir, load_published

    base = next(r for r in load_published(default_published_dir(REPO / "results")) if r.model == "qwen3_30b_a3b")
    rows = [
        dataclasses.replace(base, release=release, tflops_per_gpu=tflops)
        for release, tflops in (("26.04", 600.0), ("26.02", 500.0), ("26.02.01", 510.0))
    ]
    old, new = Point(1, 1, 1, 1, 8, 1), Point(1, 1, 1, 1, 8, 4)
    earlier = {"ranked": [Ranked(1, new, 550.0, 0.5), Ranked(2, old, 500.0, 0.5)]}
    later = {"ranked": [Ranked(1, new, 700.0, 0.5)], "space": {old, new}}  # the old layout is dropped there
    changes = layout_changes([(rows[0], new, later), (rows[1], old, earlier), (rows[2], old, earlier)])
    assert len(changes) == 1  # 26.02 -> 26.02.01 keeps the layout; the rows come in any order
    change = changes[0]
    assert (change["from_row"].split()[1], change["to_row"].split()[1]) == ("26.02.01", "26.04")
    assert (change["from_layout"], change["to_layout"], change["published_change_percent"]) == (
        old.label,
        new.label,
        17.6,
    )
    assert change["at_earlier_release"] == {"from_rank": 2, "to_rank": 1, "projected_change_percent": 10.0}
    assert change["at_later_release"] == {"from_rank": "dropped", "to_rank": 1, "projected_change_percent": None}
    outside = layout_changes([(rows[1], old, earlier), (rows[0], new, {"ranked": [], "space": {new}})])[0]
    assert outside["at_later_release"]["from_rank"] == "outside the search"
    text = markdown({**summary([]), "rows": [], "layout_changes": changes})
    assert (
        "NVIDIA changed a setup's layout between consecutive releases 1 time. The search moves the same way as"
        " NVIDIA's published figure (both up or both down) on 1 of them at the earlier release's configuration"
        " and on 0 at the later one's" in text
    )
    assert f"| {old.label} | {new.label} | +17.6 % | 2 -> 1, +10.0 % | dropped -> 1, - |" in squeezed(text)


def test_the_search_says_why_the_recipes_own_layout_is_not_one_of_its_points():
    """EP 8 does not divide the 4 data-parallel ranks of PP2 on 8 GPUs: the layout is in no search, and the search
    says so as make plan would, while it still ranks the layouts that are valid."""
    run = compose_run("qwen3_30b_a3b_muon", ["parallel.pp=2", "parallel.vpp=2", "force=true"])
    result = search(run, top=0, fixed=frozenset({"pp", "vpp"}))
    assert point_of_run(run) not in result["space"] and result["valid"] > 0
    assert str(result["own_problem"]).startswith("parallel.ep: ep*etp = 8*1 must divide tp*cp*dp = 1*1*4 = 4")
    assert (
        search(compose_run("qwen3_30b_a3b_muon", []), top=0, fixed=frozenset({"tp", "pp", "vpp"}))["own_problem"]
        is None
    )


def test_the_search_caveat_prices_each_dispatcher_as_the_runs_nvlink_was_measured():
    """NVLink 5: NCCL's published rates, and the flex price beside HybridEP's; NVLink 4 (H100): neither is published,
    both dispatchers at the ring rate, and the caveat says so."""
    from launch.search import all_to_all_prices
    from optbench.projection.interconnect import interconnect_for

    blackwell = all_to_all_prices(interconnect_for("b200"))
    assert (
        "NCCL's (moe_token_dispatcher=alltoall) at its published rates (src/optbench/data/nccl_all_to_all.csv)"
        in blackwell
    )
    assert "above HybridEP's published kernel rate (622 GB/s among 8 GPUs, 562 among 36" in blackwell
    hopper = all_to_all_prices(interconnect_for("h100"))
    assert "at the ring collectives' 360 GB/s per GPU over NVLink (HybridEP not measured on NVLink 4)" in hopper
    assert (
        "NCCL's (moe_token_dispatcher=alltoall) at the ring collectives' rate (no published NCCL all-to-all on "
        "NVLink 4)" in hopper
    )
