"""Readers, featurisers and batching of the fine-tuning core, on the real shared files."""

from __future__ import annotations


import numpy as np
import pytest

from bert_tf.tokenization import FullTokenizer
from fine_tune import batching, registry
from bert_tf.packing import pack_pair
from fine_tune.features import PairExample, PairFeaturiser
from fine_tune.tagging import (
    TaggedSentence,
    TaggingFeaturiser,
    TaggingHead,
    iob1_to_iob2,
    iob2_to_iob1,
    read_conll,
)
from fine_tune.task import Features, write_lines
from tests.conftest import shared_file

# (task, split) -> examples in the shared file (shared/data/README.md; CoLA's test file has a header).
GLUE_COUNTS = {
    ("cola", "train"): 8551, ("cola", "dev"): 1043, ("cola", "test"): 1063,
    ("mrpc", "train"): 3668, ("mrpc", "dev"): 408, ("mrpc", "test"): 1725,
    ("qnli", "dev"): 5463, ("qnli", "test"): 5463,
    ("rte", "train"): 2490, ("rte", "dev"): 277,
    ("sst-2", "train"): 67349, ("sst-2", "dev"): 872, ("sst-2", "test"): 1821,
    ("sts-b", "train"): 5749, ("sts-b", "dev"): 1500, ("sts-b", "test"): 1379,
    ("wnli", "train"): 635, ("wnli", "dev"): 71,
}  # fmt: skip
GLUE_DIRS = {"cola": "CoLA", "mrpc": "MRPC", "qnli": "QNLI", "rte": "RTE", "sst-2": "SST-2", "sts-b": "STS-B",
             "wnli": "WNLI"}


def classifier_task(name: str, **config):
    """The classifier task `name`, its config's other fields from `config`."""
    return registry.build_task(registry.lookup(name, "classifier").config(task=name, **config))


@pytest.fixture(scope="module")
def uncased() -> FullTokenizer:
    return FullTokenizer(shared_file("vocab/google_uncased_en_vocab.txt"), do_lower_case=True)


@pytest.fixture(scope="module")
def cased() -> FullTokenizer:
    return FullTokenizer(shared_file("vocab/google_cased_en_vocab.txt"), do_lower_case=False)


# === GLUE readers ===
@pytest.mark.parametrize(("task", "split"), sorted(GLUE_COUNTS))
def test_glue_readers_read_every_row_of_the_shared_files(task, split):
    data_dir = shared_file(f"glue/{GLUE_DIRS[task]}").as_posix()
    reader = classifier_task(task).reader
    (eval_set,) = reader.read(data_dir, split)
    assert len(eval_set.examples) == GLUE_COUNTS[task, split]
    first = eval_set.examples[0]
    assert first.text_a.strip() and (first.label is None) == (split == "test")
    if reader.labels:  # every gold label is one of the task's
        assert {e.label for e in eval_set.examples} <= set(reader.labels) | {None}
    if split == "test":
        assert eval_set.submission and [e.guid for e in eval_set.examples[:3]] == ["0", "1", "2"]


def test_mrpc_and_sts_b_columns_are_the_originals():
    mrpc = classifier_task("mrpc").reader
    example = mrpc.read(shared_file("glue/MRPC").as_posix(), "dev")[0].examples[0]
    assert example.label == "1"
    assert example.text_a.startswith("He said the foodservice pie business")
    assert example.text_b.startswith('" The foodservice pie business')  # quotes are plain characters
    sts = classifier_task("sts-b").reader
    example = sts.read(shared_file("glue/STS-B").as_posix(), "train")[0].examples[0]
    assert (example.text_a, example.text_b, example.label) == ("A plane is taking off.", "An air plane is taking off.",
                                                               "5.000")


def test_tsv_task_reads_columns_by_header_name():
    task = classifier_task("tsv", text_a_column="text_a", label_column="label", train_file="train.tsv")
    (train,) = task.reader.read(shared_file("zh/chnsenticorp").as_posix(), "train")
    assert len(train.examples) == 9600
    assert task.reader.labels_in(train.examples) == ("0", "1")


# === Featurisers ===
def test_pair_features_follow_the_original_layout(uncased):
    example = PairExample("0", "The cat sat.", "A dog ran far away today.", "1")
    features = PairFeaturiser()([example], uncased, 10, ["0", "1"])
    tokens = uncased.convert_ids_to_tokens(features.sequences["input_word_ids"][0].tolist())
    # 7 slots for 4 + 7 tokens: the longer side (b) loses tokens from its end until it is not longer.
    assert tokens == ["[CLS]", "the", "cat", "sat", ".", "[SEP]", "a", "dog", "ran", "[SEP]"]
    assert features.sequences["input_type_ids"][0].tolist() == [0] * 6 + [1] * 4
    assert pack_pair(["x"] * 20, None, 8)[0] == ["[CLS]"] + ["x"] * 6 + ["[SEP]"]


def test_regression_features_keep_the_score(uncased):
    features = PairFeaturiser(regression=True)([PairExample("0", "a", "b", "3.8")], uncased, 16, ())
    assert features.scalars["label"].tolist() == pytest.approx([3.8])


def test_iob_conversions_are_inverse_on_conll(shared_data):
    sentences = read_conll(str(shared_data / "conll2003" / "eng.testa"))
    assert len(sentences) == 3250 and len({s.document for s in sentences}) == 216
    for sentence in sentences:
        assert tuple(iob2_to_iob1(iob1_to_iob2(sentence.label))) == sentence.label


