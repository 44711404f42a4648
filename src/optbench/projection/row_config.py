"""The configuration of a published row: the recipe and overrides whose plan is that row's projection.

One function serves the calibration (an anchor is a row) and the table (every row), so that
``make plan RECIPE=<recipe> <overrides>`` prints the very number the table shows for the row:

* the model's recipe for the row's optimizer, the cluster preset of its GPU and the row's precision;
* ``cluster.container=nemo:<release>`` for a container we run: NVIDIA's preset of that release, as its own
  launcher executes it (``optbench/data/bridge/presets-<bridge>.json``), supplies the whole layout: TP to EP,
  VPP and the pipeline layout, GBS/MBS, dispatcher, CUDA graphs, recompute;
* every value the row itself states that the composed run does not have, typed (a typed pp or vpp
  rebalances the pipeline layout, as on the command line; a layout that does not split is refused as
  ``make plan`` refuses it, never projected with fewer layers);
* ``force=true``: the row is what NVIDIA ran, so our memory estimate reports it but does not refuse it.

A release we do not run (25.11: no executed preset) gets the row's stated layout at the oldest container we
run; such a row is projected and shown, but it is outside the validated domain.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from optbench.accounting.plan_fields import PRECISION_ALIASES
from optbench.compose.recipe import compose_run, list_recipes
from optbench.compose.recipe_choice import recipe_group_choice
from optbench.config.layout import derive_layout
from optbench.config.schema import RunConfig
from optbench.common.errors import UserError
from optbench.catalog.hardware import gpu_catalog
from optbench.catalog.published import PublishedRow
from optbench.releases import versions
from optbench.releases.hydra_values import format_override
from optbench.resolve import ResolvedRun
from optbench.validate import validate

STATED = {
    "tp": "parallel.tp", "pp": "parallel.pp", "vpp": "parallel.vpp", "cp": "parallel.cp", "ep": "parallel.ep",
    "etp": "parallel.etp", "gbs": "train.gbs", "mbs": "train.mbs", "seq_length": "train.seq_length",
}
"""A published row's layout column -> our field."""


@dataclass(frozen=True)
class RowConfig:
    """What reproduces one published row."""

    recipe: str
    """The model's recipe for the row's optimizer."""
    overrides: tuple[str, ...]
    """The overrides, in the order ``make plan`` takes them."""
    in_domain: bool
    """Whether NVIDIA's executed preset of the row's release supplies the layout (False: 25.11)."""
    typed: tuple[str, ...] = ()
    """The row's stated values its release's preset does not hold, typed (empty when the preset agrees)."""

    @property
    def command(self) -> str:
        """The ``make plan`` command that prints this row's projection."""
        return " ".join(["make plan", f"RECIPE={self.recipe}", *self.overrides])


def cluster_for_gpu(gpu: str) -> str | None:
    """Our cluster preset for ``gpu`` (the GPU registry, optbench/data/gpus.csv), None for a GPU it lacks."""
    spec = gpu_catalog().get(gpu)
    return spec.cluster_preset if spec is not None else None


def _container(release: str) -> tuple[str, bool]:
    """The container a row of ``release`` is composed at, and whether it is that release's own (one we run)."""
    name = f"nemo:{release}"
    runnable = sorted((c.name for c in versions.runnable()), key=lambda c: release_order(c.split(":", 1)[1]))
    return (name, True) if name in runnable else (runnable[0], False)


def release_order(release: str) -> tuple[int, ...]:
    """A release's place in time: '26.02.01' -> (26, 2, 1)."""
    return tuple(int(part) for part in release.split("."))


def _stated(stated: tuple[tuple[str, int], ...], run: RunConfig) -> list[str]:
    """Overrides for the values a row states (column, value) that ``run`` does not have."""
    lay = derive_layout(run)
    ours = {
        "tp": lay.tp, "pp": lay.pp, "vpp": lay.vpp, "cp": lay.cp, "ep": lay.ep, "etp": lay.etp,
        "gbs": run.train.gbs, "mbs": run.train.mbs, "seq_length": run.train.seq_length,
    }
    out = []
    for column, value in stated:
        if ours[column] == value:
            continue
        out.append(f"{STATED[column]}={'null' if column == 'vpp' and value == 1 else value}")
    return out


def row_config(row: PublishedRow) -> RowConfig | str:
    """The configuration of ``row``, or the reason there is none (no recipe, no cluster preset, no composition)."""
    return _row(*_key(row))[0]


def row_run(row: PublishedRow) -> ResolvedRun | str:
    """The validated, resolved run of ``row`` (composed once), or the reason there is none."""
    return _row(*_key(row))[1]


def _key(row: PublishedRow) -> tuple:
    """What of a row decides its configuration (hashable: two rows of one setup share one composition)."""
    stated = tuple((column, row.layout[column]) for column in STATED if row.layout.get(column) is not None)
    return row.model, row.optimizer, row.gpu, row.precision, row.release, row.num_gpus, "w/o MTP" in row.note, stated


@lru_cache(maxsize=256)
def _row(
    model: str, optimizer: str, gpu: str, precision: str, release: str, num_gpus: int, no_mtp: bool,
    stated: tuple[tuple[str, int], ...],
) -> tuple[RowConfig | str, ResolvedRun | str]:
    recipe = f"{model}_{'muon' if optimizer == 'muon' else 'adamw'}"
    cluster = cluster_for_gpu(gpu)
    if recipe not in list_recipes() or cluster is None:
        reason = f"no recipe {recipe}" if cluster else f"no cluster preset for gpu {gpu}"
        return reason, reason
    container, own = _container(release)
    option = PRECISION_ALIASES.get(precision, precision)
    # The recipe's own precision is not typed: it would only restate the recipe (compose.recipe_choice),
    # and each row's printed make plan command stays as short as a user would type it.
    typed_precision = [] if recipe_group_choice(recipe, "precision") == option else [f"precision={option}"]
    base = [
        f"cluster={cluster}",
        *typed_precision,
        f"cluster.container={container}",
        f"parallel.num_gpus={num_gpus}",
    ]
    if no_mtp:
        base.append("model.mtp_num_layers=0")
    base.append("force=true")
    try:
        composed = compose_run(recipe, base)
        typed = _stated(stated, composed)
        layout = composed.parallel.pipeline_layout
        rebalanced = any(o.startswith(("parallel.pp=", "parallel.vpp=")) for o in typed)  # compose rebalances it
        if no_mtp and layout and not rebalanced and any("mtp" in stage for stage in layout):  # the preset places MTP
            typed.append(format_override("parallel.pipeline_layout", [[e for e in s if e != "mtp"] for s in layout]))
        config = RowConfig(recipe, tuple(base + typed), own, tuple(typed))
        return config, validate(compose_run(recipe, list(config.overrides)) if typed else composed)
    except UserError as err:
        reason = err.lines()[0].removeprefix("error: ")
        return reason, reason


def layout_key(row: PublishedRow) -> tuple | None:
    """The layout a row was measured at (its executed configuration: TP, PP, VPP, CP, EP, ETP, MBS, GBS), or None
    when it has none we compose."""
    resolved = row_run(row)
    return None if isinstance(resolved, str) else run_layout_key(resolved)


def run_layout_key(resolved: ResolvedRun) -> tuple:
    """A resolved run's layout as :func:`layout_key` compares them."""
    lay, train = resolved.layout, resolved.run.train
    return lay.tp, lay.pp, lay.vpp, lay.cp, lay.ep, lay.etp, train.mbs, train.gbs
