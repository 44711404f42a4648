"""MuonClip's QK-clip on the local engine, as Megatron Core 0.16.1-0.19 implements it for MLA and GQA.

Kimi K2 trains with Muon plus QK-clip: after each optimizer step, every attention head whose largest
pre-softmax logit during the step exceeded the threshold ``tau`` has its query and key weights scaled
down so that the same inputs would give at most ``tau``. Megatron Core
(``MLASelfAttention.clip_qk``, ``megatron/core/optimizer/qk_clip.py``; Bridge calls it after the
optimizer step when ``model.qk_clip``), per head h with ``eta_h = min(tau / max_logit_h, 1)``:

* query up-projection (``q_b_proj``, or ``q_proj`` without a query LoRA): the non-rotary rows of head
  h times ``eta_h ** alpha``, its rotary rows times ``eta_h``;
* key/value up-projection (``kv_b_proj``): head h's key rows times ``eta_h ** (1 - alpha)``; values and
  the shared rotary key untouched;

so every logit of head h (non-rotary part ``q_nope . k_nope``, rotary part ``q_rot . k_rot``) is
multiplied by exactly ``eta_h``. The maximum is taken over the step's microbatches and, like
Megatron, over the data-parallel ranks (all-reduce MAX).

GQA (Megatron's ``SelfAttention.clip_qk``, "experimental on GQA"): one ``eta_g`` per query group from
the largest logit of the group's heads; the query rows of all the group's heads times ``eta_g ** alpha``
and the group's key rows times ``eta_g ** (1 - alpha)`` (values and biases untouched). Under QK-norm
the per-head RMSNorm after the projections undoes any such scaling, so validation refuses QK-clip on
a GQA model with ``qk_layernorm`` (Megatron would run it and change nothing).

The logits come from a Hugging Face attention function registered as ``optbench_qk_logits``: it takes
the maximum of ``scaling * q k^T`` over the causal positions of each head, then runs the usual SDPA
kernel. Computing the scores once more costs about one extra attention product per layer.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

ATTENTION = "optbench_qk_logits"
MAX_LOGIT = "_optbench_max_logit"
"""Attribute of each attention module holding the step's per-head maximum logit."""


def _attention_with_logits(module: nn.Module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    with torch.no_grad():
        scale = scaling if scaling is not None else query.size(-1) ** -0.5
        repeats = query.size(1) // key.size(1)
        keys = key.repeat_interleave(repeats, dim=1) if repeats > 1 else key
        scores = (query.float() @ keys.float().transpose(-1, -2)) * scale
        q_len, k_len = scores.shape[-2:]
        causal = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).tril(k_len - q_len)
        scores = scores.masked_fill(~causal, float("-inf"))
        if attention_mask is not None:
            scores = (
                scores.masked_fill(~attention_mask, float("-inf"))
                if attention_mask.dtype == torch.bool
                else scores + attention_mask
            )
        step_max = scores.amax(dim=(0, 2, 3))
        previous = getattr(module, MAX_LOGIT, None)
        setattr(module, MAX_LOGIT, step_max if previous is None else torch.maximum(previous, step_max))
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)


def register_attention() -> str:
    """Make ``optbench_qk_logits`` an attention implementation transformers models can be built with."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, _attention_with_logits)
    return ATTENTION


def _is_mla(module: nn.Module) -> bool:
    return hasattr(module, "kv_b_proj") and hasattr(module, "qk_nope_head_dim")


def _is_gqa(module: nn.Module) -> bool:
    return hasattr(module, "num_key_value_groups") and hasattr(module, "k_proj") and hasattr(module, "q_proj")


def _attentions(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if _is_mla(m) or _is_gqa(m)]


def _clip_mla(attention: nn.Module, eta: torch.Tensor, alpha: float) -> None:
    eta = eta.view(-1, 1, 1)
    nope, rope, value = attention.qk_nope_head_dim, attention.qk_rope_head_dim, attention.v_head_dim
    query = attention.q_proj if getattr(attention, "q_lora_rank", None) is None else attention.q_b_proj
    q = query.weight.view(attention.num_heads, nope + rope, -1)
    q[:, :nope].mul_(eta.pow(alpha).to(q.dtype))
    q[:, nope:].mul_(eta.to(q.dtype))
    kv = attention.kv_b_proj.weight.view(attention.num_heads, nope + value, -1)
    kv[:, :nope].mul_(eta.pow(1.0 - alpha).to(kv.dtype))


def _clip_gqa(attention: nn.Module, group_eta: torch.Tensor, alpha: float) -> None:
    groups = group_eta.numel()
    group_eta = group_eta.view(-1, 1, 1)
    q = attention.q_proj.weight.view(groups, -1, attention.q_proj.weight.size(-1))  # heads of group g are contiguous
    k = attention.k_proj.weight.view(groups, -1, attention.k_proj.weight.size(-1))
    q.mul_(group_eta.pow(alpha).to(q.dtype))
    k.mul_(group_eta.pow(1.0 - alpha).to(k.dtype))


def reset_logits(model: nn.Module) -> None:
    """Forget the recorded maxima (after a validation pass: only training steps are clipped on)."""
    for attention in _attentions(model):
        setattr(attention, MAX_LOGIT, None)


@torch.no_grad()
def clip_qk(model: nn.Module, threshold: float, alpha: float, world: int = 1) -> float | None:
    """Scale the query/key weights of every head whose step maximum exceeded ``threshold``; returns the
    largest logit of the step (None when no logit was recorded), and resets the maxima."""
    largest = None
    for attention in _attentions(model):
        logits = getattr(attention, MAX_LOGIT, None)
        if logits is None:
            continue
        if world > 1:
            dist.all_reduce(logits, op=dist.ReduceOp.MAX)
        largest = max(largest or float("-inf"), float(logits.max()))
        if _is_mla(attention):
            if bool((logits > threshold).any()):
                _clip_mla(attention, torch.clamp(threshold / logits, max=1.0), alpha)
        else:
            grouped = logits.view(-1, attention.num_key_value_groups).amax(dim=1)
            if bool((grouped > threshold).any()):
                _clip_gqa(attention, torch.clamp(threshold / grouped, max=1.0), alpha)
        setattr(attention, MAX_LOGIT, None)
    return largest
