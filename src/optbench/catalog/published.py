"""The published side of the tables: ``results/published/published.csv`` and ``sources.csv``.

Every published figure keeps its source and release; the same configuration published for
several releases stays several rows. Nothing here is computed: the loader
only parses and checks the files (a malformed row is a one-line error naming file, line and column).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from optbench.common.errors import UserError

PUBLISHED_CSV = "published.csv"
SOURCES_CSV = "sources.csv"
INCONSISTENT_CSV = "inconsistent.csv"
FLOPS_COUNTED = ("model", "model+newton_schulz")


@dataclass(frozen=True)
class Source:
    """Where a set of published figures comes from."""

    source: str
    """Short id used by published.csv rows."""
    title: str
    """Title of the page or article."""
    publisher: str
    """Who published it."""
    date: str
    """Publication date (or how the source is dated)."""
    where: str
    """URL or other locator."""
    releases: str
    """Software releases the source covers (space separated)."""
    what: str
    """What the figures are and how they count FLOPs."""


def release_order(release: str) -> tuple[int, ...]:
    """A release's place in time: '26.02.01' -> (26, 2, 1)."""
    return tuple(int(part) for part in release.split("."))


@dataclass(frozen=True)
class PublishedRow:
    """One published throughput figure."""

    source: str
    """Id of the source (a row of sources.csv)."""
    release: str
    """NeMo container / Megatron Bridge release the figure was measured with."""
    model: str
    """Model id, as in conf/model (kimi_k2, qwen3_30b_a3b, deepseek_v3)."""
    gpu: str
    """GPU id, as in optbench/data/gpus.csv."""
    num_gpus: int
    """GPUs in the run."""
    precision: str
    """Precision id, as in conf/precision (mxfp8, fp8 for Hopper FP8, bf16)."""
    optimizer: str
    """adamw or muon."""
    tflops_per_gpu: float
    """Headline TFLOP/s per GPU exactly as published."""
    flops_counted: str
    """What tflops_per_gpu counts: model (Megatron formula) or model+newton_schulz."""
    model_tflops_per_gpu: float | None
    """Model-FLOPs-only TFLOP/s per GPU (equals the headline for rows counting model FLOPs only)."""
    ns_tflops_per_gpu: float | None
    """Newton-Schulz TFLOP/s per GPU where the source splits it out."""
    tokens_per_s_per_gpu: float | None
    """Tokens per second per GPU where published."""
    layout: dict[str, int | None]
    """gbs, mbs, seq_length, tp, pp, vpp, cp, ep, etp, fsdp as published (None: not stated; fsdp 0: DDP, else Megatron
    FSDP's sharding group)."""
    note: str
    """Free-text caveat from the source row."""

    def __hash__(self) -> int:
        # A cache key (the projection solves each row once, whichever folder's copy of published.csv holds it);
        # the layout is a dict, so the generated hash would fail.
        return hash(
            (
                self.source,
                self.release,
                self.model,
                self.gpu,
                self.num_gpus,
                self.precision,
                self.optimizer,
                self.model_tflops_per_gpu,
                self.tokens_per_s_per_gpu,
                tuple(sorted(self.layout.items())),
            )
        )

    @property
    def label(self) -> str:
        """``<source> <release>``, how the tables name a published figure."""
        return f"{self.source} {self.release}"

    @property
    def setup(self) -> tuple[str, str, str, int, str]:
        """What one source publishes once per release: source, model, GPU, GPU count, precision."""
        return self.source, self.model, self.gpu, self.num_gpus, self.precision


LAYOUT_COLUMNS = ("gbs", "mbs", "seq_length", "tp", "pp", "vpp", "cp", "ep", "etp", "fsdp")


def default_published_dir(results_dir: str | Path = "results") -> Path:
    """``<results_dir>/published``."""
    return Path(results_dir) / "published"


def _number(row: dict[str, str], column: str, where: str, required: bool = False) -> float | None:
    text = (row.get(column) or "").strip()
    if not text:
        if required:
            raise UserError(f"{where}: column {column} is empty; every published row needs it", column)
        return None
    try:
        return float(text)
    except ValueError:
        raise UserError(f"{where}: column {column} is {text!r}, not a number", column) from None


def _where_published(path: Path) -> str:
    """The fix for a missing or damaged published.csv: git restores a checkout's; elsewhere (an installed copy run
    outside a checkout, another results folder) the command was pointed at the wrong folder."""
    from optbench.common.checkout import is_checkout

    results = path.absolute().parents[1]
    if is_checkout(results.parent):
        return f"restore it from git: git -C {results.parent} checkout -- {results.name}/published/"
    return (
        f"{results} is not the results/ folder of an optbench checkout, whose results/published/ holds NVIDIA's rows; "
        "run the command in the checkout, or set OPTBENCH_RESULTS_DIR=<checkout>/results"
    )


