"""Build the throughput table: published figures beside measured runs, one row per configuration.

Rules (docs/results.md explains them for users):

* A row is one (model, GPU, precision, optimizer). A configuration published by several sources or
  releases gets one row per (source, release); figures are never averaged.
* Measured cells come from one run: among the runs of that (model, GPU, precision, optimizer), the
  most recent (start date, then run id) that has post-warm-up steps. The other matching runs are
  listed by id; every run appears in the provenance table.
* Medians and interquartile ranges are over the run's post-warm-up steps (warm-up skipped again
  after every restart).
* Delta to published = measured / published - 1, only where both exist, comparing like with like:
  a published figure that counts Newton-Schulz FLOPs is compared with the measured "with NS"
  figure, one that counts model FLOPs only with the measured model-only figure.
* Muon/AdamW ratios pair rows of the same (model, GPU, precision): measured with measured, and
  published with published of the same source and release. Two measured runs are paired only when their data,
  tokens per step and machine match too (:mod:`optbench.measured.comparable`); otherwise the row says which differs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from optbench.catalog.published import PublishedRow
from optbench.measured.comparable import load_flag, why_not_comparable
from optbench.measured.runs import MeasuredRun, RunThroughput, run_throughput

MUON, ADAMW = "muon", "adamw"


@dataclass
class TableRow:
    """One line of results/throughput.{md,csv}."""

    family: str
    """Full-size model the row belongs to (a proxy's proxy_of)."""
    model: str
    """Model id."""
    gpu: str
    """GPU id (cpu for the local engine on a CPU)."""
    precision: str
    """Precision id."""
    optimizer: str
    """adamw or muon."""
    published: PublishedRow | None = None
    """The published figure of this row (None: nothing published for this configuration)."""
    run: MeasuredRun | None = None
    """The run the measured cells come from (None: not measured)."""
    throughput: RunThroughput | None = None
    """Medians of that run."""
    other_runs: list[str] = field(default_factory=list)
    """Ids of other runs of the same configuration, not used for the cells."""
    delta: float | None = None
    """measured / published - 1 (None unless both exist)."""
    delta_basis: str = ""
    """Which measured figure the delta uses: model or model+newton_schulz."""
    published_ratio: tuple[float | None, float | None] = (None, None)
    """Published Muon/AdamW of the same source and release: (model-only, headline)."""
    measured_ratio: tuple[float | None, float | None] = (None, None)
    """Measured Muon/AdamW: (model-only, with Newton-Schulz); (None, None) when the two runs are not comparable."""
    ratio_note: str = ""
    """Why the measured runs of this configuration are not set side by side, or how their seconds are flagged
    (:mod:`optbench.measured.comparable`); "" when nothing needs saying."""

    @property
    def num_gpus(self) -> int | None:
        if self.published is not None:
            return self.published.num_gpus
        return self.run.world_size if self.run is not None else None


@dataclass
class Table:
    """All rows plus what the markdown needs to say about them."""

    rows: list[TableRow]
    """Rows grouped by family, published rows first."""
    runs: list[MeasuredRun]
    """Every measured run read (used or not)."""
    warmup: int
    """Steps skipped at the start of every segment."""


def select_run(candidates: list[MeasuredRun], warmup: int) -> tuple[MeasuredRun | None, list[str]]:
    """The most recent run with post-warm-up steps (else the most recent run), and the others' ids."""
    if not candidates:
        return None, []
    ordered = sorted(candidates, key=lambda r: (r.date, r.run_id), reverse=True)
    usable = [r for r in ordered if run_throughput(r, warmup).steps_used > 0]
    chosen = (usable or ordered)[0]
    return chosen, [r.run_id for r in ordered if r is not chosen]


def _median(spread) -> float | None:
    return spread.median if spread is not None else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def _measured_ratio(muon: RunThroughput | None, adamw: RunThroughput | None) -> tuple[float | None, float | None]:
    if muon is None or adamw is None:
        return (None, None)
    base = _median(adamw.tflops_per_gpu)
    return (_ratio(_median(muon.tflops_per_gpu), base), _ratio(_median(muon.tflops_per_gpu_with_ns), base))


def _published_ratio(muon: PublishedRow, adamw: PublishedRow) -> tuple[float | None, float | None]:
    return (_ratio(muon.model_tflops_per_gpu, adamw.tflops_per_gpu), _ratio(muon.tflops_per_gpu, adamw.tflops_per_gpu))


def _delta(row: TableRow) -> None:
    if row.published is None or row.throughput is None:
        return
    if row.run is not None and row.run.engine == "megatron_bridge" and row.run.intent == "train":
        return  # real routing and checks: not the configuration NVIDIA measured (table_format says so)
    basis = row.published.flops_counted
    measured = (
        row.throughput.tflops_per_gpu_with_ns if basis == "model+newton_schulz" else row.throughput.tflops_per_gpu
    )
    if measured is not None:
        row.delta = measured.median / row.published.tflops_per_gpu - 1
        row.delta_basis = basis


def _family_of(model: str, runs: list[MeasuredRun]) -> str:
    for run in runs:
        if run.model == model:
            return run.family
    return model


def build_table(published: list[PublishedRow], runs: list[MeasuredRun], warmup: int) -> Table:
    """Rows for every published figure and every measured configuration (see the module rules)."""
    by_key: dict[tuple[str, str, str, str], list[MeasuredRun]] = defaultdict(list)
    for run in runs:
        by_key[run.key].append(run)
    chosen: dict[tuple[str, str, str, str], tuple[MeasuredRun | None, list[str]]] = {
        key: select_run(group, warmup) for key, group in by_key.items()
    }
    throughput = {key: run_throughput(run, warmup) for key, (run, _) in chosen.items() if run is not None}

    rows: list[TableRow] = []
    for pub in published:  # published.csv order: the blog's Table 1 first
        rows.append(
            TableRow(_family_of(pub.model, runs), pub.model, pub.gpu, pub.precision, pub.optimizer, published=pub)
        )
    published_keys = {(p.model, p.gpu, p.precision, p.optimizer) for p in published}
    for key in sorted(by_key):
        if key not in published_keys:
            rows.append(TableRow(by_key[key][0].family, *key))
    position = {id(row): index for index, row in enumerate(rows)}

    for row in rows:
        key = (row.model, row.gpu, row.precision, row.optimizer)
        if key in chosen:
            row.run, row.other_runs = chosen[key]
            row.throughput = throughput.get(key)
        _delta(row)
        pair = (row.model, row.gpu, row.precision)
        muon_run, adamw_run = (chosen.get((*pair, name), (None, []))[0] for name in (MUON, ADAMW))
        if muon_run is not None and adamw_run is not None:
            refusal = why_not_comparable(muon_run, adamw_run)
            row.ratio_note = refusal or load_flag(muon_run, adamw_run) or ""
            if refusal is None:
                row.measured_ratio = _measured_ratio(throughput.get((*pair, MUON)), throughput.get((*pair, ADAMW)))
        if row.published is not None:
            twins = {
                p.optimizer: p
                for p in published
                if (p.model, p.gpu, p.precision, p.source, p.release)
                == (*pair, row.published.source, row.published.release)
            }
            if MUON in twins and ADAMW in twins:
                row.published_ratio = _published_ratio(twins[MUON], twins[ADAMW])

    family_order = {f: i for i, f in enumerate(dict.fromkeys(r.family for r in rows))}
    rows.sort(key=lambda r: (family_order[r.family], position[id(r)]))
    return Table(rows=rows, runs=runs, warmup=warmup)
