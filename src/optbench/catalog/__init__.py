"""The fact tables everything reads: GPUs (data/gpus.csv), models (data/models.csv) and NVIDIA's published rows
(results/published/)."""
