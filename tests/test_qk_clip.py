"""MuonClip's QK-clip on the local engine: it bounds the attention logits exactly as Megatron's rule says."""

from __future__ import annotations

import pytest
import torch

from optbench.compose.recipe import compose_run
from optbench.engine.local import launch_local
from optbench.engine.local.model import build_model
from optbench.engine.local.qk_clip import MAX_LOGIT, _attentions, clip_qk, register_attention
from optbench.metrics import read_metrics
from optbench.resolve import resolve
from conftest import MICRO_KIMI, MICRO_VOCAB
from test_engine_runs import MICRO_TRAIN


def _logits(model, tokens) -> list[torch.Tensor]:
    with torch.no_grad():
        model(input_ids=tokens)
    found = [getattr(a, MAX_LOGIT).clone() for a in _attentions(model)]
    for attention in _attentions(model):
        setattr(attention, MAX_LOGIT, None)
    return found


@pytest.mark.parametrize("q_lora", [True, False])
def test_clipping_brings_every_heads_max_logit_down_to_the_threshold_and_leaves_the_others(q_lora):
    run = compose_run("kimi_k2_tiny_muon", [] if q_lora else ["model.q_lora_rank=null"])
    model = build_model(run.model, seed=0, attention=register_attention())
    with torch.no_grad():  # larger query/key weights: logits well above a threshold on some heads
        for attention in _attentions(model):
            (attention.q_b_proj if q_lora else attention.q_proj).weight.mul_(4.0)
            attention.kv_b_proj.weight.mul_(4.0)
    tokens = torch.randint(0, run.model.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    before = _logits(model, tokens)
    threshold = float(torch.cat(before).median())
    assert any(bool((b > threshold).any()) for b in before) and any(bool((b <= threshold).any()) for b in before)
    model(input_ids=tokens)  # a training forward records the step's maxima
    largest = clip_qk(model, threshold, alpha=0.5)
    assert largest == pytest.approx(float(torch.cat(before).max()), rel=1e-5)
    after = _logits(model, tokens)
    # The first layer sees the same inputs again: each head's maximum is now min(before, threshold) exactly
    # (later layers see inputs changed by the clipped layers before them).
    expected = torch.minimum(before[0], torch.full_like(before[0], threshold))
    assert torch.allclose(after[0], expected, rtol=1e-4), (before[0], after[0])


def test_gqa_clipping_scales_each_query_group_by_its_largest_heads_eta():
    """Megatron's GQA rule: eta_g = min(tau / max over the group's heads, 1); every logit of the group times eta_g."""
    run = compose_run("qwen3_moe_tiny_muon", ["model.qk_layernorm=false"])
    model = build_model(run.model, seed=0, attention=register_attention())
    with torch.no_grad():
        for attention in _attentions(model):
            attention.q_proj.weight.mul_(4.0)
            attention.k_proj.weight.mul_(4.0)
    tokens = torch.randint(0, run.model.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    before = _logits(model, tokens)
    groups = run.model.num_query_groups
    threshold = float(before[0].view(groups, -1).amax(dim=1).min())  # one group at the threshold, the others above
    model(input_ids=tokens)
    clip_qk(model, threshold, alpha=0.3)
    after = _logits(model, tokens)
    eta = torch.clamp(threshold / before[0].view(groups, -1).amax(dim=1), max=1.0)
    expected = before[0] * eta.repeat_interleave(before[0].numel() // groups)
    assert torch.allclose(after[0], expected, rtol=1e-4), (before[0], after[0])
    assert float(after[0].max()) == pytest.approx(threshold, rel=1e-4) and bool((eta < 1).any())


@pytest.mark.slow  # several seconds: `make test` runs it
def test_a_run_with_qk_clip_records_and_bounds_the_logits(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run = compose_run(
        "kimi_k2_tiny_muon",
        [
            *MICRO_KIMI,
            *MICRO_VOCAB,
            *MICRO_TRAIN,
            f"results_dir={tmp_path}",
            "logger=none",
            "optimizer.muon.qk_clip=true",
            "optimizer.muon.qk_clip_threshold=0.05",
        ],
    )
    records = read_metrics(launch_local(run) / "metrics.jsonl")
    logits = [r["max_attention_logit"] for r in records]
    assert len(logits) == 4 and logits[0] > 0.05  # the first step's logits exceed the threshold and get clipped
    assert max(logits[1:]) < logits[0]


def test_qk_clip_is_refused_where_it_means_nothing_and_reaches_bridge_where_it_exists():
    from optbench.engine.bridge.adapter import bridge_overrides
    from optbench.common.errors import UserError
    from optbench.validate import validate

    with pytest.raises(UserError, match="uses GQA with QK-norm, which normalises them again, so no logit changes"):
        validate(compose_run("qwen3_moe_tiny_muon", ["optimizer.muon.qk_clip=true"]))
    validate(compose_run("qwen3_moe_tiny_muon", ["optimizer.muon.qk_clip=true", "model.qk_layernorm=false"]))
    overrides = bridge_overrides(
        resolve(compose_run("kimi_k2_muon", ["optimizer.muon.qk_clip=true", "optimizer.muon.qk_clip_threshold=50"])).run
    )
    assert {"model.qk_clip=true", "model.qk_clip_threshold=50.0", "model.qk_clip_alpha=0.5"} <= set(overrides)
    assert not any(
        o.startswith("model.qk_clip") for o in bridge_overrides(resolve(compose_run("kimi_k2_muon", [])).run)
    )
