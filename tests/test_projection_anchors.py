"""results/projection/anchors.json is what solving each published AdamW row live gives (make projection wrote it)."""

from __future__ import annotations

import json

import pytest

from optbench.common.checkout import repo_root
from optbench.projection.anchors import (
    ANCHORS,
    FIELDS,
    anchor_record,
    committed_anchors,
    committed_gemm_rates,
    committed_unsolved,
)
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS
from optbench.plan.row_runs import COMPOSED_ROWS
from optbench.projection.calibration import solve_on
from optbench.projection.precision_ratio import live_rate, pair_rows
from optbench.catalog.published import default_published_dir, load_published, row_id


@pytest.mark.xdist_group("carried-table")  # beside the tests that solve every published row: each row composed once
def test_every_committed_anchor_is_what_live_solving_gives():
    rows = [r for r in load_published(default_published_dir(repo_root() / "results")) if r.optimizer == "adamw"]
    stored, unsolved = committed_anchors(), committed_unsolved()
    assert len(stored) >= 50 and set(stored) | set(unsolved) == {row_id(r) for r in rows}
    for row in rows:
        live = solve_on(row, DEFAULT_ASSUMPTIONS, COMPOSED_ROWS)
        if isinstance(live, str):
            assert unsolved[row_id(row)] == live
            continue
        kept = stored[row_id(row)]
        assert kept["efficiency"] == pytest.approx(live.efficiency, rel=1e-12), row_id(row)
        fresh = json.loads(json.dumps(anchor_record(live)))
        assert {k: v for k, v in fresh.items() if k != "efficiency"} == {
            k: list(v) if isinstance(v, tuple) else v for k, v in kept.items() if k != "efficiency"
        }


@pytest.mark.xdist_group("carried-table")
def test_every_committed_pair_rate_is_what_live_solving_gives():
    """The BF16/FP8 pairs' effective GEMM rates a plan that crosses precision reads instead of composing the pairs."""
    rows = pair_rows(load_published(default_published_dir(repo_root() / "results")))
    stored = committed_gemm_rates()
    assert len(rows) >= 4 and set(stored) == {row_id(r) for r in rows}
    for row in rows:
        live = live_rate(row, DEFAULT_ASSUMPTIONS, COMPOSED_ROWS)
        assert stored[row_id(row)] == (None if live is None else pytest.approx(live, rel=1e-12)), row_id(row)


def test_a_stale_or_foreign_file_is_never_read(tmp_path):
    """Solved at other assumptions (a constant changed since make projection) or of another shape: plans solve live."""
    document = json.loads((repo_root() / "results" / ANCHORS).read_text(encoding="utf-8"))
    stale = {**document, "assumptions": {**document["assumptions"], "dense_gemm_fixed_s": 1.0}}
    for name, text in (("stale", json.dumps(stale)), ("foreign", "[1, 2]"), ("current", json.dumps(document))):
        (tmp_path / name / "projection").mkdir(parents=True)
        (tmp_path / name / ANCHORS).write_text(text, encoding="utf-8")
    for name in ("stale", "foreign"):
        assert committed_anchors(str(tmp_path / name)) == {} and committed_unsolved(str(tmp_path / name)) == {}
        assert committed_gemm_rates(str(tmp_path / name)) == {}
    assert committed_anchors(str(tmp_path / "current")) == committed_anchors()
    assert set(next(iter(document["anchors"].values()))) == set(FIELDS)
