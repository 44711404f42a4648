"""Validation rules of the parallel layout: tensor, expert and pipeline parallelism, and the batch.

They need a whole-number data-parallel size, so :mod:`optbench.validate` runs them only after the
world-size rule holds. Each problem lists the fields that decide it as ``related``.
"""

from __future__ import annotations

from collections.abc import Iterable

from optbench.config.layout import vpp_size
from optbench.compose.pipeline import max_virtual_stages
from optbench.config.schema import RunConfig
from optbench.common.errors import Problem

PARALLEL_SIZES = ("parallel.num_gpus", "parallel.tp", "parallel.pp", "parallel.cp")
"""The fields that decide the data-parallel size."""


def _dp(run: RunConfig) -> int:
    p = run.parallel
    return p.num_gpus // (p.tp * p.pp * p.cp)


def check_tensor_parallel(run: RunConfig) -> Iterable[Problem]:
    p, m = run.parallel, run.model
    if m.num_attention_heads % p.tp:
        yield Problem(
            "parallel.tp",
            f"{m.num_attention_heads} attention heads are not divisible by tp={p.tp}",
            ("model.num_attention_heads",),
        )
    if m.num_query_groups and m.num_query_groups % p.tp:
        yield Problem(
            "parallel.tp",
            f"{m.num_query_groups} query groups are not divisible by tp={p.tp}",
            ("model.num_query_groups",),
        )
    if m.first_k_dense_layers and m.ffn_hidden_size % p.tp:
        yield Problem(
            "parallel.tp",
            f"dense FFN width {m.ffn_hidden_size} is not divisible by tp={p.tp}",
            ("model.ffn_hidden_size",),
        )
    if m.num_moe_experts and m.moe_ffn_hidden_size and m.moe_ffn_hidden_size % p.etp:
        yield Problem(
            "parallel.etp",
            f"expert FFN width {m.moe_ffn_hidden_size} is not divisible by etp={p.etp}",
            ("model.moe_ffn_hidden_size",),
        )
    seq = run.train.seq_length
    if p.sequence_parallel and p.tp > 1 and seq % p.tp:
        yield Problem(
            "train.seq_length",
            f"{seq} is not divisible by tp={p.tp} under sequence parallelism",
            ("parallel.tp", "parallel.sequence_parallel"),
        )
    if p.cp > 1 and seq % (2 * p.cp):
        yield Problem(
            "train.seq_length",
            f"{seq} is not divisible by 2*cp={2 * p.cp} (load-balanced causal context parallelism)",
            ("parallel.cp",),
        )
    if p.sequence_parallel and p.tp == 1 and run.engine == "megatron_bridge":
        # Core's ModelParallelConfig raises; Bridge from 0.4 (nemo:26.04) switches it off in finalize() before Core
        # sees it. Refused in every release: the plan would record sequence parallelism the job never runs.
        yield Problem(
            "parallel.sequence_parallel",
            "sequence parallelism needs tensor parallelism (tp=1): Megatron Core refuses it and Megatron Bridge from "
            "0.4 turns it off silently; set parallel.sequence_parallel=false",
            ("parallel.tp",),
        )
    if m.num_moe_experts and p.tp > 1 and p.ep > 1 and not p.sequence_parallel:
        yield Problem(
            "parallel.sequence_parallel",
            "Megatron requires sequence parallelism for MoE with tp > 1 and ep > 1; set "
            "parallel.sequence_parallel=true",
            ("parallel.tp", "parallel.ep"),
        )


