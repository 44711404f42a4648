"""Parameter routing as Megatron, and the TrainingOptimizer the trainer drives (single process)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

from optbench.config.schema import ModelConfig, MuonConfig, OptimizerConfig
from optbench.common.errors import UserError
from optbench.optim import build_optimizer, mark_qkv, route_parameters
from optbench.optim.routing import megatron_order, ns_matrix_shapes, qkv_split_shapes_for

TINY = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)


def _qwen3(**extra) -> nn.Module:
    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        **TINY,
        intermediate_size=48,
        moe_intermediate_size=16,
        num_experts=4,
        num_experts_per_tok=2,
        num_key_value_heads=2,
        head_dim=8,
        **extra,
    )
    return Qwen3MoeForCausalLM(config)


def _deepseek_v3() -> nn.Module:
    torch.manual_seed(0)
    config = DeepseekV3Config(
        **TINY,
        intermediate_size=48,
        moe_intermediate_size=16,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        num_key_value_heads=4,
        q_lora_rank=16,
        kv_lora_rank=8,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=8,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
    )
    return DeepseekV3ForCausalLM(config)


def _by_name(model: nn.Module) -> dict:
    return {r.name: r for r in route_parameters(model)}


@pytest.mark.parametrize("build", [_qwen3, _deepseek_v3])
def test_routes_like_megatron(build):
    routes = _by_name(build())
    assert routes["model.embed_tokens.weight"].optimizer == "adamw"
    assert routes["lm_head.weight"].optimizer == "adamw"
    assert routes["model.embed_tokens.weight"].weight_decay_mult == 1.0, "Megatron decays embeddings"
    assert routes["lm_head.weight"].weight_decay_mult == 1.0
    for name, route in routes.items():
        if route.param.ndim == 1:
            assert (route.optimizer, route.weight_decay_mult) == ("adamw", 0.0), name
        if route.param.ndim == 3:
            assert route.optimizer == "muon" and route.is_expert, name
        if route.param.ndim == 2 and "embed_tokens" not in name and "lm_head" not in name:
            assert route.optimizer == "muon" and not route.is_expert, name
    assert routes["model.layers.1.mlp.gate.weight"].optimizer == "muon", "the router is a Muon matrix"
    assert "model.layers.1.mlp.experts.gate_up_proj" in routes


def test_deepseek_expert_bias_is_a_buffer_not_a_parameter():
    model = _deepseek_v3()
    assert not any("e_score_correction_bias" in n for n, _ in model.named_parameters())
    assert any("e_score_correction_bias" in n for n, _ in model.named_buffers())


def test_tied_embeddings_are_routed_once_to_adamw():
    model = _qwen3(tie_word_embeddings=True)
    routes = route_parameters(model)
    embedding = model.get_input_embeddings().weight
    assert model.get_output_embeddings().weight is embedding
    assert [r.optimizer for r in routes if r.param is embedding] == ["adamw"]


def test_other_models_mark_the_output_layer_by_attribute():
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4))
    assert {r.optimizer for r in route_parameters(model) if r.param.ndim == 2} == {"muon"}
    model[1].weight.is_embedding_or_output_parameter = True
    assert _by_name(model)["1.weight"].optimizer == "adamw"
    assert _by_name(model)["1.bias"].weight_decay_mult == 0.0


def test_fused_qkv_marker_and_megatron_split_shapes():
    assert qkv_split_shapes_for(num_attention_heads=8, num_query_groups=2, kv_channels=16) == (64, 16, 16)
    model = nn.Module()
    model.qkv = nn.Linear(32, 2 * (64 + 16 + 16), bias=False)
    mark_qkv(model.qkv.weight)
    with pytest.raises(ValueError, match="no qkv_split_shapes"):
        route_parameters(model)
    route = route_parameters(model, qkv_split_shapes=(64, 16, 16))[0]
    assert route.qkv_split_shapes == (64, 16, 16)
    assert ns_matrix_shapes(route) == [(128, 32), (32, 32), (32, 32)]
    assert ns_matrix_shapes(route, split_qkv=False) == [(192, 32)]
    config = ModelConfig(num_attention_heads=8, num_query_groups=2, kv_channels=16, hidden_size=32)
    optimizer = build_optimizer(model, OptimizerConfig(name="muon", muon=MuonConfig()), model_config=config)
    assert optimizer.muon.param_groups[0]["qkv_split_shapes"] == (64, 16, 16)


def test_megatron_order_lists_muon_then_adam_decay_then_no_decay():
    routes = megatron_order(route_parameters(_qwen3()))
    kinds = [(r.optimizer, r.weight_decay_mult) for r in routes]
    assert kinds == sorted(kinds, key=[("muon", 1.0), ("adamw", 1.0), ("adamw", 0.0)].index)


def _muon_config(**muon) -> OptimizerConfig:
    return OptimizerConfig(name="muon", lr=0.01, weight_decay=0.1, muon=MuonConfig(fp32_matmul_prec="highest", **muon))


def test_training_optimizer_drives_both_sides():
    model = _qwen3()
    optimizer = build_optimizer(model, _muon_config())
    assert optimizer.sharding is None and optimizer.muon is not None and optimizer.adamw is not None
    adam_groups = {g["weight_decay"] for g in optimizer.adamw.param_groups}
    assert adam_groups == {0.1, 0.0}
    assert all(g["weight_decay"] == 0.1 for g in optimizer.muon.param_groups)
    tokens = torch.randint(0, 96, (2, 12))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(tokens, labels=tokens).loss.backward()
    optimizer.reduce_gradients()
    norm = optimizer.clip_grad_norm_(1e-3)
    assert norm > 1e-3
    clipped = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    assert float(clipped) == pytest.approx(1e-3, rel=1e-3)
    assert optimizer.clip_grad_norm_(0.0) == pytest.approx(float(clipped), rel=1e-6), "0 disables clipping"
    optimizer.set_lr(0.5)
    assert {g["lr"] for o in optimizer.optimizers for g in o.param_groups} == {0.5}
    optimizer.step()
    assert optimizer.last_ns_time_s > 0
    assert all(not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters()), "every param moved"
    optimizer.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_adamw_run_uses_torch_adamw_for_everything():
    model = _qwen3()
    optimizer = build_optimizer(model, OptimizerConfig(name="adamw", lr=0.01, adam_beta1=0.8, adam_eps=1e-6))
    assert optimizer.muon is None and isinstance(optimizer.adamw, torch.optim.AdamW)
    assert sum(len(g["params"]) for g in optimizer.adamw.param_groups) == len(list(model.parameters()))
    assert optimizer.adamw.defaults["betas"] == (0.8, 0.95) and optimizer.adamw.defaults["eps"] == 1e-6
    assert optimizer.last_ns_time_s == 0.0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (dict(ns_steps=0), "optimizer.muon.ns_steps"),
        (dict(ns_steps=7), "optimizer.muon.ns_steps"),
        (dict(coefficients="cubic"), "optimizer.muon.coefficients"),
        (dict(scale_mode="rms"), "optimizer.muon.scale_mode"),
        (dict(tp_mode="sharded"), "optimizer.muon.tp_mode"),
        (dict(assignment="random"), "optimizer.muon.assignment"),
    ],
)
def test_bad_muon_settings_are_one_line_user_errors(change, field):
    with pytest.raises(UserError) as caught:
        build_optimizer(_qwen3(), _muon_config(**change))
    assert caught.value.problems[0].field == field
    assert len(caught.value.lines()) == 1


def test_unknown_optimizer_name():
    with pytest.raises(UserError, match="optimizer.name"):
        build_optimizer(_qwen3(), OptimizerConfig(name="sgd"))
