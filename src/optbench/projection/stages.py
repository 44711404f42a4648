"""Model FLOPs per token held by each pipeline rank, split from Bridge's whole-model count.

:func:`optbench.accounting.flops.flop_terms` gives the whole model's FLOPs per sequence by term.
A pipeline rank runs the layers of its virtual stages (:class:`optbench.accounting.placement.VirtualStage`, placed once
per run), so its share is split from those terms without restating the formula:

* attention is the same for every layer (Bridge's attention term is per layer times layers): each
  decoder or MTP layer gets ``attention / (layers + mtp_layers)``;
* the MLP term is ``12 h * 3/2 * sum of FFN widths``: each layer gets the term times its width over
  the sum of widths (a dense layer's width is ``ffn_hidden_size``, a MoE layer's
  ``moe_ffn_hidden_size * topk + shared``; MTP layers take the last decoder layer's kind, as Bridge does);
* the output GEMM (``logits``) is split evenly over the prediction heads: the main head on the loss
  stage, one more per MTP layer on the stage that holds it, with the MTP norms and ``eh_proj``.

The per-rank values add up to ``flop_terms(...).total / seq_length`` (tests check it).
"""

from __future__ import annotations

from collections.abc import Sequence

from dataclasses import dataclass

from optbench.accounting.flops import attention_core_per_layer_token, flop_terms
from optbench.accounting.params import is_moe_layer
from optbench.accounting.placement import VirtualStage
from optbench.config.schema import RunConfig
from optbench.projection.activation_traffic import bytes_per_token


@dataclass(frozen=True)
class PipelineRankWork:
    """What one pipeline rank computes per token (forward + backward, Bridge's rule)."""

    flops_per_token: float
    """Model FLOPs per token of every layer (and head) this pipeline rank holds."""
    attention_flops_per_token: float
    """The attention part of it (what a context-parallel ring exchange can overlap with)."""
    layers: int
    """Decoder plus MTP layers held."""
    moe_layers: int
    """Of which MoE layers (each costs a token dispatch and combine)."""
    expert_flops_per_token: float = 0.0
    """The routed experts' part of ``flops_per_token`` (the grouped GEMMs whose weights the EP rank holds)."""
    attention_core_flops_per_token: float = 0.0
    """The score and value products' part of ``attention_flops_per_token`` (FlashAttention's FLOPs)."""
    activation_bytes_per_token: float = 0.0
    """What the held layers' element-wise kernels move through HBM per token, forward and backward
    (:mod:`optbench.projection.activation_traffic`)."""


def _routed_width(run: RunConfig) -> int:
    """FFN width a token passes through in a MoE layer's routed experts (top-k of them)."""
    model = run.model
    return (model.moe_ffn_hidden_size or model.ffn_hidden_size) * model.moe_router_topk


def _ffn_width(run: RunConfig, layer: int) -> int:
    model = run.model
    if is_moe_layer(model, layer):
        return _routed_width(run) + model.moe_shared_expert_intermediate_size
    return model.ffn_hidden_size


def pipeline_rank_work(run: RunConfig, stages: Sequence[VirtualStage]) -> list[PipelineRankWork]:
    """Per pipeline rank: FLOPs per token, attention FLOPs per token, layers, MoE layers, routed-expert and
    attention-core FLOPs per token, element-wise bytes per token."""
    model, seq = run.model, run.train.seq_length
    terms = flop_terms(model, seq, run.parallel.tp)
    mtp = model.mtp_num_layers
    last = model.num_layers - 1
    layer_kinds = list(range(model.num_layers)) + [last] * mtp
    widths = [_ffn_width(run, layer) for layer in layer_kinds]
    attention_per_layer = terms.attention / seq / len(layer_kinds)
    mlp_per_width = terms.mlp / seq / sum(widths)
    head = terms.logits / seq / (mtp + 1)
    mtp_extra = terms.mtp / seq / mtp if mtp else 0.0
    routed = _routed_width(run)
    core = attention_core_per_layer_token(model, seq)
    work = [
        {
            "flops_per_token": 0.0,
            "attention_flops_per_token": 0.0,
            "layers": 0,
            "moe_layers": 0,
            "expert_flops_per_token": 0.0,
            "attention_core_flops_per_token": 0.0,
            "activation_bytes_per_token": 0.0,
        }
        for _ in range(run.parallel.pp)
    ]
    for stage in stages:
        held = list(stage.decoder_layers) + [last] * len(stage.mtp_layers)
        acc = work[stage.pipeline_rank]
        for layer in held:
            moe = is_moe_layer(model, layer)
            acc["flops_per_token"] += attention_per_layer + mlp_per_width * _ffn_width(run, layer)
            acc["attention_flops_per_token"] += attention_per_layer
            acc["layers"] += 1
            acc["moe_layers"] += int(moe)
            acc["expert_flops_per_token"] += mlp_per_width * routed if moe else 0.0
            acc["attention_core_flops_per_token"] += core
            acc["activation_bytes_per_token"] += bytes_per_token(model, layer)
        acc["flops_per_token"] += len(stage.mtp_layers) * (head + mtp_extra)
        if stage.loss:
            acc["flops_per_token"] += head
    return [PipelineRankWork(**acc) for acc in work]
