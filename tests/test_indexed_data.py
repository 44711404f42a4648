"""Real text in Megatron's format: our .bin/.idx against Megatron Core's reader, the corpus tool, the
local engine's blended, split, resumable sampler, and the bad-data errors."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import MICRO_KIMI
from optbench.compose.recipe import compose_run
from optbench.config.data_path import split_ranges, split_weights
from optbench.config.schema import DataConfig, TrainConfig
from optbench.corpus.indexed import read_index, write_indexed
from optbench.corpus.prepare import Part, parts_from_folder, prepare
from optbench.engine.local import launch_local
from optbench.engine.local.indexed_data import build_indexed_stream
from optbench.common.errors import UserError
from optbench.metrics import read_metrics

pytestmark = pytest.mark.slow  # builds datasets and trains on them; `make test-fast` skips it


@pytest.fixture(scope="module")
def megatron_indexed():
    """Megatron Core's reader, imported by the tests that read with it (its import takes seconds, and would
    otherwise be paid by every collection, `make test-fast`'s included, though this module is slow)."""
    return pytest.importorskip("megatron.core.datasets.indexed_dataset")


def documents(count: int, vocab: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=int(rng.integers(1, 300))) for _ in range(count)]


@pytest.mark.parametrize("vocab", [512, 100_000])  # uint16 and int32 token files
def test_our_files_read_back_with_megatron_cores_reader_and_theirs_with_ours(tmp_path, vocab, megatron_indexed):
    docs = documents(50, vocab)
    ours = tmp_path / "ours_text_document"
    assert write_indexed(ours, docs, vocab) == (50, sum(len(d) for d in docs))
    theirs = megatron_indexed.IndexedDataset(str(ours))
    assert len(theirs) == 50 and list(theirs.document_indices) == list(range(51))
    assert all(np.array_equal(theirs[i], docs[i]) for i in range(50))
    assert theirs.index.dtype == (np.uint16 if vocab < 65500 else np.int32)

    builder_prefix = tmp_path / "megatron_text_document"
    builder = megatron_indexed.IndexedDatasetBuilder(
        str(builder_prefix) + ".bin", dtype=megatron_indexed.DType.optimal_dtype(vocab)
    )
    for doc in docs:
        builder.add_document(np.asarray(doc), [len(doc)])
    builder.finalize(str(builder_prefix) + ".idx")
    mine = read_index(builder_prefix)
    assert mine.documents == 50 and all(np.array_equal(mine.document(i), docs[i]) for i in range(50))
    for suffix in (".bin", ".idx"):  # byte for byte the file Megatron's own builder writes
        assert (tmp_path / f"ours_text_document{suffix}").read_bytes() == (
            tmp_path / f"megatron_text_document{suffix}"
        ).read_bytes()


def _corrupt(prefix: Path, how: str) -> None:
    idx, bin_path = Path(str(prefix) + ".idx"), Path(str(prefix) + ".bin")
    if how == "missing":
        bin_path.unlink()
    elif how == "empty idx":
        idx.write_bytes(b"")
    elif how == "garbage idx":
        idx.write_bytes(b"not an index" * 10)
    elif how == "truncated idx":
        idx.write_bytes(idx.read_bytes()[:60])
    elif how == "short bin":
        bin_path.write_bytes(bin_path.read_bytes()[:-2])
    elif how == "bad version":
        data = bytearray(idx.read_bytes())
        data[9:17] = struct.pack("<Q", 7)
        idx.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["missing", "empty idx", "garbage idx", "truncated idx", "short bin", "bad version"])
def test_a_missing_empty_or_corrupt_prefix_is_one_clear_error(tmp_path, how):
    prefix = tmp_path / "c_text_document"
    write_indexed(prefix, documents(5, 512), 512)
    _corrupt(prefix, how)
    with pytest.raises(UserError) as err:
        read_index(prefix)
    [problem] = err.value.problems
    assert problem.field == "data.path" and str(prefix) in problem.message and "\n" not in problem.message


