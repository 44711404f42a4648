"""Read tagged Megatron Bridge and Megatron-LM sources from git mirrors, without importing or checking out anything.

Shared by ``tools/bridge_versions.py`` (containers, field names, behaviour markers) and
``tools/bridge_perf_rows.py`` (NVIDIA's published rows). NVIDIA's presets are not read here: they are executed
(``tools/nvidia_presets.py``). A :class:`Source` is one repository at one commit; modules are read with
``git show <commit>:<path>`` and parsed with :mod:`ast`.
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # optbench.common.io for the tools' atomic writes

MIRRORS_ENV = "OPTBENCH_MIRRORS"
"""The folder of git mirrors: <folder>/<owner>+<name>/repo is the git directory of a clone of github.com/<owner>/<name>
(``git clone --mirror https://github.com/NVIDIA-NeMo/Megatron-Bridge <folder>/NVIDIA-NeMo+Megatron-Bridge/repo``)."""
BRIDGE_REPO = "NVIDIA-NeMo/Megatron-Bridge"
CORE_REPO = "NVIDIA/Megatron-LM"


def mirror(repo: str) -> Path:
    folder = os.environ.get(MIRRORS_ENV)
    if not folder:
        print(
            f"error: {MIRRORS_ENV}: not set; point it at a folder holding <owner>+<name>/repo git mirrors of "
            f"{BRIDGE_REPO} and {CORE_REPO} (tools/bridge_sources.py says how to make them)",
            file=sys.stderr,
        )
        sys.exit(2)
    return Path(folder) / repo.replace("/", "+") / "repo"


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", str(mirror(repo)), *args], check=True, capture_output=True, text=True).stdout


@dataclass(frozen=True)
class Source:
    """One repository at one commit, with the folder its ``megatron`` package lives under."""

    repo: str
    commit: str
    package_root: str
    """'src/' for Bridge (src/megatron/bridge), '' for Megatron-LM (megatron/core)."""

    @functools.lru_cache(maxsize=None)
    def text(self, path: str) -> Optional[str]:
        try:
            return git(self.repo, "show", f"{self.commit}:{path}")
        except subprocess.CalledProcessError:
            return None

    def module_path(self, module: str) -> Optional[str]:
        base = self.package_root + module.replace(".", "/")
        for path in (base + ".py", base + "/__init__.py"):
            if self.text(path) is not None:
                return path
        return None

    @functools.lru_cache(maxsize=None)
    def tree(self, path: str) -> ast.Module:
        return ast.parse(self.text(path) or "")

    def grep_class(self, name: str, under: str) -> Optional[str]:
        """The first file under ``under`` that defines ``class name`` (for classes that moved between releases)."""
        try:
            out = git(self.repo, "grep", "-l", "-E", f"^class {name}\\b", self.commit, "--", under)
        except subprocess.CalledProcessError:
            return None
        hits = sorted(line.split(":", 1)[1] for line in out.splitlines() if line)
        return hits[0] if hits else None


def path_module(source: Source, path: str) -> str:
    module = path[len(source.package_root) :].removesuffix(".py").replace("/", ".")
    return module.removesuffix(".__init__")


def _absolute(source: Source, path: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = path_module(source, path).split(".")
    if not path.endswith("__init__.py"):
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


class Resolver:
    """Finds classes across the Bridge and Core sources of one release, following imports and bases."""

    def __init__(self, bridge: Source, core: Source):
        self.bridge, self.core = bridge, core

    def source_for(self, module: str) -> Optional[Source]:
        if module.startswith("megatron.bridge"):
            return self.bridge
        if module.startswith("megatron.core") or module.startswith("megatron.training"):
            return self.core
        return None

    def find(self, module: str, name: str, depth: int = 0) -> Optional[tuple[Source, str, ast.ClassDef]]:
        """(source, path, class node) of ``name`` as seen from ``module`` (re-exports followed)."""
        source = self.source_for(module)
        if source is None or depth > 8:
            return None
        path = source.module_path(module)
        if path is None:
            return None
        tree = source.tree(path)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return source, path, node
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        found = self.find(_absolute(source, path, node), alias.name, depth + 1)
                        if found:
                            return found
        return None

    def fields(self, module: str, name: str) -> dict[str, Optional[str]]:
        """Dataclass field names of a class with its bases (bases first), each with its default's source text."""
        found = self.find(module, name)
        if found is None and self.source_for(module) is self.bridge:  # moved between releases
            path = self.bridge.grep_class(name, "src/megatron/bridge")
            found = self.find(path_module(self.bridge, path), name) if path else None
        if found is None:
            raise LookupError(
                f"class {name} not found from {module} at {self.bridge.commit[:9]}/{self.core.commit[:9]}"
            )
        source, path, node = found
        out: dict[str, Optional[str]] = {}
        for base in node.bases:
            base_name = ast.unparse(base).split(".")[-1].split("[")[0]
            owner = self._owner(source, path, base_name)
            if owner is not None:
                out.update(self.fields(*owner))
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if "ClassVar" not in ast.unparse(stmt.annotation):
                    out[stmt.target.id] = ast.unparse(stmt.value) if stmt.value is not None else None
        return out

    def _owner(self, source: Source, path: str, name: str) -> Optional[tuple[str, str]]:
        """(module, class name) a base class name refers to from ``path``; None for classes outside Megatron.

        ``from x import OptimizerConfig as MCoreOptimizerConfig``: the class keeps its own name in ``x``.
        """
        tree = source.tree(path)
        if any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body):
            return path_module(source, path), name
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        module = _absolute(source, path, node)
                        return (module, alias.name) if self.source_for(module) else None
        return None


def literal(text: Optional[str]):
    """A default's value when it is a Python literal, else its source text."""
    if text is None:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
