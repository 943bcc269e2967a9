"""`bert_tf.preprocessing`: the same ids as the fine-tuning featurisers, offsets, padding, and the
places the layer must run (tf.data, a Keras model, a SavedModel).

The parity checks are those of `bench/preprocessing_parity.py` (which runs them on every
shared example) on slices of the shared GLUE, CoNLL and SQuAD files.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from bench import preprocessing_parity as parity
from bert_tf.errors import BertTfError
from bert_tf.preprocessing import BertPreprocessor, truncated_lengths
from bert_tf.packing import truncate_seq_pair
from tests.conftest import shared_file

VOCABS = tuple(parity.VOCABS)
SLICE = 100


@pytest.fixture(autouse=True)
def _needs_shared_data():
    for relative, _ in parity.VOCABS.values():
        shared_file(relative)


def preprocessor(vocab: str = "uncased") -> BertPreprocessor:
    return parity.tokenizers(vocab)[1]


# === Same ids as the featurisers ===
def test_truncation_is_the_original_loop():
    a, b = np.meshgrid(np.arange(13), np.arange(13))
    for budget in range(0, 16):
        keep_a, keep_b = truncated_lengths(tf.constant(a.ravel()), tf.constant(b.ravel()), budget)
        for la, lb, ka, kb in zip(a.ravel(), b.ravel(), keep_a.numpy(), keep_b.numpy()):
            tokens_a, tokens_b = list(range(la)), list(range(lb))
            truncate_seq_pair(tokens_a, tokens_b, budget)
            assert (ka, kb) == (len(tokens_a), len(tokens_b)), (la, lb, budget)


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("folder", parity.GLUE_FOLDERS)
def test_glue_pairs_as_run_classifier(vocab, folder):
    shared_file(f"glue/{folder}/dev.tsv")
    examples = parity.glue_examples(folder)[:SLICE]
    for max_seq_length in (128, 32):
        same, total = parity.pair_parity(vocab, examples, max_seq_length)
        assert same == total == len(examples), (folder, max_seq_length)


def test_chinese_sentences_as_run_classifier():
    shared_file("zh/chnsenticorp/dev.tsv")
    same, total = parity.pair_parity("chinese", parity.chnsenticorp_examples()[:SLICE], 64)
    assert same == total == SLICE


@pytest.mark.parametrize(("vocab", "relative"), [(v, "conll2003/eng.testa") for v in VOCABS]
                         + [("chinese", "zh/peoples_daily_ner/example.dev")])
def test_words_as_run_ner(vocab, relative):
    sentences = parity.conll_sentences(str(shared_file(relative)))[:SLICE]
    results = parity.word_parity(vocab, sentences, max_seq_length=32)
    for what, (same, total) in results.items():
        assert same == total > 0, what
    assert results["sentences"][1] < SLICE or relative.startswith("zh"), "some sentences should need windows"


@pytest.mark.parametrize("vocab", VOCABS)
def test_question_and_context_windows_as_run_squad(vocab):
    shared_file("squad/dev-v1.1.json")
    examples = parity.squad_examples()[:40]
    # Short rows: most contexts need several windows.
    same, total = parity.squad_parity(vocab, examples, max_seq_length=128, doc_stride=48, max_query_length=24)
    assert same == total > 2 * len(examples)


# === Offsets and padding ===
def test_offsets_are_the_words_spans_in_characters():
    layer = BertPreprocessor(str(shared_file(parity.VOCABS["uncased"][0])), seq_length=64, offsets=True)
    texts = ["Héllo,  wörld\u00a0中文 x\u3000y!", "", "a\x00b c"]
    outputs = layer(tf.constant(texts))
    for text, ids, starts, ends, mask in zip(texts, *(outputs[k].numpy() for k in (
            "input_word_ids", "start_offsets", "end_offsets", "input_mask"))):
        n = mask.sum()
        assert starts[0] == ends[0] == -1 and starts[n - 1] == ends[n - 1] == -1
        assert (starts[n:] == -1).all() and (ends[n:] == -1).all()
        spans = sorted(set(zip(starts[1 : n - 1].tolist(), ends[1 : n - 1].tolist())))
        words = [text[start:end] for start, end in spans]
        # Python's split() and the original's whitespace agree on these texts.
        assert words == [w for w in text.split() if parity.tokenizers("uncased")[0].tokenize(w)], text


def test_padding_to_the_longest_or_fixed():
    texts = tf.constant(["a short one", "and a much longer sentence than the first one by far, " * 3])
    longest = BertPreprocessor(str(shared_file(parity.VOCABS["uncased"][0])), seq_length=30, padding="longest")
    short = longest(texts[:1])
    assert short["input_word_ids"].shape == (1, 8) and short["input_mask"].numpy().sum() == 5
    assert longest(texts)["input_word_ids"].shape == (2, 30)  # Truncated to seq_length, not rounded past it.
    assert preprocessor()(texts[:1])["input_word_ids"].shape == (1, 512)


# === Where it runs ===
def test_in_tf_data_in_a_keras_model_and_in_a_saved_model(tmp_path):
    layer = BertPreprocessor(str(shared_file(parity.VOCABS["uncased"][0])), seq_length=32, offsets=True)
    a = ["The cat sat.", "Héllo wörld", ""]
    b = ["On the mat!", "x", "y"]
    eager = {k: v.numpy() for k, v in layer([tf.constant(a), tf.constant(b)]).items()}

    dataset = tf.data.Dataset.from_tensor_slices((a, b)).batch(3).map(lambda x, y: layer([x, y]))
    from_data = next(iter(dataset))
    text_a = keras.Input(shape=(), dtype="string", name="text_a")
    text_b = keras.Input(shape=(), dtype="string", name="text_b")
    model = keras.Model([text_a, text_b], layer([text_a, text_b]))
    from_model = model([tf.constant(a), tf.constant(b)])

    module = tf.Module()
    module.layer = layer
    module.serve = tf.function(lambda x, y: layer([x, y]), input_signature=[tf.TensorSpec([None], tf.string)] * 2)
    tf.saved_model.save(module, str(tmp_path / "saved"))
    from_saved = tf.saved_model.load(str(tmp_path / "saved")).serve(tf.constant(a), tf.constant(b))
    for name, expected in eager.items():
        for outputs in (from_data, from_model, from_saved):
            np.testing.assert_array_equal(outputs[name].numpy(), expected, err_msg=name)


# === Running a model on rows of similar length ===
class _RecordingModel:
    """A functional model that records the shape of every batch it is called on."""

    def __init__(self, model: keras.Model):
        self.model, self.output, self.shapes = model, model.output, []

    def __call__(self, inputs, training=False):
        self.shapes.append(tuple(inputs["input_word_ids"].shape))
        return self.model(inputs, training=training)


@pytest.mark.parametrize("head", ["classification", "tagging", "span"])
def test_call_by_length_gives_the_whole_batchs_answers(head):
    from bert_tf.config import BertConfig
    from bert_tf.encoder import BertEncoder
    from fine_tune.heads import ClassificationHead, TokenClassificationHead
    from fine_tune.squad.head import SpanHead

    keras.utils.set_random_seed(3)
    builder = {"classification": ClassificationHead(), "tagging": TokenClassificationHead(), "span": SpanHead(None)}[head]
    model = builder.build(BertEncoder(BertConfig.from_preset("tiny", vocab_size=30522)), 3, 0.0)
    layer = BertPreprocessor(str(shared_file(parity.VOCABS["uncased"][0])), seq_length=64, padding="longest")
    # 19 rows (two full calls of 8 and one of 3), lengths out of order, one near the limit.
    texts = [" ".join(["word"] * (n * 7 % 40)) + " end" for n in range(19)]
    inputs = layer(tf.constant(texts))
    expected = tf.nest.map_structure(lambda t: t.numpy(), model(inputs, training=False))
    recording = _RecordingModel(model)
    eager = layer.call_by_length(recording, inputs)

    def in_graph(x):
        outputs = layer.call_by_length(model, x)
        for output, spec in zip(tf.nest.flatten(outputs), tf.nest.flatten(model.output)):
            assert output.shape.as_list() == [None, *spec.shape[1:]]  # what later graph ops need to know
        return outputs

    graph = tf.function(in_graph, autograph=False)(inputs)
    real = inputs["input_mask"].numpy().astype(bool)
    for outputs in (eager, graph):
        for got, want in zip(tf.nest.flatten(outputs), tf.nest.flatten(expected)):
            assert got.shape == want.shape
            if want.ndim >= 2 and want.shape[1] == real.shape[1]:  # per position: the real tokens'
                np.testing.assert_allclose(got.numpy()[real], want[real], atol=1e-5)
            else:
                np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
    # Shortest rows first, each call cut to its own longest row (a multiple of 8).
    lengths = [shape[1] for shape in recording.shapes]
    assert [shape[0] for shape in recording.shapes] == [8, 8, 3]
    assert lengths == sorted(lengths) and lengths[0] < inputs["input_word_ids"].shape[1] == lengths[-1]
    assert all(length % 8 == 0 for length in lengths)
    empty = tf.function(in_graph, autograph=False)({name: value[:0] for name, value in inputs.items()})
    assert [output.shape[0] for output in tf.nest.flatten(empty)] == [0] * len(tf.nest.flatten(empty))


def test_eager_xla_calls_reuse_what_they_compiled():
    """call_by_length(jit_compile=True) outside a graph, twice: the second call compiles
    nothing new (before, each call made a new XLA function and compiled every shape again,
    ~1 s each), and both give the model's answers."""
    from bert_tf import by_length
    from bert_tf.config import BertConfig
    from bert_tf.encoder import BertEncoder
    from fine_tune.heads import ClassificationHead

    keras.utils.set_random_seed(3)
    model = ClassificationHead().build(BertEncoder(BertConfig.from_preset("tiny", vocab_size=30522)), 3, 0.0)
    layer = BertPreprocessor(str(shared_file(parity.VOCABS["uncased"][0])), seq_length=64, padding="longest")
    inputs = layer(tf.constant([" ".join(["word"] * (n * 7 % 40)) + " end" for n in range(11)]))
    expected = model(inputs, training=False).numpy()
    first = layer.call_by_length(model, inputs, jit_compile=True)
    compiled = by_length.xla(model).experimental_get_tracing_count()
    second = layer.call_by_length(model, inputs, jit_compile=True)
    assert by_length.xla(model).experimental_get_tracing_count() == compiled == 2  # calls of 8 and 3 rows
    for outputs in (first, second):
        np.testing.assert_allclose(outputs.numpy(), expected, atol=1e-5)


