"""The folders are the flow: the import contract in pyproject.toml holds, and no module imports itself
back through others (docs/architecture.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
PATHS = {"PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}


def test_import_contract_is_kept():
    """`lint-imports` reads [tool.importlinter] from pyproject.toml; a broken layer names the import."""
    done = subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **PATHS},
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 kept, 0 broken" in done.stdout


def _contracts() -> dict[str, dict]:
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    return {contract["type"]: contract for contract in config["contracts"]}


def test_the_contract_states_the_design():
    """Issue 54's shape of the house: at most 7 layers, at most 3 ':' joins, no import exempted, every package of
    src/optbench/ (and launch/) placed in a layer, the engines independent, the projection kept from composing and
    validating, and at most 5 modules at the package root."""
    contracts = _contracts()
    layers = contracts["layers"]["layers"]
    assert len(layers) <= 7, layers
    assert sum(layer.count(":") for layer in layers) <= 3, layers
    assert not any("ignore_imports" in contract for contract in contracts.values())
    placed = {name.strip() for layer in layers for name in layer.replace(":", "|").split("|")}
    root = REPO / "src" / "optbench"

    def code(folder: Path) -> bool:  # optbench/data/ is a package of data files only
        return (folder / "__init__.py").is_file() and any(p.name != "__init__.py" for p in folder.rglob("*.py"))

    packages = {f"optbench.{p.name}" for p in root.iterdir() if code(p)} - {"optbench.engine"}
    packages |= {f"optbench.engine.{p.name}" for p in (root / "engine").iterdir() if code(p)}
    assert packages | {"launch"} == placed, (packages | {"launch"}) ^ placed
    assert set(contracts["independence"]["modules"]) == {"optbench.engine.local", "optbench.engine.bridge"}
    forbidden = contracts["forbidden"]
    assert forbidden["source_modules"] == ["optbench.projection"]
    assert {"optbench.compose", "optbench.validate", "optbench.engine.bridge"} <= set(forbidden["forbidden_modules"])
    assert len([p for p in root.glob("*.py")]) <= 5


def test_the_docs_table_lists_the_contracts_layers():
    """docs/architecture.md section 1 has one row per layer, bottom first, naming that layer's packages."""
    import re

    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("| layer (bottom first) | what it holds |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split(" | ", 1)[0] for line in table.strip().splitlines()[1:]]
    documented = [{name.rstrip("/").replace("/", ".") for name in re.findall(r"`([a-z_/]+)/`", row)} for row in rows]
    layers = _contracts()["layers"]["layers"]
    expected = [
        {name.strip().removeprefix("optbench.") for name in layer.replace(":", "|").split("|")} for layer in layers
    ]
    assert documented == expected[::-1]


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (iterative: the graph has hundreds of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_finder_sees_a_cycle():
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    """Function-level (lazy) imports count: a cycle through one still ties the two modules together."""
    sys.path[:0] = [str(REPO / "src"), str(REPO)]
    graph = grimp.build_graph("optbench", "launch")
    edges = {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    assert strongly_connected(edges) == []


PRIVATE_MACHINERY = ("hydra._internal", "omegaconf._utils", "_set_flag", "_get_node", "pickle")
"""What composing through Hydra's and OmegaConf's public API leaves out: their private modules and node methods,
and pickled configs (a cache a maintainer would carry across upgrades of either)."""


def test_composition_uses_hydras_public_api_only():
    found = [
        f"{path.relative_to(REPO)}:{number}: {word}"
        for folder in ("src", "launch")
        for path in sorted((REPO / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for word in PRIVATE_MACHINERY
        if word in line
    ]
    assert found == []


def test_every_code_folder_is_a_package_the_contract_sees():
    """A folder of Python modules without an ``__init__.py`` is invisible to lint-imports (``one_gpu/`` was, with
    imports from above its layer and from the other engine). Hub snapshots under ``hf_configs/`` are data."""
    missing = [
        str(folder.relative_to(REPO))
        for base in (REPO / "src" / "optbench", REPO / "launch")
        for folder in [base, *base.rglob("*")]
        if folder.is_dir()
        and "__pycache__" not in folder.parts
        and "hf_configs" not in folder.parts
        and any(folder.glob("*.py"))
        and not (folder / "__init__.py").is_file()
    ]
    assert missing == []


@pytest.mark.parametrize(("page", "limit"), [("architecture.md", 2500), ("projection.md", 4000)])
def test_the_reference_pages_stay_references(page: str, limit: int) -> None:
    """A maintainer reads the current design in a reference page; dated measurements, experiments and what was tried
    live in docs/notes/, linked from it (issue 82 item 6). Words as `wc -w` counts them."""
    text = (REPO / "docs" / page).read_text(encoding="utf-8")
    assert len(text.split()) <= limit, f"docs/{page}: {len(text.split())} words; move history to docs/notes/"
    assert "docs/notes/" in text or "notes/" in text


def test_code_reads_a_models_entry_not_its_name() -> None:
    """What differs between models is a field of their entry (data/models.csv, conf/model/<model>.yaml: the
    architecture, the release markers of a Bridge recipe's signature), never a branch on a model's id in the code
    (issue 82 item 2: the adapter branched on "kimi_k2", three benches keyed dicts by model names)."""
    from optbench.catalog.models import model_registry
    from optbench.releases import versions

    from optbench.config.schema_model import ARCHITECTURES

    names = set(model_registry()) - set(ARCHITECTURES)  # deepseek_v3 is also an architecture, which code may read
    quoted = {f'"{name}"' for name in names} | {f"'{name}'" for name in names}
    hub = "src/optbench/engine/bridge/cpu_check/hf_configs"
    found = [
        f"{path.relative_to(REPO)}: {literal}"
        for folder in ("src", "launch")
        for path in (REPO / folder).rglob("*.py")
        if not str(path.relative_to(REPO)).startswith(hub)
        for literal in quoted
        if literal in path.read_text(encoding="utf-8")
    ]
    assert found == []
    markers = {m for e in model_registry().values() for m in (e.optimizer_type_marker, e.hub_config_marker) if m}
    known = set(versions.fields(versions.runnable()[0].bridge)["behaviour"])
    assert markers and markers <= known, markers - known


def test_make_test_runs_the_formatter_and_the_linter_at_120_characters():
    """Issue 82 item 7: ruff format and ruff check (line length 120, E501 included) run first in make test."""
    import re
    import tomllib

    ruff = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]
    assert ruff["line-length"] == 120 and "E501" in ruff["lint"]["select"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^test: lint\b", makefile, re.M) and re.search(r"^test-fast: lint\b", makefile, re.M)
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", makefile, re.M)[1]
    assert "ruff format --check" in lint and "ruff check" in lint
