"""deploy/local/setup.sh's Python steps name modules that exist (issue 28 item 7).

``setup.sh --test`` once ran ``from deploy.kubernetes import ensure_schemas`` after that module had
moved to ``deploy.helm.validate``: a traceback, then a warning blaming kubernetes-validate, and exit
0. Running setup.sh reinstalls everything, so this reads the Python it runs instead: every
``from X import Y`` in a ``python -c '...'`` step must import. And the only failure the schemas step
may turn into a warning is kubernetes-validate being absent; a failure of our own code stops setup.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess

from common.settings import REPO_ROOT

SETUP = REPO_ROOT / "deploy" / "local" / "setup.sh"
_SNIPPET = re.compile(r"python -c '([^']*)'")


def unimportable(script: str) -> list[str]:
    """``module.name`` for every ``from module import name`` of the script's ``python -c`` steps that fails."""
    missing = []
    for code in _SNIPPET.findall(script):
        for node in ast.walk(ast.parse(code)):
            if not isinstance(node, ast.ImportFrom) or node.module is None:
                continue
            for alias in node.names:
                try:
                    ok = hasattr(importlib.import_module(node.module), alias.name)
                except ImportError:
                    ok = False
                if not ok:
                    missing.append(f"{node.module}.{alias.name}")
    return missing


def test_every_python_step_of_setup_imports() -> None:
    assert unimportable(SETUP.read_text()) == []


def test_the_check_finds_the_step_that_broke() -> None:
    old = ".venv/bin/python -c 'from deploy.kubernetes import ensure_schemas; print(ensure_schemas())' || echo W"
    assert unimportable(old) == ["deploy.kubernetes.ensure_schemas"]


def test_only_a_missing_kubernetes_validate_is_a_warning() -> None:
    """The schemas step's warning is said only when kubernetes-validate is not there; any other failure of the
    step is setup's failure (set -e), with its traceback, not a warning about the wrong thing and exit 0."""
    text = SETUP.read_text()
    step = next(line for line in text.splitlines() if "ensure_schemas" in line)
    assert not step.rstrip().endswith("\\") and "||" not in step, step
    guard = text[:text.index(step)].splitlines()[-4:]  # the if that chooses between the warning and the step
    assert any("import kubernetes_validate" in line for line in guard), guard
    assert subprocess.run(["bash", "-n", str(SETUP)], check=False).returncode == 0  # still parses