def _read_rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    if not path.is_file():
        raise UserError(f"no file at {path.absolute()}; {_where_published(path)}", "published")
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise UserError(f"{path}: missing column(s) {', '.join(missing)}", "published")
            return [(number, row) for number, row in enumerate(reader, start=2)]
    except (UnicodeDecodeError, csv.Error) as err:
        raise UserError(
            f"{path} is not a readable CSV file ({type(err).__name__}); {_where_published(path)}", "published"
        ) from None


def load_published(directory: str | Path) -> list[PublishedRow]:
    """Every row of ``<directory>/published.csv``, checked (numbers, known flops_counted, split adds up)."""
    path = Path(directory) / PUBLISHED_CSV
    required = ("source", "release", "model", "gpu", "num_gpus", "precision", "optimizer", "tflops_per_gpu")
    rows = []
    for line, raw in _read_rows(path, required):
        where = f"{path}:{line}"
        counted = (raw.get("flops_counted") or "model").strip()
        if counted not in FLOPS_COUNTED:
            raise UserError(
                f"{where}: flops_counted is {counted!r}; use one of {', '.join(FLOPS_COUNTED)}", "flops_counted"
            )
        total = _number(raw, "tflops_per_gpu", where, required=True)
        model_only = _number(raw, "model_tflops_per_gpu", where)
        ns = _number(raw, "ns_tflops_per_gpu", where)
        if counted == "model" and model_only is None:
            model_only = total
        if model_only is not None and ns is not None and abs(model_only + ns - total) > 0.5:
            raise UserError(f"{where}: model {model_only:g} + NS {ns:g} != tflops_per_gpu {total:g}", "tflops_per_gpu")
        layout = {c: (int(v) if (v := _number(raw, c, where)) is not None else None) for c in LAYOUT_COLUMNS}
        rows.append(
            PublishedRow(
                source=raw["source"].strip(),
                release=raw["release"].strip(),
                model=raw["model"].strip(),
                gpu=raw["gpu"].strip(),
                num_gpus=int(_number(raw, "num_gpus", where, required=True)),
                precision=raw["precision"].strip(),
                optimizer=raw["optimizer"].strip(),
                tflops_per_gpu=total,
                flops_counted=counted,
                model_tflops_per_gpu=model_only,
                ns_tflops_per_gpu=ns,
                tokens_per_s_per_gpu=_number(raw, "tokens_per_s_per_gpu", where),
                layout=layout,
                note=(raw.get("note") or "").strip(),
            )
        )
    return rows


def load_sources(directory: str | Path) -> dict[str, Source]:
    """``<directory>/sources.csv`` by source id."""
    path = Path(directory) / SOURCES_CSV
    fields = ("source", "title", "publisher", "date", "where", "releases", "what")
    return {
        row["source"]: Source(**{f: (row.get(f) or "").strip() for f in fields}) for _, row in _read_rows(path, fields)
    }


def check_sources(rows: list[PublishedRow], sources: dict[str, Source]) -> None:
    """Every published row must name a documented source."""
    unknown = sorted({r.source for r in rows} - set(sources))
    if unknown:
        raise UserError(f"source(s) {', '.join(unknown)} used in published.csv have no row in sources.csv", "published")


def load_inconsistent(directory: str | Path) -> dict[str, str]:
    """``<directory>/inconsistent.csv``: the rows (by their row id) that their own setup's other releases
    contradict, with the reason (written by ``make projection``, :mod:`optbench.projection.consistency`);
    empty when the folder has no such file."""
    path = Path(directory) / INCONSISTENT_CSV
    if not path.is_file():
        return {}
    return {row["row"].strip(): (row.get("reason") or "").strip() for _, row in _read_rows(path, ("row", "reason"))}


def data_only_reason(row: PublishedRow) -> str | None:
    """Why the projection keeps ``row`` as data and scores nothing of it (None when it scores it): its model is a
    catalog entry only (models.csv's ``not_projected``)."""
    from optbench.catalog.models import model_registry

    entry = model_registry().get(row.model)
    if entry is not None and entry.not_projected:
        return f"{row.model} is a catalog model, {entry.not_projected}"
    return None


def row_id(row: PublishedRow) -> str:
    """A published row's name, unique in published.csv: '<source> <release> <model> <gpu> x<n> <precision>
    <optimizer>'."""
    return (
        f"{row.label} {row.model} {row.gpu} x{row.num_gpus} {row.precision} {row.optimizer} "
        f"{row.model_tflops_per_gpu:g}"
    )
