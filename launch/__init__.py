"""Command line and launcher: compose -> validate -> plan -> launch (NeMo-Run on Slurm, or this machine)."""
