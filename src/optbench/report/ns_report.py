"""Our Newton-Schulz TFLOP/s next to the NVIDIA blog's (Table 1: 51 for Kimi K2, 35 for Qwen3 30B-A3B).

``python -m optbench ns-count`` prints, for every published row that splits its TFLOP/s
into model + Newton-Schulz, our count at the blog's implied step time (its model-only TFLOP/s
turned into a step time with Bridge's FLOPs rule) under several counting conventions. The
conventions are alternatives a reader might have used, computed from the same parameter inventory;
none is fitted to the published figure, and the report says how far each one lands from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from optbench.accounting.ns_flops import ns_gram_iteration_flops, rank_ns_flops
from optbench.accounting.placement import LocalParam, place
from optbench.accounting.throughput import step_time_for_tflops
from optbench.config.layout import derive_layout
from optbench.config.schema import RunConfig
from optbench.common.tables import markdown_table

Cost = Callable[[LocalParam], float]


def _orientation_total(run: RunConfig, gram_of: Callable[[int, int], tuple[int, int]]) -> float:
    """NS FLOPs of one step, every matrix once per data-parallel group, with a chosen Gram orientation."""
    lay = derive_layout(run)
    steps = run.optimizer.muon.ns_steps if run.optimizer.muon else 0

    def cost(param: LocalParam) -> float:
        if not param.spec.is_muon:
            return 0.0
        return steps * ns_gram_iteration_flops(*gram_of(*param.local_shape))

    total = 0.0
    for held in place(run).ranks:
        total += lay.tp * sum(cost(p) for p in held.dense)
        total += lay.etp * sum(cost(p) for slice_ in held.experts for p in slice_)
    return total


def conventions(run: RunConfig) -> dict[str, float]:
    """NS FLOPs per GPU per step (mean over GPUs unless named otherwise) under each convention."""
    world = run.parallel.num_gpus
    ours = rank_ns_flops(run)
    replicated = replace(run, optimizer=replace(run.optimizer, muon=replace(run.optimizer.muon, layer_wise=False)))
    every_rank = rank_ns_flops(replicated)
    return {
        "ours: textbook 4s^2l+2s^3, recipe TP mode, mean over GPUs": sum(ours) / world,
        "busiest GPU instead of the mean": max(ours),
        "SYRK kernel (3s^2l+s^3)": sum(rank_ns_flops(run, syrk=True)) / world,
        "distributed TP mode (orientation forced by partition_dim)": sum(rank_ns_flops(run, "distributed")) / world,
        "Gram on the stored rows (no transpose to s<=l)": _orientation_total(run, lambda r, c: (r, c)) / world,
        "Gram on the long side (transposed the wrong way)": _orientation_total(run, lambda r, c: (max(r, c), min(r, c)))
        / world,
        "no layer-wise ownership (every DP rank runs all its matrices), mean": sum(every_rank) / world,
        "no layer-wise ownership, busiest GPU": max(every_rank),
        "multiply-add counted as 4 FLOPs (x2)": 2 * sum(ours) / world,
    }


def blog_comparison(run: RunConfig, model_tflops: float, ns_tflops: float) -> list[tuple[str, float, float]]:
    """(convention, our NS TFLOP/s per GPU, ours / published) at the step time of ``model_tflops``."""
    step = step_time_for_tflops(run, model_tflops)
    return [(name, flops / step / 1e12, flops / step / 1e12 / ns_tflops) for name, flops in conventions(run).items()]


def main(argv: list[str] | None = None) -> int:
    import argparse

    argparse.ArgumentParser(prog="python -m optbench ns-count", description=__doc__.split("\n\n")[0]).parse_args(argv)
    from optbench.common.checkout import repo_root
    from optbench.compose.recipe import compose_run
    from optbench.catalog.published import default_published_dir, load_published

    rows = [r for r in load_published(default_published_dir(repo_root() / "results")) if r.ns_tflops_per_gpu]
    for row in rows:
        run = compose_run(f"{row.model}_muon")
        step = step_time_for_tflops(run, row.model_tflops_per_gpu or 0)
        print(
            f"\n{row.label} {row.model} {row.num_gpus}x{row.gpu}: published {row.model_tflops_per_gpu:g} model +"
            f" {row.ns_tflops_per_gpu:g} NS TFLOP/s/GPU; implied step {step:.2f} s (recipe {run.recipe})\n"
        )
        compared = blog_comparison(run, row.model_tflops_per_gpu or 0, row.ns_tflops_per_gpu or 1)
        print(
            "\n".join(
                markdown_table(
                    ["convention", "NS TFLOP/s/GPU", "ours / published"],
                    [[name, f"{tflops:.1f}", f"{ratio:.2f}"] for name, tflops, ratio in compared],
                )
            )
        )
    return 0