def test_bad_arguments_are_one_sentence():
    vocab = str(shared_file(parity.VOCABS["uncased"][0]))
    with pytest.raises(BertTfError, match="padding"):
        BertPreprocessor(vocab, padding="dynamic")
    with pytest.raises(BertTfError, match="one or two segments"):
        preprocessor().pack([tf.ragged.constant([[5]])] * 3)
    for multiple in (0, -1):  # -1 cut every row to [CLS] and one token; 0 divided by zero in the graph
        with pytest.raises(BertTfError, match=f"^pad_to_multiple_of must be 1 or more, got {multiple}.$"):
            BertPreprocessor(vocab, padding="longest", pad_to_multiple_of=multiple)


@pytest.mark.parametrize("vocab", ["uncased", "cased"])
def test_hard_texts_as_the_original(vocab):
    """Bytes that are not UTF-8 (dropped, as the original's `convert_to_unicode`), NUL and other deleted
    controls inside words (no word break), Python-only spaces (U+2028, U+3000), final sigmas
    and combining marks: the ids of the whole text, word by word, are the original's."""
    tokenizer, layer = parity.tokenizers(vocab)
    texts = [b"caf\xc3 \xff\xfeok \xe4\xb8", "a\x00b a\x1cb\x85c".encode(), "x\u2028y\u3000z\u00a0w".encode(),
             "ΣΑΣ ΟΔΟΣ.Α όσος".encode(), "e\u0301\u0327 A\u030a\u0323 Ǆ ǅ".encode(), "".encode(), b" \t\n "]
    got = layer.tokenize(tf.constant(texts)).merge_dims(1, 2).to_list()
    assert got == [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)) for text in texts]
