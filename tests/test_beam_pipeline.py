"""data_prep.beam_pipeline on Beam's DirectRunner: the same records as the local path.

Skipped when apache_beam is not installed (an optional extra, pip install .[beam]),
but for the message that says so. The pipeline runs in a subprocess, as a user runs
it: its flags share names with Model Garden's create_pretraining_data, which other
tests load in this process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import data_prep  # noqa: F401  (before bert_tf: see data_prep/__init__.py)
from bert_tf.errors import BertTfError
from data_prep.chunks import GenerationOptions
from data_prep.generate import Job, run
from tests.conftest import REPO_ROOT
from tests.test_data_prep_workers import corpus_slice, generate, record_multiset

needs_beam = pytest.mark.skipif(
    importlib.util.find_spec("apache_beam") is None, reason="apache_beam is not installed (pip install .[beam])"
)
# Without apache_beam: the module is hidden from the import system.
HIDE_BEAM = "import sys; sys.modules['apache_beam'] = None; "


def run_beam(corpus: Path | str, vocab: Path, output: Path, *extra: str, hide_beam: bool = False):
    """Runs the pipeline (in a subprocess) on the flags of the local runs below."""
    code = ("" if not hide_beam else HIDE_BEAM) + "from data_prep.beam_pipeline import main; sys.exit(main())"
    # Beam's multi-processing workers unpickle our DoFn: they must find the packages.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    command = [
        sys.executable,
        "-c",
        "import sys; " + code,
        f"--input_file={corpus}",
        f"--output_file={output}",
        f"--vocab_file={vocab}",
        "--num_output_shards=2",
        "--dupe_factor=2",
        "--random_seed=7",
        *extra,
    ]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "name, runner_flags",
    [
        ("wikitext2", []),
        ("clue_zh", []),
        ("wikitext2", ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]),
    ],
)
@needs_beam
def test_direct_runner_writes_the_local_paths_records(tmp_path, name, runner_flags):
    corpus, vocab, extra = corpus_slice(name, tmp_path)
    local = generate([corpus], vocab, tmp_path / "local", 2, shards=2, **extra)
    word_flags = ["--do_whole_word_mask"] if extra.get("do_whole_word_mask") else []
    (tmp_path / "beam").mkdir()
    stats_file = tmp_path / "stats.json"
    flags = ["--runner=DirectRunner", f"--stats_file={stats_file}", *word_flags, *runner_flags]
    result = run_beam(corpus, vocab, tmp_path / "beam" / "out", *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    shards = sorted(str(path) for path in (tmp_path / "beam").iterdir() if not path.name.startswith("."))
    assert [Path(path).name for path in shards] == ["out-00000-of-00002", "out-00001-of-00002"]
    assert record_multiset(shards) == local
    # Shard by shard, in the order of one local worker (chunks in corpus order, its
    # shuffle): the same bytes.
    (tmp_path / "local1").mkdir()
    files = [str(tmp_path / "local1" / f"part-{k}") for k in range(2)]
    options = GenerationOptions(dupe_factor=2, random_seed=7, **extra)
    run(Job([str(corpus)], files, str(vocab), options=options), progress=False)
    assert [Path(path).read_bytes() for path in shards] == [Path(path).read_bytes() for path in files]
    stats = json.loads(stats_file.read_text())
    assert stats["instances"] == sum(local.values())
    assert abs(stats["masked_fraction"] - 0.15) < 0.01
    # Each shard's settings beside it, as the local command writes them: a local re-run with the
    # same flags finds them complete; with others it refuses instead of keeping the Beam run's records.
    assert run(Job([str(corpus)], shards, str(vocab), options=options), progress=False)["shards_written"] == []
    other = GenerationOptions(dupe_factor=3, random_seed=7, **extra)
    with pytest.raises(BertTfError, match="made with other settings \\(dupe_factor was 2, now 3\\)"):
        run(Job([str(corpus)], shards, str(vocab), options=other), progress=False)


@needs_beam
def test_a_folder_stands_for_the_files_beneath_it_as_in_the_local_command(tmp_path):
    """`--input_file=texts` (no slash) was an IsADirectoryError traceback; `texts/` read only the top files,
    hidden ones too. Both now read what the local command reads: every non-hidden file beneath."""
    from data_prep.corpus import expand_input_patterns

    corpus, vocab, _ = corpus_slice("wikitext2", tmp_path)
    folder = tmp_path / "texts"
    (folder / "sub").mkdir(parents=True)
    documents = corpus.read_text(encoding="utf-8").split("\n\n")
    (folder / "a.txt").write_text("\n\n".join(documents[: len(documents) // 2]), encoding="utf-8")
    (folder / "sub" / "b.txt").write_text("\n\n".join(documents[len(documents) // 2 :]), encoding="utf-8")
    (folder / ".notes").write_text("Not part of the corpus.\n", encoding="utf-8")
    local = [str(tmp_path / f"local-{k}") for k in range(2)]
    inputs = expand_input_patterns(str(folder))
    assert [os.path.relpath(path, folder) for path in inputs] == ["a.txt", "sub/b.txt"]
    run(Job(inputs, local, str(vocab), options=GenerationOptions(dupe_factor=2, random_seed=7)), progress=False)
    for name, given in (("plain", str(folder)), ("slash", f"{folder}/")):
        (tmp_path / name).mkdir()
        result = run_beam(given, vocab, tmp_path / name / "out", "--runner=DirectRunner")
        assert result.returncode == 0, result.stderr[-3000:]
        shards = [tmp_path / name / f"out-0000{k}-of-00002" for k in range(2)]
        assert [shard.read_bytes() for shard in shards] == [Path(path).read_bytes() for path in local]


@needs_beam
def test_a_glob_reads_the_same_files_as_the_local_command(tmp_path):
    """`text/*` over WikiExtractor's text/AA/wiki_00 layout read only the top-level files in Beam
    (its match does not descend into a matched folder) and every article locally."""
    from data_prep.beam_pipeline import match_inputs
    from data_prep.corpus import expand_input_patterns

    for name in ("AA/wiki_00", "AA/wiki_01", "AB/wiki_00", "AB/.partial", ".cache/x", "top.txt"):
        (tmp_path / "text" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "text" / name).write_text("One sentence.\nTwo sentences.\n", encoding="utf-8")
    expected = {"*": ["AA/wiki_00", "AA/wiki_01", "AB/wiki_00", "top.txt"], "A?": ["AA/wiki_00", "AA/wiki_01",
                "AB/wiki_00"], "*/wiki_00": ["AA/wiki_00", "AB/wiki_00"], "[A]B": ["AB/wiki_00"]}
    for pattern, names in expected.items():
        given = str(tmp_path / "text" / pattern)
        local = [os.path.relpath(path, tmp_path / "text") for path in expand_input_patterns(given)]
        beam = [os.path.relpath(path, tmp_path / "text") for path, _ in match_inputs(given)]
        assert local == beam == names, pattern


@needs_beam
def test_a_beam_run_removes_the_settings_of_the_shards_it_replaces(tmp_path):
    """It makes every shard again: an old record left beside a replaced shard vouched for the old flags."""
    corpus, vocab, _ = corpus_slice("wikitext2", tmp_path)
    shards = [str(tmp_path / f"out-0000{k}-of-00002") for k in range(2)]
    run(Job([str(corpus)], shards, str(vocab), options=GenerationOptions(dupe_factor=2, random_seed=7)),
        progress=False)
    result = run_beam(corpus, vocab, tmp_path / "out", "--runner=DirectRunner", "--dupe_factor=5")
    assert result.returncode == 0, result.stderr[-3000:]
    with pytest.raises(BertTfError, match="made with other settings \\(dupe_factor was 5, now 2\\)"):
        run(Job([str(corpus)], shards, str(vocab), options=GenerationOptions(dupe_factor=2, random_seed=7)),
            progress=False)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--runner=SparkRunnr"], "--runner=SparkRunnr is not a Beam runner"),
        (["--runner=DataflowRunner", "--project=p"], "needs --region, --temp_location"),
        (["--runner=FlinkRunner"], "needs --flink_master"),
        (["--runner=DirectRunner", "--max_seq_length=3"], "--max_seq_length is 3"),
    ],
)
@needs_beam
def test_bad_runner_options_fail_in_one_sentence(tmp_path, flags, message):
    corpus, vocab, _ = corpus_slice("wikitext2", tmp_path)
    result = run_beam(corpus, vocab, tmp_path / "out", *flags)
    assert result.returncode == 1
    # The last line: Beam may log a warning of its own while importing.
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.glob("out*"))


@needs_beam
def test_an_input_pattern_matching_nothing_fails(tmp_path):
    _, vocab, _ = corpus_slice("wikitext2", tmp_path)
    result = run_beam(tmp_path / "nothing-*.txt", vocab, tmp_path / "out")
    assert result.returncode == 1
    assert "pattern" in result.stderr and "matches no file" in result.stderr, result.stderr[-2000:]


def test_without_beam_it_says_how_to_install_it(tmp_path):
    corpus, vocab, _ = corpus_slice("wikitext2", tmp_path)
    result = run_beam(corpus, vocab, tmp_path / "out", hide_beam=True)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: --runner needs Apache Beam, which is not installed: pip install .[beam]"
    )


def test_help_lists_the_local_flags_and_the_runner(tmp_path):
    result = run_beam(tmp_path / "c.txt", tmp_path / "v.txt", tmp_path / "out", "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--runner (string; default: DirectRunner)" in result.stdout and "The Beam runner" in result.stdout
    assert "--num_output_shards" in result.stdout
