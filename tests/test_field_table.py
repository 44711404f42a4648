"""The schema is the one table of fields: every view of a field (domain, readers, Bridge names, preset reading) is
read from it, and every Bridge name it declares is one a container knows and our adapter emits."""

from __future__ import annotations

import dataclasses

import typing
from dataclasses import fields, is_dataclass

import pytest

from optbench.engine.bridge.sections import our_items
from optbench.compose import release_layout
from optbench.compose.recipe import compose_run
from optbench.config import schema
from optbench.config.domains import DOMAINS
from optbench.config.field_spec import EVERYONE, FieldSpec
from optbench.config.field_table import TABLE, bridge_name, preset_fields, spec_of
from optbench.config.overrides import BRIDGE_ONLY, LOCAL_ONLY, SLURM_ONLY
from optbench.releases import versions


def _declared(node: type = schema.RunConfig, prefix: str = "") -> dict[str, object]:
    """Every leaf field as the dataclasses declare it, walked independently of the table."""
    out: dict[str, object] = {}
    hints = typing.get_type_hints(node)
    for f in fields(node):
        nested = next((c for c in (typing.get_args(hints[f.name]) or (hints[f.name],)) if is_dataclass(c)), None)
        out.update(_declared(nested, f"{prefix}{f.name}.") if nested else {f"{prefix}{f.name}": f.metadata.get("spec")})
    return out


def test_every_leaf_field_declares_its_spec_beside_its_type() -> None:
    declared = _declared()
    assert [key for key, spec in declared.items() if not isinstance(spec, FieldSpec)] == []
    assert list(TABLE) == list(declared) and set(DOMAINS) == set(declared)
    assert all(spec.domain is not None for spec in TABLE.values())


def test_engine_scopes_are_the_schemas_readers() -> None:
    assert set(BRIDGE_ONLY) == {k for k, s in TABLE.items() if s.readers == {"megatron_bridge"}}
    assert set(LOCAL_ONLY) == {
        "data.vocab_size",
        "data.valid_seed",
        "train.resume_step",
        "model.norm_topk_prob",
        "model.max_position_embeddings",
    }
    assert "cluster.account" in SLURM_ONLY and "cluster.container" in BRIDGE_ONLY
    assert spec_of("cluster.env.NCCL_DEBUG") is TABLE["cluster.env"] and spec_of("cluster") is None
    assert TABLE["parallel.tp"].readers == EVERYONE


def test_every_declared_bridge_name_is_a_field_of_a_runnable_container() -> None:
    runnable = versions.runnable()
    names = {name for spec in TABLE.values() for name in spec.bridge}
    names |= {spec.renamed_from for spec in TABLE.values() if spec.renamed_from}
    unknown = sorted(name for name in names if not any(versions.has_field(c, name) for c in runnable))
    assert unknown == []


def _emitted(recipe: str, *overrides: str) -> set[str]:
    run = dataclasses.replace(compose_run(recipe, list(overrides)), run_id="field-table")
    return {key for key, _ in our_items(run)}


def test_every_declared_bridge_name_is_emitted_for_some_run(tmp_path) -> None:
    """A field that declares a Bridge name and is never written into Bridge is the bug class of 45867a1."""
    blend = f"data.path=[{tmp_path / 'corpus_text_document'}]"
    emitted = set().union(
        _emitted("kimi_k2_muon"),
        _emitted("kimi_k2_muon", "cluster.container=nemo:26.02"),
        _emitted(
            "kimi_k2_muon",
            "optimizer.muon.qk_clip=true",
            "optimizer.muon.layer_wise=true",
            "optimizer.muon.overlap_param_gather=true",
            "parallel.moe_token_dispatcher=flex",
            "parallel.moe_flex_dispatcher_backend=deepep",
        ),
        _emitted("qwen3_30b_a3b_soap", "cluster.container=nemo:26.08"),
        _emitted("llama31_405b_adamw", "precision=nvfp4"),  # NVIDIA's NVFP4 preset: FP4 fields
        _emitted("llama3_70b_adamw", "parallel.megatron_fsdp=true"),
        _emitted("deepseek_v3_adamw", "cluster.container=nemo:26.08"),  # NVIDIA's MXFP8 preset: FP8 output projection
        _emitted("qwen3_30b_a3b_adaptive_muon", "cluster.container=nemo:26.08", "optimizer.scalar_optimizer=lion"),
        _emitted(
            "qwen3_30b_a3b_adamw",
            "data=indexed",
            blend,
            "data.tokenizer=Qwen/Qwen3-30B-A3B",
            "logger.wandb_entity=team",
            "intent=train",
            "train.eval_interval=50",
        ),
    )
    declared = {name for spec in TABLE.values() for name in spec.bridge}
    declared |= {spec.renamed_from for spec in TABLE.values() if spec.renamed_from}
    assert sorted(declared - emitted) == []


