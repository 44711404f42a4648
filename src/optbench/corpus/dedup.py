"""Near-duplicate documents, removed before a corpus is tokenized and split.

Megatron splits a prefix's documents into contiguous train/validation/test ranges, so a document
and its near copy can land on both sides of the split and the validation loss then measures recall.
CPython's documentation has such pairs (a module and its pure-Python twin, a reference topic repeated
inside a longer one). The rule, the usual shingle containment test of web-corpus deduplication:

* a document's **shingles** are its lower-cased word 8-grams (a shorter document is one shingle);
* documents are visited longest first (ties: corpus order); one is **kept** unless at least
  ``CONTAINMENT`` of its shingles occur in a single document kept before it.

Shingles found in more than ``COMMON_SHINGLE_DOCS`` documents are boilerplate, not evidence of a copy,
and are left out of both sides of the test (this also bounds the cost on large corpora).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Sequence

SHINGLE_WORDS = 8
CONTAINMENT = 0.5
COMMON_SHINGLE_DOCS = 1000
RULE = (
    f"a document is dropped when >= {CONTAINMENT:.0%} of its word {SHINGLE_WORDS}-grams occur in one longer "
    "document kept before it (optbench.corpus.dedup)"
)
WORD = re.compile(r"\w+")


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()


def shingles(text: str) -> set[bytes]:
    """Hashes of the document's lower-cased word 8-grams (one hash of all its words when it is shorter)."""
    words = WORD.findall(text.lower())
    if len(words) < SHINGLE_WORDS:
        return {_digest(" ".join(words))} if words else set()
    return {_digest(" ".join(words[i : i + SHINGLE_WORDS])) for i in range(len(words) - SHINGLE_WORDS + 1)}


def near_duplicates(documents: Sequence[str]) -> dict[int, int]:
    """Index of every near-duplicate document -> index of the kept document that contains it."""
    sets = [shingles(d) for d in documents]
    postings: dict[bytes, list[int]] = defaultdict(list)
    for i, found in enumerate(sets):
        for shingle in found:
            postings[shingle].append(i)
    common = {s for s, docs in postings.items() if len(docs) > COMMON_SHINGLE_DOCS}
    kept: set[int] = set()
    dropped: dict[int, int] = {}
    for i in sorted(range(len(sets)), key=lambda k: (-len(sets[k]), k)):
        evidence = sets[i] - common
        counts = Counter(j for s in evidence for j in postings[s] if j in kept)
        best = counts.most_common(1)
        if evidence and best and best[0][1] >= CONTAINMENT * len(evidence):
            dropped[i] = best[0][0]
        else:
            kept.add(i)
    return dropped
