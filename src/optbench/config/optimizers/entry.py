"""What one optimizer brings to every stage: the record each module of this folder fills in (one per optimizer).

The stages read it instead of testing the optimizer's name: validation (its settings sections, what Megatron
refuses for it), the Bridge engine (its name in Core's registry, its fields), the planner (NVIDIA's preset it starts
from, its own FLOPs and state bytes, how the plan names them), the local engine (its implementation) and
``make study`` (its arms). Adding an optimizer: docs/architecture.md, "Adding an optimizer".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional


FP32 = 4
"""Bytes of an fp32 element: every optimizer's state (and Megatron's main copy of a bf16 parameter) is fp32."""


class MatrixFlops(NamedTuple):
    """An optimizer's own FLOPs per step on one matrix, split by the rate each part runs at."""

    gemm: float
    """Matrix products, amortized over any refresh period."""
    qr: float = 0.0
    """Factorisations on CUDA cores (Householder QR), amortized the same way."""

    @property
    def total(self) -> float:
        return self.gemm + self.qr


@dataclass(frozen=True)
class StudyArm:
    """One arm of ``make study``: a recipe, its overrides and the learning rates tuned over."""

    key: str
    """The arm's name in results/study.json."""
    label: str
    """How tables and plots name it."""
    recipe: str
    overrides: tuple[str, ...]
    learning_rates: tuple[float, ...]
    """A grid a factor ~3 apart around the arm's expected optimum."""
    color: str
    """Its matplotlib colour in results/plots/study_val_loss.png."""


@dataclass(frozen=True)
class OptimizerEntry:
    """One optimizer, as every stage needs it; ``name`` is ``optimizer.name`` and its config group
    ``conf/optimizer/<name>.yaml``."""

    name: str
    label: str
    """How plans, tables and messages name it."""
    sections: tuple[str, ...] = ()
    """The settings sections it reads (fields of ``optimizer``, each filled by the config group of its name)."""
    matrix: bool = False
    """An emerging optimizer of Megatron Core: 2-D weights (not embedding/output) go to it, the rest to the scalar
    one."""
    flops_label: str = ""
    """Short name of its own FLOPs in throughput lines ("NS")."""
    flops_words: str = ""
    """The same in words, for sentences ("... with Newton-Schulz")."""
    preset_optimizer: str = "adam"
    """Whose NVIDIA preset (layout, settings) a run starts from: NVIDIA publishes presets for adam and muon only."""
    preset_adapted: bool = False
    """Whether its run always adapts that preset (its own settings on another optimizer's layout)."""
    upstream: str = ""
    """The Emerging-Optimizers module Megatron Core builds it from ("" = Core's own code); the reference benches and
    tests import it."""
    bridge_marker: str = ""
    """The source marker (optbench/data/bridge/fields-*.json) of the Megatron Core that builds it; "" = every one."""
    bridge_fields: tuple[str, ...] = ()
    """Its own run fields sent to Megatron Bridge (dotted; their Bridge names are in the field table), each in the
    run's release's name (the older one where a release renamed it); a release without the field leaves it out, and
    a value other than the default is refused there, naming the first container that has it."""
    bridge_flags: tuple[str, ...] = ()
    """Its own switches sent to Megatron Bridge only when on (off is every release's default)."""
    products_precision: str = ""
    """The fixed precision of its matrix products (Megatron's fp32_matmul_prec words); "" = ``optimizer.muon``'s."""
    products_precision_from: tuple[tuple[tuple[int, int], str], ...] = ()
    """((major, minor) of an Emerging-Optimizers release, the precision from it on) where a release changed
    ``products_precision``."""
    matrix_flops: Optional[Callable[[Any, int, int], MatrixFlops]] = None
    """(its section, rows, cols) -> its FLOPs per step on one local shard, not tensor-parallel aware; None: it counts
    its calls per tensor-parallel mode instead (``matrix_calls``)."""
    matrix_calls: str = ""
    """Its matrix work per tensor-parallel mode, ``module:function`` (Hydra's ``_target_`` convention: the count lives
    in the accounting layer, above this registry): (local parameter, model, run, TP mode, symmetric products) ->
    (Gram size, FLOPs) of each call one holder of the parameter makes per step. The Muon family names the
    Newton-Schulz count (``optbench.accounting.ns_flops:newton_schulz_calls``); "" with ``matrix_flops``, or for
    AdamW."""
    elementwise_bytes: Optional[Callable[[int, int], float]] = None
    """(rows, cols) -> HBM bytes of its element-wise work on one matrix outside the products, counted in its
    implementation (the projection prices them at the HBM bandwidth); with ``matrix_flops``."""
    eager_ops: int = 0
    """Its eager ops per matrix and step, counted the same way (the projection's host launch time); with
    ``matrix_flops``."""
    matrix_state_bytes: Optional[Callable[[Any, tuple[int, ...]], float]] = None
    """(the run's ``optimizer`` section, local shape) -> fp32 state bytes of one matrix it updates."""
    tensor_parallel_aware: bool = True
    """False: Megatron preconditions each tensor-parallel shard as a matrix of its own."""
    unshardable_state: str = ""
    """Words naming state that is not parameter-shaped, which Megatron's torch_dist checkpoint cannot shard; "" =
    none."""
    describe: Optional[Callable[[Any, list[tuple[str, str]]], str]] = None
    """(the run's ``optimizer`` section, the plan's Bridge overrides as (key, value) pairs) -> the plan summary's words
    on its settings (the overrides give Megatron's spelling of it in the run's container)."""
    study_arms: tuple[StudyArm, ...] = ()
    gpu_smoke: tuple[str, tuple[str, ...]] = ("", ())
    """(recipe, overrides) of its arm in ``make gpu-smoke``."""
    local_builder: str = ""
    """Its local-engine implementation, ``module:function`` (Hydra's ``_target_`` convention; the function takes
    the matrix side's routes, the ``optimizer`` section, the tensor-parallel group and the run's Emerging-Optimizers
    release, whose defaults it follows); "" for AdamW, whose every parameter goes to the scalar optimizer."""

    def products_precision_at(self, emerging_optimizers: tuple[int, int]) -> str:
        """``products_precision`` in the Emerging-Optimizers release of that (major, minor)."""
        changed = [prec for first, prec in self.products_precision_from if emerging_optimizers >= first]
        return changed[-1] if changed else self.products_precision

    def calls(self) -> Callable[..., tuple[tuple[int, float], ...]]:
        """The function ``matrix_calls`` names."""
        import importlib

        module, function = self.matrix_calls.split(":")
        return getattr(importlib.import_module(module), function)

    def section(self, optimizer: Any) -> Any:
        """Its own settings section of a run's ``optimizer`` (the first it reads), or None."""
        return getattr(optimizer, self.sections[0]) if self.sections else None