def test_an_empty_dataset_is_refused(tmp_path):
    write_indexed(tmp_path / "e", [], 512)
    with pytest.raises(UserError, match="holds no tokens"):
        read_index(tmp_path / "e")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """A small corpus built by the real tool: two parts (a .txt folder and a .jsonl file), a trained BPE."""
    root = tmp_path_factory.mktemp("corpus")
    source = root / "input"
    (source / "prose").mkdir(parents=True)
    rng = np.random.default_rng(0)
    words = "the of and a to in is you that it he was for on are as with his they at be this have from".split()
    for i in range(40):
        (source / "prose" / f"doc{i}.txt").write_text(" ".join(rng.choice(words, size=400)) + "\n")
    (source / "notes.jsonl").write_text(
        "".join(json.dumps({"text": " ".join(rng.choice(words, 200))}) + "\n" for _ in range(30))
    )
    return prepare(parts_from_folder(source), root / "built", vocab_size=300)


def test_the_corpus_tool_writes_parts_a_tokenizer_a_blend_and_a_manifest(corpus, tmp_path, megatron_indexed):
    assert [p["name"] for p in corpus["parts"]] == ["input", "prose"]
    assert [p["documents"] for p in corpus["parts"]] == [30, 40] and corpus["tokens"] > 10_000
    assert corpus["tokenizer"]["vocab_size"] <= 300 and corpus["data_path"].startswith("[0.")
    for part in corpus["parts"]:
        assert len(megatron_indexed.IndexedDataset(part["prefix"])) == part["documents"]
    with pytest.raises(UserError, match="notes.jsonl:1 has no string 'text' field"):
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "notes.jsonl").write_text('{"body": "x"}\n')
        parts_from_folder(tmp_path / "bad")
    again = prepare([Part("input", ["a b c"] * 3)], tmp_path / "again", tokenizer=corpus["tokenizer"]["path"])
    assert again["tokenizer"]["vocab_size"] == corpus["tokenizer"]["vocab_size"]  # an existing tokenizer is reused


def _data(corpus: dict, **changes) -> DataConfig:
    path = [x for p in corpus["parts"] for x in (str(p["tokens"]), p["prefix"])]
    return DataConfig(name="c", kind="indexed", path=path, tokenizer=corpus["tokenizer"]["path"], **changes)


def test_samples_follow_the_blend_stay_in_their_split_and_repeat_exactly(corpus):
    train = TrainConfig(name="t", seq_length=32)
    stream = build_indexed_stream(_data(corpus), train, 300)
    draws = [stream.train.sample(i) for i in range(200)]
    assert all(d.shape == (33,) for d in draws)
    taken = stream.train.taken(200) / 200
    weights = np.array([p["tokens"] for p in corpus["parts"]], dtype=float)
    assert np.allclose(taken, weights / weights.sum(), atol=0.01)
    fresh = build_indexed_stream(_data(corpus), train, 300)  # sample i is a pure function of (seed, i)
    assert np.array_equal(fresh.train.sample(150), draws[150]) and np.array_equal(fresh.train.sample(3), draws[3])
    other = build_indexed_stream(_data(corpus, seed=7), train, 300)
    assert not np.array_equal(other.train.sample(3), draws[3])
    assert stream.valid is not None


@pytest.mark.parametrize("split", ["98,2,0", "90,5,5", "969,30,1", "1", "99/1"])
@pytest.mark.parametrize("documents", [1, 40, 70, 631, 10_001])
def test_splits_cut_documents_as_megatron_core_does(split, documents):
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix,
        parse_and_normalize_split,
    )

    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(split))
    expected = [
        (int(round(m[0] * float(documents))), int(round(m[1] * float(documents)))) if m else None for m in matrix
    ]
    for ours, theirs in zip(split_ranges(documents, split_weights(split)), expected):
        assert ours == theirs if theirs is not None else ours[0] == ours[1]  # Megatron's None: an empty split


