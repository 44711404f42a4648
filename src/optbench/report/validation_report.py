"""``make projection``: the projection against every published row, in and out of sample.

Writes ``results/projection/validation.md`` and ``validation.json`` (:mod:`optbench.projection.validation`);
``make plan`` reads the leave-one-release-out summary of the JSON (leave-one-GPU-out when its calibration is
transferred from another GPU) and prints it beside its projection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optbench.common.make_args import results_parser
from optbench.common.checkout import repo_root
from optbench.common.errors import Problem, UserError
from optbench.common.io import atomic_write_json, atomic_write_text
from optbench.common.outputs import check_output, claim, remember
from optbench.plan.row_runs import COMPOSED_ROWS
from optbench.projection.consistency import csv_text, inconsistent_rows
from optbench.projection.expected_error import SCHEME_LABELS, VALIDATION
from optbench.projection.release_drift import drift_lines
from optbench.projection.validation import SCHEMES, WITHIN, report
from optbench.projection.anchors import ANCHORS, anchors_document
from optbench.projection.precision_ratio import live_rate, pair_rows
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS
from optbench.projection.calibration import solve_on
from optbench.projection.carried import CALIBRATION, fit_rows, fit_table, table_document
from optbench.common.tables import markdown_table
from optbench.catalog.published import (
    INCONSISTENT_CSV,
    default_published_dir,
    load_inconsistent,
    load_published,
    row_id,
)
from optbench.common.replace import replacing


def _cell(result: dict[str, Any]) -> str:
    if "error_percent" not in result:
        return "-"
    mark = " (anchor)" if result.get("anchor_itself") else ""
    return f"{result['tflops']:.0f} ({result['error_percent']:+.1f} %){mark}"


def summary_table(
    data: dict[str, Any], worst: bool = True, labels: tuple[str, ...] = ("all", "adamw", "muon")
) -> list[str]:
    """The summary per scheme and optimizer beside the copy baseline's, as markdown table lines."""
    cells = []
    for scheme in SCHEMES:
        for label, s in data["summary"][scheme].items():
            if not s.get("rows") or label not in labels:
                continue
            copy = s.get("copy_baseline") or {}
            copied = (
                [
                    f"{copy['median_abs_error_percent']:.1f} %",
                    f"{100 * copy['within_5_percent']:.0f} %",
                    f"{100 * copy['within_10_percent']:.0f} %",
                ]
                if copy.get("rows")
                else ["-", "-", "-"]
            )
            named = "; ".join(f"{w['row']} ({w['error_percent']:+.1f} %)" for w in s["worst"])
            boot = s.get("bootstrap_90") or {}
            interval = (
                f"{boot['median_abs_error_percent'][0]:.1f}-{boot['median_abs_error_percent'][1]:.1f} %, "
                f"{100 * boot['within_5_percent'][0]:.0f}-{100 * boot['within_5_percent'][1]:.0f} % "
                f"({boot['setups']} setups)"
                if boot
                else "-"
            )
            band = (
                f"{100 * s['band_80_coverage']:.0f} % (+-{s['band_80_median_half_width_percent']:.1f} %)"
                if s.get("band_80_coverage") is not None
                else "-"
            )
            cells.append(
                [
                    f"{SCHEME_LABELS[scheme]} ({label})",
                    s["rows"],
                    s["fitted_parameters"],
                    f"{s['median_abs_error_percent']:.1f} %",
                    *(f"{100 * s[f'within_{t:g}_percent']:.0f} %" for t in WITHIN),
                    interval,
                    band,
                    *copied,
                    *([named] if worst else []),
                ]
            )
    lines = markdown_table(
        [
            "scheme",
            "rows",
            "fitted parameters",
            "median abs. error",
            *(f"within {t:g} %" for t in WITHIN),
            "bootstrap 90 %: median, within 5 %",
            "80 % band held on (half width)",
            "copying the nearest kept row: median",
            "within 5 %",
            "within 10 %",
            *(["worst rows"] if worst else []),
        ],
        cells,
    )
    return lines


BEGIN, END = "<!-- make projection: begin -->", "<!-- make projection: end -->"
"""The block of a document that ``make docs-projection`` (``--update-docs``) rewrites (README.md, docs/projection.md);
``make projection``, a user's command, writes results/ only."""
DOCS = ("README.md", "docs/projection.md")


def read_docs() -> dict[Path, str]:
    """Each document's text (the ones with a generated block), read before anything is computed or written."""
    texts = {}
    for name in DOCS:
        path = repo_root() / name
        try:
            texts[path] = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UserError(
                Problem(
                    name,
                    "is missing from the checkout; restore it (git checkout -- "
                    f"{name}) or run without --update-docs; nothing was written",
                )
            ) from None
        except UnicodeDecodeError as err:
            raise UserError(
                Problem(
                    name,
                    f"is not UTF-8 text (byte {err.start:,}); restore it (git checkout -- {name}) "
                    "or run without --update-docs; nothing was written",
                )
            ) from None
        except OSError as err:
            raise UserError(Problem(name, f"cannot be read ({err.strerror}); nothing was written")) from None
    for path, name in zip(texts, DOCS):
        remember(path, name)  # a refusal to replace it names the document
    return {path: text for path, text in texts.items() if BEGIN in text and END in text}


