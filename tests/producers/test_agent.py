"""The node agent: config, the source registry, isolation of a failing source, and `faultline agent`
end to end against the session broker (started, fed, stopped with SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.kafka_admin import create_namespace_topics
from common.kafka_reader import read_topic
from producers import registry
from producers.agent import Agent, AgentConfig, ConfigError, load_config
from producers.capture import parse_capture_line
from producers.node.bmc import BmcSettings
from producers.node.gpu_telemetry import NvmlSettings
from producers.node.heartbeat import HeartbeatSettings
from producers.node.kernel_log import KernelLogSettings
from producers.registry import SourceContext
from producers.source import Observation, observation
from producers.spool import SpoolingPublisher
from streams.batch import decode_record
from streams.decisions import DeadLetter
from streams.events import AgentHeartbeat, Event, GpuSample, Inventory, Xid
from streams.topics import topic_name
from tests.servers import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "producers" / "agent.example.yaml"
NVML_FIXTURE = Path(__file__).resolve().parents[2] / "producers" / "node" / "recordings" / "nvml_8xh100.json"
XID = "NVRM: Xid (PCI:0000:5d:00): 48, pid='<unknown>', name=<unknown>, Double bit ECC error (DBE)"



# --- config and registry ----------------------------------------------------------------------


def test_the_example_config_is_valid_knob_by_knob() -> None:
    config = load_config(EXAMPLE)
    assert {"heartbeat", "nvml", "kernel_log", "bmc"} <= set(config.sources)
    models = {"heartbeat": HeartbeatSettings, "nvml": NvmlSettings, "kernel_log": KernelLogSettings, "bmc": BmcSettings}
    for name, model in models.items():
        model.model_validate(config.sources[name])


def test_every_registered_factory_loads() -> None:
    for name in registry.SOURCES:
        assert callable(registry.load_factory(name))
    with pytest.raises(KeyError, match="known"):
        registry.load_factory("nope")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("nodename: x\n", "Extra inputs"),
        ("sources: {gpu: {}}\n", "unknown sources"),
        ("metrics_port: 70000\n", "less than or equal"),
        ("sources: [heartbeat]\n", "valid dictionary"),
    ],
)
def test_bad_configs_say_what_is_wrong(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem):
        load_config(path)


def test_a_bad_source_section_refuses_to_start(tmp_path: Path) -> None:
    config = AgentConfig(node="n17", state_dir=tmp_path, sources={"heartbeat": {"interval_s": -1}})
    with pytest.raises(ConfigError, match=r"sources\.heartbeat"):
        Agent(config, _offline_publisher(tmp_path))


# --- one failing source does not stop the others ------------------------------------------------


def _offline_publisher(tmp_path: Path) -> SpoolingPublisher:
    return SpoolingPublisher({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, "offline", tmp_path / "spool")


class Flaky:
    """Fails every poll; counts them."""

    name = "flaky"
    interval_s = 0.05
    polls = 0

    def poll(self, now: datetime) -> list[Observation]:
        Flaky.polls += 1
        raise OSError("device vanished")

    def close(self) -> None:
        """Nothing to release."""


def flaky_factory(ctx: SourceContext, settings: Mapping[str, Any]) -> Flaky:
    return Flaky()


class Chatty:
    """Sends a heartbeat and one unusable line per poll."""

    name = "chatty"
    interval_s = 0.1

    def __init__(self, node: str) -> None:
        self.node = node

    def poll(self, now: datetime) -> list[Observation]:
        return [observation("node_agent", now, node=self.node, alive=True), observation("bmc", now, node=self.node)]

    def close(self) -> None:
        """Nothing to release."""


def chatty_factory(ctx: SourceContext, settings: Mapping[str, Any]) -> Chatty:
    return Chatty(ctx.node)


def unavailable_factory(ctx: SourceContext, settings: Mapping[str, Any]) -> None:
    return None


class LateStart:
    """A source whose first start fails (its device is not there yet)."""

    starts = 0

    @classmethod
    def create(cls, ctx: SourceContext, settings: Mapping[str, Any]) -> Chatty:
        cls.starts += 1
        if cls.starts == 1:
            raise FileNotFoundError("/dev/not-yet")
        return Chatty("late-node")


def test_a_failing_source_backs_off_alone_and_the_agent_stops_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    factories = {"flaky": "flaky_factory", "chatty": "chatty_factory", "absent": "unavailable_factory",
                 "late": "LateStart.create"}
    for name, factory in factories.items():
        monkeypatch.setitem(registry.SOURCES, name, f"{__name__}:{factory}")
    capture = tmp_path / "capture.jsonl"
    config = AgentConfig(node="n17", state_dir=tmp_path, capture_file=capture,
                         sources={name: {} for name in factories})
    publisher = _offline_publisher(tmp_path)
    Flaky.polls = LateStart.starts = 0
    agent = Agent(config, publisher)
    agent.run(deadline=time.monotonic() + 2.5)

    assert 2 <= Flaky.polls <= 3, "1 s, then 2 s back-off, not every 50 ms"
    lines = [json.loads(line) for line in capture.read_text().splitlines()]
    beats = [obs for obs in lines if obs["source"] == "node_agent" and obs["node"] == "n17"]
    assert len(beats) >= 15, "the healthy source kept its 0.1 s pace"
    assert LateStart.starts == 2 and any(obs["node"] == "late-node" for obs in lines), "a failed start is retried"
    assert len([obs for obs in lines if obs["source"] == "bmc"]) >= len(beats), "unusable lines are captured too"
    assert [runner.name for runner in agent.runners] == ["flaky", "chatty", "late"], "unavailable: left out"
    assert not any(runner.thread.is_alive() for runner in agent.runners)
    assert publisher.backlog() >= len(beats) + 1, "heartbeats and dead letters wait in the spool"


class Recording:
    """A publisher that keeps what it is handed."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.dead: list[DeadLetter] = []

    def pump(self) -> None:
        """Nothing queued."""

    def publish(self, events: Iterable[Event]) -> None:
        self.events.extend(events)

    def dead_letter(self, dl: DeadLetter) -> None:
        self.dead.append(dl)

    def close(self, timeout_s: float) -> None:
        """Nothing to release."""

    def backlog(self) -> int:
        return 0