def check_experts(run: RunConfig) -> Iterable[Problem]:
    p, m = run.parallel, run.model
    if not m.num_moe_experts:
        if p.ep > 1 or p.etp > 1:
            yield Problem(
                "parallel.ep",
                f"model {m.name} has no experts; set parallel.ep=1 parallel.etp=1",
                ("parallel.etp", "model"),
            )
        return
    if m.num_moe_experts % p.ep:
        yield Problem(
            "parallel.ep", f"{m.num_moe_experts} experts are not divisible by ep={p.ep}", ("model.num_moe_experts",)
        )
    dense_ranks = p.tp * p.cp * _dp(run)
    if dense_ranks % (p.ep * p.etp):
        options = [
            e
            for e in range(1, min(dense_ranks, m.num_moe_experts) + 1)
            if dense_ranks % (e * p.etp) == 0 and m.num_moe_experts % e == 0
        ]
        yield Problem(
            "parallel.ep",
            f"ep*etp = {p.ep}*{p.etp} must divide tp*cp*dp = {p.tp}*{p.cp}*{_dp(run)} = {dense_ranks} "
            f"(Megatron's expert layout rule); valid ep here: {', '.join(map(str, options)) or 'none with this etp'}",
            ("parallel.etp", *PARALLEL_SIZES),
        )


def check_pipeline(run: RunConfig) -> Iterable[Problem]:
    p, m = run.parallel, run.model
    vpp = vpp_size(run)
    stage_fields = ("parallel.pp", "parallel.vpp", "model.num_layers")
    if p.vpp is not None and p.vpp > 1 and p.pp == 1:
        yield Problem(
            "parallel.vpp",
            "virtual pipeline stages need pp > 1; set parallel.vpp=null or raise parallel.pp",
            ("parallel.pp",),
        )
    stages = p.pp * vpp
    if stages > max_virtual_stages(run):
        yield Problem(
            "parallel.pp",
            f"pp*vpp = {p.pp}*{vpp} = {stages} virtual stages for {m.num_layers} decoder layers: at most "
            f"{max_virtual_stages(run)} stages can each hold something; lower parallel.pp or parallel.vpp",
            stage_fields,
        )
        return
    layout = p.pipeline_layout
    if not layout:
        if m.num_layers % stages:
            yield Problem(
                "parallel.pipeline_layout",
                f"{m.num_layers} layers do not split evenly over pp*vpp = {p.pp}*{vpp} = {stages} stages; "
                "give a parallel.pipeline_layout that places every layer once, or change pp/vpp",
                stage_fields,
            )
        return
    if len(layout) != stages:
        yield Problem(
            "parallel.pipeline_layout",
            f"has {len(layout)} stages but pp*vpp = {p.pp}*{vpp} = {stages}; give one per stage",
            stage_fields,
        )
    entries = [e for stage in layout for e in stage]
    decoders = entries.count("decoder")
    if decoders != m.num_layers:
        yield Problem(
            "parallel.pipeline_layout",
            f"places {decoders} decoder layers but the model has {m.num_layers}; place every layer exactly once",
            ("model.num_layers",),
        )
    if entries.count("embedding") != 1 or "embedding" not in layout[0]:
        yield Problem("parallel.pipeline_layout", "needs exactly one 'embedding', in the first stage")
    if entries.count("loss") != 1 or "loss" not in layout[-1]:
        yield Problem("parallel.pipeline_layout", "needs exactly one 'loss', in the last stage")
    if entries.count("mtp") != m.mtp_num_layers or any("mtp" in stage for stage in layout[:-1]):
        yield Problem(
            "parallel.pipeline_layout",
            f"needs {m.mtp_num_layers} 'mtp' entries (model.mtp_num_layers), all in the last stage",
            ("model.mtp_num_layers",),
        )


def check_batch(run: RunConfig) -> Iterable[Problem]:
    t, dp = run.train, _dp(run)
    if t.gbs % (t.mbs * dp):
        yield Problem(
            "train.gbs",
            f"{t.gbs} is not a multiple of mbs*dp = {t.mbs}*{dp} = {t.mbs * dp}; "
            f"use e.g. train.gbs={max(1, t.gbs // (t.mbs * dp)) * t.mbs * dp}",
            ("train.mbs", *PARALLEL_SIZES),
        )
