"""Import-only stand-ins that let Megatron Bridge 0.3.1 import and build configs on a CPU.

Imported first in a Bridge environment (``.venv-bridge`` or ``.venv-bridge5``, see requirements.txt beside this file):

* modules that need CUDA builds (Transformer Engine, Apex, Mamba, flash-attention, ...) and Energon are
  replaced by empty modules whose every attribute is a harmless class: Bridge's and Megatron Core's
  imports succeed, and nothing of them runs while configs are built and validated;
* CUDA device properties report the GPU named by ``OPTBENCH_FAKE_GPU`` (default gb300), so that
  Bridge's architecture checks (hybrid EP, MXFP8) see the GPU the recipe is for, and
  ``torch.cuda.synchronize`` (which Megatron's timers call) returns at once.

Triton is not stubbed (PyTorch's inductor probes for it, and Bridge's config path does not need it).
Used by the conformance test, the preset tool and ``make plan CHECK=bridge`` (:mod:`.plan_check`); the job in the
NeMo container never imports it.
"""

from __future__ import annotations

import abc
import csv
import importlib.abc
import importlib.machinery
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

from optbench.engine.bridge.cpu_check import polyfill_typing

STUBBED = (
    "transformer_engine",
    "transformer_engine_torch",
    "apex",
    "flashattn_hopper",
    "mamba_ssm",
    "causal_conv1d",
    "fla",
    "nvidia_resiliency_ext",
    "deep_ep",
    "nv_grouped_gemm",
    "modelopt",
    "emerging_optimizers",
    "megatron.energon",
)
"""Stubbed unless the real package is installed (Core 0.19 iterates emerging_optimizers' registry at import)."""
TE_VERSION = "2.12.0"
"""What the stand-in Transformer Engine reports (the NeMo 26.02 container's major line)."""

GPU_REGISTRY = Path(__file__).resolve().parents[3] / "data" / "gpus.csv"
"""The GPU registry (optbench.catalog.hardware reads it too); read as a file: this module runs before optbench is
importable."""


def _gpu_properties(gpu: str) -> tuple[str, int, int, float, int]:
    """(device name, compute capability major, minor, memory in bytes, SM count) of a registry GPU."""
    row = next(r for r in csv.DictReader(GPU_REGISTRY.read_text().splitlines()) if r["gpu"] == gpu)
    major, minor = (int(part) for part in row["compute_capability"].split("."))
    return row["device_name"], major, minor, float(row["hbm_gb"]) * 1e9, int(row["sm_count"])


def _identity_or(value, args, kwargs):
    """A stand-in used as a decorator returns what it decorates; called any other way, ``value``."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return args[0]
    return value


class _Anything(abc.ABCMeta):
    """A class whose every attribute is another such class: subclassable (also beside ABC), callable,
    indexable, usable as a decorator; its instances are callable and usable as decorators too."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _make(name)

    def __call__(cls, *args, **kwargs):
        return _identity_or(super().__call__(), args, kwargs)

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls


def _make(name: str) -> type:
    return _Anything(
        name, (object,), {"__module__": "stand_in", "__call__": lambda self, *a, **k: _identity_or(self, a, k)}
    )


class _StubModule(types.ModuleType):
    __version__ = TE_VERSION

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _make(name)
        setattr(self, name, value)
        return value


def _installed(name: str) -> bool:
    """Whether the real package is importable (looked up without our finder)."""
    top = name.split(".")[0]
    return any(
        finder.find_spec(top, None) is not None
        for finder in sys.meta_path
        if not isinstance(finder, _Finder) and hasattr(finder, "find_spec")
    )


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if any((fullname == p or fullname.startswith(p + ".")) and p not in REAL for p in STUBBED):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        if module.__name__ == "transformer_engine.pytorch.optimizers":
            module.FusedAdam = FusedAdam
        if module.__name__ == "modelopt.torch.distill.plugins.megatron":
            module.get_tensor_shapes_adjust_fn_for_distillation = no_distillation_shapes


class FusedAdam:
    """Megatron Core reads this signature to allow the precision-aware optimizer (DeepSeek-V3's presets use it)."""

    def __init__(
        self,
        params,
        lr=1e-3,
        master_weight_dtype=None,
        exp_avg_dtype=None,
        exp_avg_sq_dtype=None,
        use_decoupled_grad=False,
        **kwargs,
    ):
        raise RuntimeError("stand-in: Transformer Engine's FusedAdam does not run on a CPU")


def no_distillation_shapes(model, **kwargs):
    """What Model-Optimizer's ``get_tensor_shapes_adjust_fn_for_distillation`` answers for a model that is not a
    ``DistillationModel`` (or runs without a pipeline): None. Bridge's ``train_step`` passes the answer to Core's
    schedule, and Core's no-pipeline schedule asserts it is None; the generic stand-in (a class) failed that assert
    in Bridge's ``pretrain()`` on one GPU."""
    return None


REAL = {name for name in ("emerging_optimizers",) if _installed(name)}


REAL_CUDA = "OPTBENCH_REAL_CUDA"
"""Set to 1 on a GPU machine without Transformer Engine (``make gpu-smoke``): the import stand-ins only, the
device's own CUDA untouched."""


def install(gpu: str | None = None) -> str:
    """Install the stand-ins (idempotent); CUDA reports ``gpu``'s properties from now on (None: the GPU named by
    ``OPTBENCH_FAKE_GPU``, else gb300), unless ``OPTBENCH_REAL_CUDA=1``. Returns that GPU."""
    if gpu is not None:
        os.environ["OPTBENCH_FAKE_GPU"] = gpu  # Bridge's and Core's own subprocesses and later installs see it too
    polyfill_typing()
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    import torch

    if os.environ.get(REAL_CUDA) == "1":
        return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"

    gpu = os.environ.get("OPTBENCH_FAKE_GPU", "gb300")
    name, major, minor, memory, sms = _gpu_properties(gpu)
    properties = SimpleNamespace(
        name=name, major=major, minor=minor, total_memory=int(memory), multi_processor_count=sms
    )
    torch.cuda.get_device_properties = lambda *args, **kwargs: properties
    torch.cuda.get_device_capability = lambda *args, **kwargs: (major, minor)
    torch.cuda.get_device_name = lambda *args, **kwargs: name
    torch.cuda.synchronize = lambda *args, **kwargs: None  # Megatron's timers synchronize on start and stop
    return gpu


install()
