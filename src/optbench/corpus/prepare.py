"""Turn text into Megatron indexed datasets: one prefix per part, a tokenizer, a blend, a manifest.

Input: a folder of ``.txt`` files (one document each) and ``.jsonl`` files (one document per line,
the ``text`` field, as Megatron's ``preprocess_data.py`` reads them). Files directly in the folder form
one part; every subfolder forms its own part. Output, under ``<out>/``:

* ``<part>_text_document.bin/.idx`` per part (Megatron's naming);
* ``tokenizer/``: the Hugging Face tokenizer the tokens come from (given, or a byte-level BPE trained
  on the corpus);
* ``corpus.json``: what was built (parts, documents, tokens, bytes, SHA-256 of every file, tokenizer,
  the blend in ``data.path`` syntax, provenance and the seconds it took).

Documents are written in a seeded shuffled order (the same on every machine), so that Megatron's
contiguous train/validation/test split by document draws from the whole part.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from optbench.corpus.dedup import RULE, near_duplicates
from optbench.corpus.indexed import write_indexed
from optbench.corpus.tokenizer import (
    CorpusTokenizer,
    load_tokenizer,
    save_tokenizer,
    train_byte_level_bpe,
)
from optbench.common.errors import UserError
from optbench.common.io import atomic_write_json
from optbench.common.outputs import SYSTEM_TREES, check_output, claim
from optbench.common.replace import Folder, recover_beside, replacing

SHUFFLE_SEED = 1234
MANIFEST = "corpus.json"
TEXT_FIELD = "text"


@dataclass(frozen=True)
class Part:
    """One dataset prefix: its name and its documents' text."""

    name: str
    documents: list[str]


def _jsonl_documents(path: Path) -> Iterator[str]:
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"{path}:{number} is not JSON ({err.msg})", "INPUT") from err
        text = record.get(TEXT_FIELD) if isinstance(record, dict) else None
        if not isinstance(text, str):
            raise UserError(f"{path}:{number} has no string '{TEXT_FIELD}' field", "INPUT")
        yield text


def _documents(files: Sequence[Path]) -> list[str]:
    documents = []
    for path in files:
        if path.suffix == ".jsonl":
            documents += list(_jsonl_documents(path))
        else:
            documents.append(path.read_text(encoding="utf-8", errors="replace"))
    return [d for d in documents if d.strip()]


def _text_files(folder: Path, recursive: bool) -> list[Path]:
    """The .txt/.jsonl files of ``folder`` (of its whole tree when ``recursive``), links never followed."""
    if not recursive:
        return sorted(
            p for p in folder.iterdir() if p.is_file() and not p.is_symlink() and p.suffix in (".txt", ".jsonl")
        )
    found = []
    for top, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        found += [
            Path(top) / f
            for f in sorted(files)
            if Path(f).suffix in (".txt", ".jsonl") and not (Path(top) / f).is_symlink()
        ]
    return found


def parts_from_folder(folder: str | Path) -> list[Part]:
    """The parts of an input folder: its own .txt/.jsonl files, then one part per subfolder."""
    root = Path(folder)
    resolved = root.resolve()
    if resolved == Path(resolved.anchor) or any(
        resolved == Path(t) or Path(t) in resolved.parents for t in SYSTEM_TREES
    ):
        raise UserError(
            f"{folder} is the file system's root or a system folder; give a folder of .txt or .jsonl files", "INPUT"
        )
    if not root.is_dir():
        raise UserError(f"{folder} is not a folder of .txt or .jsonl files", "INPUT")
    parts = []
    own = _text_files(root, recursive=False)
    if own:
        parts.append(Part(root.name, _documents(own)))
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        files = _text_files(sub, recursive=True)
        if files:
            parts.append(Part(sub.name, _documents(files)))
    parts = [p for p in parts if p.documents]
    if not parts:
        raise UserError(f"{folder} holds no non-empty .txt or .jsonl document", "INPUT")
    return parts


EARLIER_CORPUS_FILES = re.compile(r"tokenizer|corpus\.json|[^/]+_text_document\.(bin|idx)")
"""What a corpus folder written by an earlier optbench (before output markers) holds, and nothing else."""
CORPUS_ENTRIES = re.compile(rf"{EARLIER_CORPUS_FILES.pattern}|\.optbench-corpus|\.[^/]+\.tmp")
"""What ``make data`` writes in its folder (its marker, and the temporary files of a write it was killed in)."""