def test_bad_data_settings_are_one_line_errors(corpus, tmp_path):
    train = TrainConfig(name="t", seq_length=32)
    with pytest.raises(UserError, match="outside the 100-token vocabulary"):
        build_indexed_stream(_data(corpus), train, 100)
    with pytest.raises(UserError, match="gives the training split no documents"):
        build_indexed_stream(_data(corpus, split="0,50,50"), train, 300)
    with pytest.raises(UserError, match="training split of .* has fewer than seq_length"):
        build_indexed_stream(_data(corpus), TrainConfig(name="t", seq_length=1 << 20), 300)
    common = ["data=indexed", f"results_dir={tmp_path}", "logger=none"]
    for overrides, expected in (
        (
            [f"data.path=[{tmp_path / 'nowhere'}]", f"data.tokenizer={corpus['tokenizer']['path']}"],
            "error: data.path: no nowhere.idx",
        ),
        (
            [f"data.path=[{corpus['parts'][0]['prefix']}]", f"data.tokenizer={tmp_path}"],
            "error: data.tokenizer: no Hugging Face tokenizer",
        ),
        (
            [
                f"data.path=[{corpus['parts'][0]['prefix']}]",
                f"data.tokenizer={corpus['tokenizer']['path']}",
                "model.vocab_size=100",
            ],
            "error: model.vocab_size: the tokenizer has",
        ),
    ):
        code, _, err = _run_cli(["pretrain", "kimi_k2_tiny_muon", *common, *overrides])
        assert code == 2 and err.splitlines()[0].startswith(expected), err


def _run_cli(argv: list[str]) -> tuple[int, str, str]:
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from optbench.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code
    return code, out.getvalue(), err.getvalue()


MICRO = [
    *MICRO_KIMI,
    "train.gbs=4",
    "train.mbs=2",
    "train.seq_length=32",
    "train.warmup_iters=1",
    "train.lr_decay_iters=6",
    "logger=none",
    "train.eval_interval=2",
    "train.eval_iters=1",
]


def test_the_local_engine_trains_on_it_logs_validation_and_resumes_to_the_same_sample(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    path = "[" + ",".join(f"{p['tokens']},{p['prefix']}" for p in corpus["parts"]) + "]"
    data = ["data=indexed", f"data.path={path}", f"data.tokenizer={corpus['tokenizer']['path']}"]

    def run(*extra: str):
        return compose_run("kimi_k2_tiny_muon", [*MICRO, *data, f"results_dir={tmp_path}", *extra])

    whole = read_metrics(launch_local(run("run_id=whole", "train.iters=6")) / "metrics.jsonl")
    assert [r["step"] for r in whole if "val_loss" in r] == [2, 4, 6]
    assert whole[-1]["loss"] < whole[0]["loss"]
    launch_local(run("run_id=split", "train.iters=4", "train.save_interval=2"))
    resumed = read_metrics(
        launch_local(run("run_id=split", "train.iters=6", "train.save_interval=2", "resume=true")) / "metrics.jsonl"
    )
    assert [r["loss"] for r in resumed] == [r["loss"] for r in whole]
    assert [r.get("val_loss") for r in resumed] == [r.get("val_loss") for r in whole]
    summary = json.loads((tmp_path / "runs" / "whole" / "summary.json").read_text())
    assert summary["final_val_loss"] == whole[-1]["val_loss"] and summary["data"]["kind"] == "indexed"


def test_a_cluster_plan_says_whether_the_data_exists_here_and_the_dry_run_warns(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("SBATCH_ACCOUNT", "acct")
    for prefix, found in ((corpus["parts"][0]["prefix"], True), ("/lustre/nowhere/x_text_document", False)):
        code, out, err = _run_cli(
            [
                "pretrain",
                "kimi_k2_muon",
                "data=indexed",
                f"data.path=[{prefix}]",
                "data.tokenizer=moonshotai/Kimi-K2-Instruct",
                "dryrun=true",
                f"results_dir={tmp_path}",
            ]
        )
        assert code == 0, err
        plan = json.loads((tmp_path / "plans" / "kimi_k2_muon" / "plan.json").read_text())
        assert plan["data"]["prefixes"][0]["exists_here"] is found
        assert ("warning: data.path: /lustre/nowhere/x_text_document not found on this machine" in err) is not found
        assert ("all found on this machine" in out) is found


def test_the_builtin_corpus_is_cpythons_documentation():
    from optbench.corpus.pydocs import pydocs_parts

    reference, library = pydocs_parts()
    assert len(reference.documents) > 50 and len(library.documents) > 300
    assert any('The "for" statement' in d for d in reference.documents)
    assert any(d.startswith("Redo the builtin repr()") for d in library.documents)  # reprlib's docstring
