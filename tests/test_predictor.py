"""`load_task_model` and `bert-predict` against the run scripts' own prediction files.

Each fixture fine-tunes a tiny model for a few steps on slices of the shared data and
runs `--do_predict` (run_classifier.py, run_ner.py, run_squad.py); the tests then give
the same inputs to `fine_tune.predictor` and `fine_tune.batch_predict` and compare with
what the scripts wrote: the same labels, tags and answers, probabilities within 1e-6.
Character offsets are checked against offsets computed independently (seqeval's
entities on CoNLL-2003, the gold character tags of People's Daily, SQuAD/DRCD contexts).
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil

import numpy as np
import pytest
from seqeval.metrics.sequence_labeling import get_entities

import bert_tf
from bert_tf.errors import BertTfError
from bert_tf.tokenization import BasicTokenizer, FullTokenizer
from fine_tune import batch_predict, predictor as predictor_module
from fine_tune.predictor import Classifier, QuestionAnswerer, load_task_model, split_words
from fine_tune.tagging import iob1_to_iob2, iob2_to_iob1, read_conll
from tests.conftest import predictor_xla_functions, shared_file, without_progress_bars
from tests.test_fine_tune_tasks import conll_slice, fine_tune, read_rows, slice_of, write_rows
from tests.test_squad_run import dev_slice, read_json, squad

CASED = "vocab/google_cased_en_vocab.txt"
CHINESE = "vocab/google_zh_vocab.txt"


# === Fine-tuned runs (one of each kind, shared by the module) ===
def glue_run(tmp_path_factory, task: str, folder: str, sizes: dict[str, int], *flags: str) -> pathlib.Path:
    """A tiny run of `task` on the first `sizes[split]` rows of each shared GLUE file, with --do_predict."""
    root = tmp_path_factory.mktemp(folder)
    for split, count in sizes.items():
        write_rows(root / "data" / f"{split}.tsv", slice_of(f"glue/{folder}/{split}.tsv", 0, count))
    fine_tune("classifier", task, root / "data", root / "out", "--do_train", "--do_predict", *flags)
    return root


@pytest.fixture(scope="module")
def mrpc(tmp_path_factory) -> pathlib.Path:
    """A pair classifier with max_seq_length 32 (many MRPC pairs are truncated) and a best/ checkpoint."""
    return glue_run(tmp_path_factory, "mrpc", "MRPC", {"train": 32, "dev": 24, "test": 40}, "--do_eval",
                    "--max_seq_length=32", "--predict_batch_size=8")


@pytest.fixture(scope="module")
def stsb(tmp_path_factory) -> pathlib.Path:
    return glue_run(tmp_path_factory, "sts-b", "STS-B", {"train": 16, "test": 24})


@pytest.fixture(scope="module")
def sst2(tmp_path_factory) -> pathlib.Path:
    return glue_run(tmp_path_factory, "sst-2", "SST-2", {"train": 16, "test": 24})


@pytest.fixture(scope="module")
def conll(tmp_path_factory) -> pathlib.Path:
    """A tagger with max_seq_length 24: long sentences are covered by several windows."""
    root = tmp_path_factory.mktemp("conll")
    (root / "data").mkdir()
    for name, documents in (("eng.train", 2), ("eng.testb", 2)):
        (root / "data" / name).write_text(conll_slice(f"conll2003/{name}", documents), encoding="utf-8")
    fine_tune("ner", "conll2003", root / "data", root / "out", "--do_train", "--do_predict", "--nodo_lower_case",
              "--learning_rate=3e-4", "--max_seq_length=24", vocab=CASED)
    return root


def squad_run(tmp_path_factory, name: str, relative: str, paragraphs: int, *flags: str, vocab: str = None):
    root = tmp_path_factory.mktemp(name)
    data = dev_slice(relative, root / "dev.json", paragraphs)
    extra = {"vocab": vocab} if vocab else {}
    squad(root / "out", "--do_train", f"--train_file={data}", "--do_predict", f"--predict_file={data}", *flags,
          **extra)
    return root


@pytest.fixture(scope="module")
def squad_v1(tmp_path_factory) -> pathlib.Path:
    return squad_run(tmp_path_factory, "squad1", "squad/dev-v1.1.json", 2)


@pytest.fixture(scope="module")
def squad_v2(tmp_path_factory) -> pathlib.Path:
    return squad_run(tmp_path_factory, "squad2", "squad/dev-v2.0.json", 2, "--version_2_with_negative",
                     "--null_score_diff_threshold=-1.5")


@pytest.fixture(scope="module")
def drcd(tmp_path_factory) -> pathlib.Path:
    return squad_run(tmp_path_factory, "drcd", "zh/drcd/DRCD_dev.json", 2, "--train_batch_size=8", vocab=CHINESE)


# === Classification ===
def test_classifier_equals_run_classifier_predictions(mrpc, capsys):
    model = bert_tf.load_task_model(mrpc / "out")  # the lazy alias
    pairs = [(row[3], row[4]) for row in read_rows(mrpc / "data" / "test.tsv")[1:]]
    capsys.readouterr()
    results = model.predict(pairs)
    written = [row[1] for row in read_rows(mrpc / "out" / "MRPC.tsv")[1:]]
    probabilities = np.array(read_rows(mrpc / "out" / "test_results.tsv"), dtype=np.float64)
    assert [result.label for result in results] == written
    assert [result.label_id for result in results] == [model.labels.index(label) for label in written]
    np.testing.assert_allclose([result.probabilities for result in results], probabilities, atol=1e-6, rtol=0)
    # Truncated as in training, and said once: counted here from the tokenizer itself.
    tokenizer = FullTokenizer(shared_file("vocab/google_uncased_en_vocab.txt"))
    long = sum(len(tokenizer.tokenize(a)) + len(tokenizer.tokenize(b)) + 3 > 32 for a, b in pairs)
    assert 0 < long < len(pairs)
    err = capsys.readouterr().err
    assert err.count("note:") == 1 and f"{long} inputs of {len(pairs)} are longer than max_seq_length=32" in err
    # One pair gives one result, equal to its row of the batch.
    single = model.predict(pairs[3])
    assert single.label == written[3] and np.allclose(single.probabilities, probabilities[3], atol=1e-6)


def test_single_texts_and_regression_equal_their_runs(sst2, stsb):
    sentences = [row[1] for row in read_rows(sst2 / "data" / "test.tsv")[1:]]
    model = load_task_model(sst2 / "out", batch_size=5)
    results = model.predict(sentences)
    assert [r.label for r in results] == [row[1] for row in read_rows(sst2 / "out" / "SST-2.tsv")[1:]]
    np.testing.assert_allclose([r.probabilities for r in results],
                               np.array(read_rows(sst2 / "out" / "test_results.tsv"), dtype=float), atol=1e-6, rtol=0)
    scorer = load_task_model(stsb / "out")
    pairs = [(row[7], row[8]) for row in read_rows(stsb / "data" / "test.tsv")[1:]]
    scores = [f"{result.score:.3f}" for result in scorer.predict(pairs)]
    assert scores == [row[1] for row in read_rows(stsb / "out" / "STS-B.tsv")[1:]]


def test_long_inputs_go_in_chunks_with_a_progress_bar(sst2, capsys, monkeypatch):
    from fine_tune import predictor

    model = load_task_model(sst2 / "out")
    sentences = [row[1] for row in read_rows(sst2 / "data" / "test.tsv")[1:]]
    whole = model.predict(sentences)
    vectors = model.embed(sentences, "mean")
    capsys.readouterr()
    monkeypatch.setattr(predictor, "PROGRESS_DELAY_SECONDS", 60.0)  # calls shorter than the delay show no bar
    model.predict(sentences[:9])
    model.embed(sentences[:9], "mean")
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(predictor, "INPUT_CHUNK", 5)
    monkeypatch.setattr(predictor, "PROGRESS_DELAY_SECONDS", 0.0)  # as if each call were long
    chunked = model.predict(sentences)
    assert [r.label for r in chunked] == [r.label for r in whole]
    np.testing.assert_allclose([r.probabilities for r in chunked], [r.probabilities for r in whole], atol=1e-6)
    err = capsys.readouterr().err
    assert f"{len(sentences)}/{len(sentences)} [" in err and "inputs/s]" in err
    np.testing.assert_allclose(model.embed(sentences, "mean"), vectors, atol=1e-6)
    err = capsys.readouterr().err
    assert f"{len(sentences)}/{len(sentences)} [" in err and "texts/s]" in err


# === Tagging ===
def test_tagger_equals_run_ner_predictions_with_windows(conll):
    model = load_task_model(conll / "out")
    sentences = read_conll(str(conll / "data" / "eng.testb"))
    tokenizer = FullTokenizer(shared_file(CASED), do_lower_case=False)
    assert max(sum(len(tokenizer.tokenize(w)) for w in s.words) for s in sentences) > 22  # several windows
    results = model.predict([tuple(sentence.words) for sentence in sentences])
    written = [line.split()[-1] for line in (conll / "out" / "test_predictions.txt").read_text().splitlines()
               if line.strip() and not line.startswith("-DOCSTART-")]
    predicted = [tag for result in results for tag in iob2_to_iob1([word.tag for word in result.words])]
    assert predicted == written  # the file is IOB1 like its input; the model tags IOB2
    for sentence, result in zip(sentences, results):
        assert [word.text for word in result.words] == list(sentence.words)
        assert all(result.text[word.start : word.end] == word.text for word in result.words)


def test_entity_offsets_on_conll_sentences_equal_seqeval(conll):
    """Entities read from gold tags: seqeval's word spans, mapped to characters by hand."""
    model = load_task_model(conll / "out")
    sentences = [s for s in read_conll(str(shared_file("conll2003/eng.testa")))[:400] if s.label]
    checked = 0
    for sentence in sentences:
        tags = iob1_to_iob2(sentence.label)
        example, context = model.example(tuple(sentence.words), "input 0", 0)
        tagging = model.result(example, context, tags)
        starts = np.cumsum([0] + [len(word) + 1 for word in sentence.words])
        expected = [(kind, " ".join(sentence.words[first : last + 1]), int(starts[first]),
                     int(starts[last] + len(sentence.words[last]))) for kind, first, last in get_entities(tags)]
        assert [(e.type, e.text, e.start, e.end) for e in tagging.entities] == expected
        assert all(tagging.text[e.start : e.end] == e.text for e in tagging.entities)
        checked += len(expected)
    assert checked > 500


