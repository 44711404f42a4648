"""NeMo containers and the field names of the Megatron Bridge + Megatron Core each holds, from tagged sources.

For every NeMo container Megatron Bridge's documentation maps to a Bridge release
(``docs/versions1.json``: "0.5.0 · 26.06", with Core, TE and PyTorch from ``docs/releases/software-versions.md``
where that page lists the container), this tool reads, from git mirrors of NVIDIA-NeMo/Megatron-Bridge and
NVIDIA/Megatron-LM:

* Bridge at the release tag (``v0.5.0``) and Megatron Core at the commit that tag pins as its
  ``3rdparty/Megatron-LM`` submodule (the Core Bridge was released and tested against);
* every ConfigContainer section's dataclass fields, bases included (``ast``, nothing imported);
* Muon facts that are not field names, found by markers in the source (layer-wise parameter all-gather
  overlap, size- or cost-balanced layer-wise layouts, whether Bridge builds that layout).

Writes ``src/optbench/data/bridge/containers.json`` and ``src/optbench/data/bridge/fields-<bridge>.json``::

    OPTBENCH_MIRRORS=<folder> python tools/bridge_versions.py   # git mirrors: tools/bridge_sources.py MIRRORS_ENV
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bridge_sources import BRIDGE_REPO, CORE_REPO, Resolver, Source, git, literal  # noqa: E402
from optbench.common.io import atomic_write_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "optbench" / "data" / "bridge"
FIRST_RUNNABLE = "26.02"
"""Older containers (25.11) are kept for their published rows only: our adapter starts at Bridge 0.3."""

SECTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "model_gpt": (("megatron.bridge.models.gpt_provider", "GPTModelProvider"),),
    "model_mla": (
        ("megatron.bridge.models.gpt_provider", "GPTModelProvider"),
        ("megatron.bridge.models.transformer_config", "MLATransformerConfig"),
    ),
    "train": (("megatron.bridge.training.config", "TrainingConfig"),),
    "optimizer": (("megatron.bridge.training.config", "OptimizerConfig"),),
    "ddp": (("megatron.bridge.training.config", "DistributedDataParallelConfig"),),
    "scheduler": (("megatron.bridge.training.config", "SchedulerConfig"),),
    "dataset": (
        ("megatron.bridge.training.config", "GPTDatasetConfig"),
        ("megatron.bridge.training.config", "DataloaderConfig"),
    ),
    "logger": (("megatron.bridge.training.config", "LoggerConfig"),),
    "tokenizer": (("megatron.bridge.training.tokenizers.config", "TokenizerConfig"),),
    "checkpoint": (("megatron.bridge.training.config", "CheckpointConfig"),),
    "rng": (("megatron.bridge.training.config", "RNGConfig"),),
    "dist": (("megatron.bridge.training.config", "DistributedInitConfig"),),
    "rerun_state_machine": (("megatron.bridge.training.config", "RerunStateMachineConfig"),),
    "mixed_precision": (("megatron.bridge.training.mixed_precision", "MixedPrecisionConfig"),),
    "comm_overlap": (("megatron.bridge.training.comm_overlap", "CommOverlapConfig"),),
}
"""ConfigContainer section -> the Bridge classes whose fields (with their Megatron Core bases) it has.
``model`` depends on the architecture: GPT (Qwen3) or multi-latent attention (DeepSeek-V3, Kimi K2)."""

MARKERS: dict[str, tuple[str, str, str]] = {
    "layer_wise_overlap_param_gather": (
        "core",
        "megatron/core/optimizer",
        r"async_allgather=config\.overlap_param_gather|self\.overlap_param_gather = config\.overlap_param_gather",
    ),
    "dist_prefix_deprecated": (
        "core",
        "megatron/core/optimizer/__init__.py",
        r"Handle legacy \"dist_\*\" optimizer names",
    ),
    "layer_wise_size_balanced_layout": (
        "core",
        "megatron/core/optimizer/layer_wise_optimizer.py",
        r"_compute_per_buffer_param_layout",
    ),
    "layer_wise_ns_cost_balanced_layout": (
        "core",
        "megatron/core/optimizer/layer_wise_optimizer.py",
        r"_ns_compute_cost",
    ),
    "bridge_builds_layer_wise_layout": (
        "bridge",
        "src/megatron/bridge",
        r"tag_params_for_buffer_routing|compute_full_param_layout",
    ),
    "kimi_recipe_takes_optimizer_type": (
        "bridge",
        "src/megatron/bridge/recipes/kimi/kimi_k2.py",
        r"optimizer_type: str",
    ),
    "kimi_recipe_reads_hub_config": ("bridge", "src/megatron/bridge/recipes/kimi", r"moonshotai/Kimi-K2-Instruct"),
    "emerging_soap": (
        "core",
        "megatron/core/optimizer/emerging_optimizers.py",
        r"from emerging_optimizers\.soap import SOAP",
    ),
    "emerging_adaptive_muon": (
        "core",
        "megatron/core/optimizer/emerging_optimizers.py",
        r"\"adaptive_muon\": EmergingOptimizerEntry",
    ),
    "muon_scalar_optimizer_routed": (
        "core",
        "megatron/core/optimizer",
        r"override\['optimizer'\] = config\.muon_scalar_optimizer|config\.optimizer = config\.muon_scalar_optimizer",
    ),
    "flex_dispatcher_needs_tp_ep": (
        "core",
        "megatron/core/transformer/moe/token_dispatcher.py",
        r"Flex token dispatcher requires TPxEP > 1",
    ),
    "deepep_dispatcher_needs_tp_ep": (
        "core",
        "megatron/core/transformer/moe/token_dispatcher.py",
        r"DeepEP dispatcher requires TPxEP > 1",
    ),
    "cuda_graph_full_iteration_impl": (
        "core",
        "megatron/core/transformer/transformer_config.py",
        r"cuda_graph_impl == \"full_iteration\"",
    ),
    "ep_overlap_refuses_moe_recompute": (
        "core",
        "megatron/core/transformer/transformer_config.py",
        r"disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm",
    ),
    "local_graphs_full_iteration_only": (
        "bridge",
        "src/megatron/bridge/utils/cuda_graph.py",
        r'cuda_graph_impl="local" only for',
    ),
    "ep_overlap_graphs_te_only": (
        "core",
        "megatron/core/transformer/transformer_config.py",
        r"and CudaGraphScope\.moe not in self\.cuda_graph_scope",
    ),
    "ep_overlap_mtp_needs_pp": (
        "core",
        "megatron/core/transformer/transformer_config.py",
        r"when enabling overlap_moe_expert_parallel_comm with MTP layer",
    ),
    "muon_refuses_dist_optimizer": ("core", "megatron/core/optimizer", r"muon with dist optimizer is not supported"),
    "rank_capacity_needs_hybridep": (
        "core",
        "megatron/core/transformer/transformer_config.py",
        r"moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend",
    ),
}
"""Behaviour that is not a field name (Muon's layer-wise optimizer; what Kimi K2's recipe function takes and reads;
which emerging optimizers Core registers and whether Muon's scalar-optimizer choice reaches the param groups; which
flex-dispatcher backends Core refuses on a single expert rank, whether it refuses recomputing the MoE layer under
EP-communication overlap, whether full_iteration is a CUDA-graph implementation, whether Bridge takes the
local implementation only for full-iteration graphs, whether Core runs the per-rank expert capacity only with
HybridEP or NCCL EP, what its EP-communication overlap asserts of CUDA graphs and MTP, and whether Muon
refuses the element-wise distributed optimizer outright):
(repository, path, regex) whose presence says the release has it."""


def container_map() -> list[dict[str, Any]]:
    """Container -> Bridge release from Bridge's docs/versions1.json at the mirror's HEAD."""
    versions = json.loads(git(BRIDGE_REPO, "show", "HEAD:docs/versions1.json"))
    out = []
    for entry in versions:
        match = re.match(r"([\d.]+)(?: \(latest\))? · ([\d.]+)$", entry.get("name", ""))
        if match:
            out.append({"container": f"nemo:{match.group(2)}", "bridge": match.group(1)})
    return out


def software_versions() -> dict[str, dict[str, str]]:
    """'nemo:26.06' -> {component: version} from docs/releases/software-versions.md (HEAD)."""
    text = git(BRIDGE_REPO, "show", "HEAD:docs/releases/software-versions.md")
    out: dict[str, dict[str, str]] = {}
    current = None
    for line in text.splitlines():
        heading = re.match(r"## NeMo Framework ([\d.]+)", line)
        if heading:
            current = f"nemo:{heading.group(1)}"
            out[current] = {}
        elif current and line.startswith("| ") and not line.startswith("| Software") and "---" not in line:
            cells = [c.strip() for c in line.strip("|").split("|")]
            out[current][cells[0]] = cells[1]
    return out


def core_version(core: Source) -> str:
    text = core.text("megatron/core/package_info.py") or ""
    parts = dict(re.findall(r"^(MAJOR|MINOR|PATCH|PRE_RELEASE) = ['\"]?([\w]*)['\"]?", text, re.M))
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}{parts.get('PRE_RELEASE', '')}"


def sources(bridge_version: str) -> tuple[Source, Source]:
    tag = f"v{bridge_version}"
    commit = git(BRIDGE_REPO, "rev-parse", f"{tag}^{{commit}}").strip()
    pinned = git(BRIDGE_REPO, "ls-tree", commit, "3rdparty/Megatron-LM").split()[2]
    return Source(BRIDGE_REPO, commit, "src/"), Source(CORE_REPO, pinned, "")


def marker(bridge: Source, core: Source, where: tuple[str, str, str]) -> bool:
    repo, path, pattern = where
    source = core if repo == "core" else bridge
    try:
        out = git(source.repo, "grep", "-l", "-E", pattern, source.commit, "--", path)
    except Exception:  # git grep exits 1 when nothing matches
        return False
    return bool(out.strip())


def emerging_optimizers_pin(bridge: Source) -> str | None:
    """The Emerging-Optimizers version Bridge's uv.lock pins (what the container ships; git-only releases)."""
    lock = git(BRIDGE_REPO, "show", f"{bridge.commit}:uv.lock")
    match = re.search(r'\[\[package\]\]\nname = "emerging-optimizers"\nversion = "([^"]+)"', lock)
    return match.group(1) if match else None


