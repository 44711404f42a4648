"""Build the local proxy model: a Hugging Face transformers model of the same architecture, from our ModelConfig.

``deepseek_v3`` (Kimi K2, DeepSeek-V3) -> ``DeepseekV3ForCausalLM``; ``qwen3_moe`` (Qwen3 30B-A3B) ->
``Qwen3MoeForCausalLM``. Nothing is downloaded: the model is built from a config object with a seeded
random init, so every data-parallel rank builds the same replica.

Shapes match :func:`optbench.accounting.params.model_parameters` (Megatron's inventory) tensor for
tensor, with two layout differences that do not change the maths Muon sees:

* the dense and shared-expert MLPs are rebuilt with one fused ``gate_up_proj`` [2 * ffn, h] (Megatron's
  ``linear_fc1``) instead of transformers' separate gate and up matrices, so that Muon orthogonalizes
  [gate; up] as one matrix as Megatron does (routed experts are already fused 3-D tensors);
* a GQA layer keeps Q, K and V as three matrices where Megatron fuses them into ``linear_qkv``; with
  ``muon.split_qkv`` (the default) Megatron orthogonalizes Q, K and V separately, which is the same.

The vocabulary is padded exactly as Megatron pads it, so the logit GEMM that the FLOPs count is the
GEMM that runs. What Hugging Face cannot express is refused with a one-line error naming the field.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from optbench.accounting.params import padded_vocab_size
from optbench.config.schema import ModelConfig
from optbench.common.errors import Problem, UserError

EXPERTS_IMPLEMENTATION = "grouped_mm"
"""transformers' routed-expert kernel: ``torch._grouped_mm`` over the 3-D expert tensors. On a 2-core CPU
it is ~30x faster than the per-expert ``eager`` loop and ~40x faster than ``batched_mm`` for the tiny
proxies (0.2 s vs 6-8 s vs 10 s per 8 x 128-token forward+backward), with the same losses."""

ATTENTION_IMPLEMENTATION = "sdpa"
"""torch's scaled_dot_product_attention (causal; flash kernels on GPU, fused kernel on CPU)."""


def _unsupported(model: ModelConfig) -> list[Problem]:
    """ModelConfig features the Hugging Face class of this architecture cannot express."""
    problems = []
    if not model.num_moe_experts:
        problems.append(Problem("model.num_moe_experts", "the local engine builds MoE proxies only; set it"))
    if model.mtp_num_layers:
        problems.append(Problem("model.mtp_num_layers", "Hugging Face's DeepSeek-V3 classes train no MTP layer; set 0"))
    if model.architecture == "deepseek_v3":
        if not model.qk_layernorm:
            problems.append(
                Problem("model.qk_layernorm", "Hugging Face's DeepSeek-V3 always normalises its q/kv latents; set true")
            )
        if model.moe_router_score_function != "sigmoid":
            problems.append(Problem("model.moe_router_score_function", "Hugging Face's DeepSeek-V3 router is sigmoid"))
        shared, expert = model.moe_shared_expert_intermediate_size, model.moe_ffn_hidden_size or 0
        if expert and shared % expert:
            problems.append(
                Problem(
                    "model.moe_shared_expert_intermediate_size",
                    f"must be a multiple of moe_ffn_hidden_size ({expert}): Hugging Face sizes it n_shared x expert",
                )
            )
        if not model.multi_latent_attention:
            problems.append(Problem("model.multi_latent_attention", "the deepseek_v3 architecture is MLA; set true"))
    elif model.architecture == "qwen3_moe":
        if model.moe_router_score_function != "softmax":
            problems.append(Problem("model.moe_router_score_function", "Hugging Face's Qwen3-MoE router is softmax"))
        if model.moe_shared_expert_intermediate_size:
            problems.append(Problem("model.moe_shared_expert_intermediate_size", "Qwen3-MoE has no shared expert; 0"))
        if model.moe_router_enable_expert_bias:
            problems.append(Problem("model.moe_router_enable_expert_bias", "Qwen3-MoE's router has no expert bias"))
        if model.moe_router_topk_scaling_factor not in (None, 1.0):
            problems.append(Problem("model.moe_router_topk_scaling_factor", "Qwen3-MoE's router has no scaling; null"))
        if model.multi_latent_attention:
            problems.append(Problem("model.multi_latent_attention", "the qwen3_moe architecture is GQA; set false"))
    else:
        problems.append(Problem("model.architecture", f"no local proxy for '{model.architecture}'"))
    return problems


def rope_parameters(model: ModelConfig) -> dict:
    """RoPE as transformers 5 takes it: plain, or YaRN when ``rotary_scaling_factor`` is set.

    YaRN uses DeepSeek-V3 / Kimi K2's published settings (beta_fast 32, beta_slow 1, mscale and
    mscale_all_dim 1.0) with ``max_position_embeddings`` as the original (pre-YaRN) context.
    """
    if not model.rotary_scaling_factor:
        return {"rope_type": "default", "rope_theta": model.rotary_base}
    return {
        "rope_type": "yarn",
        "rope_theta": model.rotary_base,
        "factor": model.rotary_scaling_factor,
        "original_max_position_embeddings": model.max_position_embeddings,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    }


def _max_positions(model: ModelConfig) -> int:
    return int(model.max_position_embeddings * (model.rotary_scaling_factor or 1))


