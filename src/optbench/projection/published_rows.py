"""Our projection at every published row's configuration, and its error against the published figure.

For each row of ``results/published/published.csv`` the row's configuration is composed: the model's recipe
for the row's optimizer, the cluster of its GPU, its precision, and either ``cluster.container=<release>``
(a container we run: NVIDIA's preset of that release gives the layout) or the row's own layout as overrides
(25.11). The projection (calibrated on one AdamW row per model, never on a Muon row, see
:mod:`optbench.projection.calibration`) is then compared with the row's model-only TFLOP/s. A row it cannot
reach says why. Rows of later releases measure software NVIDIA improved since the anchor (26.02): their
error is expected to grow, and that is what it shows.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from optbench.accounting.plan_fields import PRECISION_ALIASES
from optbench.releases import presets, versions
from optbench.errors import UserError
from optbench.projection.calibration import cluster_for_gpu
from optbench.published import PublishedRow


def row_overrides(row: PublishedRow) -> list[str]:
    overrides = [f"cluster={cluster_for_gpu(row.gpu)}", f"precision={PRECISION_ALIASES.get(row.precision, row.precision)}"]
    container = f"nemo:{row.release}"
    if container in {c.name for c in versions.runnable()}:
        overrides.append(f"cluster.container={container}")
        if presets.release_of_container(container) != presets.RELEASE:
            return overrides
    layout = row.layout
    overrides += [f"parallel.num_gpus={row.num_gpus}", "parallel.pipeline_layout=null", "intent=train"]
    for ours, key in (("tp", "tp"), ("pp", "pp"), ("cp", "cp"), ("ep", "ep")):
        if layout.get(key):
            overrides.append(f"parallel.{ours}={layout[key]}")
    overrides.append(f"parallel.vpp={layout['vpp'] if layout.get('vpp') and layout['vpp'] > 1 else 'null'}")
    if layout.get("gbs"):
        overrides += [f"train.gbs={layout['gbs']}", f"train.mbs={layout['mbs']}"]
    if "w/o MTP" in row.note:
        overrides.append("model.mtp_num_layers=0")
    return overrides


@lru_cache(maxsize=256)
def _projected(recipe: str, overrides: tuple[str, ...]) -> dict[str, Any]:
    from optbench.compose.recipe import compose_run
    from optbench.projection.project import project
    from optbench.resolve import resolve

    try:
        # NVIDIA's own configuration: projected as composed, not refused by our memory estimate.
        section = project(resolve(compose_run(recipe, list(overrides))), overrides, with_what_ifs=False)
    except UserError as err:
        return {"reason": err.lines()[0].removeprefix("error: ")}
    if not section.get("available"):
        return {"reason": section.get("reason", "not projected")}
    return {"tflops": section["tflops_per_gpu"], "anchor": section["efficiency"]["calibrated_on"]}


def projection_error(row: PublishedRow) -> dict[str, Any]:
    """{'tflops', 'error_percent', 'anchor'} or {'reason'} for one published row (model-only FLOPs both sides)."""
    if cluster_for_gpu(row.gpu) is None or not row.model_tflops_per_gpu:
        return {"reason": "no model-only figure or no cluster preset for this GPU"}
    recipe = f"{row.model}_{'muon' if row.optimizer == 'muon' else 'adamw'}"
    out = dict(_projected(recipe, tuple(row_overrides(row))))
    if "tflops" in out:
        out["error_percent"] = round(100 * (out["tflops"] / row.model_tflops_per_gpu - 1), 1)
        out["anchor_itself"] = out["anchor"].startswith(f"{row.label} {row.model} {row.gpu} x{row.num_gpus} ")
    return out
