"""The study's data: near-duplicate documents removed before the split, one validation set for every seed,
and the share of it the training split already holds, measured."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from optbench.config.schema import DataConfig, TrainConfig
from optbench.corpus.dedup import near_duplicates
from optbench.corpus.prepare import Part, prepare
from optbench.engine.local.indexed_data import build_indexed_stream
from optbench.common.errors import UserError

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


def _text(rng: np.random.Generator, words: int) -> str:
    return " ".join(rng.choice(WORDS, size=words))


def test_a_document_mostly_inside_a_longer_one_is_dropped_and_the_longer_kept():
    rng = np.random.default_rng(0)
    long, other = _text(rng, 600), _text(rng, 300)
    copy = long.split()[100:400]
    near = " ".join(copy[:280] + ["changed"] * 20)  # 93 % of its words are the long document's
    partial = " ".join(long.split()[:100] + _text(rng, 200).split())  # a third of it copied: not a near duplicate
    documents = [near, other, long, partial, long]
    dropped = near_duplicates(documents)
    assert dropped == {0: 2, 4: 2}  # the near copy and the exact copy go to the first long one; the rest stay
    assert near_duplicates([long, other]) == {}


def test_the_corpus_tool_drops_near_copies_across_parts_and_says_so(tmp_path):
    rng = np.random.default_rng(1)
    docs = [_text(rng, 300) for _ in range(6)]
    manifest = prepare(
        [Part("one", docs[:4]), Part("two", [*docs[4:], " ".join(docs[1].split()[:-5])])],
        tmp_path / "c",
        vocab_size=300,
    )
    assert manifest["near_duplicates"]["removed"] == {"one": 0, "two": 1}
    assert [p["documents"] for p in manifest["parts"]] == [4, 2] and "word 8-grams" in manifest["near_duplicates"][
        "rule"
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    rng = np.random.default_rng(2)
    return prepare(
        [Part("text", [_text(rng, 400) for _ in range(60)])], tmp_path_factory.mktemp("c") / "built", vocab_size=300
    )


def _data(corpus: dict, **changes) -> DataConfig:
    part = corpus["parts"][0]
    return DataConfig(
        name="c",
        kind="indexed",
        path=[part["prefix"]],
        tokenizer=corpus["tokenizer"]["path"],
        split="80,20,0",
        **changes,
    )


def test_a_fixed_valid_seed_gives_every_training_seed_the_same_validation_samples(corpus):
    train = TrainConfig(name="t", seq_length=32)
    first, second = (build_indexed_stream(_data(corpus, seed=s, valid_seed=9), train, 300) for s in (1, 2))
    assert all(np.array_equal(first.valid.sample(i), second.valid.sample(i)) for i in range(40))
    assert not np.array_equal(first.train.sample(0), second.train.sample(0))  # training order still follows the seed
    third = build_indexed_stream(_data(corpus, seed=2), train, 300)  # null: the seed, as Megatron
    assert not all(np.array_equal(first.valid.sample(i), third.valid.sample(i)) for i in range(40))


def _run(corpus: dict, eval_iters: int):
    from optbench.compose.recipe import compose_run

    run = compose_run(
        "kimi_k2_tiny_adamw", ["train.seq_length=32", "train.gbs=4", "train.mbs=4", f"train.eval_iters={eval_iters}"]
    )
    return dataclasses.replace(
        run, data=_data(corpus, valid_seed=1), model=dataclasses.replace(run.model, vocab_size=300)
    )


def test_the_validation_set_is_described_and_a_set_that_would_repeat_samples_refused(corpus):
    from optbench.experiments.study_data import validation_set

    found = validation_set(_run(corpus, 10))
    assert found["sequences"] == 40 and found["tokens_predicted"] == 40 * 32 and found["valid_seed"] == 1
    assert found["seen_in_training"]["sequences"] == 0  # random documents share no 16-token window
    with pytest.raises(
        UserError, match=r"^train.eval_iters: a validation pass takes [\d,]+ sequences from .* samples would repeat"
    ):
        validation_set(_run(corpus, 1000))


def test_validation_text_copied_from_training_is_counted_as_seen(tmp_path):
    from optbench.experiments.study_data import validation_set

    rng = np.random.default_rng(3)
    shared = _text(rng, 150)
    # Every document opens with the same 150 words and goes on with 250 of its own: a third shared, under the
    # deduplication's 50 %, so all are kept, and the validation sequences inside that opening are seen in training.
    built = prepare([Part("text", [f"{shared} {_text(rng, 250)}" for _ in range(20)])], tmp_path / "c", vocab_size=300)
    assert built["near_duplicates"]["removed"] == {"text": 0}
    found = validation_set(_run(built, 8))
    assert 0 < found["seen_in_training"]["sequences"] < found["sequences"]