def with_block(text: str, data: dict[str, Any]) -> str:
    """``text`` with its generated block rewritten from ``data``."""
    # The Muon rows beside all: where copying a kept row beats the model (a Muon row copied from the same setup at
    # another release), the reader sees it in the same table.
    block = "\n".join([BEGIN, "", *summary_table(data, worst=False, labels=("all", "muon")), "", END])
    head, rest = text.split(BEGIN, 1)
    return head + block + rest.split(END, 1)[1]


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# The projection against every published row",
        "",
        "<!-- generated by `make projection`; do not edit by hand -->",
        "",
        "Model-only TFLOP/s/GPU projected at each row's configuration (the row's release, NVIDIA's executed preset of "
        "it, the row's stated values; `make plan` with the row's command prints the same number), with the "
        "calibration refitted on the rows each scheme keeps, hardest first: **leave one setup out** (every release of "
        "the row's model x GPU x GPU count x precision held out: a setup nobody published), leave one model out, "
        "leave one GPU out, leave one layout out (only the same model and GPU at another layout kept), leave one "
        "release out, leave one row out (mostly NVIDIA's own release-to-release drift of the same setup) and in "
        "sample. Beside each, what copying the nearest published row the scheme keeps would score, with no model at "
        "all. Error = projected / published - 1. Muon rows are never fitted. Method: docs/projection.md.",
        "",
        "## Summary over the validated domain",
        "",
        *summary_table(data),
    ]
    lines += [
        "",
        "Fitted parameters: the most fitted numbers one projection of the scheme uses. A projection on an anchor row"
        " of its own model and GPU uses that row's GEMM efficiency and the MXFP8 `M0` (2); one from the carried table"
        " (results/projection/calibration.json, refitted without the held-out rows) uses its GPU, model and release"
        " terms and `M0`. A projection in another precision than its anchor's (the 25.11 BF16 rows, outside the"
        " domain) also uses the BF16/FP8 rate ratio of the published pairs its scheme keeps (docs/projection.md"
        " section 6); no row of the validated domain does.",
        "",
        "## Release drift",
        "",
        "Published AdamW model TFLOP/s/GPU of one setup (source, model, GPU, GPU count, precision) from one release to"
        " the next, split by whether NVIDIA's executed preset of that setup changed (why the calibration prefers an"
        " anchor whose release ran the same preset over the nearest release; `validation.json`, `release_drift`,"
        " lists every step).",
        "",
        *drift_lines(data["release_drift"]),
        "",
        "## Every row",
        "",
    ]
    lines += markdown_table(
        [
            "row",
            "published",
            *(SCHEME_LABELS[scheme] for scheme in SCHEMES),
            "outside the domain",
            "typed from the row",
        ],
        [
            [
                r["row"],
                r["published_model_tflops_per_gpu"] or "-",
                *(_cell(r[scheme]) for scheme in SCHEMES),
                r["outside_domain"] or "",
                " ".join(r["typed_from_row"]) or "",
            ]
            for r in data["rows"]
        ],
    )
    lines += ["", "Each row's command: `validation.json` (`rows[].command`)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = results_parser("projection", __doc__)
    parser.add_argument("--update-docs", action="store_true", help=f"rewrite the summary block of {' and '.join(DOCS)}")
    args = parser.parse_args(argv)
    results = check_output(args.results, "--results", "results")
    docs = read_docs() if args.update_docs else {}
    published = default_published_dir(results)
    flagged = csv_text(inconsistent_rows(load_published(published), COMPOSED_ROWS))
    md, js, table = results / "projection" / "validation.md", results / VALIDATION, results / CALIBRATION
    anchors = results / ANCHORS
    with replacing(files=[published / INCONSISTENT_CSV, table, anchors, md, js, *docs]):
        claim(results, "--results", "results")
        atomic_write_text(published / INCONSISTENT_CSV, flagged)  # the calibration below reads it
        rows = load_published(default_published_dir(repo_root() / "results"))
        fitted = fit_table(fit_rows(rows, COMPOSED_ROWS, tuple(load_inconsistent(published))), COMPOSED_ROWS)
        if fitted is not None:  # plans and the in-sample scheme read it
            atomic_write_json(table, table_document(fitted))
        atomic_write_json(
            anchors,
            anchors_document(  # plans read every AdamW row solved here
                {row_id(r): solve_on(r, DEFAULT_ASSUMPTIONS, COMPOSED_ROWS) for r in rows if r.optimizer == "adamw"},
                {row_id(r): live_rate(r, DEFAULT_ASSUMPTIONS, COMPOSED_ROWS) for r in pair_rows(rows)},
            ),
        )
        data = report(rows, COMPOSED_ROWS)
        text = markdown(data)
        atomic_write_text(md, text)
        atomic_write_json(js, data)
        for path, old in docs.items():
            atomic_write_text(path, with_block(old, data))
    print(text)
    for path in (published / INCONSISTENT_CSV, table, anchors, md, js, *docs):
        print(f"wrote {path}")
    return 0
