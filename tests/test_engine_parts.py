"""Local engine pieces: the proxies mirror our accounting, the data is deterministic and learnable as
documented, the schedule is Megatron's, and what transformers cannot express is refused in one line."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch

from optbench.accounting.params import parameter_counts
from optbench.compose.recipe import compose_run
from optbench.config.schema import DataConfig, ModelConfig, OptimizerConfig, TrainConfig
from optbench.engine.local.data import (
    SUCCESSORS,
    MockStream,
    SyntheticStream,
    build_stream,
    entropy,
    microbatch_indices,
)
from optbench.engine.local.model import build_model, hf_config
from optbench.engine.local.runtime import cpu_matmul_probe
from optbench.engine.local.schedule import learning_rate
from optbench.common.errors import UserError


@pytest.mark.parametrize("recipe", ["kimi_k2_tiny_muon", "qwen3_moe_tiny_muon", "deepseek_v3_tiny_muon"])
def test_proxy_has_exactly_the_parameters_accounting_counts(recipe):
    """Same tensors as Megatron's inventory (vocabulary padding included), so the FLOPs describe this model."""
    model = compose_run(recipe).model
    built = build_model(model, seed=1)
    assert sum(p.numel() for p in built.parameters()) == parameter_counts(model).total
    experts = [p for n, p in built.named_parameters() if n.endswith("experts.gate_up_proj")]
    assert experts and experts[0].shape == (model.num_moe_experts, 2 * model.moe_ffn_hidden_size, model.hidden_size)


def test_dense_and_shared_mlps_are_fused_like_megatron_fc1():
    model = compose_run("kimi_k2_tiny_muon").model
    names = dict(build_model(model, seed=1).named_parameters())
    assert names["model.layers.0.mlp.gate_up_proj.weight"].shape == (2 * model.ffn_hidden_size, model.hidden_size)
    shared = names["model.layers.1.mlp.shared_experts.gate_up_proj.weight"]
    assert shared.shape == (2 * model.moe_shared_expert_intermediate_size, model.hidden_size)
    assert not any(n.endswith(("gate_proj.weight", "up_proj.weight")) and "gate_up" not in n for n in names)


def test_init_is_seeded_and_output_projections_are_scaled():
    model = compose_run("qwen3_moe_tiny_muon").model
    a, b, c = build_model(model, seed=7), build_model(model, seed=7), build_model(model, seed=8)
    for (name, x), y, z in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(x, y), name
    assert not torch.equal(next(a.parameters()), next(c.parameters()))
    std_q = dict(a.named_parameters())["model.layers.0.self_attn.q_proj.weight"].std().item()
    std_o = dict(a.named_parameters())["model.layers.0.self_attn.o_proj.weight"].std().item()
    assert std_q == pytest.approx(model.init_method_std, rel=0.05)
    assert std_o == pytest.approx(model.init_method_std / math.sqrt(2 * model.num_layers), rel=0.05)


def test_yarn_and_router_settings_reach_transformers():
    model = compose_run("kimi_k2_tiny_muon", ["model.rotary_scaling_factor=32"]).model
    config = hf_config(model)
    assert config.rope_parameters["rope_type"] == "yarn" and config.rope_parameters["factor"] == 32
    assert config.routed_scaling_factor == model.moe_router_topk_scaling_factor
    assert config.first_k_dense_replace == model.first_k_dense_layers
    assert config.n_shared_experts == 1 and config.num_experts_per_tok == model.moe_router_topk


@pytest.mark.parametrize(
    "recipe, overrides, field",
    [
        (
            "qwen3_moe_tiny_muon",
            ["model.moe_shared_expert_intermediate_size=128"],
            "model.moe_shared_expert_intermediate_size",
        ),
        ("qwen3_moe_tiny_muon", ["model.moe_router_score_function=sigmoid"], "model.moe_router_score_function"),
        ("kimi_k2_tiny_muon", ["model.moe_router_score_function=softmax"], "model.moe_router_score_function"),
        (
            "kimi_k2_tiny_muon",
            ["model.moe_shared_expert_intermediate_size=100"],
            "model.moe_shared_expert_intermediate_size",
        ),
        ("kimi_k2_tiny_muon", ["model.qk_layernorm=false"], "model.qk_layernorm"),
    ],
)
def test_what_transformers_cannot_express_is_one_clear_error(recipe, overrides, field):
    with pytest.raises(UserError) as err:
        hf_config(compose_run(recipe, overrides).model)
    assert err.value.problems[0].field == field


