"""The house rules of ARCHITECTURE.md, checked on the code: who may import whom, and how long a module may be.

Floors, from the ground up: ``streams`` (the contract), ``common`` (settings, Kafka helpers, metrics,
dead letters), the stages (``producers``, ``correlators``, ``sinks``), ``deploy`` (deployment
helpers), ``faultline`` (the command line and the wiring on top). A module may import its own
package and the floors below it, never one above; the stages do not import each other. Imports
inside functions count as much as those at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("producers", "correlators", "sinks")
BELOW = {
    "streams": set(),
    "common": {"streams"},
    **{stage: {"streams", "common"} for stage in STAGES},
    "deploy": {"streams", "common", *STAGES},
    "faultline": {"streams", "common", *STAGES, "deploy"},
}
PACKAGES = tuple(BELOW)
MAX_LINES = 400


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _imported_packages(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out & set(PACKAGES)


def _code_lines(source: str, tree: ast.AST) -> int:
    """Lines of the module, not counting multi-line string literals that are data (SQL, templates).

    Docstrings count: they are part of reading the module.
    """
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)  # type: ignore[attr-defined]
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    data: set[int] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                and node.end_lineno is not None and node.end_lineno > node.lineno):
            data.update(range(node.lineno, node.end_lineno + 1))
    return len(source.splitlines()) - len(data)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_run_down_the_floors_only(path: Path) -> None:
    package = path.relative_to(ROOT).parts[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    upward = _imported_packages(tree) - BELOW[package] - {package}
    assert not upward, (f"{path.relative_to(ROOT)} imports {sorted(upward)}, above or beside {package!r}; "
                        "see ARCHITECTURE.md for where the code belongs")


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_too_long_to_read(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    lines = _code_lines(source, ast.parse(source))
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (at most {MAX_LINES}): split it along a seam"