def fields_record(bridge_version: str) -> dict[str, Any]:
    bridge, core = sources(bridge_version)
    resolver = Resolver(bridge, core)
    sections: dict[str, list[str]] = {}
    defaults: dict[str, Any] = {}
    for section, classes in SECTIONS.items():
        names: dict[str, Any] = {}
        for module, cls in classes:
            names.update(resolver.fields(module, cls))
        sections[section] = sorted(names)
        if section == "optimizer":
            defaults = {k: literal(v) for k, v in sorted(names.items()) if k.startswith("muon_") or "layer_wise" in k}
    container = resolver.fields("megatron.bridge.training.config", "ConfigContainer")
    return {
        "provenance": {
            "bridge": {"repo": BRIDGE_REPO, "tag": f"v{bridge_version}", "commit": bridge.commit},
            "core": {
                "repo": CORE_REPO,
                "commit": core.commit,
                "version": core_version(core),
                "pinned_by": f"3rdparty/Megatron-LM submodule of Megatron Bridge v{bridge_version}",
            },
            "emerging_optimizers": {
                "version": emerging_optimizers_pin(bridge),
                "pinned_by": f"uv.lock of Megatron Bridge v{bridge_version}",
            },
            "tool": "tools/bridge_versions.py (ast of the dataclasses, bases included; nothing imported)",
        },
        "container_sections": sorted(container),
        "sections": sections,
        "optimizer_defaults": defaults,
        "behaviour": {name: marker(bridge, core, where) for name, where in MARKERS.items()},
    }