def test_samples_are_a_function_of_seed_and_index_only():
    stream = SyntheticStream(vocab_size=300, seed=5, seq_length=16)
    first = stream.batch(np.array([3, 4, 5]))
    again = SyntheticStream(vocab_size=300, seed=5, seq_length=16).batch(np.array([5, 3]))
    assert torch.equal(first[2], again[0]) and torch.equal(first[0], again[1])
    assert not torch.equal(first[0], first[1])
    assert not torch.equal(first, SyntheticStream(300, seed=6, seq_length=16).batch(np.array([3, 4, 5])))
    assert first.shape == (3, 17) and first.dtype == torch.int64 and int(first.max()) < 300
    mock = MockStream(300, seed=5, seq_length=16)
    assert torch.equal(mock.batch(np.array([9])), mock.batch(np.array([9])))


def test_synthetic_chain_has_the_documented_entropy():
    """Empirical conditional entropies: ~H(w) given two tokens, ~ln K given one."""
    stream = SyntheticStream(vocab_size=64, seed=3, seq_length=256)
    tokens = stream.batch(np.arange(400)).numpy()
    given_two, given_one = defaultdict(Counter), defaultdict(Counter)
    for row in tokens:
        for c, a, nxt in zip(row[:-2], row[1:-1], row[2:]):
            given_two[(c, a)][nxt] += 1
            given_one[a][nxt] += 1

    def conditional(table):
        total = sum(sum(c.values()) for c in table.values())
        return sum(
            sum(c.values()) / total * entropy(np.array(list(c.values())) / sum(c.values())) for c in table.values()
        )

    assert len({n for c in given_one.values() for n in c}) <= 64
    assert max(len(c) for c in given_one.values()) <= SUCCESSORS
    assert conditional(given_two) == pytest.approx(entropy(stream.weights), abs=0.08)
    assert entropy(stream.weights) + 0.3 < conditional(given_one) <= math.log(SUCCESSORS) + 0.01
    floor = stream.loss_floor()
    assert (
        entropy(stream.weights)
        < floor
        < entropy(stream.weights) + (math.log(SUCCESSORS) - entropy(stream.weights)) / 256 + 1e-9
    )


def test_data_parallel_ranks_split_each_global_batch_without_overlap():
    train = TrainConfig(name="t", gbs=8, mbs=2)
    for step in (1, 2):
        seen = [i for rank in range(2) for micro in range(2) for i in microbatch_indices(step, rank, 2, micro, train)]
        assert sorted(seen) == list(range((step - 1) * 8, step * 8))


def test_data_vocabulary_and_kind_are_checked():
    model = ModelConfig(vocab_size=256)
    with pytest.raises(UserError, match="exceeds"):
        build_stream(DataConfig(name="s", vocab_size=512), model, TrainConfig(name="t"))
    with pytest.raises(UserError, match="needs the tokenizer it was built with"):
        build_stream(DataConfig(name="i", kind="indexed"), model, TrainConfig(name="t"))


def test_schedule_warms_up_linearly_then_follows_the_cosine_to_min_lr():
    opt = OptimizerConfig(name="adamw", lr=1.0, min_lr=0.1)
    train = TrainConfig(name="t", iters=10, warmup_iters=2)
    lrs = [learning_rate(n, opt, train) for n in range(1, 12)]
    assert lrs[:2] == [0.5, 1.0]
    assert lrs[1 + 4] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 4 / 8)))
    assert lrs[9] == pytest.approx(0.1) and lrs[10] == 0.1
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:]))


def test_cpu_probe_measures_a_positive_rate():
    assert cpu_matmul_probe() > 0.1  # GFLOP/s; any CPU running torch does far better
