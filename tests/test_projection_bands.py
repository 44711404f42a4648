"""The 80 % band a projection prints (issue 79 item 2) and the scheme statistics beside it (item 3): split conformal
bands of the held-out errors, their coverage measured on groups the band never saw, the bootstrap over setups, the
two GPU-family schemes, and a plan's line naming its class (untested where no published row changes its knob)."""

from __future__ import annotations

import json
import math

import pytest

from conftest import REPO
from optbench.projection.bands import band_of, bootstrap, error_band, held_out_coverage
from optbench.projection.expected_error import SCHEME_LABELS

VALIDATION = REPO / "results" / "projection" / "validation.json"


def test_the_band_is_the_conformal_quantile_of_the_absolute_log_errors():
    errors = [0.01 * k for k in range(-9, 10)]  # 19 errors: the ceil(0.8 * 20) = 16th smallest |ln(1 + e)|
    low, high = error_band(errors)
    q = sorted(abs(math.log1p(e)) for e in errors)[15]
    assert (low, high) == pytest.approx((math.expm1(-q), math.expm1(q)))
    assert error_band([0.1, -0.02]) == pytest.approx((math.expm1(-math.log1p(0.1)), 0.1))  # n < 4: the largest
    assert error_band([]) is None
    # a projection 10 % high is covered by [P / 1.1, P * 1.1]: the published figure P / 1.1 is its lower end
    assert band_of(110.0, (math.expm1(-math.log(1.1)), 0.1)) == pytest.approx((100.0, 121.0))


def test_each_held_out_group_counts_once_in_the_band():
    """Ten rows of one model within 1 % and one row each of four other models at 20-40 %: weighing rows, the band
    is the many-row model's +-1 %; weighing groups (5 groups, level 0.8 x 6 / 5 > 1), it is the largest error."""
    errors = [0.01] * 10 + [0.2, 0.25, 0.3, 0.4]
    groups = ["a"] * 10 + ["b", "c", "d", "e"]
    assert error_band(errors)[1] == pytest.approx(0.25)  # 12th of 14 rows
    assert error_band(errors, groups)[1] == pytest.approx(0.4)
    # nine groups (level 0.8 x 10 / 9 = 8/9): the eighth-smallest group's score when each group has one row
    nine = [0.01 * k for k in range(1, 10)]
    assert error_band(nine, list("abcdefghi"))[1] == pytest.approx(0.08) == error_band(nine)[1]
    # nor does a group of many wide rows set it: ten rows of one group at 30 % weigh as one of nine groups
    wide = [0.3] * 10 + nine[:8]
    assert error_band(wide)[1] == pytest.approx(0.3)
    assert error_band(wide, ["a"] * 10 + list("bcdefghi"))[1] == pytest.approx(0.08)


def test_every_scheme_band_holds_on_three_quarters_of_rows_it_never_saw():
    """Issue 79's bar: the printed 80 % band covers >= 75 % of held-out rows in every out-of-sample scheme."""
    data = json.loads(VALIDATION.read_text())
    for scheme in data["schemes"]:
        summary = data["summary"][scheme]["all"]
        assert summary["band_80_coverage"] >= 0.75, scheme
        assert summary["band_80_groups"] >= 2, scheme


def test_coverage_never_uses_the_rows_own_group():
    """Two groups whose errors sit far apart: each group's band comes from the other's errors only, so the narrow
    group's band misses the wide group's rows (the wide one's band covers the narrow rows), although a band made from
    all rows would cover every row."""
    errors, groups = [0.01, 0.012, 0.011, 0.3, 0.31, 0.29], ["a", "a", "a", "b", "b", "b"]
    assert held_out_coverage(errors, groups)["band_80_coverage"] == 0.5
    low, high = error_band(errors)
    assert all(low - 1e-12 <= e <= high + 1e-12 for e in errors)
    assert held_out_coverage(errors, list("abcdef"))["band_80_coverage"] > 0.5


def test_the_bootstrap_resamples_whole_setups():
    errors, setups = [0.01, 0.01, 0.2, 0.2], ["s", "s", "t", "t"]
    low, high = bootstrap(errors, setups, lambda s: sorted(s)[len(s) // 2])
    assert (low, high) == (0.01, 0.2)  # a draw holds both rows of a setup or neither
    assert bootstrap([0.05] * 3, ["a", "b", "c"], max) == [0.05, 0.05]


def test_every_scheme_states_its_band_coverage_and_bootstrap():
    data = json.loads(VALIDATION.read_text())
    assert set(data["schemes"]) == set(SCHEME_LABELS) >= {"leave_one_architecture_out", "leave_one_family_out"}
    for scheme in data["schemes"]:
        summary = data["summary"][scheme]["all"]
        low, high = summary["band_80_error_percent"]
        if scheme == "in_sample":  # an anchor reproduces its own row's speed exactly: the band may be no band
            assert low <= 0 <= high
        else:
            assert summary["band_80_median_half_width_percent"] > 0 and low < 0 < high
        assert 0 <= summary["band_80_coverage"] <= 1
        boot = summary["bootstrap_90"]
        assert (
            boot["unit"] == "setup"
            and boot["median_abs_error_percent"][0]
            <= summary["median_abs_error_percent"]
            <= boot["median_abs_error_percent"][1]
        )
        assert summary["copy_baseline"]["rows"] == summary["rows"]


def test_holding_out_an_architecture_holds_out_each_of_its_gpus():
    from optbench.projection.validation import gpu_group

    assert gpu_group("leave_one_architecture_out", "gb300") == gpu_group("leave_one_architecture_out", "b300")
    assert gpu_group("leave_one_architecture_out", "h100") != gpu_group("leave_one_architecture_out", "b200")
    assert gpu_group("leave_one_family_out", "gb200") == gpu_group("leave_one_family_out", "gb300") == "NVL72"
    assert gpu_group("leave_one_family_out", "b200") == gpu_group("leave_one_family_out", "h100") == "8-GPU node"
    assert gpu_group("leave_one_setup_out", "b200") is None


def test_a_plan_prints_its_band_and_class_and_says_untested_where_no_row_changes_the_knob(capsys):
    from optbench.__main__ import main

    # Llama 3's rows run TP 4 and 8 and CP 2 (scored since 2026-12-07); none runs CP 4.
    assert main(["plan", "qwen3_30b_a3b_muon", "parallel.cp=4", "description=band"]) == 0
    out = capsys.readouterr().out
    assert "expected error untested (no published row runs CP 4; each runs CP 1 or 2)" in out
    band = next(line for line in out.splitlines() if "80 % band [" in line)
    assert "class: the same model x GPU x GPU count, another layout; untested: no published row runs CP 4" in band
    assert (
        main(["plan", "qwen3_30b_a3b_muon", "parallel.tp=4", "parallel.sequence_parallel=true", "description=band"])
        == 0
    )
    band = next(line for line in capsys.readouterr().out.splitlines() if "80 % band [" in line)
    assert "class: the same model x GPU x GPU count, another layout; leave one layout out" in band
    assert "untested" not in band
    assert main(["plan", "kimi_k2_muon", "parallel.ep=32", "description=band"]) == 0
    band = next(line for line in capsys.readouterr().out.splitlines() if "80 % band [" in line)
    assert "class: the same model x GPU x GPU count, another layout; leave one layout out" in band
    assert "untested" not in band
