"""Model FLOPs per token and per step, by the rule Megatron Bridge uses when it prints TFLOP/s/GPU.

Megatron Bridge 0.3.1, ``training/utils/flop_utils.py::transformer_flops`` (reproduced term by term
here, not called: Bridge does not import without CUDA). Per sequence of ``s`` tokens, with ``h`` the
hidden size, ``L`` the decoder layers plus the MTP layers, and every GEMM counted three times (forward,
data gradient, weight gradient) at two FLOPs per multiply-add::

    flops_per_sequence = s * (mlp + attention + mtp_extra + logits)

* ``mlp = 12 * h * sum over layers of (FFN width * g)`` with ``g = 3/2`` for SwiGLU (the [gate; up] fc1
  is 2 * ffn wide, fc2 ffn wide: 3 * ffn = (3/2) * 2 * ffn). A dense layer's width is ``ffn_hidden_size``;
  a MoE layer's is ``moe_ffn_hidden_size * topk + moe_shared_expert_intermediate_size``. The router GEMM
  is not counted. MTP layers are counted as the last decoder layer's kind (MoE if it is MoE).
* GQA attention, per layer: ``12 * h^2 * (1 + groups/heads + s/(2h)) * (kv_channels * heads / h)``:
  Q and output projections (1), K and V projections (groups/heads), and the causal score and value
  products counted as half of the full s x s products (s/(2h)).
* MLA attention, per layer: ``6 * (q + kv + h*rope + heads*v*h + s*heads*(qk+rope)/2 + s*heads*v/2)``
  with ``q = q_lora * (h + heads*(qk+rope) + 1)`` (down and up projection; the +1 is Bridge's allowance
  for the q norm) or ``h * heads * (qk+rope)`` without ``q_lora_rank``, and
  ``kv = kv_lora * (h + heads*(qk+v) + 1)``. The ``h*rope`` term is the shared rotary key projection.
  (Bridge multiplies by 3 * 2 here, not 12: each projection appears once.)
* ``mtp_extra = 6 * mtp_layers * (3h + 2h^2)``: MTP's two input norms and final norm, and its
  [2h -> h] ``eh_proj``.
* ``logits = 6 * h * V_padded * (mtp_layers + 1)``: the output GEMM, once per prediction head, with
  the vocabulary padded to a multiple of ``make_vocab_size_divisible_by * tp``.

Everything else (norms, softmax, rotary, router, optimizer) is excluded, so the count is the same
whatever the optimizer. TFLOP/s/GPU = ``flops_per_step / step_time / world_size / 1e12`` with
``flops_per_step = gbs * flops_per_sequence``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache

from optbench.accounting.params import is_moe_layer, padded_vocab_size
from optbench.config.schema import ModelConfig, RunConfig

SWIGLU = 1.5
"""Bridge's gated_linear_multiplier: every model here is a SwiGLU (gated SiLU) transformer."""


@dataclass(frozen=True)
class FlopTerms:
    """Model FLOPs of one sequence, split as Bridge's formula adds them up."""

    mlp: float
    """Dense FFNs, routed experts (top-k) and shared experts of every layer (MTP included)."""
    attention: float
    """Attention projections and the causal score / value products of every layer (MTP included)."""
    mtp: float
    """MTP norms and eh_proj (the MTP transformer layer itself is in mlp and attention)."""
    logits: float
    """Output-layer GEMM, once per prediction head (1 + MTP layers), vocabulary padded."""

    @property
    def total(self) -> float:
        return self.mlp + self.attention + self.mtp + self.logits


def _layer_kinds(model: ModelConfig) -> tuple[int, int]:
    """(dense layers, MoE layers) counted by Bridge, MTP layers taking the last decoder layer's kind."""
    moe = sum(is_moe_layer(model, layer) for layer in range(model.num_layers))
    dense = model.num_layers - moe
    if model.mtp_num_layers:
        if is_moe_layer(model, model.num_layers - 1):
            moe += model.mtp_num_layers
        else:
            dense += model.mtp_num_layers
    return dense, moe


