"""Shared test helpers: where the shared data lives, skips when it or an oracle is absent, and the
one way to run the project's scripts and modules in a fresh process."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
# Before any test module imports TensorFlow: the package's environment settings (quiet
# C++ logs, oneDNN kernels), so the tests run TensorFlow as the commands do.
import bert_tf  # noqa: E402, F401


def data_dir() -> pathlib.Path:
    """`BERT_TF_DATA`, or `../shared/data` next to the checkout."""
    return pathlib.Path(os.environ.get("BERT_TF_DATA", REPO_ROOT.parent / "shared" / "data"))


def shared_file(relative: str) -> pathlib.Path:
    """A file of the shared data, or a skip naming what is missing."""
    path = data_dir() / relative
    if not path.exists():
        pytest.skip(f"shared data file {path} is absent (set BERT_TF_DATA to the shared data folder)")
    return path


def without_progress_bars(stderr: str) -> str:
    """``stderr`` less tqdm's bar lines: a predictor shows its bar once a call has run 2 s, which a slow machine
    reaches on calls that take 1 s here, so a test of the notes must not depend on it."""
    return "".join(line for line in stderr.splitlines(keepends=True) if "%|" not in line and line.strip("\r\n"))


def require_module(name: str, why: str) -> None:
    """Skips the test when an optional reference package is not installed."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed: {why} (pip install -r requirements-dev.txt)")


@pytest.fixture
def shared_data() -> pathlib.Path:
    path = data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (set BERT_TF_DATA)")
    return path


def cpu_flags() -> set[str]:
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    return {flag for line in lines if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


@pytest.fixture(scope="session")
def bf16_math_takes() -> bool:
    """Whether TensorFlow takes oneDNN's bf16 math mode (`bert_tf.onednn`) on this CPU: asked
    in a fresh process, since the mode is read at a process's first matmul. It took on an
    Intel Xeon with AMX, not on an AMD EPYC with AVX512-BF16 (no AMX)."""
    if not cpu_flags() & {"avx512_bf16", "amx_bf16"}:
        return False
    probe = PROJECT.run("-c", "from bert_tf.onednn import enable_bf16_math; print(enable_bf16_math())", timeout=120)
    assert probe.stdout.strip() in ("True", "False"), probe.stderr[-2000:]
    return probe.stdout.strip() == "True"


@pytest.fixture(scope="session")
def bf16_math_cpu(bf16_math_takes: bool) -> None:
    """Skips a test of oneDNN's bf16 math mode where TensorFlow does not take it."""
    if not bf16_math_takes:
        pytest.skip("TensorFlow does not take oneDNN's bf16 math mode on this CPU (it needs AVX512-BF16 or AMX, "
                    "and took on AMX only)")


# === XLA in a graph ===
def xla_functions(graph_def) -> int:
    """How many functions of a graph's library XLA must compile (`tf.function(jit_compile=True)`)."""
    return sum(function.attr["_XlaMustCompile"].b for function in graph_def.library.function)


def saved_xla_functions(export_dir: pathlib.Path) -> int:
    """`xla_functions` of a SavedModel's graph."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel.FromString((export_dir / "saved_model.pb").read_bytes())
    return xla_functions(saved.meta_graphs[0].graph_def)


def predictor_xla_functions(model: Any) -> int:
    """`xla_functions` of the prediction steps a `load_task_model` model has traced so far."""
    return sum(xla_functions(step.graph.as_graph_def())
               for step in model.trainer._predict_functions.values())


# === The project in a subprocess ===
class ProjectProcesses:
    """Runs `python ARGS` as a user of the checkout does: from its root, with it on PYTHONPATH
    (so `-m data_prep.build_vocab`, `-c "import bert_tf"` and scripts started from another
    folder all import this checkout) and without TensorFlow's C++ log lines.

    ARGS is a root script (`run_pretraining.py`, found in the checkout whatever `cwd`
    is), `-m module` or `-c code`, then its arguments; `env` adds variables.
    """

    def environment(self, env: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}

    def command(self, args: tuple[str, ...]) -> list[str]:
        first, *rest = args
        return [sys.executable, str(REPO_ROOT / first) if first.endswith(".py") else first, *rest]

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 600, **options: Any
    ) -> subprocess.CompletedProcess:
        """Runs to the end; output captured as text unless `options` say otherwise."""
        options = {"cwd": REPO_ROOT, "capture_output": True, "text": True, **options}
        return subprocess.run(self.command(args), env=self.environment(env), timeout=timeout, **options)

    def start(self, *args: str, env: dict[str, str] | None = None, **options: Any) -> subprocess.Popen:
        """Starts it and returns at once (to signal it or to run several side by side)."""
        options = {"cwd": REPO_ROOT, "text": True, **options}
        return subprocess.Popen(self.command(args), env=self.environment(env), **options)


PROJECT = ProjectProcesses()


@pytest.fixture
def project() -> ProjectProcesses:
    """Runs the project's scripts and modules in a subprocess (see `ProjectProcesses`)."""
    return PROJECT
