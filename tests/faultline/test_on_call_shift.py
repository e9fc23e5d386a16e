"""A scripted on-call shift through the real pipeline (issue 28, "Done when").

On the session's broker and an embedded archive, the stages run as deployed: the correlator worker
(a real `correlators.app worker` process, :class:`faultline.pipeline.CorrelatorWorker`), the sink
(`faultline sink run`, a process of its own so it can be SIGKILLed and started again) and an
executor (:class:`~sinks.executors.runner.ExecutorRunner` whose backend counts what it carries out,
with its heartbeat). A capture in which an NVLink XID (74) hits a GPU streams in, with one truncated
line planted in it. The operator then does what a person on call does, each step a `faultline`
command of its own, read as a person and a script read it (table and ``--json``):

1. `status` shows the open incident with its age; `approvals` lists the held `reset_gpu` with its
   exact `faultline approve ID` line;
2. `approve ID` exits 0 and the executor carries the reset out exactly once; approving it again, or
   denying it after, is refused (exit 1, nothing sent) and it still ran once;
3. `deadletters` shows why the planted line was set aside;
4. the sink is SIGKILLed: `status` shows it down; started again: up;
5. every output above keeps the conventions: ``--json`` times in the one RFC 3339 form
   (:func:`common.times.rfc3339`), exit statuses as README's table documents them.

Stages beat every second here (``FAULTLINE_HEARTBEAT_INTERVAL_S``), so "down" is three seconds of
silence rather than 45. Every wait is bounded; nothing is timed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.heartbeat import HeartbeatPublisher, default_instance
from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.kafka_reader import read_topic
from common.settings import REPO_ROOT, Settings
from faultline import __version__
from faultline.outcome import decide_offline
from faultline.pipeline import CorrelatorWorker, publish_capture
from faultline.simulate import FaultPlan, Fleet
from producers.capture.screen import CaptureScreen, Refused
from producers.delivery import EventPublisher
from sinks.executors.launch import ExecutorOptions, make_executor
from sinks.executors.runner import ExecutorRunner
from streams.decisions import CommandResult
from streams.topics import topic_name
from tests.faultline.killed_workers import dated
from tests.faultline.test_json_times import ONE_FORM, _odd_times, _strings
from tests.harness.stages import Background, Recorder
from tests.servers import wait_until

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

BEAT_S = 2.0  # every stage's heartbeat interval: down after three silent ones
#: A kernel line cut short, as an agent's full disk leaves it: the one line the shift must find dead-lettered.
TRUNCATED = b'{"ts": "%s", "source": "kernel", "node": "gpu-node-01", "msg": "NVRM: Xid (PCI:0000:3b:00): 74'
#: README's exit-status table ("Output, errors and exit statuses"): each documented status and its meaning.
_EXIT_ROW = re.compile(r"^\| (\d+(?: / \d+)?) \| (.+?) \|$", re.M)


def documented_exits() -> dict[int, str]:
    out: dict[int, str] = {}
    for codes, meaning in _EXIT_ROW.findall((REPO_ROOT / "README.md").read_text(encoding="utf-8")):
        for code in codes.split(" / "):
            out[int(code)] = meaning
    return out


def shift_capture() -> tuple[list[bytes], str]:
    """Two nodes of four GPUs training one job; an XID 74 (NVLink) on gpu-node-02 GPU 2 two minutes in, no
    recovery; dated to end about now, so ages read as a person's; the truncated line planted in its middle.
    Returns the lines and the reason the capture screen gives the planted one (its line number cut off, as
    `faultline deadletters` groups it)."""
    fleet = Fleet(nodes=2, gpus_per_node=4, duration_s=400, sample_every_s=30, heartbeat_every_s=30,
                  step_every_s=20, checkpoint_every_s=120, job="job-shift",
                  fault=FaultPlan(at_s=120, node=1, gpu=2, xid=74), recover_after_s=None)
    lines = dated([text.encode() for text in fleet.lines()], datetime.now(UTC) - timedelta(seconds=420))
    middle = len(lines) // 2
    ts = json.loads(lines[middle])["ts"]
    lines.insert(middle, TRUNCATED % ts.encode())
    [refused] = [v for v in CaptureScreen().screen(lines) if isinstance(v, Refused)]
    reason = refused.dead_letter("producer", datetime.now(UTC)).reason
    return lines, re.sub(r"^line \d+: ", "", reason)


@dataclass
class Ran:
    """One `faultline` command as the operator ran it."""

    argv: list[str]
    rc: int
    out: str
    err: str

    def json(self) -> Any:
        docs = [json.loads(line) for line in self.out.splitlines() if line.strip()]
        return docs[0] if len(docs) == 1 else docs


@dataclass
class Shift:
    """The running pipeline of one namespace and what the operator ran against it."""

    kafka: str
    namespace: str
    data_dir: Path
    settings: Settings = field(init=False)
    env: dict[str, str] = field(init=False)
    sink: subprocess.Popen[bytes] | None = None
    ran: list[Ran] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.settings = Settings(kafka=self.kafka, namespace=self.namespace, data_dir=self.data_dir,
                                 archive=f"chdb://{self.data_dir / 'archive'}", heartbeat_interval_s=BEAT_S)
        self.env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "FAULTLINE_KAFKA": self.kafka,
                    "FAULTLINE_NAMESPACE": self.namespace, "FAULTLINE_ARCHIVE": self.settings.archive_url,
                    "FAULTLINE_DATA_DIR": str(self.data_dir), "FAULTLINE_HEARTBEAT_INTERVAL_S": str(BEAT_S)}
        self.env.pop("FAULTLINE_OPERATOR_KEYS", None)
        self.sink_log = self.data_dir / "sink.log"

    def start_sink(self) -> None:
        with self.sink_log.open("ab") as log:  # a file, not a pipe nobody reads while the sink runs
            self.sink = subprocess.Popen([sys.executable, "-m", "faultline.cli", "sink", "run"], cwd=REPO_ROOT,
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def kill_sink(self) -> None:
        assert self.sink is not None and self.sink.poll() is None, self.sink_said()
        self.sink.kill()  # SIGKILL: no goodbye, its last heartbeat is its last word
        self.sink.wait(30)

    def sink_said(self) -> str:
        return "the sink logged:\n" + self.sink_log.read_text(errors="replace")[-3000:]

    def faultline(self, *argv: str) -> Ran:
        """``faultline ARGV`` as a process of its own, its output into a pipe (plain lines, as ``| grep`` reads)."""
        done = subprocess.run([sys.executable, "-m", "faultline.cli", *argv], cwd=REPO_ROOT, env=self.env,
                              capture_output=True, text=True, timeout=120)
        ran = Ran(list(argv), done.returncode, done.stdout, done.stderr)
        self.ran.append(ran)
        return ran

    def ok(self, *argv: str) -> Ran:
        ran = self.faultline(*argv)
        assert ran.rc == 0, f"faultline {' '.join(argv)} exited {ran.rc}: {ran.err[-3000:]}"
        return ran

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = self.ok("status", "--json").json()
        return data

    def pipeline(self) -> dict[str, str]:
        """Each stage's state in `faultline status --json`'s Pipeline section."""
        rows = self.status()["pipeline"]
        # One row a stage: a restarted stage takes its own row back (common/heartbeat.py).
        assert len({r["stage"] for r in rows}) == len(rows), rows
        return {r["stage"]: r["state"] for r in rows}


@pytest.fixture
def shift(kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Iterator[Shift]:
    create_namespace_topics({"bootstrap.servers": kafka_bootstrap}, unique_name, partitions=1)
    s = Shift(kafka_bootstrap, unique_name, tmp_path)
    try:
        yield s
    finally:
        if s.sink is not None and s.sink.poll() is None:
            s.sink.kill()
            s.sink.wait(10)
        delete_namespace_topics(s.settings.kafka_config(kafka_bootstrap), unique_name)


def _row(table: str, *words: str) -> str:
    """The one line of plain output that holds every one of ``words``."""
    [line] = [ln for ln in table.splitlines() if all(w in ln for w in words)]
    return line


def _rows(text: str, title: str) -> list[dict[str, str]]:
    """The rows of the plain table titled ``title`` (``Open incidents (1)``: it says how many), each cell by
    its header: columns are aligned, so a cell is the text under its header up to the next one's."""
    lines = text.splitlines()
    at = lines.index(title)
    count = int(title.rsplit("(", 1)[1].rstrip(")"))
    header = lines[at + 1]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    ends = [*starts[1:], None]
    return [{name: line[a:b].strip() for name, a, b in zip(header.split(), starts, ends, strict=True)}
            for line in lines[at + 2:at + 2 + count]]


