"""Token streams of the local engine, indexed by (seed, global sample index).

Sample ``i`` of a stream is a pure function of the data seed and ``i``, so every data-parallel rank
draws its own samples without communication and a resumed run sees exactly the samples the
uninterrupted run would have seen. A sample is ``seq_length + 1`` tokens: inputs are the first
``seq_length``, labels the last ``seq_length``.

``mock`` -- uniform random tokens over the vocabulary, like Megatron Bridge's mock dataset: for
throughput; nothing is learnable, the loss stays at ln V.

``synthetic`` -- a second-order sparse Markov chain, learnable and with a known loss floor:

* every token ``a`` has ``K = SUCCESSORS`` distinct successor tokens ``succ[a, 0..K-1]`` and every
  token ``c`` a shift ``shift[c]`` in ``0..K-1``, both drawn once from the data seed;
* a slot ``j`` is drawn with the geometric weights ``w_j ~ SLOT_RATIO**j`` and the next token after
  ``... c, a`` is ``succ[a, (j + shift[c]) mod K]``.

Given the last two tokens the next one has entropy exactly ``H(w)`` (the successors are distinct).
A model that looks at the last token only is left with the mixture over shifts, about ``ln K``; one
that looks at no context with about ``ln V``. So the loss falls from ln V (random init) to about
ln K once the bigram table is learnt, and below that only if attention learns to look two tokens
back. The first label of a sample (its predecessor has no visible predecessor) carries the mixture
entropy ``H1``; the floor printed by :meth:`SyntheticStream.loss_floor` is
``(H1 + (seq_length - 1) * H(w)) / seq_length`` nats per token.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from optbench.config.schema import DataConfig, ModelConfig, TrainConfig
from optbench.engine.local.stream_info import StreamInfo
from optbench.common.errors import Problem, UserError

SUCCESSORS = 8
"""K: distinct successors of every token in the synthetic chain."""
SLOT_RATIO = 0.5
"""Geometric ratio of the slot weights: w = (1, 1/2, 1/4, ...) / sum, H(w) = 1.36 nats for K = 8."""
TABLE_STREAM, SYNTHETIC_STREAM, MOCK_STREAM = 0, 1, 2
"""Independent numpy seed streams: the chain's tables, synthetic samples, mock samples."""


def entropy(p: np.ndarray) -> float:
    """Shannon entropy in nats of a probability vector."""
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def _distinct_rows(rng: np.random.Generator, rows: int, k: int, high: int) -> np.ndarray:
    """``rows`` x ``k`` integers below ``high``, distinct within each row (redraws rows with repeats)."""
    table = rng.integers(0, high, size=(rows, k))
    while True:
        ordered = np.sort(table, axis=1)
        bad = np.nonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))[0]
        if bad.size == 0:
            return table
        table[bad] = rng.integers(0, high, size=(bad.size, k))


class MockStream:
    """Uniform random tokens (Megatron Bridge's mock data): for throughput, loss stays at ln V."""

    def __init__(self, vocab_size: int, seed: int, seq_length: int) -> None:
        self.vocab_size, self.seed, self.seq_length = vocab_size, seed, seq_length

    def sample(self, index: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, MOCK_STREAM, index))
        return rng.integers(0, self.vocab_size, size=self.seq_length + 1)

    def batch(self, indices: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.stack([self.sample(int(i)) for i in indices])).long()

    def info(self) -> StreamInfo:
        floor = math.log(self.vocab_size)
        return StreamInfo("mock", self.vocab_size, floor, f"uniform random tokens over {self.vocab_size}")