def test_an_observation_stamped_far_ahead_of_the_node_clock_is_refused(tmp_path: Path) -> None:
    """A BMC clock reset to 2099 must not reach the correlator (it would close every open window)."""
    config = AgentConfig(node="n1", state_dir=tmp_path, max_future_s=600)
    publisher = Recording()
    agent = Agent(config, publisher)
    now = datetime.now(UTC).replace(microsecond=0)  # observations carry milliseconds
    found = [observation("node_agent", now + timedelta(seconds=599), node="n1", alive=True),
             observation("node_agent", now - timedelta(days=3), node="n1", alive=True),
             observation("node_agent", now + timedelta(seconds=601), node="n1", alive=True),
             observation("node_agent", datetime(2099, 1, 1, tzinfo=UTC), node="n1", alive=True)]
    events = agent._events("bmc", found, now)
    assert [e.ts for e in events] == [now + timedelta(seconds=599), now - timedelta(days=3)], "the past is kept"
    assert len(publisher.dead) == 2
    assert all("ahead of this node's clock" in d.reason and "check the source's clock" in d.reason
               for d in publisher.dead)


# --- `faultline agent` end to end -------------------------------------------------------------------


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.broker
def test_faultline_agent_publishes_then_stops_on_sigterm(
    tmp_path: Path, kafka_bootstrap: str, unique_name: str
) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap}
    create_namespace_topics(conf, unique_name, partitions=1)
    kern_log, capture, state = tmp_path / "kern.log", tmp_path / "capture.jsonl", tmp_path / "state"
    kern_log.touch()
    metrics_port = free_port()
    config = {
        "node": "n17",
        "rack": "r12",
        "namespace": unique_name,
        "state_dir": str(state),
        "metrics_port": metrics_port,
        "capture_file": str(capture),
        "sources": {
            "heartbeat": {"interval_s": 0.5},
            "kernel_log": {"mode": "file", "path": str(kern_log), "interval_s": 0.2},
            "nvml": {"backend": "recorded", "path": str(NVML_FIXTURE)},
        },
    }
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "FAULTLINE_KAFKA": kafka_bootstrap}
    agent = subprocess.Popen(
        [sys.executable, "-m", "faultline.cli", "agent", "--config", str(tmp_path / "agent.yaml")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_for(lambda: (state / "kernel_log.file.json").exists(), 30, "the kernel log follower to start")
        with kern_log.open("a") as fh:
            fh.write(f"Apr 22 03:14:17 n17 kernel: eth0: link up\nApr 22 03:14:17 n17 kernel: {XID}\n")

        seen: list[Event] = []

        def arrived() -> bool:
            seen[:] = [e for v in read_topic(conf, topic_name(unique_name, "events")) for e in decode_record(v).events]
            kinds = [type(e.body) for e in seen]
            return (AgentHeartbeat in kinds and Inventory in kinds and Xid in kinds
                    and kinds.count(GpuSample) >= 8)

        _wait_for(arrived, 60, "heartbeat, inventory, 8 GPU samples and the XID on the events topic")

        def counted() -> bool:  # the delivery report is served on the agent's next poll, after a reader sees it
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            return 'faultline_producer_sent_total{source="node_agent"}' in urllib.request.urlopen(
                url, timeout=5).read().decode()

        _wait_for(counted, 30, "the sent counter of the heartbeat source")
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            _, err = agent.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
            raise
    assert agent.returncode == 0, err[-3000:]
    assert {e.node for e in seen} == {"n17"}
    xid = next(e.body for e in seen if isinstance(e.body, Xid))
    assert xid.code == 48 and xid.gpu.pci == "5d:00"
    replayed = {e.id for line in capture.read_text().splitlines() for e in parse_capture_line(line)}
    assert {e.id for e in seen} <= replayed, "the capture file replays to the very same event ids"
    assert json.loads(capture.read_text().splitlines()[0])["source"] in ("node_agent", "inventory")


def test_faultline_capture_records_observations_without_a_broker(tmp_path: Path) -> None:
    """`faultline capture` runs the node's sources and writes capture lines that replay parses."""
    out = tmp_path / "node.jsonl"
    config = {"node": "n5", "rack": "r1", "state_dir": str(tmp_path / "state"),
              "sources": {"heartbeat": {"interval_s": 0.3},
                          "nvml": {"backend": "recorded", "path": str(NVML_FIXTURE)}}}
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k != "FAULTLINE_KAFKA"}
    done = subprocess.run(
        [sys.executable, "-m", "faultline.cli", "capture", "--config", str(tmp_path / "agent.yaml"),
         "--out", str(out), "--seconds", "3"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = out.read_text().splitlines()
    sources = {json.loads(line)["source"] for line in lines}
    assert {"node_agent", "nvml", "inventory"} <= sources
    assert all(parse_capture_line(line) is not None for line in lines)