def test_raw_chinese_text_gets_character_offsets_of_gold_entities(conll):
    """People's Daily: one character a line with its tag, so gold offsets are the character indices."""
    model = load_task_model(conll / "out")
    blocks = shared_file("zh/peoples_daily_ner/example.dev").read_text(encoding="utf-8").split("\n\n")[:300]
    checked = 0
    for block in blocks:
        cells = [line.split() for line in block.splitlines() if line.strip()]
        chars, tags = [c[0] for c in cells], [c[-1] for c in cells]
        text = "".join(chars)
        spans = split_words(text)
        if [text[s:e] for s, e in spans] != chars:  # a Latin or digit run is one word: skip those sentences
            continue
        assert [text[s:e] for s, e in spans] == BasicTokenizer(do_lower_case=False).tokenize(text)
        example, context = model.example(text, "input 0", 0)
        tagging = model.result(example, context, tags)
        expected = [(kind, text[first : last + 1], first, last + 1) for kind, first, last in get_entities(tags)]
        assert [(e.type, e.text, e.start, e.end) for e in tagging.entities] == expected
        checked += len(expected)
    assert checked > 100


def test_words_end_where_the_original_ends_them():
    """Between two letters, every character Python calls a space: `split_words` cuts there exactly when
    Google's BasicTokenizer does (U+2028 yes; U+000C, U+001C, U+0085 no: its cleaning deletes them first)."""
    from official.nlp.tools import tokenization as original

    spaces = [chr(cp) for cp in range(0x110000) if chr(cp).isspace()]
    cuts = {ch: len(split_words(f"ab{ch}cd")) == 2 for ch in spaces}
    assert cuts == {ch: len(original.BasicTokenizer(do_lower_case=False).tokenize(f"ab{ch}cd")) == 2 for ch in spaces}
    assert cuts["\u2028"] and not cuts["\x0c"]


