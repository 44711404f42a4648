"""Megatron's indexed dataset format (``<prefix>.bin`` + ``<prefix>.idx``), written and read with numpy.

The format Megatron Core's ``IndexedDataset`` reads (megatron/core/datasets/indexed_dataset.py, 0.16)
and Megatron Bridge's GPT datasets build on; ``tools/preprocess_data.py`` writes it:

* ``.bin``: every sequence's tokens back to back, in the index's dtype;
* ``.idx``: ``MMIDIDX\\x00\\x00``, version ``<Q`` 1, dtype code ``<B`` (uint16 = 8 below 65,500 tokens
  in the vocabulary, else int32 = 4), sequence count ``<Q``, document count ``<Q`` (one more than the
  documents), then the sequence lengths (int32), sequence byte offsets (int64) and document indices
  (int64: 0, then the sequence count after each document).

One document is one sequence here (``preprocess_data.py`` without sentence splitting), ending in the
end-of-document token. :func:`read_index` checks everything a corrupt or truncated file could get
wrong and raises :class:`~optbench.common.errors.UserError` naming the prefix and what is wrong.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from optbench.common.errors import UserError
from optbench.common.io import atomic_write_with

HEADER = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}
"""Megatron Core's DType codes."""
TOKEN_DTYPES = (np.uint8, np.uint16, np.int32, np.int64)
_PREAMBLE = len(HEADER) + 8 + 1 + 8 + 8


def token_dtype(vocab_size: int) -> type:
    """Megatron's ``DType.optimal_dtype``: uint16 below 65,500 tokens, else int32."""
    return np.uint16 if vocab_size < 65500 else np.int32


def _code(dtype: type) -> int:
    return next(code for code, known in DTYPES.items() if known == dtype)


def write_indexed(prefix: str | Path, documents: Iterable[np.ndarray], vocab_size: int) -> tuple[int, int]:
    """Write ``<prefix>.bin`` and ``.idx`` (each atomically) from token arrays; returns (documents, tokens)."""
    prefix = Path(prefix)
    dtype = token_dtype(vocab_size)
    lengths: list[int] = []

    def write_bin(handle) -> None:
        for tokens in documents:
            array = np.asarray(tokens)
            if array.size == 0:
                continue
            if array.min() < 0 or array.max() >= vocab_size:
                raise ValueError(f"token ids must lie in [0, {vocab_size}), got {array.min()}..{array.max()}")
            handle.write(array.astype(dtype).tobytes(order="C"))
            lengths.append(int(array.size))

    atomic_write_with(prefix.with_name(prefix.name + ".bin"), write_bin)
    counts = np.array(lengths, dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(counts.astype(np.int64) * np.dtype(dtype).itemsize)[:-1]]).astype(
        np.int64
    )
    documents_index = np.arange(len(lengths) + 1, dtype=np.int64)

    def write_idx(handle) -> None:
        handle.write(HEADER)
        handle.write(struct.pack("<Q", VERSION))
        handle.write(struct.pack("<B", _code(dtype)))
        handle.write(struct.pack("<Q", len(lengths)))
        handle.write(struct.pack("<Q", len(documents_index)))
        handle.write(counts.tobytes(order="C"))
        handle.write(pointers[: len(lengths)].tobytes(order="C"))
        handle.write(documents_index.tobytes(order="C"))

    atomic_write_with(prefix.with_name(prefix.name + ".idx"), write_idx)
    return len(lengths), int(counts.sum())


@dataclass(frozen=True)
class IndexedDataset:
    """One ``<prefix>.bin/.idx`` pair, memory-mapped: documents and their tokens."""

    prefix: str
    tokens: np.ndarray
    """Every token of the .bin (memory-mapped)."""
    starts: np.ndarray
    """Token offset of each document in ``tokens`` (int64)."""
    lengths: np.ndarray
    """Tokens of each document (int64)."""

    @property
    def documents(self) -> int:
        return len(self.lengths)

    def document(self, index: int) -> np.ndarray:
        start = int(self.starts[index])
        return self.tokens[start : start + int(self.lengths[index])]


def _bad(prefix: Path, what: str) -> UserError:
    return UserError(
        f"{prefix} is not a readable Megatron indexed dataset: {what}; rebuild it with `make data`", "data.path"
    )


def read_index(prefix: str | Path) -> IndexedDataset:
    """Open and check ``<prefix>.idx`` and ``<prefix>.bin``."""
    prefix = Path(prefix)
    idx, bin_path = prefix.with_name(prefix.name + ".idx"), prefix.with_name(prefix.name + ".bin")
    missing = [p.name for p in (idx, bin_path) if not p.is_file()]
    if missing:
        raise UserError(
            f"no {' and no '.join(missing)} for the prefix {prefix} (data.path names prefixes, without .bin/.idx); "
            "prepare a dataset with `make data`",
            "data.path",
        )
    raw = np.memmap(idx, dtype=np.uint8, mode="r") if idx.stat().st_size else np.zeros(0, np.uint8)
    if raw.size < _PREAMBLE or bytes(raw[: len(HEADER)]) != HEADER:
        raise _bad(prefix, f"{idx.name} has no Megatron index header")
    version, code, sequences, document_entries = struct.unpack("<QBQQ", bytes(raw[len(HEADER) : _PREAMBLE]))
    if version != VERSION or code not in DTYPES or DTYPES[code] not in TOKEN_DTYPES:
        raise _bad(prefix, f"{idx.name} has version {version} and dtype code {code}")
    needed = _PREAMBLE + sequences * (4 + 8) + document_entries * 8
    if raw.size < needed:
        raise _bad(prefix, f"{idx.name} is truncated ({raw.size:,} of {needed:,} bytes)")
    lengths = np.frombuffer(raw, dtype=np.int32, count=sequences, offset=_PREAMBLE).astype(np.int64)
    pointers = np.frombuffer(raw, dtype=np.int64, count=sequences, offset=_PREAMBLE + 4 * sequences)
    dtype = DTYPES[code]
    itemsize = np.dtype(dtype).itemsize
    expected = np.concatenate([[0], np.cumsum(lengths * itemsize)[:-1]]) if sequences else lengths
    if sequences == 0 or (lengths <= 0).any():
        raise _bad(prefix, "it holds no tokens" if sequences == 0 else "a sequence has no tokens")
    if not np.array_equal(pointers, expected):
        raise _bad(prefix, f"{idx.name}'s sequence offsets are not consecutive")
    size = bin_path.stat().st_size
    if size != int(lengths.sum()) * itemsize:
        raise _bad(prefix, f"{bin_path.name} has {size:,} bytes, the index describes {int(lengths.sum()) * itemsize:,}")
    tokens = np.memmap(bin_path, dtype=dtype, mode="r")
    return IndexedDataset(str(prefix), tokens, pointers // itemsize, lengths)
