"""``python -m optbench.engine.local <run_dir>/config.yaml``: train one resolved run config.

Works standalone (one process) and under ``torchrun --nproc_per_node=N`` (N data-parallel processes,
N = parallel.num_gpus). Metrics, summary and wandb files go to the directory holding config.yaml.
An input problem is one line on stderr (from rank 0 only) and exit code 2.
"""

from __future__ import annotations

import dataclasses
import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from optbench.common.errors import EXIT_USER_ERROR, UserError
from optbench.runs import load_resolved_config


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m optbench.engine.local", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "config", help="resolved config.yaml written by the launcher (results/runs/<run_id>/config.yaml)"
    )
    args = parser.parse_args(argv)
    debug = False
    try:
        config = Path(args.config).resolve()
        run = load_resolved_config(config)
        debug = run.debug
        if config.parent.parent.name == "runs":  # <results>/runs/<run_id>/config.yaml: results follow the file
            run = dataclasses.replace(run, results_dir=str(config.parent.parent.parent))
        from optbench.engine.local.trainer import train

        train(run, config.parent)
    except UserError as err:
        if debug:
            raise
        if os.environ.get("RANK", "0") == "0":
            for line in err.lines():
                print(line, file=sys.stderr)
        return EXIT_USER_ERROR
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
