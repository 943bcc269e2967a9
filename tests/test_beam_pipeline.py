"""data_prep.beam_pipeline on Beam's DirectRunner: the same records as the local path.

Skipped when apache_beam is not installed (it is an optional extra, pip install .[beam]).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import data_prep  # noqa: F401  (before bert_tf: see data_prep/__init__.py)
from tests.conftest import REPO_ROOT
from tests.test_data_prep_workers import corpus_slice, generate, record_multiset

beam_pipeline = pytest.importorskip("data_prep.beam_pipeline", reason="needs the data_prep package")
if beam_pipeline.beam is None:
    pytest.skip("apache_beam is not installed (pip install .[beam])", allow_module_level=True)

# Beam's multi-processing workers unpickle our DoFn: they must find the packages.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))


def run_beam(corpus: Path, vocab: Path, output: Path, *extra: str) -> int:
    return beam_pipeline.main([
        "beam_pipeline",
        f"--input_file={corpus}",
        f"--output_file={output}",
        f"--vocab_file={vocab}",
        "--num_output_shards=2",
        "--dupe_factor=2",
        "--random_seed=7",
        *extra,
    ])


@pytest.mark.parametrize(
    "name, runner_flags",
    [
        ("wikitext2", []),
        ("clue_zh", []),
        ("wikitext2", ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]),
    ],
)
def test_direct_runner_writes_the_local_paths_records(tmp_path, name, runner_flags):
    corpus, vocab, extra = corpus_slice(name, tmp_path)
    local = generate([corpus], vocab, tmp_path / "local", 2, shards=2, **extra)
    word_flags = ["--do_whole_word_mask"] if extra.get("do_whole_word_mask") else []
    (tmp_path / "beam").mkdir()
    stats_file = tmp_path / "stats.json"
    flags = ["--runner=DirectRunner", f"--stats_file={stats_file}", *word_flags, *runner_flags]
    assert run_beam(corpus, vocab, tmp_path / "beam" / "out", *flags) == 0
    shards = sorted(str(path) for path in (tmp_path / "beam").iterdir())
    assert [Path(path).name for path in shards] == ["out-00000-of-00002", "out-00001-of-00002"]
    assert record_multiset(shards) == local
    stats = json.loads(stats_file.read_text())
    assert stats["instances"] == sum(local.values())
    assert abs(stats["masked_fraction"] - 0.15) < 0.01


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--runner=SparkRunnr"], "--runner=SparkRunnr is not a Beam runner"),
        (["--runner=DataflowRunner", "--project=p"], "needs --region, --temp_location"),
        (["--runner=FlinkRunner"], "needs --flink_master"),
        (["--runner=DirectRunner", "--max_seq_length=3"], "--max_seq_length is 3"),
    ],
)
def test_bad_runner_options_fail_in_one_sentence(tmp_path, capsys, flags, message):
    corpus, vocab, _ = corpus_slice("wikitext2", tmp_path)
    assert run_beam(corpus, vocab, tmp_path / "out", *flags) == 1
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("out*"))


def test_an_input_pattern_matching_nothing_fails(tmp_path, capsys):
    _, vocab, _ = corpus_slice("wikitext2", tmp_path)
    assert run_beam(tmp_path / "nothing-*.txt", vocab, tmp_path / "out") == 1
    assert "matches no file" in capsys.readouterr().err


def test_without_beam_it_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    corpus, vocab, _ = corpus_slice("wikitext2", tmp_path)
    monkeypatch.setattr(beam_pipeline, "beam", None)
    assert run_beam(corpus, vocab, tmp_path / "out") == 1
    assert "pip install .[beam]" in capsys.readouterr().err
