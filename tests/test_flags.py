"""The one flag layer of every command, its one-line user errors, and `fine_tune.run`
with typed configs (the library entry the fine-tuning commands map their flags onto)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import keras
import pytest

from bert_tf import extract_features, flags
from bert_tf.errors import BertTfError
from bert_tf.checkpoints import convert
from bert_tf.training import cli as pretraining_cli
from data_prep import build_vocab, create_pretraining_data, prepare_corpus
from fine_tune import batch_predict, cli, export, registry
from fine_tune.config import RunConfig
from fine_tune.glue import GlueConfig
from fine_tune.tagging import ConllConfig
from tests.conftest import REPO_ROOT, shared_file
from tests.test_fine_tune_tasks import conll_slice, slice_of, write_rows

UNCASED = "vocab/google_uncased_en_vocab.txt"
TINY = ["--preset=tiny", "--max_seq_length=32", "--train_batch_size=8", "--eval_batch_size=16",
        "--predict_batch_size=16", "--num_train_epochs=1", "--learning_rate=1e-4"]  # fmt: skip
# Every command's flags and entry point.
COMMANDS = {
    "run_pretraining": (pretraining_cli.FLAGS, pretraining_cli.main),
    "create_pretraining_data": (create_pretraining_data.FLAGS, create_pretraining_data.main),
    "convert": (convert.FLAGS, convert.main),
    "prepare_corpus": (prepare_corpus.FLAGS, prepare_corpus.main),
    "build_vocab": (build_vocab.FLAGS, build_vocab.main),
    **{f"fine_tune {family}": (cli.family_flags(family), getattr(cli, f"{family}_main")) for family in cli.FAMILIES},
}
# Commands that say what some shared flags mean to them (`flags.set_help`): the same type and
# default as everywhere, their own help.
OWN_HELP = {"bert-predict": batch_predict.FLAGS, "bert-export": export.FLAGS, "extract_features": extract_features.FLAGS}


@pytest.fixture(autouse=True)
def _fresh_keras_session():
    yield
    keras.backend.clear_session()


def canonical(values) -> dict[str, object]:
    """The flags of a `FlagValues` that are not aliases."""
    return {name: values[name] for name in values if not values[name].help.startswith("Alias for --")}


# === One declaration per flag ===
def test_a_flag_has_the_same_type_default_and_help_in_every_command():
    seen: dict[str, tuple[str, object]] = {}
    for command, (values, _) in COMMANDS.items():
        family = command.removeprefix("fine_tune ")
        for name, flag in canonical(values).items():
            default = flag.default
            if name in cli.FAMILY_DEFAULTS.get(family, {}):  # the original's run_squad.py: 384
                assert default == cli.FAMILY_DEFAULTS[family][name]
                default = flags.SHARED[name].default if name in flags.SHARED else None
            spec = (flag.flag_type(), default, flag.help)
            first = seen.setdefault(name, (command, spec))
            assert spec == first[1], f"--{name} of {command} differs from that of {first[0]}"
            if name in flags.SHARED:
                assert flag.help.endswith(flags.SHARED[name].help)  # absl prefixes an enum's values
    for command, values in OWN_HELP.items():
        for name, flag in canonical(values).items():
            if name not in flags.SHARED:  # its own flags may share a name with another command's
                continue
            first = seen.setdefault(name, (command, (flag.flag_type(), flag.default, flag.help)))
            assert (flag.flag_type(), flag.default) == first[1][:2], f"--{name} of {command} differs from {first[0]}'s"
    assert len([name for name in seen if name in flags.SHARED]) == len(flags.SHARED)  # every shared flag is used


def test_enum_values_are_the_libraries():
    from bert_tf.optimization import LR_DECAYS, OPTIMIZERS
    from bert_tf.training.distribution import STRATEGIES
    from bert_tf.training.runloop import PRECISIONS

    assert flags.OPTIMIZERS == OPTIMIZERS and flags.LR_DECAYS == LR_DECAYS and flags.STRATEGIES == STRATEGIES
    assert flags.MIXED_PRECISION == tuple(PRECISIONS)


def test_boolean_forms_aliases_and_flagfile(tmp_path):
    flagfile = tmp_path / "pretrain.flags"
    flagfile.write_text("--learning_rate=1e-4\n--do_eval\n--seed=7\n")
    values = pretraining_cli.FLAGS
    flags.parse(values, ["--do_train=true", f"--flagfile={flagfile}", "--nodo_eval", "--iterations_per_loop", "9"])
    assert (values.do_train, values.do_eval, values.learning_rate, values.random_seed) == (True, False, 1e-4, 7)
    assert values.iterations_per_loop == 9
    flags.parse(values, ["--do_eval=false"])  # a second parse starts from the defaults
    assert (values.do_train, values.learning_rate, values.random_seed) == (False, 5e-5, 12345)

    task, run = cli.parse_args("ner", ["--task=conll", "--nodo_lower_case", "--seed=3", "--do_train=1",
                                       "--distribution_strategy=mirrored"])  # fmt: skip
    assert isinstance(task, ConllConfig) and task.task == "conll"
    assert (run.do_lower_case, run.seed, run.do_train, run.distribution_strategy) == (False, 3, True, "mirrored")
    assert cli.parse_args("squad", ["--use_tpu"])[1].distribution_strategy == "tpu"


def test_commands_reading_one_file_do_not_promise_glob_patterns():
    """bert-predict and bert-extract-features read one file; their --help said "comma-separated glob patterns"."""
    from bert_tf import extract_features
    from data_prep import create_pretraining_data
    from fine_tune import batch_predict

    assert "glob" in create_pretraining_data.FLAGS["input_file"].help  # the shared meaning, where it holds
    for values in (batch_predict.FLAGS, extract_features.FLAGS):
        assert "glob" not in values["input_file"].help and "a line" in values["input_file"].help


def test_pretraining_finds_its_bert_config_where_a_user_expects_it(tmp_path):
    """--preset with a vocabulary built for the corpus got Google's 30522 rows (MLM started at ln 30522); a
    finished run's --do_eval and a phase 2 from --init_checkpoint asked for a config they already have."""
    from bert_tf import BertConfig

    def config_of(*argv: str) -> BertConfig:
        flags.parse(pretraining_cli.FLAGS, list(argv))
        return pretraining_cli.bert_config(pretraining_cli.FLAGS)

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{k}" for k in range(1995))]) + "\n")
    assert config_of("--preset=tiny", f"--vocab_file={vocab}").vocab_size == 2000
    assert config_of("--preset=tiny", f"--vocab_file={vocab}", "--vocab_size=2048").vocab_size == 2048
    assert config_of("--preset=tiny").vocab_size == 30522
    run = tmp_path / "phase1"
    run.mkdir()
    BertConfig.from_preset("mini", vocab_size=2000).to_json_file(str(run / "bert_config.json"))
    assert config_of(f"--output_dir={run}").num_hidden_layers == 4  # resume, or --do_eval alone
    assert config_of(f"--output_dir={tmp_path / 'phase2'}", f"--init_checkpoint={run}").vocab_size == 2000
    assert config_of(f"--output_dir={tmp_path / 'phase2'}", f"--init_checkpoint={run / 'ckpt-900'}").hidden_size == 256
    with pytest.raises(BertTfError, match=r"^Pass --bert_config_file or --preset to say which BERT to train \(neither "
                                          r"--output_dir nor --init_checkpoint holds a bert_config.json\)\.$"):
        config_of(f"--output_dir={tmp_path / 'new'}")


