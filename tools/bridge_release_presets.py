"""NVIDIA's layout and performance settings per Megatron Bridge release, read statically from the tagged source.

``tools/nvidia_presets.py`` executes NVIDIA's launcher for Bridge 0.3.1 (the release our conformance
environment installs). Later releases need other Bridge, Core and transformers versions than the package
registry serves, so for them this tool reads what NVIDIA's performance launcher applies, without running it:

* Bridge 0.3.x-0.5.x: ``scripts/performance/configs/<family>/<family>_workload_base_configs.py``, the
  ``WorkloadBaseConfig`` of each model/GPU/precision (``replace(BASE, ...)`` chains evaluated; field
  defaults from ``scripts/performance/utils/utils.py``). ``set_workload_base_configs`` applies them.
* Bridge 0.6.0: the flat recipes ``src/megatron/bridge/perf_recipes/<family>/<gpu>/<model>.py``, one function
  per case whose body assigns ``cfg.<section>.<field> = <value>``; literal assignments are read, calls to
  shared helpers (``_benchmark_common(cfg)``) are listed by name.

What this gives per case: the parallel layout, GBS/MBS, CUDA graphs, recompute, MoE dispatcher backend,
pipeline layout string and the other switches of the workload. What it does not give: the fields that
NVIDIA's common code sets for every case (fusions, GC, RNG tracker), which only executing that code shows.
A test checks the 0.3.1 layouts read this way against ``presets-0.3.1.json`` (executed).

    python tools/bridge_release_presets.py        # writes src/optbench/data/bridge/release-presets.json
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bridge_sources import BRIDGE_REPO, Source, git  # noqa: E402
from optbench.io import atomic_write_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "optbench" / "data" / "bridge" / "release-presets.json"
RELEASES = ("0.3.0", "0.3.1", "0.4.0", "0.4.2", "0.5.0", "0.5.1", "0.6.0")
MODELS = {"kimi_k2": ("kimi", "KIMI_K2", "kimi_k2"), "qwen3_30b_a3b": ("qwen", "QWEN3_30B_A3B", "qwen3_moe"),
          "deepseek_v3": ("deepseek", "DEEPSEEK_V3", "deepseek_v3")}
"""Our model -> (NVIDIA's family folder, workload constant prefix, perf-recipe module)."""
WORKLOAD_FILES = {"kimi": "kimi_workload_base_configs.py", "qwen": "qwen3_workload_base_configs.py",
                  "deepseek": "deepseek_workload_base_configs.py"}
GPUS = ("gb300", "gb200", "b300", "b200", "h100")
PRECISIONS = {"bf16": ("BF16", "bf16"), "fp8_cs": ("FP8_CS", "fp8cs"), "mxfp8": ("FP8_MX", "fp8mx")}
"""Our precision -> (workload constant suffix, perf-recipe function part)."""
OPTIMIZERS = {"kimi_k2": ("muon", "adam")}

WORKLOAD_TO_FIELD = {
    "tensor_model_parallel_size": "model.tensor_model_parallel_size",
    "pipeline_model_parallel_size": "model.pipeline_model_parallel_size",
    "context_parallel_size": "model.context_parallel_size",
    "virtual_pipeline_model_parallel_size": "model.virtual_pipeline_model_parallel_size",
    "expert_model_parallel_size": "model.expert_model_parallel_size",
    "expert_tensor_parallel_size": "model.expert_tensor_parallel_size",
    "global_batch_size": "train.global_batch_size",
    "micro_batch_size": "train.micro_batch_size",
    "cuda_graph_impl": "model.cuda_graph_impl",
    "cuda_graph_scope": "model.cuda_graph_scope",
    "recompute_modules": "model.recompute_modules",
    "recompute_num_layers": "model.recompute_num_layers",
    "moe_flex_dispatcher_backend": "model.moe_flex_dispatcher_backend",
    "pp_layout": "model.pipeline_model_parallel_layout",
}
"""WorkloadBaseConfig field -> the ConfigContainer field ``set_workload_base_configs`` sets from it."""


class Evaluator:
    """Module-level ``NAME = WorkloadBaseConfig(...)`` / ``replace(BASE, ...)`` / ``NAME = OTHER`` statements."""

    def __init__(self, defaults: dict[str, Any]):
        self.defaults = defaults
        self.env: dict[str, Any] = {}

    def value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Name) and node.id in self.env:
            return self.env[node.id]
        try:
            return ast.literal_eval(node)
        except (ValueError, SyntaxError):
            return ast.unparse(node)

    def run(self, tree: ast.Module) -> dict[str, dict[str, Any]]:
        for stmt in tree.body:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
                continue
            name, node = stmt.targets[0].id, stmt.value
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "WorkloadBaseConfig":
                self.env[name] = {**self.defaults, **{k.arg: self.value(k.value) for k in node.keywords}}
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "replace" and node.args:
                base = self.value(node.args[0])
                if isinstance(base, dict):
                    self.env[name] = {**base, **{k.arg: self.value(k.value) for k in node.keywords}}
            elif isinstance(node, ast.Name) and isinstance(self.env.get(node.id), dict):
                self.env[name] = self.env[node.id]
            else:
                self.env[name] = self.value(node)
        return {k: v for k, v in self.env.items() if isinstance(v, dict)}


def workload_defaults(source: Source) -> dict[str, Any]:
    tree = source.tree("scripts/performance/utils/utils.py")
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "WorkloadBaseConfig":
            out = {}
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                    try:
                        out[stmt.target.id] = ast.literal_eval(stmt.value)
                    except (ValueError, SyntaxError):
                        out[stmt.target.id] = ast.unparse(stmt.value)
            return out
    raise LookupError("WorkloadBaseConfig not found")