def _attention_per_layer_token(model: ModelConfig, seq_length: int) -> float:
    """Attention FLOPs of one layer per token (Bridge's self_attn_term divided by layers)."""
    h, heads = model.hidden_size, model.num_attention_heads
    if model.multi_latent_attention:
        qk, rope, v = model.qk_head_dim or 0, model.qk_pos_emb_head_dim or 0, model.v_head_dim or 0
        if model.q_lora_rank:
            q_term = model.q_lora_rank * (h + heads * (qk + rope) + 1)
        else:
            q_term = h * heads * (qk + rope)
        kv_term = (model.kv_lora_rank or 0) * (h + heads * (qk + v) + 1)
        rope_key = h * rope
        out_proj = heads * v * h
        core = seq_length * heads * (qk + rope) / 2 + seq_length * heads * v / 2
        return 3 * 2 * (q_term + kv_term + rope_key + out_proj + core)
    kv = model.kv_channels or h // heads
    groups = model.num_query_groups or heads
    query_to_hidden = kv * heads / h
    return 12 * h * h * ((1 + groups / heads + seq_length / h / 2) * query_to_hidden)


def attention_core_per_layer_token(model: ModelConfig, seq_length: int) -> float:
    """The causal score and value products' part of :func:`_attention_per_layer_token` (what FlashAttention runs,
    in FP8 only with ``fp8_dot_product_attention``): GQA ``12 h^2 (s/(2h)) (kv heads / h)`` = ``6 s kv heads``,
    MLA ``6 (s heads (qk+rope)/2 + s heads v/2)``."""
    heads = model.num_attention_heads
    if model.multi_latent_attention:
        qk, rope, v = model.qk_head_dim or 0, model.qk_pos_emb_head_dim or 0, model.v_head_dim or 0
        return 3 * 2 * (seq_length * heads * (qk + rope) / 2 + seq_length * heads * v / 2)
    kv = model.kv_channels or model.hidden_size // heads
    return 6 * seq_length * kv * heads


def flop_terms(model: ModelConfig, seq_length: int, tp: int = 1) -> FlopTerms:
    """Bridge's model FLOPs of one sequence of ``seq_length`` tokens, term by term."""
    h = model.hidden_size
    dense, moe = _layer_kinds(model)
    layers = model.num_layers + model.mtp_num_layers
    moe_width = _routed_width(model) + model.moe_shared_expert_intermediate_size
    mlp = 12 * h * SWIGLU * (model.ffn_hidden_size * dense + moe_width * moe)
    attention = layers * _attention_per_layer_token(model, seq_length)
    mtp = 3 * 2 * model.mtp_num_layers * (3 * h + 2 * h * h)
    logits = 3 * 2 * h * padded_vocab_size(model, tp) * (model.mtp_num_layers + 1)
    return FlopTerms(
        mlp=seq_length * mlp, attention=seq_length * attention, mtp=seq_length * mtp, logits=seq_length * logits
    )


def routed_expert_flops(model: ModelConfig, seq_length: int) -> float:
    """The routed experts' part of :func:`flop_terms`' ``mlp`` for one sequence: the top-k experts' gated FFNs of
    every MoE layer, MTP included (0 for a dense model)."""
    if not model.num_moe_experts:
        return 0.0
    return seq_length * 12 * model.hidden_size * SWIGLU * _routed_width(model) * _layer_kinds(model)[1]


def _routed_width(model: ModelConfig) -> int:
    """FFN width a token runs through in one MoE layer's routed experts: its top-k experts' widths."""
    return (model.moe_ffn_hidden_size or model.ffn_hidden_size) * model.moe_router_topk


@lru_cache(maxsize=256)
def _per_token(model_fields: tuple[tuple[str, object], ...], seq_length: int, tp: int) -> float:
    return flop_terms(ModelConfig(**dict(model_fields)), seq_length, tp).total / seq_length


def model_flops_per_token(model: ModelConfig, seq_length: int, tp: int = 1) -> float:
    """Model FLOPs per trained token (forward + backward) at ``seq_length``, Bridge's rule; cached."""
    return _per_token(tuple(sorted((f.name, getattr(model, f.name)) for f in fields(model))), seq_length, tp)


def model_flops_per_step(run: RunConfig) -> float:
    """Model FLOPs of one optimizer step: per token x gbs x seq_length."""
    per_token = model_flops_per_token(run.model, run.train.seq_length, run.parallel.tp)
    return per_token * run.train.gbs * run.train.seq_length
