"""``make gpu-smoke``: the real Megatron Bridge and Core train our recipes on one GPU (``python -m
optbench.experiments.one_gpu``; :mod:`.__main__` says how). An experiment, not an engine: it prepares job folders
through the planner and trains them with the Bridge engine's entry point and, for the Core-only loop, the local
engine's pieces, so it sits above both."""
