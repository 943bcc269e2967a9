"""`pip install .` gives an importable package and commands on the PATH.

The package goes into a fresh venv, on top of the dev venv's site-packages (a `.pth`
file adds them: the dependencies are not downloaded again), from a copy of the
checkout; the commands then run from a folder outside it, without PYTHONPATH, so
nothing can be imported from the checkout itself.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass

import pytest

from tests.conftest import REPO_ROOT

SHIPPED = ("pyproject.toml", "README.md", "requirements.txt", "bert_tf", "fine_tune", "data_prep")
RAW_TEXT = "The cat sat on the mat. It was happy.\n\nA dog ran far away. Then it came back home.\n"


def outside_environment() -> dict[str, str]:
    """This process's environment without the variables that point Python at the checkout."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}


def run(command: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=outside_environment(), capture_output=True, text=True, timeout=120)


@dataclass
class Installed:
    bin: pathlib.Path  # the venv's bin/, with python and the commands
    work: pathlib.Path  # an empty folder outside the checkout, to run them in


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """A fresh venv that `pip install --no-deps .` filled."""
    root = tmp_path_factory.mktemp("package")
    source = root / "source"
    source.mkdir()
    for name in SHIPPED:
        origin = REPO_ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, source / name)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    site_packages = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root)
    dev_paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    pathlib.Path(site_packages.stdout.strip(), "dev-venv.pth").write_text("\n".join(dev_paths) + "\n")
    # pip and setuptools come from the dev venv through the .pth file; --no-index: offline.
    install = run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", str(source)],
        root,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    (root / "work").mkdir()
    return Installed(bin=venv / "bin", work=root / "work")


def test_the_package_is_imported_from_the_venv_not_the_checkout(installed):
    script = "import bert_tf, data_prep, fine_tune.squad; print(fine_tune.squad.__file__)"
    result = run([str(installed.bin / "python"), "-c", script], installed.work)
    assert result.returncode == 0, result.stderr[-2000:]
    location = pathlib.Path(result.stdout.strip())
    assert location.is_relative_to(installed.bin.parent), location
    assert not location.is_relative_to(REPO_ROOT), location


def test_every_agreed_command_is_on_the_venv_path(installed):
    commands = ["bert-create-pretraining-data", "bert-pretrain", "bert-classify", "bert-ner", "bert-squad",
                "bert-convert", "bert-prepare-corpus", "bert-build-vocab", "bert-extract-features", "bert-predict",
                "bert-export"]  # fmt: skip
    assert [name for name in commands if not os.access(installed.bin / name, os.X_OK)] == []


def test_every_single_command_module_runs_with_python_m():
    """`python -m MODULE --help` for each command whose entry point is its module's `main`
    (users try the form the docs give for data_prep.prepare_corpus on the others; three of them did nothing)."""
    import tomllib

    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    modules = sorted(target.split(":")[0] for target in scripts.values() if target.endswith(":main"))
    assert len(modules) >= 8, modules
    silent = []
    for module in modules:
        result = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO_ROOT, capture_output=True,
                                text=True, timeout=120)
        if result.returncode != 0 or "--flagfile" not in result.stdout + result.stderr:
            silent.append(module)
    assert silent == []


def test_python_m_fine_tune_cli_names_the_command_first():
    """fine_tune.cli serves run_classifier.py, run_ner.py and run_squad.py: `python -m` it exited 0 doing nothing."""
    bare = subprocess.run([sys.executable, "-m", "fine_tune.cli"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert (bare.returncode, bare.stdout) == (1, "") and bare.stderr == (
        "error: python -m fine_tune.cli serves three commands; name one first (classifier, ner, squad), then its "
        "flags, e.g. python -m fine_tune.cli classifier --help.\n")
    ner = subprocess.run([sys.executable, "-m", "fine_tune.cli", "ner", "--help"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=120)
    assert ner.returncode == 0 and "named-entity recognition (run_ner.py)" in ner.stdout + ner.stderr


def test_the_package_requires_the_runtime_requirements_and_offers_beam(installed):
    from packaging.requirements import Requirement

    script = "import importlib.metadata as m; print(*m.requires('bert-tf'), sep='\\n')"
    result = run([str(installed.bin / "python"), "-c", script], installed.work)
    assert result.returncode == 0, result.stderr[-2000:]
    declared = [Requirement(line) for line in result.stdout.splitlines()]
    lines = (REPO_ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    runtime = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    assert [(r.name, r.specifier) for r in declared if r.marker is None] == [(r.name, r.specifier) for r in runtime]
    assert [(r.name, str(r.marker)) for r in declared if r.marker] == [("apache-beam", 'extra == "beam"')]


def test_installed_commands_prepare_a_corpus_and_build_its_vocabulary(installed):
    pytest.importorskip("sentencex", reason="the sentence segmenter of bert-prepare-corpus")
    pytest.importorskip("tokenizers", reason="the WordPiece trainer of bert-build-vocab")
    from bert_tf.tokenization import FullTokenizer

    (installed.work / "raw.txt").write_text(RAW_TEXT, encoding="utf-8")
    prepared = run(
        [str(installed.bin / "bert-prepare-corpus"), "--input_file=raw.txt", "--output_file=corpus.txt"], installed.work
    )
    assert prepared.returncode == 0, prepared.stderr
    assert (installed.work / "corpus.txt").read_text(encoding="utf-8") == (
        "The cat sat on the mat.\nIt was happy.\n\nA dog ran far away.\nThen it came back home.\n"
    )
    assert "2 documents, 2 paragraphs, 4 sentences -> corpus.txt" in prepared.stderr

    built = run(
        [str(installed.bin / "bert-build-vocab"), "--input_file=corpus.txt", "--output_file=vocab.txt",
         "--vocab_size=200", "--min_frequency=1"],
        installed.work,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    tokens = (installed.work / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert tokens[:2] == ["[PAD]", "[unused0]"] and tokens[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = FullTokenizer(str(installed.work / "vocab.txt"), do_lower_case=True).tokenize(RAW_TEXT)
    assert "[UNK]" not in pieces and "cat" in pieces, pieces


def test_an_installed_command_reports_a_user_mistake_in_one_line(installed):
    command = [str(installed.bin / "bert-build-vocab"), "--input_file=missing*.txt", "--output_file=v.txt"]
    result = run(command, installed.work)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
