"""Installs by role: the node agent runs on its own dependencies; every other role is an extra.

The agent test runs ``faultline agent`` and ``faultline capture`` in a process where every module
that only the other roles install (chDB, clickhouse-connect, the Kubernetes client, Faust, and
everything they pull in) fails to import, as on a node that installed ``faultline[agent]``. The
set is computed from ``pyproject.toml`` and the installed distributions' metadata, so a new
dependency of another role is left out of the agent's world automatically.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from common.settings import REPO_ROOT
from faultline.extras import EXTRA_OF_MODULE, install_hint

PROJECT: dict[str, Any] = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
ROLES = ("agent", "correlator", "sink", "executor", "scheduler")
NVML_RECORDING = REPO_ROOT / "producers" / "node" / "recordings" / "nvml_8xh100.json"

_BOOT = r"""
import importlib.abc, runpy, sys
blocked = set(sys.argv[1].split(","))
class LeftOut(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, LeftOut())
sys.argv = ["faultline", *sys.argv[2:]]
runpy.run_module("faultline.cli", run_name="__main__", alter_sys=True)
"""


def _closure(requirements: list[str]) -> set[str]:
    """Every distribution that ``requirements`` install (faultline's own extras expanded from pyproject)."""
    seen: set[str] = set()
    stack = [(Requirement(r), "") for r in requirements]
    while stack:
        req, extra = stack.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name == "faultline":
            stack += [(Requirement(r), "") for e in req.extras for r in EXTRAS[e]]
            continue
        wanted = [(name, e) for e in sorted(req.extras)] + [(name, "")]
        if all(f"{n}[{e}]" in seen for n, e in wanted):
            continue
        seen.update(f"{n}[{e}]" for n, e in wanted)
        try:
            requires = md.distribution(name).requires or []
        except md.PackageNotFoundError:
            continue
        for e in ["", *sorted(req.extras)]:
            stack += [(Requirement(r), e) for r in requires]
    return {key.partition("[")[0] for key in seen}


def _left_out_of_the_agent() -> set[str]:
    """Top-level modules that only the other roles' extras install."""
    agent = _closure([*PROJECT["dependencies"], *EXTRAS["agent"]])
    others = _closure([r for role in ROLES if role != "agent" for r in EXTRAS[role]]) - agent
    modules = md.packages_distributions()
    return {m for m, dists in modules.items()
            if not m.startswith("_") and {canonicalize_name(d) for d in dists} <= others}


def _run(blocked: set[str], *args: str, timeout: float = 120, **kwargs: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "FAULTLINE_KAFKA": "127.0.0.1:1"}
    return subprocess.Popen([sys.executable, "-c", _BOOT, ",".join(sorted(blocked)), *args], cwd=REPO_ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def test_dev_and_all_bring_every_role() -> None:
    assert EXTRAS["all"] == [f"faultline[{','.join(ROLES)}]"]
    assert "faultline[all]" in EXTRAS["dev"]
    assert set(EXTRAS) >= {*ROLES, "all", "dev"}


def test_the_agent_installs_without_chdb_kubernetes_or_faust() -> None:
    blocked = _left_out_of_the_agent()
    assert {"chdb", "clickhouse_connect", "kubernetes", "faust", "aiokafka"} <= blocked
    agent = _closure([*PROJECT["dependencies"], *EXTRAS["agent"]])
    assert not agent & {"chdb", "clickhouse-connect", "kubernetes", "faust-streaming"}


def test_the_agent_and_capture_run_with_only_the_agent_s_dependencies(tmp_path: Path) -> None:
    blocked = _left_out_of_the_agent()
    state = tmp_path / "state"
    config = {"node": "n5", "rack": "r1", "kafka": "127.0.0.1:1", "namespace": "slim", "state_dir": str(state),
              "sources": {"heartbeat": {"interval_s": 0.2},
                          "nvml": {"backend": "recorded", "path": str(NVML_RECORDING)}}}
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(config))

    capture = _run(blocked, "capture", "--config", str(tmp_path / "agent.yaml"), "--out", str(tmp_path / "n5.jsonl"),
                   "--seconds", "2")
    _, err = capture.communicate(timeout=120)
    assert capture.returncode == 0, err[-3000:]
    assert {"node_agent", "nvml", "inventory"} <= {json.loads(x)["source"]
                                                   for x in (tmp_path / "n5.jsonl").read_text().splitlines()}

    agent = _run(blocked, "agent", "--config", str(tmp_path / "agent.yaml"))
    try:
        deadline = time.monotonic() + 60
        spool = state / "spool"
        while not (spool.is_dir() and sum(f.stat().st_size for f in spool.rglob("*") if f.is_file()) > 0):
            assert agent.poll() is None, agent.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the agent spooled nothing (the broker is unreachable on purpose)"
            time.sleep(0.2)
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err[-3000:]


def test_a_command_of_a_role_left_out_says_which_extra_to_install() -> None:
    status = _run(_left_out_of_the_agent(), "status")
    _, err = status.communicate(timeout=120)
    assert status.returncode == 1
    assert "pip install 'faultline[sink]'" in err and "Traceback" not in err


def test_every_hinted_module_comes_with_its_extra() -> None:
    modules = md.packages_distributions()
    for module, extra in EXTRA_OF_MODULE.items():
        dists = {canonicalize_name(d) for d in modules[module]}
        assert dists & _closure(EXTRAS[extra]), (module, extra)
        assert install_hint(ModuleNotFoundError(f"No module named {module!r}", name=f"{module}.x")) is not None
    assert install_hint(ModuleNotFoundError("No module named 'nope'", name="nope")) is None


@pytest.mark.parametrize("role", ROLES)
def test_every_role_is_documented_with_its_install_line(role: str) -> None:
    assert f"pip install 'faultline[{role}]'" in (REPO_ROOT / "README.md").read_text()


def test_replay_on_an_agent_only_install_names_every_role_it_needs(tmp_path: Path) -> None:
    """replay runs a correlator and writes the archive: it needs both roles, and says so in one line."""
    capture = tmp_path / "c.jsonl"
    capture.write_text('{"ts": "2026-04-22T03:00:00+00:00", "source": "node_agent", "node": "n1", "alive": true}\n')
    replay = _run(_left_out_of_the_agent(), "replay", str(capture))
    _, err = replay.communicate(timeout=120)
    assert replay.returncode == 1, err[-3000:]
    assert "pip install 'faultline[correlator,sink]'" in err and "Traceback" not in err, err[-3000:]
    assert err.count("\n") == 1, err
