"""Each invalid layout or override gets its own specific one-line message naming the field."""

from __future__ import annotations

import pytest

from optbench.compose.recipe import compose_run
from optbench.common.errors import Problem, UserError
from optbench.validate import collect_problems


def problems_for(recipe: str, overrides: list[str]) -> list[Problem]:
    try:
        run = compose_run(recipe, overrides)
    except UserError as err:
        return err.problems
    return collect_problems(run)


K, Q, T = "kimi_k2_muon", "qwen3_30b_a3b_adamw", "qwen3_moe_tiny_muon"

INVALID = [
    # (id, recipe, overrides, field, fragment of the message)
    ("world-size", K, ["parallel.pp=3"], "parallel.num_gpus", "not a multiple of tp*pp*cp"),
    (
        "partial-nodes",
        K,
        [
            "parallel.num_gpus=258",
            "parallel.ep=1",
            "parallel.pp=1",
            "parallel.vpp=null",
            "parallel.pipeline_layout=null",
            "model.num_layers=60",
        ],
        "parallel.num_gpus",
        "do not fill whole gb300_nvl72 nodes of 4",
    ),
    ("expert-rule", K, ["parallel.ep=48"], "parallel.ep", "must divide tp*cp*dp"),
    (
        "experts-per-ep",
        Q,
        ["parallel.ep=3", "parallel.num_gpus=12", "train.gbs=516"],
        "parallel.ep",
        "128 experts are not divisible by ep=3",
    ),
    (
        "heads-per-tp",
        Q,
        ["parallel.tp=3", "parallel.num_gpus=24", "parallel.ep=1", "parallel.sequence_parallel=true"],
        "parallel.tp",
        "32 attention heads are not divisible by tp=3",
    ),
    (
        "groups-per-tp",
        Q,
        ["parallel.tp=8", "parallel.ep=1", "parallel.num_gpus=64", "parallel.sequence_parallel=true"],
        "parallel.tp",
        "4 query groups are not divisible by tp=8",
    ),
    (
        "layers-per-stage",
        Q,
        ["parallel.pp=5", "parallel.num_gpus=40", "parallel.ep=1"],
        "parallel.pipeline_layout",
        "48 layers do not split evenly over pp*vpp",
    ),
    (
        "layout-stage-count",
        K,
        ["parallel.vpp=2", "parallel.pipeline_layout=[[embedding,decoder],[decoder,loss]]"],
        "parallel.pipeline_layout",
        "has 2 stages but pp*vpp = 4*2 = 8",
    ),
    (
        "layout-layer-count",
        K,
        ["model.num_layers=60"],
        "parallel.pipeline_layout",
        "places 61 decoder layers but the model has 60",
    ),
    (
        "layout-entry",
        K,
        ["parallel.pipeline_layout.0.0=embeding"],
        "parallel.pipeline_layout.0.0",
        "'embeding' is not one of embedding, decoder, mtp, loss",
    ),
    ("vpp-without-pp", Q, ["parallel.vpp=2"], "parallel.vpp", "need pp > 1"),
    ("gbs-vs-mbs-dp", K, ["train.gbs=4000"], "train.gbs", "not a multiple of mbs*dp = 2*64 = 128"),
    (
        "seq-vs-tp-sp",
        Q,
        ["parallel.tp=2", "parallel.num_gpus=16", "parallel.sequence_parallel=true", "train.seq_length=4095"],
        "train.seq_length",
        "not divisible by tp=2",
    ),
    (
        "seq-vs-cp",
        Q,
        ["parallel.cp=2", "parallel.num_gpus=16", "train.seq_length=4094"],
        "train.seq_length",
        "not divisible by 2*cp=4",
    ),
    (
        "moe-tp-needs-sp",
        Q,
        ["parallel.tp=2", "parallel.num_gpus=16", "parallel.sequence_parallel=false"],
        "parallel.sequence_parallel",
        "requires sequence parallelism",
    ),
    (
        "muon-dist-opt",
        K,
        ["optimizer.use_distributed_optimizer=true", "cluster.container=nemo:26.02.01"],
        "optimizer.use_distributed_optimizer",
        "Muon refuses the element-wise distributed optimizer",
    ),
    (
        "muon-dist-opt-split",
        K,
        ["optimizer.use_distributed_optimizer=true", "cluster.container=nemo:26.08"],
        "optimizer.use_distributed_optimizer",
        "size-balanced layer-wise layout, which Megatron Bridge 0.6.0 does not build",
    ),
    (
        "muon-overlap-gather",
        K,
        ["optimizer.overlap_param_gather=true"],
        "optimizer.overlap_param_gather",
        "parameter all-gather, which Muon does not use",
    ),
    ("muon-fp16", T, ["precision=fp16"], "precision", "Muon does not support fp16"),
    (
        "muon-fp8-param-gather",
        K,
        ["precision.fp8_param_gather=true"],
        "precision.fp8_param_gather",
        "incompatible with the layer-wise Muon optimizer",
    ),
    (
        "muon-simple-on-bridge",
        K,
        ["optimizer.muon.coefficients=simple", "cluster.container=nemo:26.02.01"],
        "optimizer.muon.coefficients",
        "has no muon_coefficient_type: its Megatron Core runs coefficients=quintic only",
    ),
    ("mxfp8-on-hopper", K, ["cluster=h100"], "precision", "mxfp8 needs a Blackwell GPU"),
    (
        "fp8-attention-without-fp8",
        Q,
        ["precision=bf16", "precision.fp8_dot_product_attention=true"],
        "precision.fp8_dot_product_attention",
        "FP8 attention needs an FP8 recipe",
    ),
    ("unknown-key", K, ["parallel.tpp=2"], "parallel.tpp", "unknown key (did you mean tp?)"),
    ("appended-unknown-key", K, ["+train.gbs_typo=3"], "train.gbs_typo", "unknown key"),
    (
        "unknown-section",  # issue 80's spelling of the unverified-container switch
        K,
        ["cluster.container=nemo:26.10.01", "release.unverified=true"],
        "release.unverified",
        "unknown section release (did you mean cluster.unverified_container?)",
    ),
    ("key-of-another-section", K, ["parallel.unverified=1"], "parallel.unverified", "(did you mean cluster.unverified"),
    ("no-lookalike-across-sections", K, ["parallel.ep_size=8"], "parallel.ep_size", "unknown key; parallel has:"),
    ("wrong-type", K, ["parallel.tp=two"], "parallel.tp", "expected an integer, got 'two'"),
    ("null-int", K, ["train.mbs=null"], "train.mbs", "cannot be null"),
    ("unknown-recipe", "kimi_k2_moun", [], "RECIPE", "no recipe 'kimi_k2_moun' (did you mean kimi_k2_muon?)"),
    ("unknown-group-option", K, ["cluster=gb300"], "cluster", "no option 'gb300'"),
    ("bad-enum", K, ["optimizer.muon.tp_mode=sharded"], "optimizer.muon.tp_mode", "'sharded' is not one of"),
    (
        "ns-steps",
        T,
        ["optimizer.muon.ns_steps=0"],
        "optimizer.muon.ns_steps",
        "must be a whole number from 1 to 100, got 0",
    ),
    (
        "ns-steps-quintic",
        T,
        ["optimizer.muon.ns_steps=7"],
        "optimizer.muon.ns_steps",
        "a multiple of 5 with the quintic",
    ),
    (
        "local-engine-model-parallel",
        T,
        ["parallel.tp=2", "parallel.num_gpus=2"],
        "parallel",
        "the local engine runs data parallel only",
    ),
    ("local-engine-fp8", T, ["precision=fp8_cs"], "precision", "the local engine runs bf16/fp32 only"),
    ("indexed-needs-path", K, ["data=indexed"], "data.path", "indexed data needs dataset prefixes"),
    ("preset-label", Q, ["optimizer.name=muon"], "optimizer.name", "choose another with optimizer=<option>"),
    ("sweep-in-plan", K, ["parallel.ep=32,64"], "parallel.ep", "a comma-separated value is a sweep"),
    ("muon-syrk-on-bridge", K, ["optimizer.muon.syrk=true"], "optimizer.muon.syrk", "has a SYRK Newton-Schulz kernel"),
    (
        "flex-needs-backend",
        K,
        ["parallel.moe_flex_dispatcher_backend=null"],
        "parallel.moe_flex_dispatcher_backend",
        "needs a backend",
    ),
    # Found by make plan CHECK=bridge (every single-field override of the Qwen3 recipe through 26.08's real Bridge):
    (
        "expert-bias-softmax",
        Q,
        ["model.moe_router_enable_expert_bias=true"],
        "model.moe_router_enable_expert_bias",
        "needs the sigmoid score function",
    ),
    (
        "moe-recompute-untyped-granularity",
        Q,
        ["parallel.recompute_modules=[moe]"],
        "parallel.recompute_modules",
        "EP-communication overlap refuses recomputing 'moe'",
    ),
    (
        "full-iteration-scope",
        Q,
        ["parallel.cuda_graph_scope=[attn]"],
        "parallel.cuda_graph_scope",
        "a full-iteration CUDA graph takes no per-layer scope",
    ),
    (
        "scope-mlp-all-moe",
        Q,
        ["cluster.container=nemo:26.04.01", "parallel.cuda_graph_scope=[mlp]"],
        "parallel.cuda_graph_scope",
        "every layer of qwen3_30b_a3b is MoE",
    ),
    (
        "scope-moe-no-drop-pad",
        Q,
        ["cluster.container=nemo:26.04.01", "parallel.cuda_graph_scope=[moe]"],
        "parallel.cuda_graph_scope",
        "needs drop-and-pad MoE",
    ),
    (
        "scope-preprocess-alone",
        Q,
        ["cluster.container=nemo:26.04.01", "parallel.cuda_graph_scope=[moe_preprocess]"],
        "parallel.cuda_graph_scope",
        "moe_preprocess is graphed only with moe_router",
    ),
    (
        "scope-moe-and-router",
        Q,
        ["cluster.container=nemo:26.04.01", "parallel.cuda_graph_scope=[moe,moe_router]"],
        "parallel.cuda_graph_scope",
        "moe and moe_router are not graphed together",
    ),
    (
        "fp4-preset-with-fp8",
        Q,
        ["precision.bridge_mixed_precision=bf16_with_nvfp4_mixed"],
        "precision.bridge_mixed_precision",
        "Megatron Core refuses both at once",
    ),
    (
        "local-graphs-on-bridge-0.6",
        Q,
        ["parallel.cuda_graph_impl=local"],
        "parallel.cuda_graph_impl",
        "takes the local CUDA-graph implementation only for full-iteration graphs",
    ),
    # Found by the pairwise override sweep (conformance.py --pairs), then one field away on the AdamW recipe:
    (
        "reuse-without-fp8-params",
        Q,
        ["precision.fp8_param_gather=false"],
        "precision.reuse_grad_buf_for_mxfp8_param_ag",
        "reuses the gradient buffer for the parameter all-gather only",
    ),
    (
        "mxfp8-params-without-reuse",
        "qwen3_30b_a3b_muon",
        ["optimizer.muon.layer_wise=false", "precision.fp8_param_gather=true"],
        "precision.reuse_grad_buf_for_mxfp8_param_ag",
        "requires the reuse with MXFP8 parameters",
    ),
    (
        "delayed-over-current-scaling-preset",
        Q,
        ["precision=fp8_cs", "precision.fp8_recipe=delayed"],
        "precision.fp8_recipe",
        "keeps the first and last layers in BF16",
    ),
    (
        "deepep-under-rank-capacity-preset",
        Q,
        ["cluster=b300", "parallel.moe_flex_dispatcher_backend=deepep"],
        "parallel.moe_flex_dispatcher_backend",
        "runs that cap only with hybridep or ncclep",
    ),
    (
        "overlap-local-graphs-core-0.17",
        "qwen3_30b_a3b_muon",
        ["cluster.container=nemo:26.04.01", "parallel.cuda_graph_impl=local", "parallel.ep_comm_overlap=true"],
        "parallel.cuda_graph_impl",
        "takes CUDA graphs only from transformer_engine",
    ),
    (
        "overlap-mtp-without-pp-core-0.17",
        "deepseek_v3_adamw",
        ["cluster.container=nemo:26.04.01", "parallel.ep_comm_overlap=true", "parallel.pp=1", "parallel.vpp=null"],
        "parallel.pp",
        "with an MTP layer needs pipeline parallelism",
    ),
    (
        "overlap-te-graphs-of-moe",
        Q,
        ["parallel.cuda_graph_impl=transformer_engine", "parallel.cuda_graph_scope=[moe]"],
        "parallel.cuda_graph_scope",
        "EP-communication overlap refuses per-layer CUDA graphs",
    ),
    (
        "mla-up-proj-without-mla",
        Q,
        ["parallel.recompute_granularity=selective", "parallel.recompute_modules=[mla_up_proj]"],
        "parallel.recompute_modules",
        "has none (Megatron Core refuses it)",
    ),
    (
        "delayed-scaling-recomputes-moe-act",
        K,
        ["parallel.recompute_modules=[moe_act]", "precision.fp8_recipe=delayed"],
        "parallel.recompute_modules",
        "moe_act recomputed under delayed FP8 scaling",
    ),
    # Found by the single-field sweep over DeepSeek-V3's recipes (26.08):
    (
        "fp8-output-proj-under-tensorwise",
        "deepseek_v3_adamw",
        ["precision.fp8_recipe=tensorwise"],
        "precision.fp8_output_proj",
        "the FP8 output projection runs only under MXFP8",
    ),
    # Megatron FSDP and NVFP4 (issue 79's Llama rows):
    ("fsdp-with-muon", K, ["parallel.megatron_fsdp=true"], "parallel.megatron_fsdp", "has no FSDP branch"),
    (
        "fsdp-without-distributed-optimizer",
        "llama3_70b_adamw",
        ["parallel.megatron_fsdp=true", "optimizer.use_distributed_optimizer=false"],
        "optimizer.use_distributed_optimizer",
        "always runs the distributed optimizer",
    ),
    ("nvfp4-on-hopper", "llama3_70b_adamw", ["precision=nvfp4", "cluster=h100"], "precision", "FP4 peak"),
    ("fp4-beside-fp8", Q, ["precision.fp4=e2m1"], "precision.fp4", "refuses both at once"),
    (
        "fp4-param-gather-without-fp4",
        Q,
        ["precision.fp4_param_gather=true"],
        "precision.fp4_param_gather",
        "need an FP4 recipe",
    ),
    (
        "fp4-param-gather-before-0.4.2",
        "llama3_70b_adamw",
        ["precision=nvfp4", "precision.fp4_param_gather=true", "cluster.container=nemo:26.04", "intent=train"],
        "precision.fp4_param_gather",
        "has no FP4 parameter all-gather",
    ),
    (
        "precision-aware-adam-without-distributed-optimizer",
        "deepseek_v3_adamw",
        ["optimizer.use_distributed_optimizer=false"],
        "optimizer.use_distributed_optimizer",
        "runs only with the distributed optimizer",
    ),
]