# === Bad input: one line `error: ...`, exit status 1, from every entry point ===
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_unknown_flag_is_one_line_naming_the_closest(command, capsys):
    values, main = COMMANDS[command]
    assert main(["--output_dirr=x"]) == 1
    captured = capsys.readouterr()
    closest = "output" if command == "convert" else "output_file" if "output_file" in values else "output_dir"
    assert captured.err == f"error: Unknown flag --output_dirr; did you mean --{closest}? (--helpfull lists all " \
                           "flags.)\n"  # fmt: skip
    assert captured.out == ""


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_lists_every_flag_and_exits_0(command, capsys):
    values, main = COMMANDS[command]
    assert main(["--helpfull"]) == 0
    out = capsys.readouterr().out
    assert all(f"--{name}" in out for name in values) and "--flagfile" in out


def test_bad_values_and_missing_flags_are_one_sentence(capsys):
    cases = [
        (pretraining_cli.main, ["--train_batch_size=many"], "error: flag --train_batch_size=many: invalid literal"),
        (pretraining_cli.main, ["--optimizer=sgd"], "error: --optimizer: invalid choice 'sgd'; use one of adamw, lamb."),
        (create_pretraining_data.main, ["--input_file=x", "extra"], "error: Unexpected argument 'extra'"),
        (convert.main, ["--input=x"], "error: --output is required."),
        (build_vocab.main, ["--output_file=v.txt"], "error: --input_file is required."),
        (cli.classifier_main, ["--flagfile=/nonexistent/flags"], "error: "),
    ]
    for main, argv, start in cases:
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(start) and err.count("\n") == 1 and "Traceback" not in err, err


