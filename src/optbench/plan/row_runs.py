"""The composed runs of published rows: what the calibration solves on and the validation projects.

The projection composes nothing (:class:`optbench.projection.row_config.RowRuns`); whoever asks it to calibrate
on published rows hands it :data:`COMPOSED_ROWS`, which composes a row only when asked and once per setup:

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
from optbench.catalog.hardware import gpu_catalog
from optbench.catalog.published import PublishedRow, data_only_reason, release_order
from optbench.common.errors import UserError
from optbench.compose.recipe import compose_run, list_recipes
from optbench.compose.recipe_choice import recipe_group_choice
from optbench.config.layout import derive_layout
from optbench.config.schema import RunConfig
from optbench.projection.row_config import STATED, RowConfig, row_key
from optbench.releases import versions
from optbench.releases.hydra_values import format_override
from optbench.resolve import ResolvedRun
from optbench.validate import validate


def cluster_for_gpu(gpu: str) -> str | None:
    """Our cluster preset for ``gpu`` (the GPU registry, optbench/data/gpus.csv), None for a GPU it lacks."""
    spec = gpu_catalog().get(gpu)
    return spec.cluster_preset if spec is not None else None


@dataclass(frozen=True)
class ComposedRowRuns:
    """:class:`~optbench.projection.row_config.RowRuns` composed through Hydra from the recipes on disk."""

    def config(self, row: PublishedRow) -> RowConfig | str:
        return data_only_reason(row) or _row(*row_key(row))[0]

    def run(self, row: PublishedRow) -> ResolvedRun | str:
        return data_only_reason(row) or _row(*row_key(row))[1]


COMPOSED_ROWS = ComposedRowRuns()
"""The one provider every caller hands down (one object, so the projection's caches see one key)."""


def _container(release: str) -> tuple[str, bool]:
    """The container a row of ``release`` is composed at, and whether it is that release's own (one we run)."""
    name = f"nemo:{release}"
    runnable = sorted((c.name for c in versions.runnable()), key=lambda c: release_order(c.split(":", 1)[1]))
    return (name, True) if name in runnable else (runnable[0], False)


def _stated(stated: tuple[tuple[str, int], ...], run: RunConfig) -> list[str]:
    """Overrides for the values a row states (column, value) that ``run`` does not have."""
    lay = derive_layout(run)
    ours = {
        "tp": lay.tp,
        "pp": lay.pp,
        "vpp": lay.vpp,
        "cp": lay.cp,
        "ep": lay.ep,
        "etp": lay.etp,
        "gbs": run.train.gbs,
        "mbs": run.train.mbs,
        "seq_length": run.train.seq_length,
        "fsdp": lay.dp * lay.cp if run.parallel.megatron_fsdp else 0,
    }
    out = []
    for column, value in stated:
        if ours[column] == value:
            continue
        if column == "fsdp":
            out.append(f"{STATED[column]}={'true' if value else 'false'}")
            continue
        out.append(f"{STATED[column]}={'null' if column == 'vpp' and value == 1 else value}")
    columns = dict(stated)
    if columns.get("pp") == 1 and "vpp" not in columns and lay.vpp > 1:
        out.append(f"{STATED['vpp']}=null")  # one stage cannot interleave (26.02.01's Llama 3 70B GB300 NVFP4 row)
    return out


@lru_cache(maxsize=256)
def _row(
    model: str,
    optimizer: str,
    gpu: str,
    precision: str,
    release: str,
    num_gpus: int,
    no_mtp: bool,
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
