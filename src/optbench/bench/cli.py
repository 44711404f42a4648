"""``python -m optbench bench [--only NAME] [--gpu-only] [--quick] [--threads N] [--out DIR]``: run the benchmarks,
write results/bench/."""

from __future__ import annotations

import argparse
import importlib

from optbench.bench import BENCHMARKS, GPU_BENCHMARKS
from optbench.common.errors import Problem, UserError
from optbench.common.redact import clipped

MAX_THREADS = 4096
"""Most CPU threads a benchmark may ask torch for (more than any machine's cores; torch overflows far beyond)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m optbench bench", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("--only", metavar="NAME", help=f"run one benchmark: {', '.join(BENCHMARKS)}")
    parser.add_argument("--out", default=None, help="output folder (default: <repo>/results/bench)")
    parser.add_argument(
        "--gpu-only",
        action="store_true",
        help="on a GPU machine: measure the GPU sections alone and keep every other section of the "
        f"stored results ({', '.join(GPU_BENCHMARKS)})",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller models, fewer repetitions and one CPU thread (smoke test)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's, one per core)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.only is not None and args.only not in BENCHMARKS:
        raise UserError(Problem("--only", f"unknown benchmark {args.only!r}; choose one of {', '.join(BENCHMARKS)}"))
    if args.gpu_only:
        if args.only is not None and args.only not in GPU_BENCHMARKS:
            raise UserError(
                Problem("--gpu-only", f"{args.only!r} has no GPU section; choose one of {', '.join(GPU_BENCHMARKS)}")
            )
        from optbench.bench.sections import require_cuda

        require_cuda()  # before anything is printed or written
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        raise UserError(
            Problem("--threads", f"must be from 1 to {MAX_THREADS:,}, got {clipped(str(args.threads), 24)}")
        )
    from optbench.common.outputs import claim

    if args.out is None:
        from optbench.common.checkout import repo_root

        out = claim(repo_root() / "results", "results_dir", "results") / "bench"
    else:
        out = claim(args.out, "--out", "results")
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    names = [args.only] if args.only else list(GPU_BENCHMARKS if args.gpu_only else BENCHMARKS)
    for name in names:
        module = importlib.import_module(BENCHMARKS[name])
        print(f"bench {name}: {module.DESCRIPTION}", flush=True)
        extra = {"gpu_only": True} if args.gpu_only else {}
        for path in module.run(out, quick=args.quick, **extra):
            print(f"  wrote {path}")
    return 0
