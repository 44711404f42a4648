"""Tokenizers for prepared corpora: Hugging Face ``tokenizers``, local files only.

Either an existing Hugging Face tokenizer (a ``tokenizer.json`` file, or a folder holding one, as
``save_pretrained`` writes it) or a byte-level BPE trained here on the corpus itself with the
``tokenizers`` library (GPT-2's byte-level scheme: any text is encodable, nothing is downloaded). A
trained tokenizer is saved as a Hugging Face folder (``tokenizer.json``, ``tokenizer_config.json``),
which transformers' ``AutoTokenizer`` and Megatron Bridge's ``HuggingFaceTokenizer`` load offline.
Every document ends in the end-of-document token, as ``preprocess_data.py --append-eod`` does.
"""

from __future__ import annotations

import os
import re

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from optbench.common.errors import UserError

EOD = "<|endoftext|>"
"""The end-of-document token a trained tokenizer gets (GPT-2's)."""


@dataclass
class CorpusTokenizer:
    """A loaded tokenizer: encode text, its vocabulary size and end-of-document id."""

    tokenizer: object
    """A ``tokenizers.Tokenizer``."""
    eod_id: int
    source: str
    """Where it came from: a path, or how it was trained."""

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    def encode_documents(self, texts: Iterable[str]) -> Iterable[list[int]]:
        """Token ids of each text, with the end-of-document token appended."""
        for text in texts:
            yield [*self.tokenizer.encode(text).ids, self.eod_id]


def _tokenizer_file(path: Path) -> Path:
    return path / "tokenizer.json" if path.is_dir() else path


def load_tokenizer(path: str | Path, field: str = "data.tokenizer") -> CorpusTokenizer:
    """A Hugging Face tokenizer from a local ``tokenizer.json`` or a folder holding one."""
    from tokenizers import Tokenizer

    file = _tokenizer_file(Path(path))
    if not file.is_file():
        raise UserError(
            f"no Hugging Face tokenizer at {path} (a tokenizer.json, or a folder holding one); local files only, "
            "nothing is downloaded",
            field,
        )
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as err:  # the tokenizers library raises plain Exceptions for bad files
        raise UserError(
            f"{file} is not a Hugging Face tokenizer file ({' '.join(str(err).split())[:120]})", field
        ) from err
    eod = next(
        (
            tokenizer.token_to_id(t)
            for t in (EOD, "</s>", "<eos>", "<|end_of_text|>")
            if tokenizer.token_to_id(t) is not None
        ),
        None,
    )
    if eod is None:
        raise UserError(f"{file} has no end-of-document token ({EOD}, </s>, <eos>); documents need one", field)
    return CorpusTokenizer(tokenizer, eod, str(file))


def train_byte_level_bpe(texts: Iterable[str], vocab_size: int) -> CorpusTokenizer:
    """A byte-level BPE of ``vocab_size`` tokens (256 byte tokens, merges, and the end-of-document token)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 257 + 1:
        raise UserError(
            f"a byte-level BPE needs at least 258 tokens (256 bytes, a merge, {EOD}), got {vocab_size}", "VOCAB"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    source = f"byte-level BPE trained on the corpus, {size} tokens" + (
        f" (asked for {vocab_size})" if size != vocab_size else ""
    )
    return CorpusTokenizer(tokenizer, tokenizer.token_to_id(EOD), source)


def save_tokenizer(tokenizer: CorpusTokenizer, folder: Path) -> Path:
    """Save as a Hugging Face tokenizer folder (what AutoTokenizer and Bridge's HuggingFaceTokenizer load)."""
    from transformers import PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer, eos_token=EOD, bos_token=EOD, unk_token=EOD)
    try:
        fast.save_pretrained(str(folder))
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(err.filename or folder)) from err
    except (
        Exception
    ) as err:  # the tokenizers library (Rust) raises a bare Exception for a failed write: "... (os error 28)"
        code = re.search(r"\(os error (\d+)\)", str(err))
        if code is None:
            raise
        raise OSError(int(code[1]), os.strerror(int(code[1])), str(folder)) from err
    return folder
