"""Our create_pretraining_data.py against Model Garden's on the shared corpora.

- Fidelity: same flags and seed, both written and read back; the statistics of the
  issue within its tolerances. Slices of the corpora keep this CI-friendly; the full
  corpora are compared by bench/data_prep.py.
- Well-formedness: every instance, unmasked with its masked_lm_ids, is
  `[CLS] A [SEP] B [SEP]` where A and B are token spans of the source as tokenized by
  Model Garden's (= the original's) tokenizer, B following A in its document for IsNext.
- Interop: Model Garden's pre-training loader reads our files; our reader reads theirs.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import data_prep  # noqa: F401  (before bert_tf: see data_prep/__init__.py)
from data_prep.analysis import (
    instance_statistics,
    load_examples,
    malformed_instances,
    not_from_source,
    source_stream,
    undo_masking,
)
from data_prep.chunks import GenerationOptions
from data_prep.generate import Job, run
from tests.conftest import require_module, shared_file

SEQ, PREDICTIONS = 128, 20
BATCH = 64
MASK_ID, CLS_ID, SEP_ID = 103, 101, 102
# corpus, vocabulary, bytes of it to use (None: all), dupe_factor, seeds. Statistics
# are pooled over the seeds' runs: a run on a small corpus is noisy (sample_text has
# three documents: the mean length of its instances varies by 0.7% from seed to seed).
CORPORA = {
    "sample_text": ("pretrain/sample_text.txt", "vocab/google_uncased_en_vocab.txt", None, 100, (1, 2, 3, 4, 5)),
    "wikitext2": ("pretrain/wikitext2_valid.tokens.txt", "vocab/google_uncased_en_vocab.txt", 400_000, 10, (1, 2, 3)),
    "clue_zh": ("pretrain/clue_zh_small.txt", "vocab/google_zh_vocab.txt", 200_000, 10, (1, 2, 3)),
}


def _slice(name: str, directory: Path) -> tuple[Path, Path, int]:
    relative, vocab, size, dupe_factor, _ = CORPORA[name]
    source = shared_file(relative)
    if size is None:
        return source, shared_file(vocab), dupe_factor
    data = source.read_bytes()[:size]
    end = data.rfind(b"\n\n")
    path = directory / f"{name}.txt"
    path.write_bytes(data[: end + 1] if end > 0 else data[: data.rfind(b"\n") + 1])
    return path, shared_file(vocab), dupe_factor


def _model_garden_tokenizer(vocab: Path):
    from official.nlp.tools import tokenization

    tokenizer = tokenization.FullTokenizer(vocab_file=str(vocab), do_lower_case=True)
    tokenizer.wordpiece_tokenizer.max_input_chars_per_word = 200  # the original's value
    return tokenizer


def _model_garden(
    corpus: Path, vocab: Path, output: Path, dupe_factor: int, gzip: bool = False, seed: int = 12345
) -> Path:
    from official.nlp.data import create_pretraining_data as garden

    tokenizer = _model_garden_tokenizer(vocab)
    instances = garden.create_training_instances(
        [str(corpus)],
        tokenizer,
        garden.get_processor_text_fn(False, True),
        SEQ,
        dupe_factor,
        0.1,
        0.15,
        PREDICTIONS,
        random.Random(seed),
    )
    garden.write_instance_to_example_files(instances, tokenizer, SEQ, PREDICTIONS, [str(output)], gzip, False)
    return output


def _ours(corpus: Path, vocab: Path, output: Path, dupe_factor: int, gzip: bool = False, **flags) -> Path:
    options = GenerationOptions(dupe_factor=dupe_factor, **flags)
    run(Job([str(corpus)], [str(output)], str(vocab), options=options, gzip=gzip), progress=False)
    return output


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, tuple[Path, Path, list[Path], list[Path]]]:
    """name -> (corpus, vocab, our files, Model Garden's files), one per seed."""
    require_module("official", "Model Garden is the reference implementation")
    directory = tmp_path_factory.mktemp("fidelity")
    made = {}
    for name, (*_, seeds) in CORPORA.items():
        corpus, vocab, dupe_factor = _slice(name, directory)
        ours = [
            _ours(corpus, vocab, directory / f"{name}.{seed}.ours", dupe_factor, random_seed=seed) for seed in seeds
        ]
        garden = [
            _model_garden(corpus, vocab, directory / f"{name}.{seed}.garden", dupe_factor, seed=seed) for seed in seeds
        ]
        made[name] = (corpus, vocab, ours, garden)
    return made


@pytest.mark.parametrize("name", list(CORPORA))
def test_statistics_match_model_garden(outputs, name):
    _, _, ours, garden = outputs[name]
    got = instance_statistics(load_examples([str(path) for path in ours]), MASK_ID, SEQ)
    want = instance_statistics(load_examples([str(path) for path in garden]), MASK_ID, SEQ)
    report = f"ours {got}\nModel Garden {want}"
    assert abs(got["instances"] / want["instances"] - 1) <= 0.02, report
    assert abs(got["mean_tokens"] / want["mean_tokens"] - 1) <= 0.01, report
    assert abs(got["masked_fraction"] - want["masked_fraction"]) <= 0.005, report
    for share, target in [("mask_share", 0.8), ("kept_share", 0.1), ("random_share", 0.1)]:
        assert abs(got[share] - target) <= 0.01, report
    assert abs(got["not_next_rate"] - want["not_next_rate"]) <= 0.015, report
    assert abs(got["short_share"] - want["short_share"]) <= 0.01, report


def _source_documents(corpus: Path, vocab: Path) -> list[list[list[int]]]:
    """The corpus as documents of sentences of ids, by Model Garden's tokenizer (the oracle)."""
    tokenizer = _model_garden_tokenizer(vocab)
    documents: list[list[list[int]]] = [[]]
    for line in corpus.read_text(encoding="utf-8").splitlines():
        if line.strip():
            documents[-1].append(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line.strip())))
        elif documents[-1]:
            documents.append([])
    return documents


