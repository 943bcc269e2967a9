"""`bert-export --format hf|tf1` (`fine_tune.checkpoint_export`): fine-tuned runs as transformers' task
models, checked by transformers itself (its classes, `AutoTokenizer`, `pipeline`), and under the original's
TF1 names, checked by Model Garden's converter and the original's head arithmetic."""

from __future__ import annotations

import json
import os
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import checkpoints
from bert_tf.checkpoints import tf1
from bert_tf.tokenization import FullTokenizer
from fine_tune.cli import parse_args, run
from fine_tune.export import main
from fine_tune.features import PairExample, PairFeaturiser
from fine_tune.run_dir import load_run
from fine_tune.trainer import save_weights
from tests.conftest import shared_file
from tests.test_checkpoints import model_garden_model
from tests.test_export import fine_tune, glue_rows
from tests.test_squad_run import dev_slice, squad

PAIRS = [("The company said profits rose.", "Profits went up, the firm said."), ("A dog runs.", "Stocks fell sharply.")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, pathlib.Path]:
    """Run dirs of tiny models fine-tuned a few steps: MRPC, STS-B (regression), CoNLL-2003 NER (cased), SQuAD v1.1.
    A few steps leave heads near zero: each head is redrawn large, so that wrong rows or a transposition show."""
    root = tmp_path_factory.mktemp("runs")
    fine_tune("mrpc", root / "mrpc_data", root / "mrpc", {"train": glue_rows("MRPC", 32)})
    fine_tune("sts-b", root / "stsb_data", root / "sts-b", {"train": glue_rows("STS-B", 32)})
    conll = shared_file("conll2003/eng.train").read_text(encoding="utf-8").split("\n\n")[:40]
    (root / "ner_data").mkdir()
    (root / "ner_data" / "eng.train").write_text("\n\n".join(conll) + "\n", encoding="utf-8")
    run(*parse_args("ner", [f"--data_dir={root / 'ner_data'}", f"--output_dir={root / 'ner'}",
                           f"--vocab_file={shared_file('vocab/google_cased_en_vocab.txt')}", "--nodo_lower_case",
                           "--preset=tiny", "--max_seq_length=32", "--train_batch_size=32", "--num_train_epochs=1",
                           "--do_train"]))
    squad(root / "squad", "--do_train", f"--train_file={dev_slice('squad/dev-v1.1.json', root / 'squad.json', 1)}")
    keras.backend.clear_session()
    rng = np.random.default_rng(0)
    for name in ("mrpc", "sts-b", "ner", "squad"):
        model = load_run(str(root / name)).model
        head = model.get_layer("span_logits" if name == "squad" else "logits")
        head.set_weights([rng.normal(0, 1, w.shape).astype(np.float32) for w in head.get_weights()])
        save_weights(model, str(root / name))
    return {name: root / name for name in ("mrpc", "sts-b", "ner", "squad")}


def exported(run_dir: pathlib.Path, format: str) -> pathlib.Path:
    export_dir = run_dir.parent / f"{run_dir.name}_{format}"
    if not export_dir.exists():
        assert main([f"--model_dir={run_dir}", f"--export_dir={export_dir}", f"--format={format}"]) == 0
    return export_dir


def pair_inputs(run_dir: pathlib.Path) -> dict[str, np.ndarray]:
    """run_classifier.py's ids of PAIRS, padded to the longer pair."""
    loaded = load_run(str(run_dir))
    tokenizer = FullTokenizer(loaded.vocab_file, do_lower_case=loaded.do_lower_case)
    features = PairFeaturiser(regression=loaded.is_regression)(
        [PairExample(str(i), a, b, None) for i, (a, b) in enumerate(PAIRS)], tokenizer, loaded.max_seq_length,
        loaded.labels)
    length = max(len(ids) for ids in features.sequences["input_word_ids"])
    batch = {name: np.zeros((len(PAIRS), length), np.int32) for name in ("input_word_ids", "input_type_ids", "input_mask")}
    for row, (ids, types) in enumerate(zip(features.sequences["input_word_ids"], features.sequences["input_type_ids"])):
        batch["input_word_ids"][row, : len(ids)] = ids
        batch["input_type_ids"][row, : len(ids)] = types
        batch["input_mask"][row, : len(ids)] = 1
    return batch


