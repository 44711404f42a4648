"""Multi-process checks on gloo: tensor-parallel Newton-Schulz modes and the layer-wise distributed optimizer.

One spawn per world size (2 and 4 processes, one torch thread each, a file store in a temporary
directory and the loopback interface, so no port can collide) runs every check and saves what it
found; the tests below assert on it. The single-process references are computed in this process.
"""

from __future__ import annotations

import copy
import io
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from optbench.config.schema import MuonConfig, OptimizerConfig
from optbench.optim import build_optimizer, mark_qkv
from optbench.optim.muon import Muon
from optbench.optim.newton_schulz import newton_schulz
from optbench.optim.tensor_parallel import newton_schulz_tp

STEPS = 5
SHAPES = [(48, 24), (24, 48), (3, 32, 48)]
LAYER_WISE_ATOL = 2e-5
"""Layer-wise vs single process: the gradients differ only by the order of float sums (an all-reduce of
per-rank means vs one mean over the whole batch), ~1e-7 relative, which five Newton-Schulz steps and
five optimizer steps amplify to ~1e-6 on weights of size ~0.1-1."""


class TinyMoE(nn.Module):
    """Embedding, fused QKV (2 query groups), projection with bias, 3-D expert stacks, router, norm, head."""

    def __init__(self, vocab: int = 64, hidden: int = 32, experts: int = 4, ffn: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.qkv = nn.Linear(hidden, 2 * (16 + 8 + 8), bias=False)
        mark_qkv(self.qkv.weight, (16, 8, 8))
        self.proj = nn.Linear(32, hidden)
        self.router = nn.Linear(hidden, experts, bias=False)
        self.experts_up = nn.Parameter(torch.randn(experts, 2 * ffn, hidden) * 0.1)
        self.experts_down = nn.Parameter(torch.randn(experts, hidden, ffn) * 0.1)
        self.norm = nn.RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        q, k, v = self.qkv(h).split([32, 16, 16], dim=-1)
        h = h + self.proj(torch.tanh(q) * torch.cat([k, v], dim=-1))
        weights = torch.softmax(self.router(h), dim=-1)
        gate, up = torch.einsum("bth,efh->btef", h, self.experts_up).chunk(2, dim=-1)
        out = torch.einsum("btef,ehf->bteh", nn.functional.silu(gate) * up, self.experts_down)
        h = h + (weights.unsqueeze(-1) * out).sum(dim=-2)
        return self.lm_head(self.norm(h))


def _model() -> TinyMoE:
    torch.manual_seed(0)
    return TinyMoE()


def _tokens(step: int, rank: int) -> torch.Tensor:
    return torch.randint(0, 64, (4, 8), generator=torch.Generator().manual_seed(1000 * step + rank))


def _config(assignment: str = "pingpong", layer_wise: bool = True) -> OptimizerConfig:
    muon = MuonConfig(fp32_matmul_prec="highest", assignment=assignment, layer_wise=layer_wise)
    return OptimizerConfig(name="muon", lr=0.02, weight_decay=0.1, clip_grad=1.0, muon=muon)


def _train(model, optimizer, steps, batch_of_step) -> None:
    for step in steps:
        logits = model(batch_of_step(step))
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch_of_step(step).roll(-1, 1).flatten())
        loss.backward()
        optimizer.reduce_gradients()
        optimizer.clip_grad_norm_(1.0)
        optimizer.step()
        optimizer.zero_grad()


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


# ----------------------------------------------------------------------------- worker (one process per rank)


