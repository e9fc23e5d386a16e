"""Shared steps of the worker-kill tests: production workers armed to die, a dated capture, copies per id.

* :class:`Workers` -- starts real correlator worker processes as deployments run them: command
  signing and snapshot keys set, development mode off, the live clock on -- through
  ``tests/faultline/fault_worker.py``, which arms the fault point it is given;
* :func:`dated` -- a capture moved in time (the live clock judges by the wall clock, so a capture
  must be dated where the test wants the wall clock to be);
* :func:`offline` -- what the uninterrupted run decides, per event;
* :func:`check_decisions` -- every decision of the uninterrupted run on its topic at least once,
  nothing else, and one content per id (see its docstring for what "one content" means of a
  signed command); returns the copies counted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from common.kafka_reader import read_topic
from common.settings import Settings
from faultline import pipeline
from faultline.outcome import collate, decide_offline
from faultline.pipeline import CorrelatorWorker
from streams.decisions import Command, Incident
from streams.signing import SigningKeys, verify
from streams.topics import topic_name
from tests.harness.copies import Copies

__all__ = ["Offline", "Workers", "check_decisions", "dated", "offline", "production_settings"]

REPO = Path(__file__).resolve().parents[2]
FAULT_WORKER = Path(__file__).with_name("fault_worker.py")
SIGNING = "wk1:worker-kill-signing-secret-0123456789"
SNAPSHOT_KEY = "worker-kill-snapshot-key-0123456789abcdef"
OPERATORS = "op1:worker-kill-operator-secret-0123456789"
#: A re-signed copy of a command differs from the first only here (streams/signing.py: the expiry is the wall
#: clock at signing + the TTL, and the signature covers it).
SIGNED_AT_PUBLICATION = {"expires_at", "signature"}


def production_settings(bootstrap: str, data_dir: Path, namespace: str, **extra: Any) -> Settings:
    """A worker's settings as deployed: keys set, development mode off, the live clock on."""
    return Settings(kafka=bootstrap, data_dir=data_dir, namespace=namespace, dev_mode=False, live_clock=True,
                    signing_keys=SecretStr(SIGNING), snapshot_key=SecretStr(SNAPSHOT_KEY),
                    operator_keys=SecretStr(OPERATORS), **extra)


