"""``python -m optbench data [--input FOLDER] [--out DIR] [--tokenizer PATH | --vocab N]`` (``make data``).

Without ``--input`` it builds the built-in corpus (``pydocs``: CPython's own documentation, see
:mod:`optbench.corpus.pydocs`) into ``data/pydocs``; with ``--input`` it tokenizes your folder of
.txt/.jsonl files (:mod:`optbench.corpus.prepare`). It prints the ``data.path`` blend to train on.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from optbench.common.errors import Problem, UserError
from optbench.common.redact import clipped

DEFAULT_VOCAB = 512
"""The tiny proxies' vocabulary: their recipes train on the corpus without a model.vocab_size override."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m optbench data", description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", help="folder of .txt / .jsonl documents (default: the built-in pydocs corpus)")
    parser.add_argument("--out", help="output folder (default: data/<corpus or input folder name>)")
    parser.add_argument("--tokenizer", help="an existing Hugging Face tokenizer.json or folder (default: train a BPE)")
    parser.add_argument(
        "--vocab", default=str(DEFAULT_VOCAB), help=f"BPE vocabulary to train (default {DEFAULT_VOCAB})"
    )
    args = parser.parse_args(argv)
    text = str(args.vocab).strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 8):
        raise UserError(Problem("VOCAB", f"{clipped(text, 20)!r} is not a whole number of tokens"))
    args.vocab = int(text)
    from optbench.common.checkout import repo_root
    from optbench.corpus.prepare import is_earlier_corpus, parts_from_folder, prepare
    from optbench.common.outputs import check_output, output_problem

    if args.vocab < 258 or args.vocab > 1 << 20:
        raise UserError(Problem("VOCAB", f"must be from 258 to {1 << 20:,}, got {args.vocab}"))
    for field, value in (("INPUT", args.input), ("TOKENIZER", args.tokenizer)):
        if value is not None and (len(value) > 4096 or any(ord(c) < 32 for c in value)):
            raise UserError(Problem(field, "must be a path on one line of at most 4,096 characters"))
    from optbench.common.redact import secret_in_path

    for field, value in (("INPUT", args.input), ("TOKENIZER", args.tokenizer)):
        source = secret_in_path(value) if value else None
        if source is not None:  # corpus.json records it, and hides every secret: the path would be rewritten
            raise UserError(
                Problem(
                    field,
                    f"the path holds the value of {source}, a secret, which corpus.json and "
                    "the printed data.path would hide, naming a path that does not exist; "
                    "rename the folder or run without that variable set; nothing was written",
                )
            )
    inputs = [p for p in (args.input, args.tokenizer) if p]
    if args.input and not Path(args.input).resolve().name:
        raise UserError(
            Problem("INPUT", f"{args.input} is the file system's root; give a folder of .txt or .jsonl files")
        )
    out = (
        Path(args.out)
        if args.out
        else repo_root() / "data" / (Path(args.input).resolve().name if args.input else "pydocs")
    )
    from optbench.common.replace import recover_beside

    if output_problem(str(out), "corpus", inputs, earlier=is_earlier_corpus) is not None:
        recover_beside([out])  # a build killed while it made OUT left a journal: undo it, then judge OUT again
    check_output(str(out), "OUT", "corpus", inputs, earlier=is_earlier_corpus)
    if args.input:
        parts, name = parts_from_folder(args.input), Path(args.input).resolve().name
        about = {"corpus": name, "what": f"documents from {Path(args.input).resolve()}"}
    else:
        from optbench.corpus.pydocs import ABOUT, NAME, pydocs_parts

        parts, name, about = pydocs_parts(), NAME, ABOUT
    print(
        f"corpus {name}: {sum(len(p.documents) for p in parts):,} documents in {len(parts)} part(s) -> {out}",
        flush=True,
    )
    manifest = prepare(parts, out, tokenizer=args.tokenizer, vocab_size=args.vocab, about=about)
    from optbench.common.tables import console_table

    removed = manifest["near_duplicates"]["removed"]
    rows = [[p["name"], f"{p['documents']:,}", f"{p['tokens']:,}", p["prefix"]] for p in manifest["parts"]]
    rows.append(["near copies", f"{sum(removed.values()):,} dropped", "-", manifest["near_duplicates"]["rule"]])
    print("\n".join(console_table(["part", "documents", "tokens", "files"], rows, ("left", "right", "right", "left"))))
    print(
        f"  tokenizer    {manifest['tokenizer']['vocab_size']:,} tokens ({manifest['tokenizer']['source']}) "
        f"{manifest['tokenizer']['path']}\n  total        {manifest['tokens']:,} tokens from "
        f"{manifest['characters']:,} characters in {manifest['seconds']} s\ntrain on it:   "
        + (
            "data=pydocs"
            if not args.input and not args.out
            else f"data=indexed 'data.path={manifest['data_path']}' data.tokenizer={manifest['tokenizer']['path']}"
        )
    )
    return 0
