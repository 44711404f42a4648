"""The study's validation set, described and checked before anything trains.

Every run validates on the same samples (``data.valid_seed`` fixed), so a difference between two runs'
validation losses is a difference between the models, not between the samples. This module says how
many tokens that set holds, refuses a set that would repeat samples (a validation split smaller than one
pass), and measures how much of it the training split already contains: the share of validation
sequences most of whose ``WINDOW``-token windows occur somewhere in the training split's tokens.
"""

from __future__ import annotations

import numpy as np

from optbench.config.data_path import dataset_blend, split_ranges, split_weights
from optbench.config.schema import RunConfig
from optbench.corpus.indexed import IndexedDataset, read_index
from optbench.engine.local.indexed_data import build_indexed_stream
from optbench.common.errors import Problem, UserError

WINDOW = 16
"""Tokens per window of the overlap test (16 BPE tokens: about 10 words)."""
SEEN_SHARE = 0.5
"""A validation sequence counts as seen in training when at least this share of its windows occur there."""
_MULTIPLIERS = np.random.default_rng(20261125).integers(1, 2**63, size=WINDOW, dtype=np.uint64) | np.uint64(1)


def _window_hashes(tokens: np.ndarray) -> np.ndarray:
    """A 64-bit hash of every WINDOW-token window of ``tokens`` (wrapping arithmetic; collisions negligible)."""
    if len(tokens) < WINDOW:
        return np.zeros(0, dtype=np.uint64)
    windows = np.lib.stride_tricks.sliding_window_view(tokens.astype(np.uint64) + np.uint64(1), WINDOW)
    with np.errstate(over="ignore"):
        return (windows * _MULTIPLIERS).sum(axis=1, dtype=np.uint64)


def _training_windows(datasets: list[IndexedDataset], fractions: list[float]) -> np.ndarray:
    found = []
    for dataset in datasets:
        first, last = split_ranges(dataset.documents, fractions)[0]
        found += [_window_hashes(dataset.document(i)) for i in range(first, last)]
    return np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.uint64)


def _contained(values: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    """Which ``values`` occur in ``sorted_unique`` (a binary search each: np.isin would sort the large side again)."""
    if sorted_unique.size == 0:
        return np.zeros(values.shape, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_unique, values), sorted_unique.size - 1)
    return sorted_unique[at] == values


def validation_set(config: RunConfig) -> dict:
    """Tokens per validation pass, the split's size, and the share of evaluated sequences seen in training."""
    train, data = config.train, config.data
    sequences = train.eval_iters * train.gbs
    stream = build_indexed_stream(data, train, config.model.vocab_size)
    if stream.valid is None:
        raise UserError(
            Problem("data.split", f"'{data.split}' holds out no validation documents; the study needs them")
        )
    for sampler, wanted in zip(stream.valid.samplers, stream.valid.taken(sequences)):
        if wanted > sampler.samples_per_epoch:
            raise UserError(
                Problem(
                    "train.eval_iters",
                    f"a validation pass takes {int(wanted):,} sequences from {sampler.dataset.prefix}, whose "
                    f"validation split holds {sampler.samples_per_epoch:,}: samples would repeat; hold out more "
                    "(data.split) or evaluate fewer",
                )
            )
    prefixes, _ = dataset_blend(list(data.path))
    seen_in_training = _training_windows([read_index(p) for p in prefixes], split_weights(data.split))
    seen = 0
    for index in range(sequences):
        seen += bool(_contained(_window_hashes(stream.valid.sample(index)), seen_in_training).mean() >= SEEN_SHARE)
    return {
        "corpus": stream.text,
        "sequences": sequences,
        "tokens_predicted": sequences * train.seq_length,
        "split": data.split,
        "valid_seed": data.valid_seed,
        "split_tokens": int(sum(s.tokens_per_epoch for s in stream.valid.samplers)),
        "seen_in_training": {
            "sequences": seen,
            "share": seen / sequences,
            "rule": f">= {SEEN_SHARE:.0%} of a sequence's {WINDOW}-token windows occur in the training split",
        },
    }
