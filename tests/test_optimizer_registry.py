"""The optimizer registry (src/optbench/config/optimizers): one entry per optimizer, read by every stage, so that
adding one touches its entry, its schema field, its config group, its implementation and its tests."""

from __future__ import annotations

import dataclasses
import typing

import torch

from optbench.common.checkout import repo_root
from optbench.config.optimizers import MATRIX_OPTIMIZERS, REGISTRY, matrix_labels
from optbench.config.schema import OptimizerConfig
from optbench.optim.training import local_builder
from optbench.releases.versions import release_line

SOAP_FILES = {
    "src/optbench/config/optimizers/__init__.py",
    "src/optbench/config/optimizers/soap.py",
    "src/optbench/config/schema_optimizer.py",
    "src/optbench/optim/soap.py",
    "src/optbench/bench/emerging.py",
    "src/optbench/releases/emerging_fields.py",
}
"""Where one optimizer's name may appear in the code (docs/architecture.md section 5 says why each)."""


def test_every_config_group_is_an_entry_and_every_entry_a_config_group():
    groups = {p.stem for p in (repo_root() / "conf" / "optimizer").glob("*.yaml")}
    assert groups == set(REGISTRY)


def _section_class(section: str) -> type:
    """The dataclass of ``optimizer.<section>``, as the schema declares it (``Optional[<class>]``)."""
    return typing.get_type_hints(OptimizerConfig)[section].__args__[0]


def test_each_entry_names_sections_the_schema_has_with_its_own_dataclass():
    hints = typing.get_type_hints(OptimizerConfig)
    fields = {f.name for f in dataclasses.fields(OptimizerConfig)}
    for name, e in REGISTRY.items():
        assert set(e.sections) <= fields, name
        for section in e.sections:
            assert (
                dataclasses.is_dataclass(_section_class(section))
                and hints[section] == typing.Optional[_section_class(section)]
            ), (name, section)
        assert e.matrix == bool(e.sections) == bool(e.local_builder), name


def _config(name: str) -> OptimizerConfig:
    """An ``optimizer`` section for ``name`` with its settings sections at their defaults."""
    return OptimizerConfig(name=name, **{s: _section_class(s)() for s in REGISTRY[name].sections})


def _route(weight: torch.nn.Parameter) -> object:
    """A stand-in for one routed parameter (optbench.optim.routing.ParamRoute's fields the builders read)."""
    fields = {"qkv_split_shapes": None, "partition_dim": None, "is_expert": False}
    return type("Route", (), {"param": weight, "weight_decay_mult": 1.0, **fields})()


def test_each_matrix_optimizer_builds_its_local_implementation_from_the_entry():
    weight = torch.nn.Parameter(torch.randn(8, 4))
    route = _route(weight)
    for name in MATRIX_OPTIMIZERS:
        built = local_builder(name)([route], _config(name), None, "0.2.0")
        assert isinstance(built, torch.optim.Optimizer) and built.param_groups[0]["params"] == [weight], name


def test_the_local_optimizers_follow_the_containers_emerging_optimizers_release():
    """Issue 80 item 4: Emerging-Optimizers 0.4.0 normalizes before Newton-Schulz with eps 1e-15 (1e-7 before) and
    runs SOAP's products at fp32 (TF32 before); the local builders and the projection's SOAP rate follow the release."""
    route = _route(torch.nn.Parameter(torch.randn(8, 4)))
    for release, eps, soap_products in (("0.1.0", 1e-7, "high"), ("0.2.0", 1e-7, "high"), ("0.4.0", 1e-15, "highest")):
        assert local_builder("muon")([route], _config("muon"), None, release).ns_eps == eps
        assert local_builder("soap")([route], _config("soap"), None, release).fp32_matmul_prec == soap_products
        assert REGISTRY["soap"].products_precision_at(release_line(release)) == soap_products


def test_an_optimizer_that_counts_its_own_work_says_all_of_it():
    for name, e in REGISTRY.items():
        if e.matrix_flops is not None:
            flops = e.matrix_flops(e.section(_config(name)), 64, 32)
            assert flops.gemm > 0 and e.elementwise_bytes(64, 32) > 0 and e.eager_ops > 0 and e.products_precision
        if e.matrix:  # at least the fp32 main copy and one buffer
            assert e.matrix_state_bytes(_config(name), (64, 32)) >= 8 * 64 * 32, name


def test_each_matrix_optimizer_counts_its_work_one_way_through_its_entry():
    """Issue 82 item 4: the Muon family's Newton-Schulz count per tensor-parallel mode is named by its entry, as SOAP's
    own count is; no stage picks a count by the optimizer's name."""
    for name, e in REGISTRY.items():
        if not e.matrix:
            assert e.matrix_flops is None and not e.matrix_calls, name
            continue
        assert (e.matrix_flops is None) != (not e.matrix_calls), name  # exactly one of the two
        if e.matrix_calls:
            assert callable(e.calls()), name


def test_the_matrix_optimizers_are_listed_in_words_from_the_registry():
    assert matrix_labels() == "Muon, AdaMuon and SOAP"


def test_no_stage_outside_the_entry_names_an_optimizer_of_its_own():
    """A stage that tests ``name == "soap"`` again fails here: it belongs in the entry."""
    root = repo_root()
    found = {
        str(p.relative_to(root))
        for folder in ("src", "launch")
        for p in (root / folder).rglob("*.py")
        if "soap" in p.read_text(encoding="utf-8").lower()
    }
    assert found <= SOAP_FILES, sorted(found - SOAP_FILES)