def test_a_command_process_prints_no_tensorflow_lines(tmp_path):
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}  # no TF_CPP_MIN_LOG_LEVEL: the command's own
    result = subprocess.run([sys.executable, str(REPO_ROOT / "run_ner.py"), "--do_trian"], capture_output=True,
                            text=True, cwd=tmp_path, env=env, timeout=300)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == "error: Unknown flag --do_trian; did you mean --do_train? (--helpfull lists all flags.)\n"


@pytest.mark.parametrize("setting, enabled", [(None, True), ("0", False)])
def test_importing_bert_tf_turns_on_onednn_unless_the_user_chose(setting, enabled):
    # TensorFlow's own default leaves oneDNN off on AVX2-only CPUs (about 2x slower steps);
    # a user's TF_ENABLE_ONEDNN_OPTS=0 is kept. IsMklEnabled is what TensorFlow's kernels read.
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}
    if setting is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = setting
    code = "import bert_tf, tensorflow; from tensorflow.python.util import _pywrap_util_port as p; print(p.IsMklEnabled())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.stdout == f"{enabled}\n", result.stderr


# === Data files without --data_dir ===
def test_conll_files_need_no_data_dir(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative file flags stand alone: relative to the working folder
    (tmp_path / "train.conll").write_text(conll_slice("conll2003/eng.train", 2), encoding="utf-8")
    (tmp_path / "test.conll").write_text(conll_slice("conll2003/eng.testb", 1), encoding="utf-8")
    argv = ["--task=conll", "--train_file=train.conll", f"--test_file={tmp_path / 'test.conll'}", "--do_train",
            "--do_predict", "--output_dir=out", f"--vocab_file={shared_file(UNCASED)}", *TINY]  # fmt: skip
    assert cli.ner_main(argv) == 0, capsys.readouterr().err
    assert {"test_precision", "test_recall", "test_f1"} <= set(json.loads((tmp_path / "out" / "test_scores.json")
                                                                          .read_text()))  # fmt: skip
    # Without --data_dir, a split without its file flag names the flag to give.
    assert cli.ner_main([*argv[:2], "--do_train", "--do_eval", "--output_dir=out2"]) == 1
    assert capsys.readouterr().err == ("error: --data_dir is required (or give --dev_file): --task=conll reads its "
                                       "dev set from it.\n")  # fmt: skip


# === fine_tune.run with typed configs ===
def test_typed_configs_run_as_the_command_line_and_the_run_dir_rebuilds_them(tmp_path):
    data = tmp_path / "MRPC"
    write_rows(data / "train.tsv", slice_of("glue/MRPC/train.tsv", 0, 24))
    write_rows(data / "dev.tsv", slice_of("glue/MRPC/dev.tsv", 0, 16))
    argv = ["--task_name=MRPC", f"--data_dir={data}", f"--output_dir={tmp_path / 'cli'}", "--do_train", "--do_eval",
            f"--vocab_file={shared_file(UNCASED)}", *TINY]  # fmt: skip
    from_cli = cli.run(*cli.parse_args("classifier", argv))
    keras.backend.clear_session()
    task_config = GlueConfig("MRPC", str(data))
    run_config = RunConfig(str(tmp_path / "lib"), max_seq_length=32, train_batch_size=8, eval_batch_size=16,
                           predict_batch_size=16, num_train_epochs=1.0, learning_rate=1e-4, do_train=True,
                           do_eval=True, preset="tiny", vocab_file=str(shared_file(UNCASED)))  # fmt: skip
    import fine_tune

    from_library = fine_tune.run(task_config, run_config)
    assert from_library["eval"] == from_cli["eval"] and from_library["train_steps"] == from_cli["train_steps"] == 3

    record = json.loads((tmp_path / "lib" / "fine_tune.json").read_text())
    assert (record["family"], record["task"], record["labels"]) == ("classifier", "mrpc", ["0", "1"])
    assert record["task_config"] == dataclasses.asdict(task_config)
    assert record["training"] == dataclasses.asdict(run_config)
    for output_dir in ("cli", "lib"):
        task, config, run, _ = registry.task_from_run_dir(str(tmp_path / output_dir))
        assert (task.name, config) == ("mrpc", task_config)
        assert dataclasses.replace(run, output_dir=run_config.output_dir, do_train=True, do_eval=True) == run_config


def test_run_config_defaults_are_the_flags():
    _, from_flags = cli.parse_args("classifier", ["--task=mrpc", "--output_dir=out"])
    assert from_flags == RunConfig("out")