def test_label_sits_on_the_first_wordpiece(cased):
    sentence = TaggedSentence("s", ("Johanson", "visited", "Kraków"), ("B-PER", "O", "B-LOC"),
                              (("Johanson", "B-PER"), ("visited", "O"), ("Kraków", "B-LOC")), 0, None, "test")
    labels = ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
    features = TaggingFeaturiser(document_context=False)([sentence], cased, 32, labels)
    ids = features.sequences["input_word_ids"][0]
    tokens = cased.convert_ids_to_tokens(ids.tolist())
    weights = features.sequences["label_weights"][0]
    first_pieces = [token for token, weight in zip(tokens, weights) if weight]
    assert first_pieces == [cased.tokenize(word)[0] for word in sentence.words]
    assert [labels[i] for i, w in zip(features.sequences["label_ids"][0], weights) if w] == list(sentence.label)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and len(tokens) > 5  # some words have several pieces


def test_long_sentences_are_windowed_and_every_word_is_predicted(cased):
    words = tuple(f"word{i}" for i in range(40))
    sentence = TaggedSentence("s", words, ("O",) * 40, tuple((w, "O") for w in words), 0, None, "test")
    features = TaggingFeaturiser(document_context=False)([sentence], cased, 16, ("O",))
    assert len(features) > 2 and max(features.lengths) <= 16
    outputs = [np.eye(1)[np.zeros(n, int)] for n in features.lengths]
    assert TaggingHead().decode([sentence], features, outputs, ("O",)) == [("O",) * 40]


def test_document_context_fills_the_window_without_labels(cased, shared_data):
    sentences = read_conll(str(shared_data / "conll2003" / "eng.testa"))[:60]
    labels = ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER")
    sentences = [s.__class__(**{**s.__dict__, "label": tuple(iob1_to_iob2(s.label))}) for s in sentences]
    plain = TaggingFeaturiser(document_context=False)(sentences, cased, 128, labels)
    context = TaggingFeaturiser(document_context=True)(sentences, cased, 128, labels)
    assert context.lengths.mean() > 2 * plain.lengths.mean()
    for a, b in zip(plain.sequences["label_weights"], context.sequences["label_weights"]):
        assert a.sum() == b.sum()  # the same words carry labels: context is never trained on
    # The target words are the same pieces in both, only shifted by the left context.
    for row in range(len(plain)):
        p_ids, c_ids = plain.sequences["input_word_ids"][row], context.sequences["input_word_ids"][row]
        p_pos, c_pos = plain.extras[row].positions, context.extras[row].positions
        assert p_ids[p_pos].tolist() == c_ids[c_pos].tolist()


# === Batching ===
@pytest.mark.parametrize("mode", batching.PADDING_MODES)
@pytest.mark.parametrize("seed", [None, 3])
def test_batch_plan_covers_every_row_once(mode, seed):
    lengths = np.random.default_rng(0).integers(3, 128, size=1001)
    plan = batching.batch_plan(lengths, 32, mode, seed=seed)
    assert sorted(np.concatenate(plan).tolist()) == list(range(1001))
    assert [len(b) for b in plan].count(32) == 31
    if mode == "bucket":  # batches of similar lengths: far less padding than random batches
        waste = sum(lengths[b].max() * len(b) - lengths[b].sum() for b in plan)
        random_waste = sum(lengths[b].max() * len(b) - lengths[b].sum()
                           for b in batching.batch_plan(lengths, 32, "fixed", seed=seed))
        assert waste < random_waste / 4


def test_batch_plan_is_a_function_of_the_seed():
    lengths = np.arange(100)
    first = batching.batch_plan(lengths, 8, "bucket", seed=1)
    assert all((a == b).all() for a, b in zip(first, batching.batch_plan(lengths, 8, "bucket", seed=1)))
    assert not all((a == b).all() for a, b in zip(first, batching.batch_plan(lengths, 8, "bucket", seed=2)))


def test_pad_batch_pads_to_the_longest_row_and_masks():
    features = Features({"input_word_ids": [np.array([2, 7, 3], np.int32), np.array([2, 3], np.int32)],
                         "input_type_ids": [np.zeros(3, np.int32), np.zeros(2, np.int32)]},
                        {"label_ids": np.array([1, 0], np.int32)}, np.arange(2))
    length = batching.padded_length(3, 128, "dynamic", 4)
    batch = batching.pad_batch(features, features.lengths, np.array([1, 0]), length)
    assert batch["input_word_ids"].tolist() == [[2, 3, 0, 0], [2, 7, 3, 0]]
    assert batch["input_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 0]]
    assert batch["label_ids"].tolist() == [0, 1] and batch["feature_index"].tolist() == [1, 0]


def test_a_prediction_file_is_replaced_whole_or_not_at_all(tmp_path):
    """GLUE's and CoNLL's prediction writers: an interrupted write (Ctrl-C, a full disk) keeps the
    previous file whole and leaves no temporary (they wrote in place, leaving half a file)."""
    path = write_lines(str(tmp_path), "dev_predictions.tsv", ["index\tprediction", "0\t1"])

    def interrupted():
        yield "index\tprediction"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_lines(str(tmp_path), "dev_predictions.tsv", interrupted())
    assert open(path, encoding="utf-8").read() == "index\tprediction\n0\t1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["dev_predictions.tsv"]