class Workers:
    """Starts worker processes through fault_worker.py, each armed with its own fault point (or none)."""

    def __init__(self, settings: Settings, bootstrap: str, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.settings, self.bootstrap, self.ns = settings, bootstrap, ns
        self.started: list[CorrelatorWorker] = []
        self._spec = ""
        popen = subprocess.Popen

        def armed(argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
            assert argv[1:3] == ["-m", "correlators.app"], argv
            env = dict(kw.pop("env"))
            # CorrelatorWorker runs a replay's throw-away worker in development mode; these run in production's.
            env.update(FAULTLINE_DEV_MODE="false", FAULTLINE_TEST_KILL=self._spec,
                       PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
            return popen([sys.executable, str(FAULT_WORKER), *argv[3:]], env=env, **kw)

        monkeypatch.setattr(pipeline.subprocess, "Popen", armed)

    def start(self, spec: str = "", name: str | None = None) -> CorrelatorWorker:
        self._spec = spec
        worker = CorrelatorWorker(self.settings, self.bootstrap, self.ns, name=name or f"w{len(self.started)}")
        self.started.append(worker)
        return worker

    def wait_killed(self, worker: CorrelatorWorker, context: str, timeout_s: float = 240.0) -> str:
        """Until the armed worker killed itself at its fault point; where it says it died."""
        try:
            worker.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{context}the fault point was never reached in {timeout_s:.0f}s:\n"
                                 f"{worker.tail()}") from None
        worker.stop()
        text = worker.log_text()
        found = re.findall(r"test: SIGKILL at (.*)", text)
        assert worker.proc.returncode == -signal.SIGKILL and found, \
            f"{context}exited {worker.proc.returncode} without reaching its fault point:\n{worker.tail()}"
        assert "DEVELOPMENT MODE" not in text, f"{context}the worker ran in development mode"
        return str(found[-1])

    def kill(self, worker: CorrelatorWorker) -> None:
        """``kill -9`` from outside."""
        os.killpg(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait(10)
        worker.stop()

    def stop_all(self) -> None:
        for w in self.started:
            w.stop()


def dated(lines: list[bytes], first: datetime, gap_after: int | None = None,
          gap: timedelta = timedelta(0)) -> list[bytes]:
    """``lines`` moved in time so the first is at ``first``; the lines after ``gap_after`` ``gap`` later still."""
    t0 = _ts(json.loads(lines[0]))
    out = []
    for n, raw in enumerate(lines):
        obj = json.loads(raw)
        shift = first - t0 + (gap if gap_after is not None and n >= gap_after else timedelta(0))
        obj["ts"] = (_ts(obj) + shift).isoformat(timespec="microseconds").replace("+00:00", "Z")
        out.append(json.dumps(obj).encode())
    return out


def _ts(obj: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(obj["ts"]).replace("Z", "+00:00")).astimezone(UTC)


@dataclass
class Offline:
    """The uninterrupted run's decisions: per event (by events offset), and all of them."""

    per_event: list[list[Incident | Command]] = field(default_factory=list)
    contract: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def incidents(self) -> list[Incident]:
        return [d for ds in self.per_event for d in ds if isinstance(d, Incident)]

    @property
    def commands(self) -> list[Command]:
        return [d for ds in self.per_event for d in ds if isinstance(d, Command)]


def offline(lines: list[bytes]) -> Offline:
    out = Offline()
    out.contract = decide_offline(lines, on_decisions=lambda ds: out.per_event.append(list(ds)))
    return out


def unsigned(cmd: Command) -> bytes:
    """A command's content without what signing adds at publication (and without its scope, checked apart)."""
    return cmd.model_dump_json(exclude=SIGNED_AT_PUBLICATION | {"namespace", "cluster"}).encode()


@dataclass
class Counted:
    versions: Copies
    commands: Copies
    raw_commands: Copies

    @property
    def resigned(self) -> int:
        """Command ids whose copies differ byte for byte (a re-signed copy: its expiry and signature)."""
        return len(self.raw_commands.conflicting())

    def copies_of(self, keys: list[str]) -> dict[str, int]:
        """Copies of each decision named as the kill line names them (``id@version`` for an incident)."""
        counts: dict[str, int] = {}
        for key in keys:
            inc, _, version = key.partition("@")
            counts[key] = self.versions.count.get((inc, int(version)), 0) if version else self.commands.count.get(key, 0)
        return counts


def check_decisions(conf: dict[str, Any], ns: str, settings: Settings, want: Offline, context: str) -> Counted:
    """What the namespace's topics hold, against the uninterrupted run, per id:

    * every incident version and command of the uninterrupted run at least once, nothing else;
    * every copy of an incident version byte-identical, and equal to the uninterrupted run's;
    * every copy of a command signed for this namespace and cluster with a valid signature, and
      identical to every other copy and to the uninterrupted run's command in everything but what
      signing adds when it is published (``expires_at``, the wall clock + the TTL, and so the
      ``signature``): a copy republished by a successor is signed again, later, so those differ;
    * the commands, first copies in topic order, in the uninterrupted run's order.
    """
    raw_incidents = list(read_topic(conf, topic_name(ns, "incidents"), timeout=60))
    raw_commands = list(read_topic(conf, topic_name(ns, "commands"), timeout=60))
    keys = settings.signing()
    assert keys is not None and isinstance(keys, SigningKeys)
    commands = [Command.model_validate_json(v) for v in raw_commands]
    now = datetime.now(UTC)
    bad = [(c.id, why) for c in commands
           if (why := verify(c, keys, now, namespace=ns, cluster=settings.cluster)) is not None]
    assert not bad, f"{context}commands whose signature does not hold: {bad[:5]}"

    def version(v: bytes) -> Hashable:
        i = Incident.model_validate_json(v)
        return (i.id, i.version)

    versions = Copies.of("incident versions", raw_incidents, version)
    versions.assert_at_least_once_identical({(i.id, i.version) for i in want.incidents}, context)
    expected = {(i.id, i.version): i.model_dump_json().encode() for i in want.incidents}
    differ = [k for k, c in versions.contents.items() if c != {expected[k]}]  # type: ignore[index]
    assert not differ, f"{context}incident versions unlike the uninterrupted run's: {differ[:5]}"

    content = Copies.of("commands (content as decided)", [unsigned(c) for c in commands],
                        lambda v: Command.model_validate_json(v).id)
    content.assert_at_least_once_identical({c.id for c in want.commands}, context)
    offline_content = {c.id: unsigned(c) for c in want.commands}
    differ_c = [k for k, c in content.contents.items() if c != {offline_content[str(k)]}]
    assert not differ_c, f"{context}commands unlike the uninterrupted run's: {differ_c[:5]}"

    got = collate([Incident.model_validate_json(v) for v in raw_incidents], commands)
    assert [c["id"] for c in got["commands"]] == [c["id"] for c in want.contract["commands"]], \
        f"{context}command order"
    assert [(i["id"], i["state"]) for i in got["incidents"]] == \
           [(i["id"], i["state"]) for i in want.contract["incidents"]], f"{context}final incidents"
    raw = Copies.of("commands (bytes)", raw_commands, lambda v: Command.model_validate_json(v).id)
    return Counted(versions, content, raw)


def wait_until(what: str, done: Any, timeout_s: float, every_s: float = 0.3) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(every_s)