def keras_outputs(run_dir: pathlib.Path, batch: dict[str, np.ndarray]):
    return load_run(str(run_dir)).model(batch, training=False)


def torch_inputs(batch: dict[str, np.ndarray]) -> dict:
    import torch

    return {"input_ids": torch.from_numpy(batch["input_word_ids"]).long(),
            "token_type_ids": torch.from_numpy(batch["input_type_ids"]).long(),
            "attention_mask": torch.from_numpy(batch["input_mask"]).long()}


# === transformers ===
@pytest.mark.parametrize("task", ["mrpc", "sts-b"])
def test_a_classifier_is_a_transformers_sequence_classifier(runs, task):
    transformers = pytest.importorskip("transformers")
    import torch

    export_dir = exported(runs[task], "hf")
    batch = pair_inputs(runs[task])
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(export_dir)).eval()
    assert type(model).__name__ == "BertForSequenceClassification"
    with torch.no_grad():
        theirs = model(**torch_inputs(batch)).logits.numpy()
    np.testing.assert_allclose(theirs, np.asarray(keras_outputs(runs[task], batch)), atol=2e-5)
    # Its tokenizer cuts the pairs as run_classifier.py does: the casing and vocabulary went with it.
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(export_dir))
    for row, (a, b) in enumerate(PAIRS):
        ids = tokenizer(a, b)["input_ids"]
        assert ids == batch["input_word_ids"][row, : batch["input_mask"][row].sum()].tolist()
    labels = load_run(str(runs[task])).labels
    if task == "mrpc":  # the label names, in the run's order, are what pipeline answers
        assert model.config.id2label == dict(enumerate(labels)) and model.config.problem_type == "single_label_classification"
        answers = transformers.pipeline("text-classification", model=str(export_dir))([{"text": a, "text_pair": b} for a, b in PAIRS])
        expected = [labels[i] for i in np.asarray(keras_outputs(runs[task], batch)).argmax(-1)]
        assert [answer["label"] for answer in answers] == expected
    else:
        assert model.config.problem_type == "regression" and model.config.num_labels == 1


def test_a_tagger_is_a_transformers_token_classifier(runs):
    transformers = pytest.importorskip("transformers")
    import torch

    export_dir = exported(runs["ner"], "hf")
    loaded = load_run(str(runs["ner"]))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(export_dir))
    encoded = tokenizer(["EU rejects German call to boycott British lamb .", "Peter Blackburn"], padding=True,
                        return_tensors="np")
    batch = {"input_word_ids": encoded["input_ids"].astype(np.int32), "input_mask": encoded["attention_mask"].astype(np.int32),
             "input_type_ids": encoded["token_type_ids"].astype(np.int32)}
    assert "German" in tokenizer.convert_ids_to_tokens(batch["input_word_ids"][0].tolist())  # cased, as the run
    model = transformers.AutoModelForTokenClassification.from_pretrained(str(export_dir)).eval()
    assert type(model).__name__ == "BertForTokenClassification"
    assert model.config.id2label == dict(enumerate(loaded.labels))
    with torch.no_grad():
        theirs = model(**torch_inputs(batch)).logits.numpy()
    mask = batch["input_mask"].astype(bool)
    np.testing.assert_allclose(theirs[mask], np.asarray(keras_outputs(runs["ner"], batch))[mask], atol=2e-5)


def test_a_squad_model_is_a_transformers_question_answerer(runs):
    transformers = pytest.importorskip("transformers")
    import torch

    export_dir = exported(runs["squad"], "hf")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(export_dir))
    encoded = tokenizer("Which team won?", "The Denver Broncos defeated the Carolina Panthers 24-10.", return_tensors="np")
    batch = {"input_word_ids": encoded["input_ids"].astype(np.int32), "input_mask": encoded["attention_mask"].astype(np.int32),
             "input_type_ids": encoded["token_type_ids"].astype(np.int32)}
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(str(export_dir)).eval()
    assert type(model).__name__ == "BertForQuestionAnswering"
    with torch.no_grad():
        theirs = model(**torch_inputs(batch))
    ours = keras_outputs(runs["squad"], batch)
    np.testing.assert_allclose(theirs.start_logits.numpy(), np.asarray(ours["start_logits"]), atol=2e-5)
    np.testing.assert_allclose(theirs.end_logits.numpy(), np.asarray(ours["end_logits"]), atol=2e-5)


