"""Megatron indexed datasets on the local engine: the same ``data.path`` blend and split as the cluster.

Sample ``i`` of a split is a pure function of (data seed, ``i``), like the synthetic streams, so every
data-parallel rank draws its own samples and a resumed run continues at exactly the next sample.
What Megatron's ``GPTDataset`` and ``BlendedDataset`` do, written out:

* **split** (``data.split``, e.g. ``98,2,0``): each prefix's documents are cut into contiguous train,
  validation and test ranges in those proportions (Megatron's ``get_split_indices``);
* **samples**: per epoch the split's documents are concatenated in a seeded random order and cut into
  samples of ``seq_length + 1`` tokens, each starting where the previous one's inputs end (Megatron's
  ``sample_idx``); the samples of an epoch are visited in a seeded random order (``shuffle_idx``);
  the tokens left over at the end of an epoch are dropped;
* **blend** (``data.path=[w1,prefix1,w2,prefix2,...]``): global sample ``i`` goes to the dataset whose
  share is furthest behind its weight, ``argmax_k (w_k (i + 1) - taken_k)`` (Megatron's
  ``build_blending_indices``), and is that dataset's next sample.

The seeds differ from Megatron's, so the order is not Megatron's order, but the distribution is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from optbench.config.data_path import dataset_blend, split_ranges, split_weights
from optbench.config.schema import DataConfig, TrainConfig
from optbench.corpus.indexed import IndexedDataset, read_index
from optbench.engine.local.stream_info import StreamInfo
from optbench.common.errors import UserError

SPLITS = ("train", "valid", "test")
INDEXED_STREAM = 3
"""numpy seed stream of indexed data (after the synthetic streams' 0-2)."""
MAX_SCANNED_TOKENS = 1 << 28


class SplitSampler:
    """The samples of one split of one prefix."""

    def __init__(
        self, dataset: IndexedDataset, documents: tuple[int, int], seq_length: int, seed: tuple[int, ...]
    ) -> None:
        self.dataset, self.seq, self.seed = dataset, seq_length, seed
        self.doc_ids = np.arange(*documents)
        lengths = dataset.lengths[self.doc_ids]
        self.tokens_per_epoch = int(lengths.sum())
        self.samples_per_epoch = max(0, (self.tokens_per_epoch - 1) // seq_length)
        self._epoch: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None

    def _layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(documents in this epoch's order, their token offsets in the epoch, the sample order)."""
        if self._epoch is None or self._epoch[0] != epoch:
            rng = np.random.default_rng((*self.seed, epoch))
            order = self.doc_ids[rng.permutation(len(self.doc_ids))]
            offsets = np.concatenate([[0], np.cumsum(self.dataset.lengths[order])])
            self._epoch = (epoch, order, offsets, rng.permutation(self.samples_per_epoch))
        return self._epoch[1:]

    def sample(self, index: int) -> np.ndarray:
        epoch, within = divmod(index, self.samples_per_epoch)
        order, offsets, shuffle = self._layout(epoch)
        start = int(shuffle[within]) * self.seq
        end = start + self.seq + 1
        first = int(np.searchsorted(offsets, start, side="right")) - 1
        pieces, position, doc = [], start, first
        while position < end:
            begin = position - int(offsets[doc])
            take = min(end - position, int(self.dataset.lengths[order[doc]]) - begin)
            pieces.append(self.dataset.document(int(order[doc]))[begin : begin + take])
            position += take
            doc += 1
        return np.concatenate(pieces).astype(np.int64)


class BlendedSampler:
    """Samples drawn from several samplers in proportion to their weights (Megatron's blending)."""

    def __init__(self, samplers: list[SplitSampler], weights: list[float]) -> None:
        self.samplers = samplers
        self.weights = np.array(weights, dtype=np.float64) / float(sum(weights))  # Megatron normalises the blend
        self._dataset = np.zeros(0, dtype=np.int64)
        self._local = np.zeros(0, dtype=np.int64)

    def _extend(self, size: int) -> None:
        done = len(self._dataset)
        if size <= done:
            return
        taken = np.bincount(self._dataset, minlength=len(self.samplers)).astype(np.float64)
        chosen, local = [], []
        for index in range(done, size):
            k = int(np.argmax(self.weights * (index + 1) - taken))
            chosen.append(k)
            local.append(int(taken[k]))
            taken[k] += 1
        self._dataset = np.concatenate([self._dataset, chosen])
        self._local = np.concatenate([self._local, local])

    def sample(self, index: int) -> np.ndarray:
        self._extend(index + 1)
        return self.samplers[int(self._dataset[index])].sample(int(self._local[index]))

    def taken(self, count: int) -> np.ndarray:
        """How many of samples ``0 .. count - 1`` each sampler gives."""
        self._extend(count)
        return np.bincount(self._dataset[:count], minlength=len(self.samplers))


@dataclass
class IndexedStream:
    """The local engine's stream over Megatron indexed data: train samples, and validation samples."""

    train: BlendedSampler
    valid: BlendedSampler | None
    vocab_size: int
    text: str

    def batch(self, indices: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.stack([self.train.sample(int(i)) for i in indices]))

    def valid_batch(self, indices: np.ndarray) -> torch.Tensor:
        assert self.valid is not None
        return torch.from_numpy(np.stack([self.valid.sample(int(i)) for i in indices]))

    def info(self) -> StreamInfo:
        return StreamInfo("indexed", self.vocab_size, None, self.text)


def build_indexed_stream(data: DataConfig, train: TrainConfig, vocab_size: int) -> IndexedStream:
    """Open every prefix of ``data.path``, split it, and blend the splits; errors name data.path or data.split."""
    prefixes, weights = dataset_blend(list(data.path))
    weights = weights or [1.0] * len(prefixes)
    fractions = split_weights(data.split)
    datasets = [read_index(prefix) for prefix in prefixes]
    for dataset in datasets:
        # One pass over the tokens (about a second per 2**28 tokens); larger files trust their tokenizer.
        top = int(dataset.tokens.max()) if 0 < dataset.tokens.size <= MAX_SCANNED_TOKENS else 0
        if top >= vocab_size:
            raise UserError(
                f"{dataset.prefix} holds token id {top}, outside the {vocab_size}-token vocabulary; give the "
                "tokenizer it was built with (data.tokenizer) and a model.vocab_size at least its size",
                "data.path",
            )
    splits = {}
    for s, name in enumerate(SPLITS[:2]):
        seed = data.valid_seed if name == "valid" and data.valid_seed is not None else data.seed
        samplers = [
            SplitSampler(d, split_ranges(d.documents, fractions)[s], train.seq_length, (seed, INDEXED_STREAM, k, s))
            for k, d in enumerate(datasets)
        ]
        empty = [sampler.dataset.prefix for sampler in samplers if sampler.samples_per_epoch == 0]
        if name == "train" and empty:
            raise UserError(
                f"the training split of {empty[0]} has fewer than seq_length + 1 = {train.seq_length + 1} tokens; "
                "give a larger corpus or a larger train share in data.split",
                "data.split",
            )
        splits[name] = None if empty else BlendedSampler(samplers, weights)
    documents = sum(d.documents for d in datasets)
    tokens = sum(int(d.lengths.sum()) for d in datasets)
    text = (
        f"Megatron indexed data, {len(datasets)} prefix(es), {documents:,} documents, {tokens:,} tokens, "
        f"split {data.split}" + ("" if splits["valid"] else " (no validation split)")
    )
    return IndexedStream(splits["train"], splits["valid"], vocab_size, text)