def hf_config(model: ModelConfig, attention: str = ATTENTION_IMPLEMENTATION):
    """The transformers config object for ``model`` (raises UserError for what it cannot express)."""
    problems = _unsupported(model)
    if problems:
        raise UserError(problems)
    common = dict(
        vocab_size=padded_vocab_size(model),
        hidden_size=model.hidden_size,
        intermediate_size=model.ffn_hidden_size,
        moe_intermediate_size=model.moe_ffn_hidden_size,
        num_hidden_layers=model.num_layers,
        num_attention_heads=model.num_attention_heads,
        num_experts_per_tok=model.moe_router_topk,
        norm_topk_prob=model.norm_topk_prob,
        max_position_embeddings=_max_positions(model),
        initializer_range=model.init_method_std,
        rms_norm_eps=model.layernorm_epsilon,
        tie_word_embeddings=model.share_embeddings_and_output_weights,
        rope_parameters=rope_parameters(model),
        use_cache=False,
        attn_implementation=attention,
        experts_implementation=EXPERTS_IMPLEMENTATION,
    )
    if model.architecture == "deepseek_v3":
        from transformers import DeepseekV3Config

        return DeepseekV3Config(
            **common,
            num_key_value_heads=model.num_attention_heads,
            n_routed_experts=model.num_moe_experts,
            n_shared_experts=model.moe_shared_expert_intermediate_size // (model.moe_ffn_hidden_size or 1),
            routed_scaling_factor=model.moe_router_topk_scaling_factor or 1.0,
            q_lora_rank=model.q_lora_rank,
            kv_lora_rank=model.kv_lora_rank,
            qk_nope_head_dim=model.qk_head_dim,
            qk_rope_head_dim=model.qk_pos_emb_head_dim,
            v_head_dim=model.v_head_dim,
            n_group=model.moe_router_num_groups or 1,
            topk_group=model.moe_router_group_topk or 1,
            first_k_dense_replace=model.first_k_dense_layers,
            num_mtp_layers=0,
        )
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(
        **common,
        num_key_value_heads=model.num_query_groups or model.num_attention_heads,
        head_dim=model.kv_channels or model.hidden_size // model.num_attention_heads,
        num_experts=model.num_moe_experts,
        decoder_sparse_step=1,
        mlp_only_layers=list(range(model.first_k_dense_layers)),
        # transformers' load_balancing_loss_func is the Switch-style loss of Megatron's "aux_loss" type.
        output_router_logits=model.moe_aux_loss_coeff > 0,
        router_aux_loss_coef=model.moe_aux_loss_coeff,
    )


class FusedSwiGLU(nn.Module):
    """SwiGLU MLP with [gate; up] in one matrix, as Megatron's ``linear_fc1``; same function as transformers' MLP."""

    def __init__(self, gate: nn.Linear, up: nn.Linear, down: nn.Linear) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(gate.in_features, 2 * gate.out_features, bias=False)
        self.down_proj = down
        with torch.no_grad():
            self.gate_up_proj.weight.copy_(torch.cat([gate.weight, up.weight]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(nn.functional.silu(gate) * up)


def _fuse_mlps(module: nn.Module) -> None:
    """Replace every transformers gated MLP (dense layers, shared experts) by :class:`FusedSwiGLU`."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child).__name__ in ("DeepseekV3MLP", "Qwen3MoeMLP"):
                setattr(parent, name, FusedSwiGLU(child.gate_proj, child.up_proj, child.down_proj))


OUTPUT_PROJECTIONS = ("o_proj", "down_proj")
"""Matrices that write into the residual stream: Megatron inits them with std / sqrt(2 * num_layers)."""


@torch.no_grad()
def _scale_output_projections(module: nn.Module, model: ModelConfig) -> None:
    """Megatron's ``output_layer_init_method``: residual-branch outputs (attention linear_proj, MLP and
    expert fc2) drawn with std ``init_method_std / sqrt(2 * num_layers)``; transformers draws them with
    the plain std."""
    std = model.init_method_std / math.sqrt(2.0 * model.num_layers)
    for name, param in module.named_parameters():
        parts = name.split(".")
        # nn.Linear weights end in "<proj>.weight"; the 3-D routed-expert tensor is "experts.down_proj".
        if parts[-1] == "down_proj" or (parts[-1] == "weight" and parts[-2] in OUTPUT_PROJECTIONS):
            param.normal_(0.0, std)


def has_aux_loss(model: ModelConfig) -> bool:
    """Whether the built proxy returns a load-balancing loss (Qwen3-MoE with moe_aux_loss_coeff > 0).

    transformers' DeepSeek-V3 has no auxiliary loss; those proxies balance with the router bias only.
    """
    return model.architecture == "qwen3_moe" and model.moe_aux_loss_coeff > 0


def build_model(
    model: ModelConfig, seed: int, device: torch.device | str = "cpu", attention: str = ATTENTION_IMPLEMENTATION
) -> nn.Module:
    """The causal-LM proxy of ``model`` in fp32 on ``device``, initialised from ``seed`` alone."""
    config = hf_config(model, attention)
    if model.architecture == "deepseek_v3":
        from transformers import DeepseekV3ForCausalLM as model_class
    else:
        from transformers import Qwen3MoeForCausalLM as model_class
    torch.manual_seed(seed)
    module = model_class(config)
    _fuse_mlps(module)
    _scale_output_projections(module, model)
    if not model.qk_layernorm:  # Qwen3 without QK-norm (Megatron's qk_layernorm=false): no per-head q/k RMSNorm
        for attention in module.modules():
            if hasattr(attention, "q_norm") and hasattr(attention, "k_norm"):
                attention.q_norm, attention.k_norm = nn.Identity(), nn.Identity()
    return module.to(device=device, dtype=torch.float32).train()


def routers(module: nn.Module) -> list[nn.Module]:
    """The MoE routers of a built proxy, in layer order."""
    return [m for m in module.modules() if type(m).__name__ in ("DeepseekV3TopkRouter", "Qwen3MoeTopKRouter")]
