"""Megatron Core's training step on one GPU, as Megatron Bridge's ``train_step`` takes it, on a built ConfigContainer.

Used where Bridge's own ``pretrain()`` cannot run (a machine without Transformer Engine). Every object is the one a
Bridge job builds from the same ConfigContainer: the model through the provider's ``provide_distributed_model``
(Megatron's DDP around a bf16 ``Float16Module``), the optimizer and scheduler through Bridge's ``setup_optimizer``
(Core's Muon, and its other emerging optimizers through Emerging-Optimizers), one step through Core's
``forward_backward_func`` with the model-config hooks Bridge sets (gradient sync, ``finalize_model_grads``, loss
scaling), the optimizer step inside Megatron's ``optimizer`` timer as Bridge times it. Our
:class:`~optbench.engine.bridge.callback.MetricsCallback`
is called with the same context fields Bridge gives it. What differs from Bridge's loop: the data (our synthetic
token stream, learnable, instead of Bridge's data loader) and no evaluation, checkpointing or rerun machinery.
"""

from __future__ import annotations

import os
import socket
import time
from types import SimpleNamespace
from typing import Any, Iterator

import torch


def single_process_env() -> None:
    """The environment torchrun gives one process (rank 0 of 1, a free local port), where it is not set: Bridge's
    ``pretrain()`` and :func:`init_single_process` both read it."""
    with socket.socket() as probe:  # a free port: two smokes on one machine must not collide
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for key, value in (
        ("RANK", "0"),
        ("LOCAL_RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", str(port)),
    ):
        os.environ.setdefault(key, value)


def init_single_process() -> None:
    """torch.distributed with one NCCL rank on this GPU (what torchrun would set up for one process)."""
    if torch.distributed.is_initialized():
        return
    single_process_env()
    torch.cuda.set_device(0)
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)


def batches(stream: Any, gbs: int, mbs: int, steps: int, device: str) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """``steps`` global batches of ``gbs`` samples, split into micro-batches of (tokens, labels) on ``device``,
    drawn before the loop so that no step waits for data."""
    out = []
    for step in range(steps):
        sample = stream.batch(range(step * gbs, (step + 1) * gbs)).to(device)
        out.append(
            [(sample[i : i + mbs, :-1].contiguous(), sample[i : i + mbs, 1:].contiguous()) for i in range(0, gbs, mbs)]
        )
    return out


def _loss(output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Bridge's GPT loss form: (summed token loss, token count, {'lm loss': [sum, count]})."""
    losses = output.float().view(-1)
    total, count = losses.sum(), torch.tensor(losses.numel(), device=losses.device, dtype=torch.int)
    return total, count, {"lm loss": torch.stack([total.detach(), count.float()])}


def _forward_step(data: Iterator[tuple[torch.Tensor, torch.Tensor]], model: Any):
    tokens, labels = next(data)
    positions = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0).expand_as(tokens)
    return model(tokens, positions, None, labels=labels), _loss


def _reduced(losses: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """The step's loss over its micro-batches, per token, as Bridge's train_step reduces it."""
    total = torch.vstack([item["lm loss"].view(-1) for item in losses]).sum(dim=0)
    return {"lm loss": float(total[0] / total[1])}


def build(config: Any) -> tuple[list[Any], Any, Any]:
    """(model chunks, optimizer, scheduler) from a ConfigContainer that ``runtime_config_update`` has seen."""
    from megatron.bridge.training.optim import setup_optimizer
    from megatron.core.distributed import finalize_model_grads

    provider = config.model
    provider.initialize_model_parallel(seed=config.rng.seed)
    model = provider.provide_distributed_model(ddp_config=config.ddp, bf16=provider.bf16, fp16=provider.fp16)
    optimizer, scheduler = setup_optimizer(config.optimizer, config.scheduler, model)
    model_config = model[0].config if hasattr(model[0], "config") else provider
    if config.ddp.overlap_grad_reduce:  # as Bridge's setup sets the hooks
        model_config.no_sync_func = model[0].no_sync
        model_config.grad_sync_func = model[0].start_grad_sync
    model_config.finalize_model_grads_func = finalize_model_grads
    model_config.grad_scale_func = optimizer.scale_loss
    return model, optimizer, scheduler


def train(config: Any, stream: Any, steps: int, callback: Any) -> dict[str, Any]:
    """``steps`` training steps; the callback sees each as Bridge's ``on_train_step_end``. Returns what was built."""
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.timers import Timers

    model, optimizer, scheduler = build(config)
    timers = Timers(log_level=2, log_option="minmax")
    train = config.train
    micro = train.global_batch_size // train.micro_batch_size
    data = batches(stream, train.global_batch_size, train.micro_batch_size, steps, "cuda")
    forward_backward = get_forward_backward_func()
    state = SimpleNamespace(train_state=SimpleNamespace(step=0), timers=timers, wandb_logger=None)
    callback.on_train_start(SimpleNamespace(state=state))
    for step in range(steps):
        state.train_state.step = step
        for chunk in model:
            chunk.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward(
            forward_step_func=_forward_step,
            data_iterator=iter(data[step]),
            model=model,
            num_microbatches=micro,
            seq_length=config.model.seq_length,
            micro_batch_size=train.micro_batch_size,
            forward_only=False,
        )
        timers("optimizer", log_level=1).start(barrier=False)
        ok, grad_norm, _ = optimizer.step()
        timers("optimizer").stop()
        if ok:
            scheduler.step(increment=train.global_batch_size)
        callback.on_train_step_end(
            SimpleNamespace(
                state=state, loss_dict=_reduced(losses), grad_norm=grad_norm, optimizer=optimizer, skipped_iter=not ok
            )
        )
    callback.on_train_end(SimpleNamespace(state=state))
    return {
        "model_class": type(model[0]).__name__,
        "optimizer_class": type(optimizer).__name__,
        "parameters": sum(p.numel() for chunk in model for p in chunk.parameters()),
        "microbatches": micro,
        "finished": time.time(),
    }
