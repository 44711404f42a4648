"""Outside check of the projection's bands: hold back every scored row of some models from every fit, project them,
and count how many fall inside the band each scheme would have printed from the other models' held-out errors.

The rows of the models held back are what a plan meets when it runs settings the calibration never saw (Llama 3's
TP 4-8, CP 2, dense GEMMs and FP8 current scaling on Blackwell, none of which a row of the earlier models ran). The
band of each scheme is rebuilt from the committed validation.json with those models' rows removed, as it was
printed before they were scored. Run after ``make projection``::

    .venv/bin/python tools/outside_check.py --models llama3_70b,llama31_405b
    .venv/bin/python tools/outside_check.py --models gpt_oss_120b

Each check is one entry of results/projection/outside_check.json (``checks``, by the models held back); a run
replaces its own entry and keeps the others.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from optbench.catalog.published import default_published_dir, load_published  # noqa: E402
from optbench.common.errors import Problem, UserError  # noqa: E402
from optbench.common.exits import exit_on_user_error  # noqa: E402
from optbench.common.io import atomic_write_json  # noqa: E402
from optbench.common.outputs import check_output, claim  # noqa: E402
from optbench.common.replace import replacing  # noqa: E402
from optbench.plan.row_runs import COMPOSED_ROWS  # noqa: E402
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS  # noqa: E402
from optbench.projection.bands import error_band  # noqa: E402
from optbench.projection.calibration import Holdout, row_id  # noqa: E402
from optbench.projection.carried import fitted_without  # noqa: E402
from optbench.projection.published_rows import projection_error  # noqa: E402
from optbench.projection.validation import SCHEMES, held_out_group  # noqa: E402

OUT = Path("projection") / "outside_check.json"
"""Under the results folder."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", required=True, help="comma-separated models whose rows are held back from every fit"
    )
    args = parser.parse_args()
    with exit_on_user_error():  # every refusal before the first write
        return check(args.models)


def check(names: str) -> int:
    """The outside check of ``names`` (comma-separated models), its entry of results/projection/outside_check.json."""
    models = frozenset(m for m in names.split(",") if m)
    results = check_output(ROOT / "results", "results", "results")
    directory = default_published_dir(results)
    validation = json.loads((results / "projection" / "validation.json").read_text())
    scored = {r["row"] for r in validation["rows"] if r["outside_domain"] is None}
    held = [r for r in load_published(directory) if r.model in models and row_id(r) in scored]
    if not held:
        raise UserError(
            Problem(
                "--models",
                f"no scored row of {', '.join(sorted(models)) or 'no model'} in "
                "results/projection/validation.json; name scored models, after make projection",
            )
        )
    holdout = Holdout(models=models)
    table = fitted_without(str(directory), holdout, COMPOSED_ROWS)
    assumptions = replace(DEFAULT_ASSUMPTIONS, small_expert_gemm_rows_mxfp8=table.mxfp8_expert_rows)
    rows = []
    for row in held:
        result = projection_error(row, COMPOSED_ROWS, holdout, assumptions)
        rows.append({"row": row_id(row), "error_percent": result.get("error_percent"), "anchor": result.get("anchor")})
    errors = [r["error_percent"] / 100 for r in rows if r["error_percent"] is not None]
    bands = {}
    for scheme in SCHEMES:
        kept = [
            r
            for r in validation["rows"]
            if r["outside_domain"] is None and "error_percent" in r[scheme] and r["model"] not in models
        ]
        band = error_band([r[scheme]["error_percent"] / 100 for r in kept], [held_out_group(scheme, r) for r in kept])
        if band is None:
            continue
        low, high = band
        inside = sum(low <= e <= high for e in errors)
        bands[scheme] = {
            "band_80_error_percent": [round(100 * low, 2), round(100 * high, 2)],
            "covered": inside,
            "rows": len(errors),
            "coverage": round(inside / len(errors), 3),
        }
        print(f"{scheme:28s} band [{100 * low:+7.1f}, {100 * high:+7.1f}] % covers {inside} of {len(errors)}")
    summary = {
        "models_held_back": sorted(models),
        "rows": len(errors),
        "median_abs_error_percent": round(100 * statistics.median(abs(e) for e in errors), 2),
        "error_range_percent": [round(100 * min(errors), 2), round(100 * max(errors), 2)],
    }
    print(f"median |error| {summary['median_abs_error_percent']} %, range {summary['error_range_percent']}")
    out = results / OUT
    checks = _earlier_checks(out)
    checks[",".join(sorted(models))] = {"summary": summary, "bands": bands, "rows": rows}
    with replacing(files=[out]):
        claim(results, "results", "results")
        atomic_write_json(out, {"about": __doc__.split("\n\n")[0], "checks": dict(sorted(checks.items()))})
    print(f"wrote {out}")
    return 0


def _earlier_checks(out: Path) -> dict:
    """The checks the file already holds (none before the first; a damaged file is a one-line refusal)."""
    if not out.is_file():
        return {}
    try:
        return dict(json.loads(out.read_text())["checks"])
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(
            Problem("results", f"{out} is not an outside check this tool wrote ({err}); move it away and rerun")
        ) from err


if __name__ == "__main__":
    raise SystemExit(main())