def test_raw_text_is_cut_at_bert_word_boundaries(conll):
    model = load_task_model(conll / "out")
    text = "Müller (Bayern) scored twice in São Paulo\u3000on Sunday , 3-1 .\n"
    tagging = model.predict(text)
    assert [w.text for w in tagging.words] == BasicTokenizer(do_lower_case=False).tokenize(text)
    assert all(text[w.start : w.end] == w.text for w in tagging.words)
    assert all(text[e.start : e.end] == e.text for e in tagging.entities)
    long = " ".join(["Brussels"] * 60)  # 60 words, 24 positions: windows, no word left untagged
    assert len(model.predict(long).words) == 60 and all(w.tag for w in model.predict(long).words)


# === Question answering ===
def squad_inputs(data: pathlib.Path) -> tuple[list[str], list[tuple[str, str]]]:
    ids, pairs = [], []
    for article in read_json(data)["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                ids.append(qa["id"])
                pairs.append((qa["question"], paragraph["context"]))
    return ids, pairs


def check_answers(model: QuestionAnswerer, root: pathlib.Path) -> list:
    ids, pairs = squad_inputs(root / "dev.json")
    answers = model.answer([q for q, _ in pairs], [c for _, c in pairs])
    assert {qas_id: a.text for qas_id, a in zip(ids, answers)} == read_json(root / "out" / "predictions.json")
    for (question, context), answer in zip(pairs, answers):
        span = context[answer.start : answer.end]
        assert " ".join(span.split()) == answer.text and answer.has_answer == bool(answer.text)
        if answer.text and not any(c.isspace() and c != " " for c in span) and "  " not in span:
            assert span == answer.text
    nbest = read_json(root / "out" / "nbest_predictions.json")
    for qas_id, answer in zip(ids, answers):
        assert answer.score == pytest.approx(next(e["probability"] for e in nbest[qas_id] if e["text"] == answer.text),
                                             abs=1e-6)
    return answers


def test_answers_equal_run_squad_predictions(squad_v1):
    model = load_task_model(squad_v1 / "out")
    contexts = [context for _, context in squad_inputs(squad_v1 / "dev.json")[1]]
    assert max(len(model.tokenizer.tokenize(context)) for context in contexts) > model.max_seq_length  # windows
    answers = check_answers(model, squad_v1)
    assert all(a.has_answer and a.null_score_diff is None for a in answers)
    one = model.answer(*squad_inputs(squad_v1 / "dev.json")[1][0])
    assert one == answers[0]


def test_squad_v2_answers_and_null_odds(squad_v2):
    model = load_task_model(squad_v2 / "out")  # its SQuAD 2.0 flags as recorded
    answers = check_answers(model, squad_v2)
    ids, _ = squad_inputs(squad_v2 / "dev.json")
    odds = read_json(squad_v2 / "out" / "null_odds.json")
    np.testing.assert_allclose([a.null_score_diff for a in answers], [odds[i] for i in ids], atol=1e-5)
    assert not all(a.has_answer for a in answers)
    # With a threshold no null score reaches, every question gets its best span.
    lenient = load_task_model(squad_v2 / "out", null_score_diff_threshold=1e9)
    nbest = read_json(squad_v2 / "out" / "nbest_predictions.json")
    spans = lenient.predict(squad_inputs(squad_v2 / "dev.json")[1])
    assert [a.text for a in spans] == [next(e["text"] for e in nbest[i] if e["text"]) for i in ids]
    assert all(a.has_answer for a in spans)


def test_chinese_answers_are_exact_context_characters(drcd):
    answers = check_answers(load_task_model(drcd / "out"), drcd)
    assert all(a.text and not a.text.isascii() for a in answers[:5])


# === Embeddings ===
def test_embed_pools_the_encoder_layers(mrpc, capsys):
    from bert_tf import pooling
    from fine_tune.trainer import ENCODER_INPUTS

    model = load_task_model(mrpc / "out")
    texts = ["Unaffable cats sat.", ("A pair", "of texts")]
    encoder = next(layer for layer in model.run.model.layers if isinstance(layer, bert_tf.BertEncoder))
    tokenizer = model.tokenizer
    for text in texts:
        tokens = ["[CLS]", *tokenizer.tokenize(text if isinstance(text, str) else text[0]), "[SEP]"]
        types = [0] * len(tokens)
        if isinstance(text, tuple):
            tokens += [*tokenizer.tokenize(text[1]), "[SEP]"]
            types += [1] * (len(tokens) - len(types))
        ids = np.array([tokenizer.convert_tokens_to_ids(tokens)])
        inputs = dict(zip(ENCODER_INPUTS, (ids, np.array([types]), np.ones_like(ids))))
        layers = [np.asarray(h)[0] for h in encoder(inputs)["encoder_outputs"]]
        both = np.concatenate([layers[-1], layers[0]], axis=-1)
        np.testing.assert_allclose(model.embed(text, "cls", (-1, 0)), both[0], atol=1e-5)
        np.testing.assert_allclose(model.embed(text, "mean", (-1, 0)), both.mean(0), atol=1e-5)
        np.testing.assert_allclose(model.embed(text, "none", (-1, 0)), both, atol=1e-5)
        starts = pooling.word_start_mask([tokens], len(tokens))[0].astype(bool)
        np.testing.assert_allclose(model.embed(text, "first_subword", (-1, 0)), both[starts], atol=1e-5)
    assert [v.shape for v in model.embed(texts, "mean")] == [(128,), (128,)]
    capsys.readouterr()
    long = " ".join(["word"] * (model.max_seq_length + 10))
    assert len(model.embed([long, "short", long], "none")[0]) == model.max_seq_length  # cut as in training
    assert without_progress_bars(capsys.readouterr().err) == (
        f"note: 2 inputs of 3 are longer than max_seq_length={model.max_seq_length} WordPieces; they were truncated "
        "as in training.\n")
    with pytest.raises(BertTfError, match="not one of cls, mean, first_subword, none"):
        model.embed("x", "max")
    with pytest.raises(BertTfError, match="out of range for a model of 2 layers"):
        model.embed("x", "cls", (5,))
    np.testing.assert_array_equal(model.embed("x", "cls", -1), model.embed("x", "cls", (-1,)))  # one index
    for layers, message in (("-1", "layers is str; give a layer index or a list of them"),  # were TypeErrors
                            (["-1"], "layers value '-1' is not a layer index")):
        with pytest.raises(BertTfError, match=re.escape(message)):
            model.embed("x", "cls", layers)


def test_bf16_predicts_in_bfloat16_near_float32(mrpc, capsys, tmp_path):
    """`mixed_precision="bf16"`: a float32 model whose projections compute in bfloat16 (as
    torch.autocast does), with probabilities float32's to bf16's precision (not equal to them: it
    computes in bf16); bert-predict --mixed_precision=bf16 is the same where oneDNN's bf16 math
    mode does not take (where it does, the math mode's float32 model: tests/test_onednn.py)."""
    fp32, bf16 = load_task_model(mrpc / "out"), load_task_model(mrpc / "out", mixed_precision="bf16")
    projections = [[(layer.compute_dtype, layer.matmul_dtype) for layer in model.run.model._flatten_layers()
                    if isinstance(layer, bert_tf.layers.PositionwiseDense)] for model in (fp32, bf16)]
    layers = 6 * fp32.run.config.num_hidden_layers
    assert projections == [[("float32", None)] * layers, [("float32", "bfloat16")] * layers]
    pairs = [(row[3], row[4]) for row in read_rows(mrpc / "data" / "test.tsv")[1:]]
    expected, got = fp32.predict(pairs), bf16.predict(pairs)
    gap = np.abs(np.array([r.probabilities for r in got]) - [r.probabilities for r in expected])
    assert 0 < gap.max() < 2e-2
    margin = np.abs(np.diff([r.probabilities for r in expected], axis=1))[:, 0]
    assert all(a.label == b.label for a, b, m in zip(expected, got, margin) if m > 2 * gap.max())
    vectors = bf16.embed(["A text.", "Another one."], "mean")
    assert all(v.dtype == np.float32 for v in vectors)
    np.testing.assert_allclose(vectors, fp32.embed(["A text.", "Another one."], "mean"), atol=0.1)
    write_rows(tmp_path / "pairs.tsv", [list(pair) for pair in pairs])
    status, err = run_batch(capsys, mrpc / "out", tmp_path / "pairs.tsv", tmp_path / "bf16.jsonl",
                            "--mixed_precision=bf16")
    assert status == 0, err
    assert [r["probabilities"] for r in read_jsonl(tmp_path / "bf16.jsonl")] == [list(r.probabilities) for r in got]
    with pytest.raises(BertTfError, match=r"^Unknown --mixed_precision 'fp8'; use one of none, bf16, fp16\.$"):
        load_task_model(mrpc / "out", mixed_precision="fp8")


def test_the_runs_own_use_best_checkpoint_picks_the_weights(mrpc, tmp_path):
    """A run's predictions came from best/ unless it said --nouse_best_checkpoint: a loaded
    model (and so an export) takes the same weights, unless prefer_best says otherwise
    (before, best/ whatever the run said: answers other than the run's own)."""
    from fine_tune.run_dir import load_run

    copy = tmp_path / "run"
    shutil.copytree(mrpc / "out", copy)
    record = read_json(copy / "fine_tune.json")
    record["training"]["use_best_checkpoint"] = False
    (copy / "fine_tune.json").write_text(json.dumps(record), encoding="utf-8")
    best, final = str(copy / "best" / "model.weights.h5"), str(copy / "model.weights.h5")
    assert load_run(mrpc / "out").weights == str(mrpc / "out" / "best" / "model.weights.h5")
    assert (load_run(copy).weights, load_run(copy, prefer_best=True).weights) == (final, best)
    assert load_task_model(copy).run.weights == final


def test_bert_predict_jit_compile_answers_as_without(mrpc, capsys, tmp_path, monkeypatch):
    """bert-predict --jit_compile: the loaded model's prediction graph holds XLA functions, and the
    labels and probabilities (1e-5) are the plain predictor's; with --mixed_precision, one sentence."""
    pairs = [(row[3], row[4]) for row in read_rows(mrpc / "data" / "test.tsv")[1:]]
    write_rows(tmp_path / "pairs.tsv", [list(pair) for pair in pairs])
    loaded = []
    monkeypatch.setattr(predictor_module, "load_task_model",
                        lambda *args, **kwargs: loaded.append(load_task_model(*args, **kwargs)) or loaded[-1])
    status, err = run_batch(capsys, mrpc / "out", tmp_path / "pairs.tsv", tmp_path / "xla.jsonl", "--jit_compile")
    assert status == 0, err
    assert predictor_xla_functions(loaded[0]) > 0
    status, err = run_batch(capsys, mrpc / "out", tmp_path / "pairs.tsv", tmp_path / "no.jsonl", "--jit_compile",
                            "--mixed_precision=bf16")
    assert (status, err) == (1, "error: --jit_compile and --mixed_precision do not combine (XLA's matmuls do not take "
                                "oneDNN's bf16 math mode, and ran slower in bf16 here); give one of them.\n")
    assert not (tmp_path / "no.jsonl").exists()
    got, expected = read_jsonl(tmp_path / "xla.jsonl"), load_task_model(mrpc / "out").predict(pairs)
    assert [r["label"] for r in got] == [e.label for e in expected]
    np.testing.assert_allclose([r["probabilities"] for r in got], [e.probabilities for e in expected], atol=1e-5)


def test_bert_predict_bf16_in_its_own_process_takes_onednn_bf16_math_where_it_can(mrpc, project, tmp_path,
                                                                                 bf16_math_takes):
    """bert-predict --mixed_precision=bf16 as a user runs it (its own process): oneDNN's bf16
    math mode where TensorFlow takes it, else the projections cast to bfloat16, said on stderr;
    probabilities float32's to bf16's precision (not equal), the same labels where float32's
    margin is wider than the gap. (In the test process above, which had run matmuls, the mode
    could not take.)"""
    pairs = [(row[3], row[4]) for row in read_rows(mrpc / "data" / "test.tsv")[1:]]
    write_rows(tmp_path / "pairs.tsv", [list(pair) for pair in pairs])
    done = project.run("-m", "fine_tune.batch_predict", f"--model_dir={mrpc / 'out'}",
                       f"--input_file={tmp_path / 'pairs.tsv'}", f"--output_file={tmp_path / 'bf16.jsonl'}",
                       "--mixed_precision=bf16")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = ("bf16: oneDNN's bf16 math mode (a float32 model, its matmuls in bfloat16)." if bf16_math_takes else
            "bf16: the encoder's projections in bfloat16 (oneDNN's bf16 math mode does not take on this CPU).")
    assert said in done.stderr
    got = np.array([r["probabilities"] for r in read_jsonl(tmp_path / "bf16.jsonl")])
    expected = load_task_model(mrpc / "out").predict(pairs)
    gap = np.abs(got - [r.probabilities for r in expected])
    assert 0 < gap.max() < 2e-2
    margin = np.abs(np.diff([r.probabilities for r in expected], axis=1))[:, 0]
    assert all(r["label"] == e.label for r, e, m in zip(read_jsonl(tmp_path / "bf16.jsonl"), expected, margin)
               if m > 2 * gap.max())


# === Bad input: one sentence each ===
def test_a_context_without_wordpieces_has_no_windows():
    from fine_tune.squad.features import max_context_masks

    assert max_context_masks([], 0) == []


def test_empty_strings_are_valid_inputs(mrpc, sst2, conll, squad_v1):
    assert load_task_model(mrpc / "out").predict(("", "")).label in ("0", "1")
    assert load_task_model(sst2 / "out").predict("").label in ("0", "1")
    tagging = load_task_model(conll / "out").predict("")
    assert tagging.words == () and tagging.entities == ()
    answerer = load_task_model(squad_v1 / "out")
    assert answerer.answer("", "") == answerer.answer("Who?", "  ")
    assert answerer.answer("Who?", "").has_answer is False and answerer.answer("", "Denver won.").text


@pytest.mark.parametrize("rows,message", [
    ([("ok", "fine"), (None, "x")], "input 1 text_a is None, not a text"),
    ([("ok", 3)], "input 0 text_b is int, not a text"),
    ([(b"\xff\xfe", "x")], "input 0 text_a is bytes that are not UTF-8"),
    (["one text"], "input 0 is one text, but mrpc classifies pairs"),
    ([("a", "b", "c")], "input 0 is a tuple of 3 items"),
])
def test_bad_classifier_inputs(mrpc, rows, message):
    model = load_task_model(mrpc / "out")
    with pytest.raises(BertTfError, match=message):
        model.predict(rows)
    assert model.predict([(b"caf\xc3\xa9", "ok")])[0].label in model.labels  # UTF-8 bytes are text


@pytest.mark.parametrize("inputs,message", [
    (None, "not NoneType"), (5, "not int"),
    ({"text_a": "a", "text_b": "b"}, "not dict"),  # its keys would otherwise be taken for two texts
    ({"a", "b"}, "not set"),  # no order to answer in
])
def test_bad_input_containers(sst2, inputs, message):
    with pytest.raises(BertTfError, match=f"^Give a text, a tuple or a list of them to predict, {message}.$"):
        load_task_model(sst2 / "out").predict(inputs)


@pytest.mark.parametrize("question,context,message", [
    ("Who won?", None, "input 0 context is None, not a text"),
    (5, "Denver won.", "input 0 question is int, not a text"),
    (["Who?", "When?"], "Denver won.", r"answer\(\) got 2 questions but one context; give a list of one context"),
    (["Who?", "When?"], ["Denver won."], r"answer\(\) got 2 questions but 1 contexts"),
    ("Who won?", b"\xff", "input 0 context is bytes that are not UTF-8"),
])
def test_bad_answer_inputs(squad_v1, question, context, message):
    with pytest.raises(BertTfError, match=message):
        load_task_model(squad_v1 / "out").answer(question, context)


def test_wrong_kind_of_input_or_model(sst2, conll, squad_v1):
    with pytest.raises(BertTfError, match="input 0 is a pair of texts, but sst-2 classifies single texts"):
        load_task_model(sst2 / "out").predict([("a", "b")])
    with pytest.raises(BertTfError, match=r"^input 0 is a list; give a pair of texts as a \(text_a, text_b\) tuple.$"):
        load_task_model(sst2 / "out").predict([["a", "b"]])
    with pytest.raises(BertTfError, match=r"holds a classifier \(sst-2, from run_classifier.py\); answer\(\) needs"):
        load_task_model(sst2 / "out").answer("Who?", "Denver won.")
    with pytest.raises(BertTfError, match="input 0 word 1 is None"):
        load_task_model(conll / "out").predict([("EU", None)])
    with pytest.raises(BertTfError, match=r"input 0 is not a \(question, context\) pair"):
        load_task_model(squad_v1 / "out").predict(["Who won?"])
    with pytest.raises(BertTfError, match="'doc_stride' is not a setting of sst-2 models"):
        load_task_model(sst2 / "out", doc_stride=64)


def test_settings_are_read_as_their_flags_types(squad_v1):
    """A setting as a command line gives it ("False", "48") means what the flag would: the
    string "False" once switched SQuAD 2.0 on (a non-empty string is true)."""
    question, context = "Who won the game?", "Denver won the game against Carolina."
    plain = load_task_model(squad_v1 / "out").answer(question, context)
    as_strings = load_task_model(squad_v1 / "out", doc_stride="48", max_query_length="32",
                                 version_2_with_negative="False").answer(question, context)
    assert as_strings == plain and plain.has_answer and plain.null_score_diff is None
    for setting, message in [({"version_2_with_negative": "no"}, "version_2_with_negative='no' must be true or false"),
                             ({"doc_stride": "abc"}, "doc_stride='abc' must be an integer"),
                             ({"n_best_size": 2.5}, "n_best_size=2.5 must be an integer"),
                             ({"null_score_diff_threshold": True}, "null_score_diff_threshold=True must be a number")]:
        with pytest.raises(BertTfError, match=f"^The setting {message}.$"):
            load_task_model(squad_v1 / "out", **setting)


def test_incomplete_or_damaged_run_dirs(sst2, tmp_path):
    with pytest.raises(BertTfError, match="is not a folder"):
        load_task_model(tmp_path / "nope")
    for not_a_path in (None, 123):
        with pytest.raises(BertTfError, match=f"^Give load_task_model the path of a run dir or export as a string, "
                                              f"not {not_a_path}.$"):
            load_task_model(not_a_path)
    for missing in ("fine_tune.json", "bert_config.json", "vocab.txt"):
        broken = tmp_path / f"no_{missing}"
        shutil.copytree(sst2 / "out", broken, ignore=shutil.ignore_patterns(missing))
        with pytest.raises(BertTfError, match=f"is not a finished fine-tuning run \\({missing} is missing\\)"):
            load_task_model(broken)
    untrained = tmp_path / "untrained"
    shutil.copytree(sst2 / "out", untrained, ignore=shutil.ignore_patterns("*.weights.h5"))
    with pytest.raises(BertTfError, match="neither model.weights.h5 nor best/model.weights.h5 is there"):
        load_task_model(untrained)
    damaged = tmp_path / "damaged"
    shutil.copytree(sst2 / "out", damaged)
    (damaged / "fine_tune.json").write_text('{"task": "sst-2"')
    with pytest.raises(BertTfError, match="fine_tune.json is damaged"):
        load_task_model(damaged)
    record = json.loads((sst2 / "out" / "fine_tune.json").read_text())
    (damaged / "fine_tune.json").write_text(json.dumps({**record, "task": "pos"}))
    with pytest.raises(BertTfError, match="Unknown --task 'pos'"):
        load_task_model(damaged)
    truncated = tmp_path / "truncated"
    shutil.copytree(sst2 / "out", truncated)
    for weights in truncated.rglob("*.weights.h5"):
        weights.write_bytes(weights.read_bytes()[:2000])
    with pytest.raises(BertTfError, match=r"model.weights.h5 is not a readable weights file \(.*\); "):
        load_task_model(truncated)
    resized = tmp_path / "resized"
    shutil.copytree(sst2 / "out", resized)
    config = json.loads((resized / "bert_config.json").read_text())
    (resized / "bert_config.json").write_text(json.dumps(dict(config, num_hidden_layers=3)))
    with pytest.raises(BertTfError, match="does not fit the model of bert_config.json"):
        load_task_model(resized)


# === bert-predict ===
def run_batch(capsys, model_dir, input_file, output_file, *flags) -> tuple[int, str]:
    status = batch_predict.main([f"--model_dir={model_dir}", f"--input_file={input_file}",
                                 f"--output_file={output_file}", *flags])
    return status, capsys.readouterr().err


def read_jsonl(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_bert_predict_every_format_and_task(capsys, tmp_path, mrpc, sst2, conll, squad_v2):
    pairs = [(row[3], row[4]) for row in read_rows(mrpc / "data" / "test.tsv")[1:]]
    expected = [row[1] for row in read_rows(mrpc / "out" / "MRPC.tsv")[1:]]
    write_rows(tmp_path / "pairs.tsv", [list(pair) for pair in pairs])
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps({"id": i if i else None, "text_a": a, "text_b": b})
                                                  + "\n\n" for i, (a, b) in enumerate(pairs)))  # a null id is kept
    for name in ("pairs.tsv", "pairs.jsonl"):
        status, err = run_batch(capsys, mrpc / "out", tmp_path / name, tmp_path / "out" / f"{name}.jsonl",
                                "--batch_size=3", "--chunk_size=7")  # several chunks, in input order
        assert status == 0 and f"Wrote {len(pairs)} predictions" in err and "rows/s]" in err
        assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", err)  # elapsed<left
        assert err.count("note:") == 1  # truncation said once for the whole file
        records = read_jsonl(tmp_path / "out" / f"{name}.jsonl")
        assert [r["label"] for r in records] == expected
        assert set(records[0]) == ({"id", "label", "label_id", "probabilities"} if "jsonl" in name
                                   else {"label", "label_id", "probabilities"})
        if "jsonl" in name:
            assert [r["id"] for r in records] == [None, *range(1, len(pairs))]
    sentences = ["", *[row[1] for row in read_rows(sst2 / "data" / "test.tsv")[1:6]]]
    (tmp_path / "sentences.txt").write_text("\n".join(sentences) + "\n")
    assert run_batch(capsys, sst2 / "out", tmp_path / "sentences.txt", tmp_path / "sst.jsonl")[0] == 0
    model = load_task_model(sst2 / "out")
    assert [r["label"] for r in read_jsonl(tmp_path / "sst.jsonl")] == [p.label for p in model.predict(sentences)]
    text = "EU rejects German call to boycott British lamb .\nPeter Blackburn\n"
    (tmp_path / "ner.txt").write_text(text)
    assert run_batch(capsys, conll / "out", tmp_path / "ner.txt", tmp_path / "ner.jsonl")[0] == 0
    records = read_jsonl(tmp_path / "ner.jsonl")
    assert [r["text"] for r in records] == text.splitlines()
    assert [[w["text"] for w in r["words"]] for r in records] == [line.split() for line in text.splitlines()]
    ids, questions = squad_inputs(squad_v2 / "dev.json")
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps({"id": i, "question": q, "context": c}, ensure_ascii=False)
                                               + "\n" for i, (q, c) in zip(ids, questions)), encoding="utf-8")
    status, err = run_batch(capsys, squad_v2 / "out", tmp_path / "qa.jsonl", tmp_path / "qa_out.jsonl")
    assert status == 0, err
    assert {r["id"]: r["text"] for r in read_jsonl(tmp_path / "qa_out.jsonl")} == read_json(
        squad_v2 / "out" / "predictions.json")


