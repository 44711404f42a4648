"""Every published row projected at its own configuration, by the path `make plan` takes, in and out of sample."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from launch.dispatch import plan_run
from optbench.projection.calibration import Holdout, ranked_anchors, row_id, solve_on
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS
from optbench.projection.expected_error import error_case, expected_error, expected_error_text
from optbench.projection.published_rows import projection_error
from optbench.plan.row_runs import COMPOSED_ROWS
from optbench.projection.validation import report, summary
from optbench.catalog.published import load_published

REPO = Path(__file__).resolve().parents[1]
ROWS = load_published(REPO / "results" / "published")


def _row(release: str, model: str, gpu: str, optimizer: str = "adamw"):
    return next(r for r in ROWS if (r.release, r.model, r.gpu, r.optimizer) == (release, model, gpu, optimizer))


@pytest.mark.parametrize(
    "release, model, gpu, optimizer",
    [("26.02", "kimi_k2", "gb300", "muon"), ("26.02.01", "qwen3_30b_a3b", "h100", "adamw")],
)
def test_plan_and_table_print_the_same_projection(release, model, gpu, optimizer):
    row = _row(release, model, gpu, optimizer)
    config = COMPOSED_ROWS.config(row)
    _, plan = plan_run(config.recipe, list(config.overrides))
    assert plan.projection.step.tflops_per_gpu == projection_error(row, COMPOSED_ROWS)["tflops"]
    assert config.command.startswith(f"make plan RECIPE={config.recipe} ")


def test_a_row_keeps_every_layer_of_its_model():
    # NVIDIA's 26.02.01 H100 row states PP2 VPP12: typed, the layout is rebalanced over 24 stages, never floored.
    row = _row("26.02.01", "qwen3_30b_a3b", "h100")
    resolved = COMPOSED_ROWS.run(row)
    assert "parallel.pp=2" in COMPOSED_ROWS.config(row).typed and "parallel.vpp=12" in COMPOSED_ROWS.config(row).typed
    assert len(resolved.stage_layers) == 24
    assert sum(resolved.stage_layers) == resolved.run.model.num_layers


def test_a_release_row_takes_that_release_preset():
    # Kimi K2's 26.02 blog row at nemo:26.02: the container is the row's, and its figure is reproduced as anchor.
    row = _row("26.02", "kimi_k2", "gb300")
    assert "cluster.container=nemo:26.02" in COMPOSED_ROWS.config(row).overrides
    assert COMPOSED_ROWS.run(row).run.cluster.container == "nemo:26.02"
    result = projection_error(row, COMPOSED_ROWS)
    assert result["anchor_itself"] and abs(result["error_percent"]) < 0.05


def test_a_row_runs_its_release_precision_settings():
    # The recipe's own precision is not typed, so the release's preset supplies its precision fields: Qwen3's
    # MXFP8 preset runs FP8 attention from 26.06 (Bridge 0.5), not before; an H100 FP8 row types its precision.
    assert COMPOSED_ROWS.run(_row("26.06", "qwen3_30b_a3b", "gb300")).run.precision.fp8_dot_product_attention
    assert not COMPOSED_ROWS.run(_row("26.04.01", "qwen3_30b_a3b", "gb300")).run.precision.fp8_dot_product_attention
    assert not any(
        o.startswith("precision=") for o in COMPOSED_ROWS.config(_row("26.06", "qwen3_30b_a3b", "gb300")).overrides
    )
    assert "precision=fp8_cs" in COMPOSED_ROWS.config(_row("26.02", "qwen3_30b_a3b", "h100")).overrides


def test_an_impossible_layout_is_a_reason_not_a_projection(monkeypatch):
    row = _row("26.02", "qwen3_30b_a3b", "gb300")
    bad = type(row)(**{**row.__dict__, "layout": {**row.layout, "pp": 7}, "release": "26.02.01"})
    result = projection_error(bad, COMPOSED_ROWS)
    assert "tflops" not in result and "parallel" in result["reason"]


def test_anchor_ranking_prefers_the_row_release_and_precision():
    best = ranked_anchors("qwen3_30b_a3b", "gb300", "26.06", ROWS, precision="mxfp8")[0]
    assert (best.release, best.gpu) == ("26.06", "gb300")
    assert ranked_anchors("deepseek_v3", "gb300", "26.02", ROWS, precision="mxfp8")[0].precision == "mxfp8"


def test_holdouts_never_use_what_they_hold_out():
    row = _row("26.06", "qwen3_30b_a3b", "gb300")
    assert projection_error(row, COMPOSED_ROWS)["anchor_itself"]
    loo = projection_error(row, COMPOSED_ROWS, Holdout(rows=frozenset({row_id(row)})))
    assert not loo["anchor_itself"] and loo["anchor"] != projection_error(row, COMPOSED_ROWS)["anchor"]
    loro = projection_error(row, COMPOSED_ROWS, Holdout(releases=frozenset({row.release})))
    assert " 26.06 " not in loro["anchor"]


def test_a_row_the_model_cannot_reach_says_so():
    row = _row("26.04.01", "deepseek_v3", "b200")
    assert not isinstance(solve_on(row, DEFAULT_ASSUMPTIONS, COMPOSED_ROWS), str)
    tenfold = dataclasses.replace(
        row, tokens_per_s_per_gpu=10 * row.tokens_per_s_per_gpu, model_tflops_per_gpu=10 * row.model_tflops_per_gpu
    )
    assert solve_on(tenfold, DEFAULT_ASSUMPTIONS, COMPOSED_ROWS).startswith("the model cannot reach this figure")


def test_summary_counts_only_the_validated_domain():
    def record(error, outside=None, optimizer="adamw"):
        result = {
            "error_percent": error,
            "anchor": f"a{error}",
            "parameters": 2,
            "copy": {"error_percent": 2 * error, "copied_from": "another row"},
        }
        return {
            "row": str(error),
            "optimizer": optimizer,
            "outside_domain": outside,
            "in_sample": result,
            "model": "m",
            "gpu": "g",
            "release": "r",
            "setup": ["m", "g", error, "p"],
            "layout": None,
        }

    records = [record(1.0), record(-4.0), record(12.0), record(50.0, outside="25.11"), record(2.0, optimizer="muon")]
    s = summary(records, "in_sample")
    assert s["rows"] == 4 and s["median_abs_error_percent"] == 3.0
    assert (s["within_3_percent"], s["within_5_percent"], s["within_10_percent"]) == (0.5, 0.75, 0.75)
    assert s["worst"][0] == {"row": "12.0", "error_percent": 12.0}
    assert summary(records, "in_sample", "muon")["rows"] == 1
    # The copy baseline over the same rows, under the same keys (other tools read them).
    copy = s["copy_baseline"]
    assert copy["rows"] == 4 and copy["median_abs_error_percent"] == 6.0 and copy["fitted_parameters"] == 0
    assert {"median_abs_error_percent", "within_5_percent", "within_10_percent", "fitted_parameters"} <= s.keys()


def test_expected_error_is_read_from_the_validation(tmp_path):
    assert expected_error("setup", tmp_path) is None
    assert "unknown" in expected_error_text(None)
    (tmp_path / "projection").mkdir()
    summary_all = {"rows": 10, "median_abs_error_percent": 2.5, "within_5_percent": 0.8, "within_10_percent": 0.9}
    (tmp_path / "projection" / "validation.json").write_text(
        json.dumps({"summary": {"leave_one_release_out": {"all": summary_all}}})
    )
    text = expected_error_text(expected_error("release", tmp_path))
    assert "median 2.5 %" in text and "90 %" in text and "10 published rows" in text
    # A matrix optimizer's plan adds the scheme's Muon rows (where the file has them), named for what they are.
    summary_muon = {"rows": 6, "median_abs_error_percent": 4.8, "within_5_percent": 0.5, "within_10_percent": 1.0}
    (tmp_path / "projection" / "validation.json").write_text(
        json.dumps({"summary": {"leave_one_release_out": {"all": summary_all, "muon": summary_muon}}})
    )
    assert expected_error_text(expected_error("release", tmp_path)) == text  # an AdamW plan: all rows only
    muon = expected_error_text(expected_error("release", tmp_path, matrix_optimizer="muon"))
    assert "10 published rows; its 6 Muon rows: median 4.8 %, 100 % within 10 %; make projection" in muon
    soap = expected_error_text(expected_error("release", tmp_path, matrix_optimizer="soap"))
    assert "; no published soap row; the 6 Muon rows: median 4.8 %" in soap


def test_each_case_reads_the_scheme_that_measured_it(tmp_path):
    (tmp_path / "projection").mkdir()
    figures = {
        scheme: {
            "all": {"rows": n, "median_abs_error_percent": float(n), "within_5_percent": 0.5, "within_10_percent": 0.25}
        }
        for n, scheme in enumerate(
            (
                "leave_one_row_out",
                "leave_one_release_out",
                "leave_one_layout_out",
                "leave_one_setup_out",
                "leave_one_model_out",
            ),
            start=1,
        )
    }
    drift = {
        "summary": {"preset_unchanged": {"steps": 11, "median_abs_change_percent": 0.62, "max_abs_change_percent": 1.8}}
    }
    path = tmp_path / "projection" / "validation.json"
    path.write_text(json.dumps({"summary": figures, "release_drift": drift}))
    named = {case: expected_error(case, tmp_path).scheme for case in ("row", "release", "layout", "setup", "model")}
    assert named == {
        "row": "leave one row out",
        "release": "leave one release out",
        "layout": "leave one layout out",
        "setup": "leave one setup out",
        "model": "leave one model out",
    }
    assert expected_error_text(expected_error("setup", tmp_path)).startswith(
        "expected error: median 4.0 %, 25 % of rows"
    )
    assert "at most 1.8 % (release drift" in expected_error_text(expected_error("drift", tmp_path))
    # How a projection relates to its anchor decides the case.
    assert error_case(True, True, True, True, True) == "row"
    assert error_case(True, True, True, True, False, same_preset=True) == "drift"
    assert error_case(True, True, True, True, False) == "release"
    assert error_case(True, True, True, False, True) == "layout"
    assert error_case(True, True, False, True, True) == "setup"  # another GPU count
    assert error_case(False, True, False, False, False) == "setup"  # a GPU the model has no row on
    assert error_case(False, False, False, False, False) == "model"
    path.write_text(json.dumps({"summary": {**figures, "leave_one_setup_out": {"all": {"rows": 0}}}}))
    assert expected_error_text(expected_error("setup", tmp_path)).startswith("expected error not measured: ")


@pytest.mark.slow  # about 12 s: the carried table refitted without GB300's rows
def test_leave_one_gpu_out_carries_every_row_from_the_table_of_the_other_gpus():
    row = _row("26.04", "qwen3_30b_a3b", "gb300")
    held = projection_error(row, COMPOSED_ROWS, Holdout(gpus=frozenset({"gb300"})))
    assert held["anchor"].startswith("the carried table") and not held["anchor_itself"]
    assert " gb300 " in projection_error(row, COMPOSED_ROWS)["anchor"]


def test_a_plan_states_the_error_of_its_own_case():
    """Kimi K2 is published on GB300 only: on B200 its efficiency comes from the carried table and the plan prints
    the leave-one-GPU-out figure and band (another GPU of an architecture with rows); at 512 GPUs (a count nobody
    published for any model and GPU at two counts) the setup figure, marked untested, with the widest band; the
    recipe itself at the blog's release is its anchor's own configuration (leave one row out)."""
    from optbench.projection.expected_error import with_band_tflops

    _, moved = plan_run("kimi_k2_muon", ["cluster=b200"])
    _, wider = plan_run("kimi_k2_muon", ["parallel.num_gpus=512", "train.gbs=8192"])
    _, own = plan_run("kimi_k2_muon", ["cluster.container=nemo:26.02"])
    _, layout = plan_run("qwen3_30b_a3b_muon", ["parallel.ep=4"])
    assert moved.projection.efficiency.status == "carried: gpu as blackwell, model fitted, release fitted"
    gpu = expected_error("gpu", matrix_optimizer="muon")
    assert moved.projection.expected_error == with_band_tflops(gpu, moved.projection.step.tflops_per_gpu)
    assert moved.projection.expected_error.scheme == "leave one GPU out"
    untested = "no model and GPU is published at two GPU counts"
    setup = expected_error("setup", matrix_optimizer="muon", untested=untested)
    assert wider.projection.expected_error == with_band_tflops(setup, wider.projection.step.tflops_per_gpu)
    band = wider.projection.expected_error.band
    assert band.untested == untested and band.case_class == "another GPU count or TP/CP"
    low, high = band.tflops_per_gpu
    assert low < wider.projection.step.tflops_per_gpu < high
    for plan, case in ((own, "row"), (layout, "layout")):
        assert plan.projection.expected_error == with_band_tflops(
            expected_error(case, matrix_optimizer="muon"), plan.projection.step.tflops_per_gpu
        )
        assert plan.projection.expected_error.band.untested is None
    # A Muon plan also states what the Muon rows alone score in its scheme (Muon is predicted, never fitted).
    assert own.projection.expected_error.muon_rows.rows >= 1


def test_an_efficiency_carried_across_precision_goes_through_the_published_pairs_and_claims_no_expected_error():
    """A BF16 run of a model NVIDIA published only in FP8 runs its GEMMs at the FP8 anchor's effective rate times
    the BF16/FP8 rate ratio of the published pairs; the plan names it and prints no out-of-sample error."""
    _, bf16 = plan_run("qwen3_30b_a3b_adamw", ["precision=bf16"])
    _, mxfp8 = plan_run("qwen3_30b_a3b_adamw", [])
    crossed, own = bf16.projection.efficiency, mxfp8.projection.efficiency
    assert (crossed.of_peak, own.of_peak, own.status) == ("gb300_bf16", "gb300_fp8", "calibrated")
    ratio = crossed.precision_ratio
    assert ratio.precisions == "BF16/FP8" and [pair.lower for pair in ratio.pairs] == [
        "bridge_perf_summary 25.11 deepseek_v3 gb200 x256 bf16 adamw 782",
        "bridge_perf_summary 25.11 deepseek_v3 gb300 x256 bf16 adamw 961",
    ]
    assert ratio.value == pytest.approx(math.prod(pair.ratio for pair in ratio.pairs) ** 0.5, abs=1e-4)
    # The status rounds the ratio to 3 places, the record keeps 4: 0.6355 may print either way.
    assert crossed.status.startswith("transferred from gb300_fp8 at BF16/FP8 rate ratio ")
    assert float(crossed.status.rsplit(" ", 1)[1]) == pytest.approx(ratio.value, abs=6e-4)
    assert crossed.value == pytest.approx(own.value * 2 * ratio.value, rel=1e-3)  # GB300: FP8 peak = 2 x BF16
    assert crossed.calibrated_on == own.calibrated_on
    assert expected_error_text(bf16.projection.expected_error).startswith("expected error not measured: ")
    assert mxfp8.projection.expected_error.scheme in ("leave one row out", "release drift of an unchanged preset")


def test_the_precision_ratio_leaves_out_held_out_pairs_and_without_one_carries_the_fraction_of_peak():
    bf16_row = _row("25.11", "deepseek_v3", "gb300")  # the GB300 pair's BF16 row (first in file order: bf16)
    assert bf16_row.precision == "bf16"
    run = plan_run("qwen3_30b_a3b_adamw", ["precision=bf16"])[0].run
    from optbench.projection.calibration import calibrate

    both = calibrate(run, DEFAULT_ASSUMPTIONS, row_runs=COMPOSED_ROWS)
    one = calibrate(
        run, DEFAULT_ASSUMPTIONS, holdout=Holdout(rows=frozenset({row_id(bf16_row)})), row_runs=COMPOSED_ROWS
    )
    none = calibrate(run, DEFAULT_ASSUMPTIONS, holdout=Holdout(releases=frozenset({"25.11"})), row_runs=COMPOSED_ROWS)
    assert len(both.precision_ratio.pairs) == 2 and len(one.precision_ratio.pairs) == 1
    assert one.precision_ratio.pairs[0][0].startswith("bridge_perf_summary 25.11 deepseek_v3 gb200")
    assert none.precision_ratio is None and none.peak_key == "gb300_fp8"  # the fraction of the FP8 peak, as it was
    assert none.as_record("gb300", "gb300_bf16").status == "transferred to gb300_bf16"
    ratio = both.precision_ratio
    assert ratio.efficiency_at(ratio.efficiency_at(0.2, "gb300_bf16"), "gb300_fp8") == pytest.approx(0.2)


def test_nvfp4_crosses_from_fp8_at_the_fp8_fp4_ratio_and_from_bf16_through_both():
    """NVIDIA's NVFP4 rows pair with the FP8 rows of their setups (Llama 3 70B and 3.1 405B on GB200 and GB300); an
    efficiency crosses one rung at its ratio and BF16 <-> FP4 at the product, and crossing back returns it."""
    from optbench.projection.precision_ratio import PrecisionRatio, chained, pairs, row_rung

    fp4_pairs = pairs(ROWS, "fp8", "fp4")
    assert all(row_rung(fp8) == "fp8" and fp4.precision == "nvfp4" for fp8, fp4 in fp4_pairs)
    assert {(fp4.model, fp4.gpu) for _, fp4 in fp4_pairs} == {
        (model, gpu) for model in ("llama3_70b", "llama31_405b") for gpu in ("gb200", "gb300")
    }
    assert not pairs(ROWS, "bf16", "fp4")  # BF16 reaches FP4 through FP8 only
    bf16_fp8 = PrecisionRatio(0.6, (("a", "b", 0.6),))
    fp8_fp4 = PrecisionRatio(0.8, (("b", "c", 0.8),), "fp8", "fp4")
    both = chained(bf16_fp8, fp8_fp4)
    assert (both.label, both.value, len(both.pairs)) == ("BF16/FP4", pytest.approx(0.48), 2)
    # GB300: FP4 peak 15000, FP8 5000: an FP8 fraction 0.2 at rate ratio 0.8 is 0.2 x 5000 / 0.8 of the FP4 peak.
    assert fp8_fp4.efficiency_at(0.2, "gb300_fp4") == pytest.approx(0.2 * 5000 / 0.8 / 15000)
    assert fp8_fp4.efficiency_at(fp8_fp4.efficiency_at(0.2, "gb300_fp4"), "gb300_fp8") == pytest.approx(0.2)
    assert both.efficiency_at(both.efficiency_at(0.5, "gb200_fp4"), "gb200_bf16") == pytest.approx(0.5)
    _, kimi = plan_run("kimi_k2_adamw", ["precision=nvfp4"])  # no NVFP4 row of Kimi K2: crosses from its FP8 anchor
    crossed = kimi.projection.efficiency
    assert crossed.of_peak == "gb300_fp4" and crossed.precision_ratio.precisions == "FP8/FP4"
    assert "NVIDIA's NVFP4 rows held out" in expected_error_text(kimi.projection.expected_error)
    _, llama = plan_run("llama31_405b_adamw", ["precision=nvfp4"])  # its own NVFP4 rows anchor it
    assert llama.projection.efficiency.of_peak == "gb300_fp4" and llama.projection.efficiency.precision_ratio is None


@pytest.mark.slow  # a minute: a plan per model and release (every row: each row's command in make projection)
def test_plan_and_table_agree_on_a_row_of_every_model_and_release():
    seen = set()
    for row in ROWS:
        config, result = COMPOSED_ROWS.config(row), projection_error(row, COMPOSED_ROWS)
        if isinstance(config, str) or "tflops" not in result or (row.model, row.release) in seen:
            continue
        seen.add((row.model, row.release))
        _, plan = plan_run(config.recipe, list(config.overrides))
        assert plan.projection.step.tflops_per_gpu == result["tflops"], config.command


@pytest.mark.slow  # about 40 s: every row under seven schemes, the carried table refitted per scheme
@pytest.mark.xdist_group("carried-table")  # on the worker that fits the table (test_projection_carried): fitted once
def test_committed_validation_is_what_make_projection_computes():
    committed = json.loads((REPO / "results" / "projection" / "validation.json").read_text())
    assert report(ROWS, COMPOSED_ROWS)["summary"] == committed["summary"]


def test_a_row_every_other_release_of_its_setup_contradicts_is_flagged_and_a_lone_pair_is_not(monkeypatch):
    from optbench.projection import consistency

    errors = {
        "outvoted": [("26.02.01", 156.5), ("26.04", 158.0), ("26.04.01", 160.5)],
        "one witness": [("26.02", -62.5)],
        "split": [("26.02", -62.5), ("26.04", 0.6)],
        "mixed signs": [("26.02", -60.0), ("26.04", 70.0)],
        "close": [("26.02", 3.0), ("26.04", -2.0)],
    }
    monkeypatch.setattr(consistency, "cross_release_errors", lambda rows, row_runs: errors)
    flagged = consistency.inconsistent_rows([], COMPOSED_ROWS)
    assert list(flagged) == ["outvoted"]
    assert "(26.02.01, 26.04, 26.04.01)" in flagged["outvoted"] and "+156 to +160 %" in flagged["outvoted"]


@pytest.mark.slow  # about 12 s: each row projected from each other release of its setup
def test_committed_inconsistent_rows_are_what_the_check_finds():
    from optbench.projection.consistency import csv_text, inconsistent_rows

    committed = (REPO / "results" / "published" / "inconsistent.csv").read_text(encoding="utf-8")
    assert csv_text(inconsistent_rows(ROWS, COMPOSED_ROWS)) == committed


@pytest.mark.xdist_group("carried-table")  # beside the tests that solve every published row: each row composed once
def test_a_contradicted_row_anchors_nothing_and_is_listed_outside_the_domain_with_its_reason():
    from optbench.catalog.published import load_inconsistent

    listed = load_inconsistent(REPO / "results" / "published")
    b200 = _row("26.02", "qwen3_30b_a3b", "b200")
    assert row_id(b200) in listed
    kept = ranked_anchors("qwen3_30b_a3b", "b200", "26.02", ROWS, precision="mxfp8", inconsistent=listed)
    assert b200 not in kept and kept[0].gpu == "b200"
    assert ranked_anchors("qwen3_30b_a3b", "b200", "26.02", ROWS, precision="mxfp8")[0] == b200  # without the list
    # What make plan prints at that release is anchored on the next release's row, not on the contradicted one.
    _, plan = plan_run("qwen3_30b_a3b_adamw", ["cluster=b200", "cluster.container=nemo:26.02"])
    assert (
        " b200 " in plan.projection.efficiency.calibrated_on and "26.02.01" in plan.projection.efficiency.calibrated_on
    )
    from optbench.projection.validation import validate_rows

    assert validate_rows([b200], COMPOSED_ROWS)[0]["outside_domain"] == listed[row_id(b200)]


def test_make_projection_refuses_a_folder_it_did_not_create_and_leaves_its_files(tmp_path, capsys):
    from optbench.__main__ import main

    (tmp_path / "published").mkdir()
    theirs = tmp_path / "published" / "inconsistent.csv"
    theirs.write_text("mine\n")
    with pytest.raises(SystemExit) as stopped:
        main(["projection", "--results", str(tmp_path)])
    assert stopped.value.code == 2
    assert theirs.read_text() == "mine\n"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --results: ") and "nothing was written" in err[0]
