"""Issue 15: anything read back from Kafka or disk is data, never code.

No source module may import a deserialiser that can construct arbitrary objects (``pickle``,
``marshal``, ``shelve``, ``dill``...) or call ``yaml.load``/``yaml.unsafe_load`` with a loader
that builds Python objects, or ``eval``/``exec``. Checked on the syntax tree of every module.

Correlator snapshots included: they are the engine's typed state as JSON
(:mod:`correlators.snapshots`), refused at worst, never executed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("streams", "common", "producers", "correlators", "sinks", "faultline", "deploy")
CODE_LOADERS = frozenset({"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "jsonpickle"})
MODULES = sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))


def _problems(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in CODE_LOADERS]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in CODE_LOADERS:
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            if name in ("eval", "exec") and not owner:
                found.append(f"{name}(...)")
            if owner == "yaml" and name in ("unsafe_load", "full_load", "load_all", "unsafe_load_all"):
                found.append(f"yaml.{name}(...)")
            if owner == "yaml" and name == "load":
                loaders = [ast.unparse(k.value) for k in node.keywords if k.arg == "Loader"] + \
                          [ast.unparse(a) for a in node.args[1:]]
                if not loaders or not all("Safe" in loader for loader in loaders):
                    found.append(f"yaml.load(..., Loader={loaders or 'default'})")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_can_turn_data_into_code(path: Path) -> None:
    rel = str(path.relative_to(REPO))
    problems = _problems(ast.parse(path.read_text(), filename=rel))
    assert not problems, f"{rel}: {problems}"


def test_the_check_catches_what_it_is_for() -> None:
    bad = ast.parse("import pickle\nfrom marshal import loads\nimport yaml\nyaml.load(x)\nyaml.unsafe_load(x)\n"
                    "eval(s)\nyaml.load(x, Loader=yaml.Loader)\n")
    assert len(_problems(bad)) == 6
    good = ast.parse("import json\nimport yaml\nyaml.safe_load(x)\nyaml.load(x, Loader=yaml.SafeLoader)\n")
    assert _problems(good) == []