@pytest.mark.parametrize(
    ("recipe", "overrides", "field", "fragment"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
@pytest.mark.slow  # every published row / preset / invalid input: `make test` runs it
def test_invalid_input_gets_its_own_message(recipe: str, overrides: list[str], field: str, fragment: str) -> None:
    problems = problems_for(recipe, overrides)
    matching = [p for p in problems if p.field == field and fragment in p.message]
    assert matching, f"expected '{field}: ...{fragment}...', got {[str(p) for p in problems]}"
    assert all("\n" not in str(p) for p in problems)


@pytest.mark.slow  # every published row / preset / invalid input: `make test` runs it
def test_messages_are_distinct() -> None:
    """No two cases are answered by the same sentence: each failure has its own specific message."""
    messages = set()
    for _, recipe, overrides, field, fragment in INVALID:
        messages |= {str(p) for p in problems_for(recipe, overrides) if p.field == field and fragment in p.message}
    assert len(messages) == len(INVALID)


@pytest.mark.parametrize(
    "overrides",
    [
        ["model.moe_router_enable_expert_bias=true", "model.moe_router_score_function=sigmoid"],
        ["parallel.recompute_modules=[moe]", "parallel.ep_comm_overlap=false"],
        ["parallel.cuda_graph_scope=[attn]", "parallel.cuda_graph_impl=transformer_engine"],
        ["cluster.container=nemo:26.04.01", "parallel.cuda_graph_scope=[moe_router,moe_preprocess]"],
        ["parallel.cuda_graph_impl=local", "cluster.container=nemo:26.06"],
        ["precision.fp8_param_gather=false", "precision.reuse_grad_buf_for_mxfp8_param_ag=false"],
        ["cluster=b300", "parallel.moe_flex_dispatcher_backend=deepep", "cluster.container=nemo:26.04.01"],
    ],
    ids=[
        "expert-bias-sigmoid",
        "moe-recompute-no-overlap",
        "scoped-te-graphs",
        "router-and-preprocess",
        "local-graphs-before-bridge-0.6",
        "no-fp8-params-no-reuse",
        "deepep-before-the-rank-capacity",
    ],
)
def test_the_fix_each_new_bridge_rule_names_passes_it(overrides: list[str]) -> None:
    """What the rules found by CHECK=bridge suggest is accepted (26.08's real Bridge took each: docs/cluster.md)."""
    assert problems_for(Q, overrides) == []


def test_moe_act_recomputed_under_current_scaling_passes_the_delayed_scaling_rule() -> None:
    """Kimi K2 recomputes selectively: moe_act under tensorwise scaling is what the rule suggests, and 26.08's real
    Bridge took it (make plan ... force=true CHECK=bridge, 2026-11-26); without force its memory estimate refuses it."""
    fix = ["parallel.recompute_modules=[moe_act]", "precision.fp8_recipe=tensorwise", "force=true"]
    assert problems_for(K, fix) == []
    assert [p.field for p in problems_for(K, fix[:1] + ["precision.fp8_recipe=delayed", "force=true"])] == [
        "parallel.recompute_modules"
    ]


@pytest.mark.parametrize(
    "overrides",
    [
        ["precision.fp8_output_proj=false", "precision.fp8_recipe=tensorwise"],
        ["precision=fp8_cs"],
    ],
    ids=["output-proj-off-tensorwise", "fp8-cs-group"],
)
def test_deepseek_v3_adamw_takes_what_the_new_rules_suggest(overrides: list[str]) -> None:
    """26.08's real Bridge took each (make plan ... CHECK=bridge, 2026-11-26)."""
    assert problems_for("deepseek_v3_adamw", overrides) == []


def test_adam_without_the_distributed_optimizer_passes_where_the_preset_keeps_fp32_moments() -> None:
    """Qwen3's 26.08 preset turns the precision-aware optimizer off: 26.08's real Bridge took this (2026-11-26)."""
    assert problems_for(Q, ["optimizer.use_distributed_optimizer=false", "force=true"]) == []


def test_muon_without_its_layer_wise_optimizer_keeps_mxfp8_parameters_with_the_reuse_bridge_requires() -> None:
    """What the FP8 parameter rules suggest is accepted (26.08's real Bridge took it: docs/cluster.md)."""
    assert (
        problems_for(
            "qwen3_30b_a3b_muon",
            [
                "optimizer.muon.layer_wise=false",
                "precision.fp8_param_gather=true",
                "precision.reuse_grad_buf_for_mxfp8_param_ag=true",
            ],
        )
        == []
    )


def test_problems_of_one_field_share_its_line_so_the_fix_is_shown_without_debug():
    """Issue 81 item 8: 'and 1 more problem (parallel.ep)' hid the problem that carried the fix (the valid ep
    values)."""
    from optbench.common.errors import Problem, UserError

    err = UserError(
        [
            Problem("parallel.ep", "384 experts are not divisible by ep=7"),
            Problem("optimizer.lr", "must be finite"),
            Problem("parallel.ep", "ep*etp = 7*1 must divide 64; valid ep here: 1, 2, 4, 8, 16, 32, 64"),
        ]
    )
    line, more = err.report()
    assert line == (
        "error: parallel.ep: 384 experts are not divisible by ep=7; also ep*etp = 7*1 must divide 64; valid "
        "ep here: 1, 2, 4, 8, 16, 32, 64"
    )
    assert more == "  and 1 more problem (optimizer.lr); debug=true lists them all"
