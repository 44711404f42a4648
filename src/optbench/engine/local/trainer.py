"""The local engine's training loop: data-parallel over processes, gradient accumulation, our optimizers.

Per optimizer step ``n`` (1-based), on every rank:

1. ``num_microbatches = gbs / (mbs * world)`` forward/backward passes over this rank's samples of the
   step (:func:`~optbench.engine.local.data.microbatch_indices`), each loss divided by
   ``num_microbatches`` so the accumulated gradient is the mean over the rank's samples (the
   objective adds ``moe_aux_loss_coeff`` x the load-balancing loss where the proxy has one; the
   recorded ``loss`` is the language-model cross-entropy alone);
2. ``reduce_gradients`` (mean over ranks), ``clip_grad_norm_(optimizer.clip_grad)`` (global norm
   before clipping, logged as ``grad_norm``), ``set_lr`` from the warmup + cosine schedule, ``step``
   (with the layer-wise optimizer: owned parameters, then all-gather), ``zero_grad``;
3. the router expert-bias update (DeepSeek-V3 family), metrics, and a checkpoint every ``save_interval``.

``step_time_s`` is the wall time of 1-2 (GPU synchronised); ``optimizer_time_s`` the part from
clipping to ``zero_grad`` (clip, update, Newton-Schulz, parameter all-gather; not the gradient
all-reduce); ``ns_time_s`` the Newton-Schulz part reported by the optimizer.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from optbench.accounting.throughput import step_throughput
from optbench.accounting.params import parameter_counts, padded_vocab_size
from optbench.config.layout import derive_layout
from optbench.config.schema import RunConfig
from optbench.config.schema_optimizer import MATRIX_FLOPS_WORDS
from optbench.engine.local.checkpoint import checkpoint_dir, has_checkpoint, load_checkpoint, save_checkpoint
from optbench.engine.local.data import build_stream, microbatch_indices
from optbench.engine.local.expert_load import ExpertLoadTracker
from optbench.engine.local.model import ATTENTION_IMPLEMENTATION, build_model, has_aux_loss, routers
from optbench.engine.local.qk_clip import clip_qk, register_attention, reset_logits
from optbench.engine.local.runtime import Runtime, init_runtime, peak_memory_gb, shutdown
from optbench.engine.local.schedule import learning_rate
from optbench.common.errors import UserError
from optbench.common.machine_load import LoadMeter
from optbench.releases import versions
from optbench.metrics import MetricsWriter, Progress, loss_summary, provenance, steady_state
from optbench.metrics.progress import flops_text
from optbench.metrics.summary import software_versions, utc_now
from optbench.optim import build_optimizer
from optbench.optim.newton_schulz import resolve_matmul_precision


DEFAULT_EVAL_ITERS = 4
"""Global batches per validation pass when train.eval_iters is null."""


def _mean_over_ranks(value: torch.Tensor, world: int) -> float:
    if world > 1:
        value = value.clone()
        dist.all_reduce(value)
        value /= world
    return float(value)


class Trainer:
    """One process's share of a local-engine run."""

    def __init__(self, run: RunConfig, run_dir: Path, runtime: Runtime) -> None:
        self.run, self.run_dir, self.rt = run, Path(run_dir), runtime
        self.is_writer = runtime.rank == 0
        self.num_microbatches = derive_layout(run).num_microbatches
        self.stream = build_stream(run.data, run.model, run.train)
        self.vocab = padded_vocab_size(run.model)
        muon = run.optimizer.muon
        self.qk_clip = muon if muon is not None and muon.qk_clip else None
        attention = register_attention() if self.qk_clip else ATTENTION_IMPLEMENTATION
        self.model = build_model(run.model, run.train.seed, runtime.device, attention)
        self.aux_loss = has_aux_loss(run.model)
        try:
            self.optimizer = build_optimizer(
                self.model,
                run.optimizer,
                model_config=run.model,
                emerging_optimizers=versions.emerging_optimizers(versions.container_of(run)),
            )
        except ValueError as err:  # a setting the optimizer refuses (validation should have caught it)
            raise UserError(str(err), "optimizer") from err
        self.experts = ExpertLoadTracker(routers(self.model), runtime.world, run.model.moe_router_enable_expert_bias)
        self.eval_interval, self.eval_iters = self._eval_schedule()
        self.start_step = 0
        self.resume_note = ""
        if run.resume:
            resumed = load_checkpoint(run, self.model, self.optimizer, runtime.rank, runtime.world)
            # A run killed before its first checkpoint starts over: its steps are recomputed bit for bit.
            self.start_step = resumed.step if resumed is not None else 0
            self.resume_note = (
                "" if resumed else "no checkpoint was written before it stopped: starting over from step 0"
            )
        elif has_checkpoint(checkpoint_dir(run)):
            raise UserError(
                f"{checkpoint_dir(run)} already holds a checkpoint; add resume=true or pick a new run_id", "run_id"
            )

    def _eval_schedule(self) -> tuple[int, int]:
        """(interval, batches) of validation: only when the data has a validation split."""
        train = self.run.train
        if getattr(self.stream, "valid", None) is None or train.eval_iters == 0:
            return 0, 0
        return train.eval_interval or max(1, train.iters // 10), train.eval_iters or DEFAULT_EVAL_ITERS

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """Mean language-model loss over the same ``eval_iters`` global batches of the validation split
        (the same held-out samples every time, so values along a run and across runs compare); seconds."""
        rt = self.rt
        rt.synchronize()
        start = time.perf_counter()
        total = torch.zeros((), device=rt.device)
        self.experts.paused = True
        for batch in range(1, self.eval_iters + 1):
            for micro in range(self.num_microbatches):
                indices = microbatch_indices(batch, rt.rank, rt.world, micro, self.run.train)
                tokens = self.stream.valid_batch(indices).to(rt.device, non_blocking=True)
                with rt.autocast():
                    logits = self.model(input_ids=tokens[:, :-1]).logits
                total += F.cross_entropy(logits.float().reshape(-1, self.vocab), tokens[:, 1:].reshape(-1))
        self.experts.paused = False
        if self.qk_clip:
            reset_logits(self.model)  # clipping follows training logits only
        loss = _mean_over_ranks(total / (self.eval_iters * self.num_microbatches), rt.world)
        rt.synchronize()
        return loss, time.perf_counter() - start

    def _forward_backward(self, step: int) -> torch.Tensor:
        """Accumulate this rank's gradients of step ``step``; returns its mean loss (detached)."""
        total = torch.zeros((), device=self.rt.device)
        for micro in range(self.num_microbatches):
            indices = microbatch_indices(step, self.rt.rank, self.rt.world, micro, self.run.train)
            tokens = self.stream.batch(indices).to(self.rt.device, non_blocking=True)
            with self.rt.autocast():
                output = self.model(input_ids=tokens[:, :-1])
            loss = F.cross_entropy(output.logits.float().reshape(-1, self.vocab), tokens[:, 1:].reshape(-1))
            objective = loss + self.run.model.moe_aux_loss_coeff * output.aux_loss if self.aux_loss else loss
            (objective / self.num_microbatches).backward()
            total += loss.detach()
        return total / self.num_microbatches

    def train_step(self, step: int) -> dict[str, Any]:
        """One optimizer step; returns its metrics record (identical on every rank)."""
        rt, opt = self.rt, self.optimizer
        rt.synchronize()
        start = time.perf_counter()
        loss = self._forward_backward(step)
        opt.reduce_gradients()
        rt.synchronize()
        optimizer_start = time.perf_counter()
        grad_norm = opt.clip_grad_norm_(self.run.optimizer.clip_grad)
        lr = learning_rate(step, self.run.optimizer, self.run.train)
        opt.set_lr(lr)
        opt.step()
        # MuonClip: Megatron (Bridge's train loop) clips right after the optimizer step, inside its optimizer timer.
        max_logit = (
            clip_qk(self.model, self.qk_clip.qk_clip_threshold, self.qk_clip.qk_clip_alpha, rt.world)
            if self.qk_clip
            else None
        )
        opt.zero_grad(set_to_none=True)
        rt.synchronize()
        end = time.perf_counter()
        imbalance = self.experts.update()
        step_time = end - start
        throughput = step_throughput(self.run, step_time, peaks=rt.peaks, world_size=rt.world)
        record = {
            "step": step,
            "loss": _mean_over_ranks(loss, rt.world),
            "grad_norm": grad_norm,
            "lr": lr,
            "optimizer_time_s": end - optimizer_start,
            "ns_time_s": opt.last_ns_time_s,
            "tokens": self.run.train.gbs * self.run.train.seq_length,
            **throughput.as_record(),
            "peak_memory_gb": peak_memory_gb(rt),
        }
        if imbalance is not None:
            record["moe_load_imbalance"] = imbalance
        if max_logit is not None:
            record["max_attention_logit"] = max_logit  # before this step's clip (Megatron's logged value)
        if not math.isfinite(record["loss"]):
            raise UserError(
                f"the loss became {record['loss']} at step {step} (training diverged); lower optimizer.lr "
                f"(now {self.run.optimizer.lr:g}) or set optimizer.clip_grad, then start a new run_id"
                + (" or resume from a checkpoint before the divergence" if self.run.train.save_interval else ""),
                "optimizer.lr",
            )
        return record

    def _intro(self, progress: Progress) -> None:
        run, info = self.run, self.stream.info()
        counts = parameter_counts(run.model)
        lines = [
            f"local engine: {run.recipe} ({run.model.name}, {run.optimizer.name}) on {self.rt.description}, "
            f"precision {self.rt.precision}",
            f"  model   {counts.total / 1e6:.2f} M params ({counts.active / 1e6:.2f} M active), vocab {self.vocab}",
            f"  data    {info.kind}: {info.description}"
            + (f"; loss floor {info.loss_floor:.3f} nats" if info.loss_floor is not None else ""),
            f"  batch   gbs {run.train.gbs} = mbs {run.train.mbs} x {self.num_microbatches} microbatches x "
            f"{self.rt.world} processes, seq {run.train.seq_length}, {run.train.iters} steps",
            f"  peak    {self.rt.peaks[0].label if self.rt.peaks else 'none known (MFU not computed)'}",
            f"  run     {self.run_dir.name} -> {self.run_dir}"
            + (
                f" (checkpoint every {run.train.save_interval} steps; resume=true run_id={self.run_dir.name} "
                "continues it)"
                if run.train.save_interval
                else ""
            ),
        ]
        if run.model.moe_aux_loss_coeff and not self.aux_loss:
            lines.append(
                "  note    model.moe_aux_loss_coeff is not applied: transformers' DeepSeek-V3 has no auxiliary "
                "loss (the router bias balances the experts)"
            )
        if run.data.path and run.data.kind != "indexed":
            lines.append(f"  note    data.path is not read: data.kind is {run.data.kind} (data=indexed reads it)")
        if self.qk_clip:
            lines.append(
                f"  clip    MuonClip QK-clip: heads above logit {self.qk_clip.qk_clip_threshold:g} scaled after each "
                f"step (alpha {self.qk_clip.qk_clip_alpha:g}); max_attention_logit recorded"
            )
        if self.eval_interval:
            lines.append(
                f"  valid   {self.eval_iters} batches of the validation split every {self.eval_interval} "
                "steps and at the last step (val_loss)"
            )
        if self.start_step:
            lines.append(f"  resume  from the checkpoint of step {self.start_step}")
        elif self.resume_note:
            lines.append(f"  resume  {self.resume_note}")
        for line in lines:
            progress.write(line)

    def fit(self) -> dict[str, Any] | None:
        """Train from ``start_step`` to ``train.iters``; returns the summary on the writing rank."""
        run, rt = self.run, self.rt
        started = utc_now()
        writer = MetricsWriter(
            run,
            self.run_dir,
            is_writer=self.is_writer,
            resume_step=self.start_step if run.resume else None,
            gpu=rt.gpu,
            precision=rt.precision_key,
        )
        wall_offset = writer.previous[-1]["wall_s"] if writer.previous else 0.0
        progress = Progress(
            run.train.iters, self.start_step, enabled=self.is_writer, log_interval=run.train.log_interval
        )
        try:
            self._intro(progress)
            with LoadMeter() as load:
                self._train_steps(writer, progress, wall_offset)
            progress.close()
            # With several processes the others include this run's own ranks: recorded for one process only.
            machine_load = load.result if rt.world == 1 else None
            summary = self._summary(writer.records(), started, machine_load) if self.is_writer else None
            if summary is not None:
                writer.write_summary(summary)
                self._outro(summary, writer)
            return summary
        finally:
            progress.close()
            writer.close()
            self.experts.close()

    def _train_steps(self, writer: MetricsWriter, progress: Progress, wall_offset: float) -> None:
        run, rt = self.run, self.rt
        clock = time.perf_counter()
        for step in range(self.start_step + 1, run.train.iters + 1):
            record = self.train_step(step)
            if self.eval_interval and (step % self.eval_interval == 0 or step == run.train.iters):
                record["val_loss"], record["eval_time_s"] = self.evaluate()
            record["wall_s"] = wall_offset + time.perf_counter() - clock
            record["timestamp"] = time.time()
            writer.log_step(record)
            progress.update(record)
            if rt.governor is not None:
                rt.governor.tick(step)
            interval = run.train.save_interval
            if interval and (step % interval == 0 or step == run.train.iters):
                save_checkpoint(run, step, self.model, self.optimizer, rt.rank, rt.world)

    def _summary(self, records: list[dict[str, Any]], started: str, machine_load: dict | None) -> dict[str, Any]:
        run, rt, info = self.run, self.rt, self.stream.info()
        steady = steady_state(records)
        summary: dict[str, Any] = {
            **loss_summary(records),
            "loss_floor": info.loss_floor,
            "final_val_loss": next((r["val_loss"] for r in reversed(records) if r.get("val_loss") is not None), None),
            "tokens_per_s": steady["tokens_per_s"],
            "tflops_per_gpu": steady["tflops_per_gpu"],
            "tflops_per_gpu_with_ns": steady["tflops_per_gpu_with_ns"],
            "mfu": steady["mfu"],
            "peak": asdict(rt.peaks[0]) if rt.peaks else None,
            "peaks": [asdict(p) for p in rt.peaks],
            "steps": records[-1]["step"] if records else 0,
            "wall_s": records[-1]["wall_s"] if records else 0.0,
            **{
                k: v
                for k, v in steady.items()
                if k not in ("tokens_per_s", "tflops_per_gpu", "tflops_per_gpu_with_ns", "mfu")
            },
            "peak_memory_gb": max((r["peak_memory_gb"] for r in records), default=None),
            "tokens_per_step": run.train.gbs * run.train.seq_length,
            "data": {"kind": info.kind, "vocab_size": info.vocab_size, "description": info.description},
            **provenance(
                run,
                device=rt.description,
                gpu=rt.gpu,
                precision=rt.precision,
                world_size=rt.world,
                threads_per_process=rt.threads,
                threads=rt.governor.record() if rt.governor is not None else None,
                resumed_from_step=self.start_step if run.resume else None,
            ),
            "versions": software_versions("torch", "transformers", "wandb", "numpy"),
            # What "auto" meant on this machine (its CPU's bf16 support): a reanalysis elsewhere must not guess it.
            "ns_matmul_precision": resolve_matmul_precision(run.optimizer.muon.fp32_matmul_prec, rt.device)
            if run.optimizer.muon_family
            else None,
            "machine_load": machine_load,
            "started": started,
            "finished": utc_now(),
        }
        return summary

    def _outro(self, summary: dict[str, Any], writer: MetricsWriter) -> None:
        # AdamW has no matrix work of its own: one figure; each matrix optimizer names its own (registry words).
        matrix = self.run.optimizer.name if self.run.optimizer.matrix_optimizer else None
        lines = [
            f"loss {summary['initial_loss']:.4f} (step 1) -> {summary['final_loss']:.4f} (step {summary['steps']})"
            + (f"; floor {summary['loss_floor']:.3f}" if summary.get("loss_floor") is not None else ""),
            f"throughput {summary['tokens_per_s']:,.0f} tokens/s, {flops_text(summary['tflops_per_gpu'])} per process"
            + (
                f" ({flops_text(summary['tflops_per_gpu_with_ns'])} with {MATRIX_FLOPS_WORDS[matrix]})"
                if matrix
                else ""
            )
            + ", "
            + (
                f"MFU {summary['mfu'][summary['peak']['key']]:.1%} of the {summary['peak']['label']}"
                if summary["peak"]
                else ""
            ),
            f"results   {self.run_dir}",
            f"  metrics {writer.metrics_path}",
            f"  summary {writer.summary_path}",
        ]
        if writer.wandb_dir is not None:
            lines.append(f"  wandb   {writer.wandb_dir} (upload: wandb sync {writer.wandb_dir})")
        print("\n".join(lines), flush=True)


def train(run: RunConfig, run_dir: str | Path) -> dict[str, Any] | None:
    """Run (or resume) training on this process; returns summary.json's content on the writing rank."""
    runtime = init_runtime(run)
    try:
        return Trainer(run, Path(run_dir), runtime).fit()
    finally:
        shutdown(runtime)
