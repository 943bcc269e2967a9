"""The layers of ARCHITECTURE.md, enforced: what each package may import.

bert_tf (the core) imports neither fine_tune nor data_prep, except the one lazy alias
`bert_tf.load_task_model` (module `__getattr__` in bert_tf/__init__.py, importing
fine_tune.predictor only when asked for); fine_tune and data_prep build on bert_tf and
do not import each other. Every import counts, also one inside a function and one
spelt `importlib.import_module("...")`.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator

import pytest

from tests.conftest import REPO_ROOT

FORBIDDEN = {"bert_tf": ("fine_tune", "data_prep"), "fine_tune": ("data_prep",), "data_prep": ("fine_tune",)}
# (file, enclosing function, imported module): the documented exception.
ALLOWED = {("bert_tf/__init__.py", "__getattr__", "fine_tune.predictor")}


def imports(source: str) -> Iterator[tuple[int, str, str]]:
    """(line, enclosing function or "", absolute module) of every import in `source`.

    >>> code = "import os\\nfrom . import x\\ndef f():\\n    from data_prep.chunks import write\\n"
    >>> list(imports(code + "importlib.import_module('fine_tune.cli')\\n"))
    [(1, '', 'os'), (4, 'f', 'data_prep.chunks'), (5, '', 'fine_tune.cli')]
    """
    yield from _imports(ast.parse(source), "")


def _imports(node: ast.AST, function: str) -> Iterator[tuple[int, str, str]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import):
            yield from ((child.lineno, function, alias.name) for alias in child.names)
        elif isinstance(child, ast.ImportFrom) and not child.level:  # relative ones stay in their package
            yield child.lineno, function, child.module or ""
        elif isinstance(child, ast.Call) and _is_import_call(child):
            yield child.lineno, function, child.args[0].value
        inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
        yield from _imports(child, inner)


def _is_import_call(call: ast.Call) -> bool:
    callee = call.func
    name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
    first = call.args[0] if call.args else None
    return name in ("import_module", "__import__") and isinstance(first, ast.Constant) and isinstance(first.value, str)


def violations(package: str, root: pathlib.Path = REPO_ROOT) -> list[str]:
    """`file:line imports module` for each import across a layer boundary in `package`."""
    found = []
    for path in sorted((root / package).rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        for line, function, module in imports(path.read_text(encoding="utf-8")):
            top = module.split(".")[0]
            if top in FORBIDDEN[package] and (relative, function, module) not in ALLOWED:
                found.append(f"{relative}:{line} imports {module}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_crosses_a_layer_boundary(package):
    assert (REPO_ROOT / package / "__init__.py").is_file()
    assert violations(package) == []


def test_the_scanner_finds_a_lazy_import_across_the_boundary(tmp_path):
    """The rule can fail: a fake core package with a function-level data_prep import."""
    (tmp_path / "bert_tf").mkdir()
    (tmp_path / "bert_tf" / "__init__.py").write_text("def __getattr__(name):\n    import fine_tune.predictor\n")
    (tmp_path / "bert_tf" / "inputs.py").write_text("import os\n\n\ndef read():\n    from data_prep import x\n")
    assert violations("bert_tf", root=tmp_path) == ["bert_tf/inputs.py:5 imports data_prep"]