@pytest.mark.parametrize("name", list(CORPORA))
def test_every_instance_is_made_of_source_spans(outputs, name):
    corpus, vocab, ours, _ = outputs[name]
    examples = load_examples([str(ours[0])])
    assert malformed_instances(examples, CLS_ID, SEP_ID) == []
    assert not_from_source(examples, source_stream(_source_documents(corpus, vocab)), SEP_ID) == []


def _garden_loader_batch(path: Path, v2: bool, gzip: bool) -> dict[str, np.ndarray]:
    from official.nlp.data import pretrain_dataloader

    config = pretrain_dataloader.BertPretrainDataConfig(
        input_path=str(path),
        seq_length=SEQ,
        max_predictions_per_seq=PREDICTIONS,
        global_batch_size=BATCH,
        is_training=False,
        use_v2_feature_names=v2,
        file_type="tfrecord_compressed" if gzip else "tfrecord",
    )
    batch = next(iter(pretrain_dataloader.BertPretrainDataLoader(config).load()))
    return {name: value.numpy() for name, value in batch.items()}


@pytest.mark.parametrize("v2,gzip", [(False, False), (True, True)])
def test_model_garden_loader_reads_our_files(outputs, tmp_path, v2, gzip):
    corpus, vocab, _, _ = outputs["sample_text"]
    ours = _ours(corpus, vocab, tmp_path / "ours.tfrecord", 10, gzip=gzip, use_v2_feature_names=v2)
    garden = _garden_loader_batch(ours, v2, gzip)
    expected = load_examples([str(ours)])
    for name, value in garden.items():
        np.testing.assert_array_equal(value, expected[name][:BATCH].astype(value.dtype), err_msg=name)


def test_our_reader_reads_model_garden_files(outputs, tmp_path):
    from bert_tf.data.reader import pretraining_dataset

    corpus, vocab, _, _ = outputs["sample_text"]
    for gzip in (False, True):
        garden_file = _model_garden(corpus, vocab, tmp_path / f"garden{gzip}.tfrecord", 10, gzip=gzip)
        expected = _garden_loader_batch(garden_file, v2=False, gzip=gzip)
        ours = next(iter(pretraining_dataset(str(garden_file), BATCH, SEQ, PREDICTIONS, is_training=False)))
        assert set(ours) == set(expected)
        for name, value in expected.items():
            np.testing.assert_array_equal(ours[name].numpy(), value, err_msg=name)
    # Dynamic masking over statically masked files: masks anew, keeps the text.
    dynamic = next(
        iter(
            pretraining_dataset(
                str(garden_file),
                BATCH,
                SEQ,
                PREDICTIONS,
                is_training=False,
                dynamic_masking=True,
                vocab_size=30522,
                seed=1,
            )
        )
    )
    restored = {k: v.numpy() for k, v in dynamic.items()}
    np.testing.assert_array_equal(undo_masking(restored), undo_masking(expected))
    assert not np.array_equal(restored["masked_lm_positions"], expected["masked_lm_positions"])