def _worker(rank: int, world: int, folder: str) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world)
    try:
        found = {"tp": _tp_checks(rank, world), "layer_wise": {}}
        for policy in ("pingpong", "cost_aware"):
            found["layer_wise"][policy] = _layer_wise_checks(rank, world, policy)
        torch.save(found, f"{folder}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _tp_checks(rank: int, world: int) -> dict:
    out = {}
    for shape in SHAPES:
        full = torch.randn(shape, generator=torch.Generator().manual_seed(7))
        reference = newton_schulz(full, 5, "quintic")
        for partition_dim in (0, 1):
            axis = full.ndim - 2 + partition_dim
            shard = full.chunk(world, dim=axis)[rank].contiguous()
            results = {
                mode: newton_schulz_tp(
                    shard, 5, "quintic", tp_group=dist.group.WORLD, partition_dim=partition_dim, mode=mode
                )
                for mode in ("duplicated", "distributed", "blockwise")
            }
            out[(shape, partition_dim)] = {
                "reference_shard": reference.chunk(world, dim=axis)[rank],
                "local_ns": newton_schulz(shard, 5, "quintic"),
                **results,
            }
    out["muon"] = _tp_muon_checks(rank, world)
    return out


def _tp_muon_checks(rank: int, world: int) -> dict:
    """Muon on tensor-parallel shards: the updated shard after three steps, per mode and partition dim."""
    found = {}
    full = torch.randn(48, 32, generator=torch.Generator().manual_seed(11))
    grads = torch.randn(3, 48, 32, generator=torch.Generator().manual_seed(12))
    for mode in ("duplicated", "distributed", "blockwise"):
        for partition_dim in (0, 1):
            shard = nn.Parameter(full.chunk(world, dim=partition_dim)[rank].clone())
            opt = Muon(
                [{"params": [shard], "partition_dim": partition_dim}],
                lr=0.05,
                weight_decay=0.1,
                tp_mode=mode,
                tp_group=dist.group.WORLD,
                fp32_matmul_prec="highest",
            )
            for g in grads:
                shard.grad = g.chunk(world, dim=partition_dim)[rank].clone()
                opt.step()
            found[(mode, partition_dim)] = shard.detach().clone()
    return found


def _layer_wise_checks(rank: int, world: int, policy: str) -> dict:
    counts = {"all_reduce": 0, "all_gather": 0}
    originals = {name: getattr(dist, name) for name in counts}

    def counting(name):
        def call(*args, **kwargs):
            counts[name] += 1
            return originals[name](*args, **kwargs)

        return call

    model = _model()
    optimizer = build_optimizer(model, _config(policy), dp_group=dist.group.WORLD)
    batch = lambda step: _tokens(step, rank)  # noqa: E731
    for name in counts:
        setattr(dist, name, counting(name))
    try:
        _train(model, optimizer, range(3), batch)
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
    saved_model = copy.deepcopy(model.state_dict())
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    owned = len(optimizer.muon.state if optimizer.muon else {}) + len(optimizer.adamw.state if optimizer.adamw else {})
    _train(model, optimizer, range(3, STEPS), batch)

    resumed = _model()
    resumed.load_state_dict(saved_model)
    resumed_optimizer = build_optimizer(resumed, _config(policy), dp_group=dist.group.WORLD)
    buffer.seek(0)
    resumed_optimizer.load_state_dict(torch.load(buffer, weights_only=True))
    _train(resumed, resumed_optimizer, range(3, STEPS), batch)
    return {
        "weights": _weights(model),
        "resumed": _weights(resumed),
        "owners": optimizer.sharding.owner_of_name,
        "owned_state": owned,
        "collectives_per_step": {name: count / 3 for name, count in counts.items()},
    }


@pytest.fixture(scope="module", params=[2, 4], ids=["2procs", "4procs"])
def spawned(request, tmp_path_factory):
    """What every rank found, for one world size: a list indexed by rank."""
    world = request.param
    folder = tmp_path_factory.mktemp(f"gloo{world}")
    mp.spawn(_worker, args=(world, str(folder)), nprocs=world, join=True)
    return world, [torch.load(folder / f"rank{r}.pt", weights_only=False) for r in range(world)]


# ----------------------------------------------------------------------------- tensor-parallel Newton-Schulz

# Starts gloo process groups (`make test-fast` skips it); on one xdist worker, so that each world size's spawn
# (10-20 s on 2 cores) runs once, not once per worker.
pytestmark = [pytest.mark.timeout(240), pytest.mark.slow, pytest.mark.xdist_group("gloo-spawned")]


def test_distributed_equals_duplicated_equals_full_newton_schulz(spawned):
    _, ranks = spawned
    for found in ranks:
        for key, result in found["tp"].items():
            if key == "muon":
                continue
            torch.testing.assert_close(result["duplicated"], result["reference_shard"], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(result["distributed"], result["duplicated"], rtol=1e-4, atol=2e-5)


def test_blockwise_is_newton_schulz_of_each_shard(spawned):
    _, ranks = spawned
    for found in ranks:
        for key, result in found["tp"].items():
            if key == "muon":
                continue
            assert torch.equal(result["blockwise"], result["local_ns"])
            assert (result["blockwise"] - result["reference_shard"]).abs().max() > 1e-2, "blockwise depends on t"


def test_tensor_parallel_muon_matches_single_process(spawned):
    """Duplicated/distributed: the shard of single-process Muon on the full matrix (full-shape scale).
    Blockwise: single-process Muon on the shard alone (local-shape scale, as Megatron)."""
    world, ranks = spawned
    full = torch.randn(48, 32, generator=torch.Generator().manual_seed(11))
    grads = torch.randn(3, 48, 32, generator=torch.Generator().manual_seed(12))
    whole = nn.Parameter(full.clone())
    opt = Muon([whole], lr=0.05, weight_decay=0.1, fp32_matmul_prec="highest")
    for g in grads:
        whole.grad = g.clone()
        opt.step()
    for rank, found in enumerate(ranks):
        for partition_dim in (0, 1):
            expected = whole.detach().chunk(world, dim=partition_dim)[rank]
            for mode in ("duplicated", "distributed"):
                torch.testing.assert_close(found["tp"]["muon"][(mode, partition_dim)], expected, rtol=1e-4, atol=1e-5)
            local = nn.Parameter(full.chunk(world, dim=partition_dim)[rank].clone())
            local_opt = Muon([local], lr=0.05, weight_decay=0.1, fp32_matmul_prec="highest")
            for g in grads:
                local.grad = g.chunk(world, dim=partition_dim)[rank].clone()
                local_opt.step()
            torch.testing.assert_close(found["tp"]["muon"][("blockwise", partition_dim)], local.detach())


# ----------------------------------------------------------------------------- layer-wise distributed optimizer


def _single_process_weights(world: int, policy: str) -> dict[str, torch.Tensor]:
    model = _model()
    optimizer = build_optimizer(model, _config(policy))
    assert optimizer.sharding is None
    _train(model, optimizer, range(STEPS), lambda step: torch.cat([_tokens(step, r) for r in range(world)]))
    return _weights(model)


@pytest.mark.parametrize("policy", ["pingpong", "cost_aware"])
def test_layer_wise_equals_single_process_after_five_steps(spawned, policy):
    world, ranks = spawned
    expected = _single_process_weights(world, policy)
    for found in ranks:
        weights = found["layer_wise"][policy]["weights"]
        for name, value in expected.items():
            torch.testing.assert_close(weights[name], value, rtol=0, atol=LAYER_WISE_ATOL, msg=name)


@pytest.mark.parametrize("policy", ["pingpong", "cost_aware"])
def test_layer_wise_ownership_state_and_collectives(spawned, policy):
    world, ranks = spawned
    owners = ranks[0]["layer_wise"][policy]["owners"]
    assert all(found["layer_wise"][policy]["owners"] == owners for found in ranks), "every rank agrees"
    assert set(owners) == {n for n, _ in _model().named_parameters()}
    per_rank = [sum(1 for o in owners.values() if o == r) for r in range(world)]
    assert [found["layer_wise"][policy]["owned_state"] for found in ranks] == per_rank, "state only for owned params"
    for found in ranks:
        assert found["layer_wise"][policy]["collectives_per_step"] == {"all_reduce": 1, "all_gather": 1}


@pytest.mark.parametrize("policy", ["pingpong", "cost_aware"])
def test_layer_wise_state_dict_round_trip_resumes_identically(spawned, policy):
    _, ranks = spawned
    for found in ranks:
        run = found["layer_wise"][policy]
        for name, value in run["weights"].items():
            assert torch.equal(run["resumed"][name], value), name


def test_pingpong_owners_follow_megatron():
    """Sorted by numel (stable, Muon's parameters listed first), dealt 0, 1, 1, 0, ... over 2 ranks."""
    model = _model()
    from optbench.optim.layer_wise import assign_owners, param_work
    from optbench.optim.routing import megatron_order, route_parameters

    routes = megatron_order(route_parameters(model))
    owners = assign_owners(param_work(routes, 5, True), 2, "pingpong")
    by_size = sorted(range(len(routes)), key=lambda i: routes[i].param.numel())
    assert [owners[i] for i in by_size] == [[0, 1, 1, 0][k % 4] for k in range(len(routes))]


def test_single_process_state_dict_round_trip():
    model = _model()
    optimizer = build_optimizer(model, _config(layer_wise=False))
    batch = lambda step: _tokens(step, 0)  # noqa: E731
    _train(model, optimizer, range(3), batch)
    saved_model, buffer = copy.deepcopy(model.state_dict()), io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    _train(model, optimizer, range(3, STEPS), batch)
    resumed = _model()
    resumed.load_state_dict(saved_model)
    resumed_optimizer = build_optimizer(resumed, _config(layer_wise=False))
    buffer.seek(0)
    resumed_optimizer.load_state_dict(torch.load(buffer, weights_only=True))
    _train(resumed, resumed_optimizer, range(3, STEPS), batch)
    for name, value in _weights(model).items():
        assert torch.equal(_weights(resumed)[name], value), name
    assert all(s["momentum_buffer"].dtype == torch.float32 for s in resumed_optimizer.muon.state.values())
    other = build_optimizer(_model(), OptimizerConfig(name="adamw", lr=0.02))
    with pytest.raises(ValueError, match="optimizer state is for 'muon'"):
        other.load_state_dict(optimizer.state_dict())