@pytest.mark.parametrize(
    ("container", "name"), [("nemo:26.02", "optimizer.muon_use_nesterov"), ("nemo:26.08", "optimizer.muon_nesterov")]
)
def test_a_renamed_bridge_field_takes_the_containers_name(container: str, name: str) -> None:
    release = versions.containers()[container]
    assert bridge_name("optimizer.muon.nesterov", lambda field: versions.has_field(release, field)) == name


def test_presets_are_read_through_the_declared_bridge_names() -> None:
    every, reproduce = preset_fields("train"), preset_fields("reproduce")
    assert every["model.pipeline_model_parallel_size"] == "parallel.pp"
    assert every["mixed_precision.fp8_param_gather"] == "precision.fp8_param_gather"
    assert (
        set(reproduce) - set(every)
        == set(release_layout.REPRODUCE_FIELDS)
        == {"model.init_method_std", "model.moe_aux_loss_coeff", "optimizer.adam_eps"}
    )
    assert all(ours in TABLE and TABLE[ours].bridge[0] == bridge for bridge, ours in reproduce.items())


NOT_WRITTEN_INTO_BRIDGE = {
    "labels": (
        "recipe",
        "description",
        "model.name",
        "model.proxy_of",
        "parallel.name",
        "precision.name",
        "train.name",
        "data.name",
    ),
    "choose what the adapter starts from (the Bridge recipe, the mixed-precision preset, the MLA fields)": (
        "engine",
        "intent",
        "model.architecture",
        "model.multi_latent_attention",
        "precision.params_dtype",
        "precision.bridge_mixed_precision",
    ),
    "planning and the job around Bridge (world size, folders, run id, flags of the command)": (
        "parallel.num_gpus",
        "train.checkpoint_dir",
        "data.kind",
        "run_id",
        "results_dir",
        "debug",
        "dryrun",
        "force",
        "resume",
        "step_time_s",
        "precision.peak",
        "compare_with",
    ),
    "where the recipe departs from NVIDIA's preset on purpose, and why: the fields the adapter leaves as ours": (
        "preset_departures",
        "preset_kept",
    ),
    "refused on Megatron Bridge unless left at the default (validation names the engine that has it)": (
        "optimizer.muon.assignment",
        "optimizer.muon.syrk",
    ),
}
"""Fields a Bridge run reads that are not a Bridge field of their own, each group with the reason."""


def test_a_field_bridge_reads_is_written_into_bridge_or_has_a_reason() -> None:
    """A new field that Bridge runs accept must name its Bridge field, or say here why it needs none; otherwise a
    typed value would be silently ignored by the job (a field only the local engine reads declares readers=LOCAL)."""
    reasoned = {key for keys in NOT_WRITTEN_INTO_BRIDGE.values() for key in keys}
    unwritten = {
        key
        for key, spec in TABLE.items()
        if "megatron_bridge" in spec.readers and not spec.bridge and not key.startswith(("cluster.", "logger."))
    }  # the job and its logging around Bridge
    assert sorted(unwritten - reasoned) == [] and sorted(reasoned - unwritten) == []
