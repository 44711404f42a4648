"""Benchmarks behind ``make bench``: each module measures one thing and writes results/bench/<name>.json + .md.

A benchmark module exposes ``NAME`` (what ``--only`` selects), ``DESCRIPTION`` (one line) and
``run(out_dir: Path, quick: bool) -> list[Path]`` (the files it wrote; one listed in :data:`GPU_BENCHMARKS` also
takes ``gpu_only``). Register it in
:data:`BENCHMARKS`; ``python -m optbench bench`` runs them all in this order.
"""

from __future__ import annotations

BENCHMARKS: dict[str, str] = {
    "optim": "optbench.bench.optim",
    "grouped_gemm": "optbench.bench.grouped_gemm",
    "dense_gemm": "optbench.bench.dense_gemm",
    "muon_matrices": "optbench.bench.muon_matrices",
    "all_to_all": "optbench.bench.all_to_all",
    "emerging": "optbench.bench.emerging",
    "pretrain": "optbench.bench.pretrain",
    "callback": "optbench.bench.callback",
}
"""Benchmark name -> module that implements it."""
GPU_BENCHMARKS: tuple[str, ...] = ("grouped_gemm", "dense_gemm", "muon_matrices", "all_to_all", "optim", "pretrain")
"""Benchmarks with GPU sections: ``--gpu-only`` measures those sections alone (:mod:`optbench.bench.sections`)."""