def test_an_hf_export_is_an_init_checkpoint_its_head_ignored(runs):
    """The paper starts RTE, MRPC and STS-B from an MNLI model: a run's export is read as a pre-trained encoder."""
    with pytest.warns(UserWarning, match="Ignoring 2 variables"):
        encoder = checkpoints.load_encoder(str(exported(runs["mrpc"], "hf")))
    batch = pair_inputs(runs["mrpc"])
    from bert_tf.hub_export import task_encoder

    ours = task_encoder(load_run(str(runs["mrpc"])).model)(batch)["pooled_output"]
    np.testing.assert_allclose(np.asarray(encoder(batch)["pooled_output"]), np.asarray(ours), atol=1e-6)


# === The original's TF1 names ===
@pytest.mark.parametrize("task", ["mrpc", "squad"])
def test_tf1_export_has_the_original_head_names_read_by_model_garden(runs, task):
    """run_classifier.py: logits = pooled @ output_weights^T + output_bias, output_weights [labels, hidden];
    run_squad.py: cls/squad/output_weights [2, hidden] on every position, start then end."""
    export_dir = exported(runs[task], "tf1")
    reader = tf.train.load_checkpoint(os.path.join(export_dir, tf1.CHECKPOINT_NAME))
    prefix = "cls/squad/" if task == "squad" else ""
    weights, bias = reader.get_tensor(f"{prefix}output_weights"), reader.get_tensor(f"{prefix}output_bias")
    loaded = load_run(str(runs[task]))
    hidden = loaded.config.hidden_size
    assert weights.shape == (2 if task == "squad" else len(loaded.labels), hidden)
    encoder = model_garden_model(str(export_dir), "encoder")  # tiny runs use "gelu", the tanh form in both
    batch = pair_inputs(runs["mrpc"])
    sequence, pooled = encoder(batch)
    ours = keras_outputs(runs[task], batch)
    if task == "squad":
        logits = np.einsum("bsh,oh->bso", sequence.numpy(), weights) + bias
        np.testing.assert_allclose(logits[..., 0], np.asarray(ours["start_logits"]), atol=2e-5)
        np.testing.assert_allclose(logits[..., 1], np.asarray(ours["end_logits"]), atol=2e-5)
    else:
        np.testing.assert_allclose(pooled.numpy() @ weights.T + bias, np.asarray(ours), atol=2e-5)
        assert (export_dir / "labels.txt").read_text(encoding="utf-8").split() == list(loaded.labels)
    assert json.loads((export_dir / "bert_config.json").read_text())["hidden_size"] == hidden
    assert (export_dir / "vocab.txt").read_bytes() == pathlib.Path(loaded.vocab_file).read_bytes()


def test_a_tf1_export_warns_of_an_activation_the_original_cannot_read(runs, tmp_path):
    import dataclasses

    from fine_tune.checkpoint_export import export_checkpoint

    loaded = load_run(str(runs["mrpc"]))
    exact = dataclasses.replace(loaded, config=dataclasses.replace(loaded.config, hidden_act="gelu_exact"))
    with pytest.warns(UserWarning, match=f"bert_config.json in {tmp_path / 'tf1'} says hidden_act='gelu_exact'"):
        export_checkpoint(exact, str(tmp_path / "tf1"), "tf1")


def test_an_unknown_format_is_refused_before_anything_is_read(runs, tmp_path):
    from bert_tf.errors import BertTfError
    from fine_tune.export import export

    with pytest.raises(BertTfError, match="^Unknown export format 'HF'; use one of saved_model, hf, tf1.$"):
        export(str(runs["mrpc"]), str(tmp_path / "out"), format="HF")
    assert not (tmp_path / "out").exists()


def test_an_existing_checkpoint_export_needs_overwrite(runs, capsys):
    export_dir = exported(runs["mrpc"], "tf1")
    assert main([f"--model_dir={runs['mrpc']}", f"--export_dir={export_dir}", "--format=tf1"]) == 1
    assert capsys.readouterr().err == f"error: --export_dir {export_dir} already exists; pass --overwrite to replace it.\n"