AGE = re.compile(r"^\d+[smhd]$")


def test_an_on_call_shift_from_fault_to_sink_restart(shift: Shift) -> None:
    lines, planted_reason = shift_capture()
    want = decide_offline(lines)
    [incident] = want["incidents"]
    [reset] = [c for c in want["commands"] if c["type"] == "reset_gpu"]
    assert reset["requires_approval"] and incident["category"] == "gpu_nvlink_fault"

    conf = shift.settings.kafka_config(shift.kafka)
    backend = Recorder()
    executor = make_executor(ExecutorOptions(backend="webhook", state_dir=shift.data_dir / "executor",
                                             fleet_size=100), backend)
    runner = ExecutorRunner(executor, conf, shift.namespace)
    beat = HeartbeatPublisher(conf, shift.namespace, "executor", version=__version__, dev_mode=True,
                              instance=default_instance(executor.name), interval_s=BEAT_S)
    worker = CorrelatorWorker(shift.settings, shift.kafka, shift.namespace)
    stages: list[Background] = []
    try:
        shift.start_sink()
        beat.start()
        stages.append(Background("executor", runner.run))
        pub = EventPublisher(conf, shift.namespace)
        _, events, bad, _ = publish_capture(pub, lines)
        pub.flush()
        assert (events > 0, bad) == (True, 1)

        # 1. The fault reaches the operator: an open incident with its age, the reset held with its line.
        def held() -> bool:
            assert worker.alive() and not worker.crashed(), worker.tail()
            assert shift.sink is not None and shift.sink.poll() is None, shift.sink_said()
            rows = shift.ok("approvals", "--json").json()["waiting_for_approval"]
            return [r["id"] for r in rows] == [reset["id"]]

        wait_until(held, 180, "the reset held for approval, in `faultline approvals`", interval_s=1)
        status = shift.status()
        shift.ok("status", "-o", "yaml")  # the same data for another reader (its times checked at the end)
        [open_incident] = status["open_incidents"]
        assert (open_incident["id"], open_incident["category"]) == (incident["id"], "gpu_nvlink_fault")
        table = shift.ok("status").out
        [row] = _rows(table, "Open incidents (1)")
        assert (row["CATEGORY"], row["ID"]) == ("gpu_nvlink_fault", incident["id"]) and AGE.match(row["AGE"]), row
        assert row["OPENED"] == open_incident["opened_at"].replace("T", " ")[:19] + "Z"  # for people: to the second
        [approval] = status["waiting_for_approval"]
        approve_line = f"faultline approve {reset['id']}"
        assert approval["approve"] == approve_line and approval["what"].startswith("reset_gpu")
        [held_row] = _rows(shift.ok("approvals").out, "Waiting for approval (1)")
        assert (held_row["ID"], held_row["TO_APPROVE"]) == (reset["id"], approve_line) and AGE.match(held_row["AGE"])
        assert backend.executed[reset["id"]] == 0  # held: nothing ran before a person said so

        # 2. The operator approves it; the executor runs it once; a second decision is refused.
        approved = shift.ok("approve", reset["id"], "--by", "alice", "--reason", "job checkpointed; reset is safe")
        assert approved.out.strip() == f"approved {reset['id']} as alice"
        wait_until(lambda: backend.executed[reset["id"]] >= 1, 60, "the executor to carry the approved reset out")
        wait_until(lambda: shift.ok("approvals", "--json").json()["waiting_for_approval"] == [], 60,
                   "the approved reset to leave `faultline approvals`", interval_s=1)
        results = [r for v in read_topic(conf, topic_name(shift.namespace, "command-results"))
                   if (r := CommandResult.model_validate_json(v)).command == reset["id"]]
        assert [r.status for r in results] == ["waiting_approval", "done"], results
        assert results[-1].detail.endswith("(approved by alice)"), results[-1]
        again = shift.faultline("approve", reset["id"], "--by", "alice")
        assert again.rc == 1 and f"{reset['id']} (reset_gpu) was approved by alice at " in again.err, again.err
        denied = shift.faultline("deny", reset["id"], "--by", "bob", "--reason", "too late")
        assert denied.rc == 1 and "nothing was sent" in denied.err, denied.err
        assert backend.executed[reset["id"]] == 1, backend.executed  # exactly once, whatever was asked after

        # 3. Why the planted line was set aside.
        dead = shift.ok("deadletters", "-o", "json").json()
        assert [(g["source"], g["reason"], g["count"]) for g in dead["reasons"]] == [
            ("producer", planted_reason, 1)], dead
        assert planted_reason[:40] in shift.ok("deadletters").out

        # 4. The sink dies without a word: status says so; started again: up.
        wait_until(lambda: shift.pipeline() == {"sink": "up", "executor": "up"}, 60, "both stages' heartbeats archived",
                   interval_s=0.5)
        shift.kill_sink()
        wait_until(lambda: shift.pipeline() == {"sink": "down", "executor": "unknown"}, 60,
                   f"`faultline status` to show the killed sink down (silent > 3 x {BEAT_S:g} s) and the executor, "
                   "heard through it, unknown", interval_s=0.5)
        table = shift.ok("status").out  # once down, down until it beats again: the table says the same
        assert {r["STAGE"]: r["STATE"] for r in _rows(table, "Pipeline (2)")} == {"sink": "down", "executor": "unknown"}
        assert _row(table, "pipeline: sink").startswith(f"pipeline: sink {default_instance()} down (silent ")
        shift.start_sink()
        wait_until(lambda: shift.pipeline() == {"sink": "up", "executor": "up"}, 120,
                   "`faultline status` to show the restarted sink up, and the executor's beats kept in the topic "
                   "meanwhile caught up", interval_s=1)
        wait_until(lambda: {r["STAGE"]: r["STATE"] for r in _rows(shift.ok("status").out, "Pipeline (2)")} == {
            "sink": "up", "executor": "up"}, 30, "the status table to say so too", interval_s=0.5)
        assert worker.alive() and not worker.crashed(), worker.tail()
        for stage in stages:
            stage.end()
        stages.clear()
    finally:
        for stage in stages:
            stage.stop.set()
            stage.thread.join(60)
        runner.close()
        beat.stop()
        worker.stop()

    # 5. The conventions, over everything the operator read.
    assert backend.executed[reset["id"]] == 1, backend.executed
    documented = documented_exits()
    assert {r.rc for r in shift.ran} <= documented.keys(), [(r.argv, r.rc) for r in shift.ran]
    assert {(r.argv[0], r.rc) for r in shift.ran if r.rc != 0} == {("approve", 1), ("deny", 1)}
    assert documented[1].startswith("failure")
    docs = [r.json() for r in shift.ran if "--json" in r.argv or "json" in r.argv]
    docs += [d for r in shift.ran if "yaml" in r.argv for d in yaml.load_all(r.out, Loader=yaml.BaseLoader)]
    assert len(docs) == len([r for r in shift.ran if {"--json", "json", "yaml"} & set(r.argv)])
    assert docs and not [t for d in docs for t in _odd_times(d)]
    assert any(ONE_FORM.fullmatch(t) for d in docs for t in _strings(d))