class SyntheticStream:
    """The second-order sparse Markov chain described in the module docstring."""

    def __init__(self, vocab_size: int, seed: int, seq_length: int) -> None:
        if vocab_size <= SUCCESSORS:
            raise UserError(
                f"the synthetic stream needs more than {SUCCESSORS} tokens, got {vocab_size}", "data.vocab_size"
            )
        self.vocab_size, self.seed, self.seq_length = vocab_size, seed, seq_length
        rng = np.random.default_rng((seed, TABLE_STREAM))
        self.successors = _distinct_rows(rng, vocab_size, SUCCESSORS, vocab_size)
        self.shift = rng.integers(0, SUCCESSORS, size=vocab_size)
        weights = SLOT_RATIO ** np.arange(SUCCESSORS)
        self.weights = weights / weights.sum()
        self.cdf = np.cumsum(self.weights)
        self.cdf[-1] = 1.0

    def batch(self, indices: np.ndarray) -> torch.Tensor:
        """Samples ``indices`` as a [len(indices), seq_length + 1] int64 tensor."""
        n, length = len(indices), self.seq_length + 1
        starts = np.empty((n, 2), dtype=np.int64)
        slots = np.empty((n, length), dtype=np.int64)
        for row, index in enumerate(indices):
            rng = np.random.default_rng((self.seed, SYNTHETIC_STREAM, int(index)))
            starts[row] = rng.integers(0, self.vocab_size, size=2)
            slots[row] = np.searchsorted(self.cdf, rng.random(length), side="right")
        tokens = np.empty((n, length), dtype=np.int64)
        before, current = starts[:, 0], starts[:, 1]  # the first visible token's invisible predecessor
        tokens[:, 0] = current
        for t in range(1, length):
            column = (slots[:, t] + self.shift[before]) % SUCCESSORS
            before, current = current, self.successors[current, column]
            tokens[:, t] = current
        return torch.from_numpy(tokens)

    def mixture_entropy(self) -> float:
        """Entropy of the next token given the last token only, when the one before is uniform (H1)."""
        counts = np.bincount(self.shift, minlength=SUCCESSORS) / self.vocab_size
        mixture = np.zeros(SUCCESSORS)
        for shift, share in enumerate(counts):
            mixture += share * np.roll(self.weights, shift)
        return entropy(mixture)

    def loss_floor(self) -> float:
        """Lowest achievable mean cross-entropy per label, nats."""
        return (self.mixture_entropy() + (self.seq_length - 1) * entropy(self.weights)) / self.seq_length

    def info(self) -> StreamInfo:
        text = (
            f"2nd-order sparse Markov chain over {self.vocab_size} tokens, {SUCCESSORS} successors, "
            f"entropy {entropy(self.weights):.3f} nats given two tokens, ~{math.log(SUCCESSORS):.2f} given one, "
            f"{math.log(self.vocab_size):.2f} given none"
        )
        return StreamInfo("synthetic", self.vocab_size, self.loss_floor(), text)


def data_vocab_size(data: DataConfig, model: ModelConfig) -> int:
    """Tokens the stream uses: data.vocab_size, else the model's (unpadded) vocabulary."""
    vocab = data.vocab_size or model.vocab_size
    if vocab > model.vocab_size:
        raise UserError(
            Problem("data.vocab_size", f"{vocab} exceeds the model's vocabulary ({model.vocab_size}); lower it")
        )
    return vocab


def build_stream(data: DataConfig, model: ModelConfig, train: TrainConfig):
    """The token stream a run trains on (mock, synthetic, or Megatron indexed data: indexed_data.py)."""
    if data.kind == "indexed":
        from optbench.corpus.tokenizer import load_tokenizer
        from optbench.engine.local.indexed_data import build_indexed_stream

        if not data.tokenizer:
            raise UserError(
                "indexed data needs the tokenizer it was built with (a local tokenizer.json or folder)",
                "data.tokenizer",
            )
        tokens = load_tokenizer(data.tokenizer).vocab_size
        if tokens > model.vocab_size:
            raise UserError(
                f"the tokenizer has {tokens:,} tokens, the model's vocabulary {model.vocab_size:,}; set "
                f"model.vocab_size={tokens}",
                "model.vocab_size",
            )
        return build_indexed_stream(data, train, model.vocab_size)
    vocab = data_vocab_size(data, model)
    if data.kind == "mock":
        return MockStream(vocab, data.seed, train.seq_length)
    return SyntheticStream(vocab, data.seed, train.seq_length)


def microbatch_indices(step: int, rank: int, world: int, micro: int, train: TrainConfig) -> np.ndarray:
    """Global sample indices of microbatch ``micro`` of optimizer step ``step`` (1-based) on ``rank``.

    Step ``n`` consumes samples ``[(n-1)*gbs, n*gbs)``; as in Megatron, each data-parallel rank takes a
    contiguous ``gbs / world`` slice of them and splits it into microbatches of ``mbs``.
    """
    per_rank = train.gbs // world
    start = (step - 1) * train.gbs + rank * per_rank + micro * train.mbs
    return np.arange(start, start + train.mbs)