def settings_from_workload(workload: dict[str, Any]) -> dict[str, Any]:
    settings = {WORKLOAD_TO_FIELD[k]: v for k, v in workload.items() if k in WORKLOAD_TO_FIELD}
    if workload.get("moe_flex_dispatcher_backend"):
        settings["model.moe_token_dispatcher_type"] = "flex"
    if not workload.get("cuda_graph_impl"):
        settings.pop("model.cuda_graph_impl", None)
        settings.pop("model.cuda_graph_scope", None)
    return {k: v for k, v in settings.items() if v is not None}


def workload_cases(source: Source, version: str) -> dict[str, dict[str, Any]]:
    defaults = workload_defaults(source)
    out = {}
    for model, (family, prefix, _) in MODELS.items():
        path = f"scripts/performance/configs/{family}/{WORKLOAD_FILES[family]}"
        if source.text(path) is None:
            continue
        constants = Evaluator(defaults).run(source.tree(path))
        for gpu in GPUS:
            for precision, (suffix, _) in PRECISIONS.items():
                # get_workload_base_config with the launcher's default variant: V2, else V1, else unversioned.
                stem = f"{prefix}_PRETRAIN_CONFIG_{gpu.upper()}_{suffix}"
                names = [f"{stem}_V2", f"{stem}_V1", stem]
                name = next((n for n in names if n in constants), None)
                if name is None:
                    continue
                workload = constants[name]
                for optimizer in OPTIMIZERS.get(model, ("adam",)):
                    out[f"{model}/{gpu}/{precision}/{optimizer}"] = {
                        "source": f"{path}:{name}",
                        "num_gpus": workload["num_gpus"],
                        "workload": workload,
                        "settings": settings_from_workload(workload),
                        "not_applied": sorted(k for k, v in workload.items()
                                              if k not in WORKLOAD_TO_FIELD and k != "num_gpus" and v not in (None, False)),
                    }
    return out


FLAT_TO_WORKLOAD = {field: name for name, field in WORKLOAD_TO_FIELD.items()}


def flat_case(tree: ast.Module, function: str) -> tuple[dict[str, Any], list[str]]:
    """``cfg.a.b = literal`` assignments of one flat perf recipe, and the helpers it calls with ``cfg``."""
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    settings: dict[str, Any] = {}
    helpers: list[str] = []
    for stmt in ast.walk(node):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute):
            target = ast.unparse(stmt.targets[0])
            if target.startswith("cfg.") and target.count(".") == 2:
                try:
                    settings[target[4:]] = ast.literal_eval(stmt.value)
                except (ValueError, SyntaxError):
                    settings[target[4:]] = ast.unparse(stmt.value)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            if any(ast.unparse(a) == "cfg" for a in stmt.value.args):
                helpers.append(ast.unparse(stmt.value.func))
    return settings, helpers


def flat_cases(source: Source) -> dict[str, dict[str, Any]]:
    out = {}
    for model, (family, _, module) in MODELS.items():
        for gpu in GPUS:
            path = f"src/megatron/bridge/perf_recipes/{family}/{gpu}/{module}.py"
            if source.text(path) is None:
                continue
            tree = source.tree(path)
            functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
            for precision, (_, part) in PRECISIONS.items():
                pattern = re.compile(rf"^{MODELS[model][2].split('_moe')[0] if model != 'qwen3_30b_a3b' else 'qwen3_30b_a3b'}"
                                     rf"_pretrain_(\d+)gpu_{gpu}_{part}_config$")
                found = [(f, pattern.match(f)) for f in functions]
                found = [(f, m) for f, m in found if m]
                if not found:
                    continue
                function, match = found[0]
                settings, helpers = flat_case(tree, function)
                settings = {k: v for k, v in settings.items() if not k.startswith("dataset.")}
                workload = {FLAT_TO_WORKLOAD[k]: v for k, v in settings.items() if k in FLAT_TO_WORKLOAD}
                for optimizer in OPTIMIZERS.get(model, ("adam",)):
                    out[f"{model}/{gpu}/{precision}/{optimizer}"] = {
                        "source": f"{path}:{function}",
                        "num_gpus": int(match.group(1)),
                        "workload": workload,
                        "settings": {k: v for k, v in settings.items() if not isinstance(v, str) or not v.startswith(("_", "{"))},
                        "computed": sorted(k for k, v in settings.items() if isinstance(v, str) and v.startswith(("_", "{"))),
                        "helpers": helpers,
                        "not_applied": [],
                    }
    return out


def release(version: str) -> dict[str, Any]:
    commit = git(BRIDGE_REPO, "rev-parse", f"v{version}^{{commit}}").strip()
    source = Source(BRIDGE_REPO, commit, "src/")
    flat = source.text("src/megatron/bridge/perf_recipes/__init__.py") is not None
    cases = flat_cases(source) if flat else workload_cases(source, version)
    return {"tag": f"v{version}", "commit": commit, "reader": "flat perf recipes" if flat else "workload base configs",
            "presets": dict(sorted(cases.items()))}


def main() -> int:
    payload = {
        "provenance": {"repo": BRIDGE_REPO, "tool": "tools/bridge_release_presets.py (static: ast of the tagged source)"},
        "releases": {version: release(version) for version in RELEASES},
    }
    for version, data in payload["releases"].items():
        print(version, data["reader"], len(data["presets"]), "cases")
    atomic_write_text(OUT, json.dumps(payload, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