def is_corpus_entry(path: Path) -> bool:
    """Whether ``path``, in a corpus folder, is one ``make data`` wrote (the folder is replaced as a whole)."""
    return (
        bool(CORPUS_ENTRIES.fullmatch(path.name))
        and (path.is_dir() == (path.name == "tokenizer"))
        and not path.is_symlink()
    )


def is_earlier_corpus(folder: Path) -> bool:
    """Whether ``folder`` is a corpus an earlier ``make data`` wrote (its manifest and only its files)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        names = [p.name for p in folder.iterdir()]
    except (OSError, ValueError):
        return False
    return (
        isinstance(manifest, dict)
        and {"parts", "data_path", "document_order"} <= manifest.keys()
        and all(EARLIER_CORPUS_FILES.fullmatch(name) for name in names)
    )


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def blend_text(entries: Sequence[tuple[float, str]]) -> str:
    """``[w1,prefix1,w2,prefix2]`` as typed after ``data.path=`` (one prefix alone needs no weight)."""
    if len(entries) == 1:
        return f"[{entries[0][1]}]"
    return "[" + ",".join(f"{weight:.4f},{prefix}" for weight, prefix in entries) + "]"


def _without_near_duplicates(parts: Sequence[Part]) -> tuple[list[Part], dict[str, int]]:
    """The parts without their near-duplicate documents (across all parts), and how many each lost."""
    owners = [(k, i) for k, part in enumerate(parts) for i in range(len(part.documents))]
    dropped = near_duplicates([d for part in parts for d in part.documents])
    gone = {owners[index] for index in dropped}
    kept = [
        Part(part.name, [d for i, d in enumerate(part.documents) if (k, i) not in gone]) for k, part in enumerate(parts)
    ]
    removed = {part.name: len(part.documents) - len(new.documents) for part, new in zip(parts, kept)}
    return [part for part in kept if part.documents], removed  # a part whose every document is a copy is gone


def prepare(
    parts: Sequence[Part],
    out: str | Path,
    tokenizer: str | Path | None = None,
    vocab_size: int = 512,
    about: Mapping[str, object] | None = None,
) -> dict:
    """Tokenize ``parts`` into ``out`` (replaced as a whole only when complete); returns the manifest.

    ``out`` must be new, empty or an earlier corpus (checked again here: :func:`optbench.common.outputs.claim`)."""
    started = time.perf_counter()
    recover_beside([out])
    out = check_output(out, "OUT", "corpus", earlier=is_earlier_corpus)
    parts, removed = _without_near_duplicates(parts)
    with replacing(folders=[Folder(out, holds=is_corpus_entry)]):
        claim(out, "OUT", "corpus")
        corpus: CorpusTokenizer = (
            load_tokenizer(tokenizer, "TOKENIZER")
            if tokenizer is not None
            else train_byte_level_bpe((d for part in parts for d in part.documents), vocab_size)
        )
        save_tokenizer(corpus, out / "tokenizer")
        rng = np.random.default_rng(SHUFFLE_SEED)
        built = []
        for part in parts:
            order = rng.permutation(len(part.documents))
            texts = [part.documents[i] for i in order]
            prefix = out / f"{part.name}_text_document"
            ids = (np.array(doc, dtype=np.int64) for doc in corpus.encode_documents(texts))
            documents, tokens = write_indexed(prefix, ids, corpus.vocab_size)
            built.append(
                {
                    "name": part.name,
                    "prefix": str(prefix),
                    "documents": documents,
                    "tokens": tokens,
                    "characters": sum(len(t) for t in texts),
                    "sha256": {suffix: _sha256(prefix.with_name(prefix.name + suffix)) for suffix in (".bin", ".idx")},
                }
            )
        total = sum(p["tokens"] for p in built)
        entries = [(p["tokens"] / total, p["prefix"]) for p in built]
        manifest = {
            **dict(about or {}),
            "parts": built,
            "documents": sum(p["documents"] for p in built),
            "tokens": total,
            "characters": sum(p["characters"] for p in built),
            "tokenizer": {
                "path": str(out / "tokenizer"),
                "source": corpus.source,
                "vocab_size": corpus.vocab_size,
                "eod_id": corpus.eod_id,
            },
            "data_path": blend_text(entries),
            "blend": "weights proportional to each part's tokens",
            "document_order": f"shuffled with numpy default_rng({SHUFFLE_SEED}) per part",
            "near_duplicates": {"removed": removed, "rule": RULE},
            "python": platform.python_version(),
            "seconds": round(time.perf_counter() - started, 2),
        }
        atomic_write_json(out / MANIFEST, manifest)
    return manifest
