"""A recipe's pipeline layout follows ``parallel.pp`` / ``parallel.vpp`` typed on the command line.

A published layout (``conf/parallel/kimi_k2_gb300_256.yaml``) lists one entry per virtual stage,
so it is valid only for the pp * vpp it was written for. Megatron Bridge's Kimi K2 recipe keeps a
table of layouts keyed by (pp, vpp) for the same reason. When a user changes pp or vpp and does not
give a layout, the recipe's layout is replaced by a balanced one for the new stage count, so that
``make plan RECIPE=kimi_k2_muon parallel.pp=8 parallel.ep=32`` plans what it says. A layout the
user types (``parallel.pipeline_layout=...``) or a ``parallel=<name>`` group choice is kept as given
and validated as it is.
"""

from __future__ import annotations

from typing import Sequence

from optbench.config.layout import vpp_size
from optbench.config.schema import RunConfig

STAGE_KEYS = ("parallel.pp", "parallel.vpp")


def _override_keys(overrides: Sequence[str]) -> set[str]:
    return {override.partition("=")[0].lstrip("+~") for override in overrides}


def layout_follows_overrides(overrides: Sequence[str]) -> bool:
    """Whether the typed overrides change the stage count without choosing a layout."""
    keys = _override_keys(overrides)
    chooses_layout = any(key.startswith("parallel.pipeline_layout") or key == "parallel" for key in keys)
    return bool(keys & set(STAGE_KEYS)) and not chooses_layout


def balanced_pipeline_layout(num_layers: int, stages: int, mtp_layers: int = 0) -> list[list[str]]:
    """``num_layers`` decoder layers over ``stages`` virtual stages, embedding first, MTP and loss last.

    Layer counts differ by at most one; the extra layers go to the middle stages first, because the
    first stage also holds the embedding and the last the output layer, loss and MTP.
    """
    base, extra = divmod(num_layers, stages)
    counts = [base] * stages
    order = list(range(1, stages - 1)) + [0, stages - 1] if stages > 2 else list(range(stages))
    for stage in order[:extra]:
        counts[stage] += 1
    layout = [["decoder"] * count for count in counts]
    layout[0].insert(0, "embedding")
    layout[-1] += ["mtp"] * mtp_layers + ["loss"]
    return layout


def follow_stage_overrides(run: RunConfig, overrides: Sequence[str]) -> bool:
    """Rebalance ``run``'s pipeline layout when the overrides changed pp or vpp; True if it did."""
    p = run.parallel
    stages = p.pp * vpp_size(run)
    if not p.pipeline_layout or len(p.pipeline_layout) == stages or not layout_follows_overrides(overrides):
        return False
    if stages == 1:
        p.pipeline_layout = None
    else:
        p.pipeline_layout = balanced_pipeline_layout(run.model.num_layers, stages, run.model.mtp_num_layers)
    return True
