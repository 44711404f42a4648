"""What a step time means: tokens/s, model TFLOP/s per GPU (Bridge's rule), Newton-Schulz TFLOP/s, MFU.

One function serves the plan (at a given or published step time), the Bridge metrics callback (the
cluster GPU's peaks) and the local engine (its measured CPU/GPU peak and its process count), so a
plan and a run can never disagree.

* model TFLOP/s per GPU = ``model_flops_per_step / step_time / world_size / 1e12``
  (:mod:`optbench.accounting.flops`, exactly what Megatron Bridge prints);
* Newton-Schulz TFLOP/s per GPU = the Newton-Schulz FLOPs all ranks execute in one step
  (:func:`optbench.accounting.ns_flops.rank_ns_flops`, the recipe's TP mode, textbook count without
  SYRK savings, redundant TP work included because it is executed), divided by the step time and the
  world size: the mean over GPUs, the same normalisation as the model figure. NVIDIA's Table 1 adds
  the two ("1080 = 1029 + 51"); both are reported side by side;
* MFU = TFLOP/s per GPU / peak, against every peak of :func:`optbench.accounting.peaks.peaks_for`
  (FP8 and BF16 under FP8 recipes), model-only and with Newton-Schulz.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from optbench.accounting.flops import model_flops_per_step
from optbench.accounting.ns_flops import rank_ns_flops
from optbench.accounting.peaks import Peak, mfu, peaks_for
from optbench.config.schema import RunConfig


@dataclass(frozen=True)
class StepThroughput:
    """Throughput implied by one optimizer step's wall time."""

    step_time_s: float
    """Seconds per optimizer step."""
    tokens_per_s: float
    """Tokens trained per second, whole job."""
    tokens_per_s_per_gpu: float
    """Tokens per second per GPU (or process)."""
    tflops_per_gpu: float
    """Model TFLOP/s per GPU, Megatron Bridge's rule (no optimizer FLOPs)."""
    ns_tflops_per_gpu: float
    """Newton-Schulz TFLOP/s per GPU (mean over GPUs of the NS FLOPs they execute; 0 for AdamW)."""
    tflops_per_gpu_with_ns: float
    """Model plus Newton-Schulz TFLOP/s per GPU, as NVIDIA's Table 1 adds them."""
    mfu: dict[str, float]
    """Model-only MFU against every peak, {peak.key: fraction}."""
    peaks: list[Peak]
    """The peaks MFU is computed against, primary first."""
    mfu_with_ns: dict[str, float] = field(default_factory=dict)
    """MFU counting Newton-Schulz FLOPs as useful, {peak.key: fraction}."""

    def as_record(self, rounded: bool = False) -> dict[str, object]:
        """The throughput fields of a metrics record or plan entry (``rounded`` for human-facing plans)."""

        def r(value: float, digits: int) -> float:
            return round(value, digits) if rounded else value

        return {
            "step_time_s": r(self.step_time_s, 4),
            "tokens_per_s": r(self.tokens_per_s, 1),
            "tokens_per_s_per_gpu": r(self.tokens_per_s_per_gpu, 1),
            "tflops_per_gpu": r(self.tflops_per_gpu, 2),
            "ns_tflops_per_gpu": r(self.ns_tflops_per_gpu, 2),
            "tflops_per_gpu_with_ns": r(self.tflops_per_gpu_with_ns, 2),
            "mfu": {k: r(v, 4) for k, v in self.mfu.items()},
            "mfu_with_ns": {k: r(v, 4) for k, v in self.mfu_with_ns.items()},
        }


def ns_flops_per_step_total(run: RunConfig) -> float:
    """Matrix-optimizer FLOPs all ranks execute in one step: Newton-Schulz (recipe's TP mode, no SYRK) for the Muon
    family, the registry entry's own count for the others."""
    if not run.optimizer.matrix_optimizer:
        return 0.0
    return sum(rank_ns_flops(run))


def step_throughput(
    run: RunConfig,
    step_time_s: float,
    peaks: list[Peak] | None = None,
    world_size: int | None = None,
    ns_flops_total: float | None = None,
) -> StepThroughput:
    """Throughput and MFU of ``run`` at ``step_time_s`` per step.

    ``ns_flops_total``: :func:`ns_flops_per_step_total` of the run, when the caller holds it (a resolved
    run, a training loop that reports every step); counted here otherwise.
    """
    if step_time_s <= 0:
        raise ValueError(f"step_time_s must be positive, got {step_time_s}")
    world = world_size or run.parallel.num_gpus
    peaks = peaks_for(run.cluster.gpu, run.precision) if peaks is None else list(peaks)
    tokens = run.train.gbs * run.train.seq_length / step_time_s
    model = model_flops_per_step(run) / step_time_s / world / 1e12
    if ns_flops_total is None:
        ns_flops_total = ns_flops_per_step_total(run)
    ns = ns_flops_total / step_time_s / world / 1e12
    return StepThroughput(
        step_time_s=step_time_s,
        tokens_per_s=tokens,
        tokens_per_s_per_gpu=tokens / world,
        tflops_per_gpu=model,
        ns_tflops_per_gpu=ns,
        tflops_per_gpu_with_ns=model + ns,
        mfu=mfu(model, peaks),
        peaks=peaks,
        mfu_with_ns=mfu(model + ns, peaks),
    )


def step_time_for_tflops(run: RunConfig, model_tflops_per_gpu: float) -> float:
    """The step time at which the run reaches ``model_tflops_per_gpu`` model TFLOP/s per GPU."""
    return model_flops_per_step(run) / (model_tflops_per_gpu * 1e12 * run.parallel.num_gpus)


def step_time_for_tokens(run: RunConfig, tokens_per_s_per_gpu: float) -> float:
    """The step time at which the run trains ``tokens_per_s_per_gpu`` tokens per second per GPU."""
    return run.train.gbs * run.train.seq_length / (tokens_per_s_per_gpu * run.parallel.num_gpus)