@pytest.mark.parametrize("content,message", [
    ('{"text_a": "a", "text_b": "b"}\n{"text_a": "a", \n', "pairs.jsonl line 2 is not valid JSON"),
    ('{"text_a": "a", "text_b": "b"}\n["a", "b"]\n', "pairs.jsonl line 2 is a JSON list, not an object"),
    ('{"text_a": "a", "text_b": "b"}\n{"sentence": "a"}\n', 'pairs.jsonl line 2 has no "text" or "text_a"'),
    ('{"text_a": "a", "text_b": null}\n', "pairs.jsonl line 1 text_b is None, not a text"),
    (b'{"text_a": "a", "text_b": "b"}\n{"text_a": "\xff"}\n', "pairs.jsonl line 2 is not UTF-8 text"),
    ('{"text": "one"}\n', 'pairs.jsonl line 1 is one text, but mrpc classifies pairs; give text_a<TAB>text_b (.tsv) '
                         'or {"text_a": ..., "text_b": ...} (.jsonl) lines.'),
    ('{"text": "one", "text_b": "two"}\n', 'pairs.jsonl line 1 has a "text_b" this line cannot use; a classifier '
                                          'line gives "text", or "text_a" and "text_b".'),
    ('{"text_a": "a", "text_b": "b", "text": "c"}\n', 'pairs.jsonl line 1 has both "text" and "text_a"; give one'),
])
def test_bert_predict_bad_lines_name_file_and_line(capsys, tmp_path, monkeypatch, mrpc, content, message):
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    (tmp_path / "out").mkdir()
    predicted = []
    monkeypatch.setattr(Classifier, "predict_rows", lambda self, rows, *_, **__: predicted.append(rows))
    status, err = run_batch(capsys, mrpc / "out", path, tmp_path / "out" / "new" / "predictions.jsonl",
                            "--chunk_size=1")
    assert status == 1 and message in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("error: ") and "Traceback" not in err
    assert predicted == []  # every line is checked before the first is predicted
    assert list((tmp_path / "out").iterdir()) == []  # nothing half-written, no temporary, no new folder