def core_main_record() -> dict[str, Any]:
    """Megatron Core's main branch at the mirror's HEAD: options no container holds yet (SYRK, cost balancing)."""
    commit = git(CORE_REPO, "rev-parse", "HEAD").strip()
    core = Source(CORE_REPO, commit, "")
    bridge, _ = sources("0.6.0")
    names = Resolver(bridge, core).fields("megatron.core.optimizer.optimizer_config", "OptimizerConfig")
    return {
        "repo": CORE_REPO,
        "commit": commit,
        "date": git(CORE_REPO, "log", "-1", "--format=%cs", commit).strip(),
        "version": core_version(core),
        "optimizer_fields": sorted(names),
        "optimizer_defaults": {k: literal(v) for k, v in sorted(names.items()) if k.startswith("muon_")},
        "behaviour": {name: marker(bridge, core, where) for name, where in MARKERS.items() if where[0] == "core"},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    components = software_versions()
    bridge_head = git(BRIDGE_REPO, "rev-parse", "HEAD").strip()
    containers = []
    outputs: dict[Path, str] = {}  # written together at the end: a failure leaves every file as it was
    for entry in container_map():
        name, version = entry["container"], entry["bridge"]
        listed = components.get(name, {})
        runnable = tuple(int(x) for x in name.split(":")[1].split(".")) >= tuple(
            int(x) for x in FIRST_RUNNABLE.split(".")
        )
        record = {
            **entry,
            "core": core_version(sources(version)[1]) if runnable else listed.get("Megatron Core"),
            "core_in_container": listed.get("Megatron Core"),
            "transformer_engine": listed.get("Transformer Engine"),
            "pytorch": listed.get("PyTorch"),
            "components_listed": bool(listed),
            "runnable": runnable,
        }
        containers.append(record)
        if runnable:
            data = fields_record(version)
            outputs[args.out / f"fields-{version}.json"] = json.dumps(data, indent=1, sort_keys=True) + "\n"
            print(
                f"{name}: Bridge {version}, Core {data['provenance']['core']['version']}: "
                f"{sum(len(v) for v in data['sections'].values())} fields"
            )
    payload = {
        "provenance": {
            "repo": BRIDGE_REPO,
            "commit": bridge_head,
            "container_to_bridge": "docs/versions1.json ('<bridge> · <container>')",
            "components": "docs/releases/software-versions.md (lists 25.09-26.06; 26.02.01, 26.04.01, 26.06.01 "
            "and 26.08 are not listed there: their Core is the one the Bridge tag pins)",
            "tool": "tools/bridge_versions.py",
        },
        "containers": containers,
        "core_main": core_main_record(),
    }
    outputs[args.out / "containers.json"] = json.dumps(payload, indent=1) + "\n"
    for path, text in outputs.items():
        atomic_write_text(path, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
