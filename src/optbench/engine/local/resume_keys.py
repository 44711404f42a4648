"""What a resumed run must share with the run it continues: read by the launcher's check (no torch) and
by the checkpoint it writes, so both compare the same settings."""

RESUME_MUST_MATCH = (
    "model",
    "optimizer",
    "data",
    "precision",
    "train.gbs",
    "train.mbs",
    "train.seq_length",
    "train.seed",
    "parallel.num_gpus",
)
"""Settings a resumed run must share with the run it continues (train.iters may grow)."""