def test_bert_predict_says_what_a_line_must_hold_in_the_files_terms(capsys, tmp_path, sst2, conll):
    """A pair for a single-text task, and a pair for a tagger (which read it as two words
    before), are one sentence naming the file and line, with what to write instead."""
    (tmp_path / "pairs.tsv").write_text("good\nHe said so.\tSo he said.\n")
    status, err = run_batch(capsys, sst2 / "out", tmp_path / "pairs.tsv", tmp_path / "o.jsonl")
    assert (status, err) == (1, f"error: {tmp_path / 'pairs.tsv'} line 2 is a pair of texts, but sst-2 classifies "
                                "single texts; give one text a line.\n")
    (tmp_path / "ner.jsonl").write_text('{"text": "EU rejects German call"}\n{"text_a": "EU", "text_b": "Bonn"}\n')
    status, err = run_batch(capsys, conll / "out", tmp_path / "ner.jsonl", tmp_path / "o.jsonl")
    assert (status, err) == (1, f'error: {tmp_path / "ner.jsonl"} line 2 has a "text_b" this line cannot use; a '
                                'tagger line gives one text ("text" or "words").\n')
    assert not (tmp_path / "o.jsonl").exists()


def test_bert_predict_bad_flags(capsys, tmp_path, mrpc, squad_v1):
    (tmp_path / "q.txt").write_text("Who won?\n")
    status, err = run_batch(capsys, squad_v1 / "out", tmp_path / "q.txt", tmp_path / "o.jsonl")
    assert status == 1 and "a question answerer needs a question and a context per line" in err
    (tmp_path / "in.csv").write_text("a\n")
    status, err = run_batch(capsys, mrpc / "out", tmp_path / "in.csv", tmp_path / "o.jsonl")
    assert status == 1 and "must end in .txt, .tsv, .jsonl" in err
    status, err = run_batch(capsys, tmp_path, tmp_path / "q.txt", tmp_path / "o.jsonl")
    assert status == 1 and "is not a finished fine-tuning run (fine_tune.json is missing)" in err
    assert not (tmp_path / "o.jsonl").exists()
    (tmp_path / "pairs.tsv").write_text("He said so.\tSo he said.\n")
    status, err = run_batch(capsys, mrpc / "out", tmp_path / "pairs.tsv", tmp_path / "pairs.tsv")  # replaced it
    assert (status, err) == (1, f"error: --output_file {tmp_path / 'pairs.tsv'} is --input_file; give another "
                                "file name.\n")
    assert (tmp_path / "pairs.tsv").read_text() == "He said so.\tSo he said.\n"
    status, err = run_batch(capsys, mrpc / "out", tmp_path / "pairs.tsv", tmp_path / "pairs.tsv" / "o.jsonl")
    assert (status, err) == (1, f"error: --output_file {tmp_path / 'pairs.tsv' / 'o.jsonl'} cannot be made: "
                                f"{tmp_path / 'pairs.tsv'} is a file, not a folder.\n")  # was a FileExistsError

