"""`faultline bench`: how fast faultline detects and acts, how much it carries, what it saves.

Everything runs against the real local broker and an embedded archive in one
run, so ratios compare like with like on the same (noisy, shared) machine:
each throughput figure sits beside its baseline (a bare consumer of the same
records, a bare insert of the same rows), CPU seconds beside wall seconds, the
machine's load average beside all of it, and a figure measured several times
is given as the median with every run. Progress goes to standard error;
``--json`` prints one JSON object, the summary, as the last line of standard
output. The steps:

1. detection to command under light background telemetry;
2. the correlator: throughput of batch records vs a bare consumer, then a
   16,384-GPU cell's steady load, collective-timeout storm and takeover
   (:mod:`faultline.bench.storm`);
3. the archive: through the sink vs a bare insert;
4. replay of a capture, start-up included;
5. the node agent's CPU;
6. goodput from the engine's own decisions (:mod:`faultline.bench.goodput`).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer

from common.heap import frozen_heap
from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.kafka_reader import TopicReader, read_topic
from common.settings import Settings
from faultline.bench.goodput import compare
from faultline.bench.storm import StormSizes, storm
from faultline.pipeline import CorrelatorWorker, end_marker, replay_batching, wait_for_end
from faultline.preflight import ensure_broker
from faultline.simulate import FaultPlan, Fleet
from producers.capture import parse_capture_line
from producers.delivery import EventPublisher
from streams.decisions import Command, StreamEnd
from streams.events import Event
from streams.topics import scratch_namespace, topic_name

__all__ = ["run_bench", "Sizes"]


class Sizes:
    """How much load each measurement uses; ``quick`` keeps CI to seconds."""

    def __init__(self, quick: bool) -> None:
        self.fleet_nodes = 4 if quick else 32
        self.fleet_seconds = 120 if quick else 600
        self.throughput_runs = 1 if quick else 3
        self.detect_samples = 5 if quick else 40
        # telemetry of a ~2,000-GPU cell after publish-on-change (deploy/topics/: 10,000 GPUs ~ 2,700/s)
        self.background_eps = 200 if quick else 530
        self.replay_nodes = 2 if quick else 32
        self.storm = StormSizes(quick)
        self.goodput_runs = 3 if quick else 20
        self.agent_seconds = 10 if quick else 30


def _say(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def _fleet_events(nodes: int, seconds: float) -> list[Event]:
    fleet = Fleet(nodes=nodes, duration_s=seconds, sample_every_s=1, heartbeat_every_s=15,
                  fault=FaultPlan(at_s=seconds * 0.6), spare_nodes=1, recover_after_s=None)
    return [e for line in fleet.lines() for e in parse_capture_line(line)]


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


class Bench:
    def __init__(self, settings: Settings, sizes: Sizes) -> None:
        self.settings = settings
        self.sizes = sizes
        self.bootstrap = ensure_broker(settings)
        self.conf = settings.kafka_config(self.bootstrap)
        self.namespaces: list[str] = []

    def namespace(self, what: str) -> str:
        ns = scratch_namespace(self.settings.namespace, "bench", f"{what}-{uuid.uuid4().hex[:6]}")
        create_namespace_topics(self.conf, ns, partitions=1)
        self.namespaces.append(ns)
        return ns

    def close(self) -> None:
        for ns in self.namespaces:
            delete_namespace_topics(self.conf, ns)

    def published(self, events: list[Event]) -> str:
        """A new namespace holding ``events`` (batched as a replay batches them) and their end marker."""
        ns = self.namespace("throughput")
        pub = EventPublisher(self.conf, ns, batching=replay_batching(self.settings))
        pub.publish(events)
        pub.publish([end_marker(len(events), events[-1].ts)])
        pub.flush(120)
        return ns

    # --- throughput: correlator vs a bare consumer, on the same topic ---------------------
    def throughput(self, events: list[Event]) -> dict[str, Any]:
        """The same records (batched as a replay batches them) read by a bare consumer, then judged by a
        worker; both rates in events/s, each timed from its first record (start-up left out)."""
        ns = self.published(events)
        n = len(events) + 1
        records, baseline_s = _bare_consume(self.conf, topic_name(ns, "events"))
        _say(f"bare consumer: {records} records ({n} events) in {baseline_s:.2f}s")
        worker = CorrelatorWorker(self.settings, self.bootstrap, ns)
        try:
            wait_for_end(self.conf, ns, worker, timeout=300)
        finally:
            worker.stop()
        end = StreamEnd.model_validate_json(next(iter(read_topic(self.conf, topic_name(ns, "control")))))
        rate = n / end.seconds if end.seconds else 0.0
        base = n / baseline_s
        cpu = end.cpu_seconds or 0.0
        _say(f"correlator: {n} events in {end.seconds:.2f}s ({cpu:.2f} CPU-s)")
        return {"correlator_events_per_s": round(rate), "consumer_baseline_events_per_s": round(base),
                "correlator_to_baseline_ratio": round(rate / base, 3),
                "correlator_events_per_cpu_s": round(n / cpu) if cpu else None, "events": n, "records": records,
                "namespace": ns}

    def throughputs(self, events: list[Event], runs: int) -> dict[str, Any]:
        """:meth:`throughput` ``runs`` times; the median run's figures, and every run's."""
        results = [self.throughput(events) for _ in range(runs)]
        ranked = sorted(results, key=lambda r: r["correlator_events_per_s"])
        median = dict(ranked[len(ranked) // 2])
        median["throughput_runs"] = [{k: r[k] for k in ("correlator_events_per_s", "consumer_baseline_events_per_s",
                                                        "correlator_events_per_cpu_s")} for r in results]
        return median

    # --- archive: through the sink vs a bare insert of the same rows ------------------------
    def archive(self, ns: str, events: list[Event]) -> dict[str, Any]:
        from sinks.archive.store import EVENT_COLUMNS, Archive, event_row
        from sinks.archive_sink import ArchiveSink

        # Frozen as a sink process freezes its start-up heap: the bench's own events are not walked by the drain's
        # full collections (common/heap.py).
        with frozen_heap(), tempfile.TemporaryDirectory() as d, Archive.open(f"chdb://{d}/archive") as store:
            sink = ArchiveSink(store, self.bootstrap, ns, consumer_config=self.conf)
            try:
                _, join_s = _timed(sink.join)  # group membership is start-up, as the bare insert has none
                cpu = time.process_time()  # the whole process's: chDB's and librdkafka's threads too
                rows, sink_s = _timed(lambda: sink.drain(timeout_s=600))
                cpu = time.process_time() - cpu
            finally:
                sink.close()
            store.client.command("CREATE TABLE bare_events AS events ENGINE = MergeTree ORDER BY id")
            data = [event_row(e) for e in events]
            _, bare_s = _timed(lambda: store.client.insert("bare_events", data, column_names=EVENT_COLUMNS))
        _say(f"archive: sink {rows} rows in {sink_s:.2f}s (after {join_s:.2f}s joining the group); bare insert "
             f"{len(data)} rows in {bare_s:.2f}s; the sink's drain took {cpu:.2f} CPU-s")
        return {"archive_rows_per_s": round(rows / sink_s), "archive_bare_insert_rows_per_s": round(len(data) / bare_s),
                "archive_to_bare_ratio": round((rows / sink_s) / (len(data) / bare_s), 3),
                "archive_sink_join_s": round(join_s, 2), "archive_sink_cpu_s": round(cpu, 2)}

    # --- replay -----------------------------------------------------------------------------
    def replay(self) -> dict[str, Any]:
        from faultline.pipeline import replay

        fleet = Fleet(nodes=self.sizes.replay_nodes, duration_s=self.sizes.fleet_seconds, sample_every_s=1)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "capture.jsonl"
            path.write_text("\n".join(fleet.lines()) + "\n")
            settings = self.settings.model_copy(update={"archive": f"chdb://{d}/archive"})
            run, secs = _timed(lambda: replay(path, settings))
        _say(f"replay: {run.lines} lines in {secs:.2f}s (start-up included)")
        return {"replay_lines_per_s": round(run.lines / secs), "replay_lines": run.lines,
                "replay_seconds": round(secs, 2)}

    # --- detection to command, under background telemetry ----------------------------------
    def detect_to_command(self) -> dict[str, Any]:
        ns = self.namespace("latency")
        settings = self.settings.model_copy(update={"live_clock": True})
        worker = CorrelatorWorker(settings, self.bootstrap, ns)
        pub = EventPublisher({**self.conf, "linger.ms": 0}, ns)
        stop = threading.Event()
        samples: list[float] = []
        try:
            nodes = [f"lat-{i:03d}" for i in range(self.sizes.detect_samples)]
            now = datetime.now(UTC)
            for node in nodes:
                pub.publish(parse_capture_line(json.dumps({
                    "ts": now.isoformat(), "source": "inventory", "node": node, "rack": "bench",
                    "gpus": [{"index": 0, "uuid": f"GPU-{node}", "pci_bus_id": "00000000:3A:00.0"}]})))
            pub.flush()
            bg = threading.Thread(target=self._background, args=(ns, stop), daemon=True)
            bg.start()
            cmds = Consumer({**self.conf, "group.id": f"bench-{uuid.uuid4().hex}", "auto.offset.reset": "latest"})
            cmds.subscribe([topic_name(ns, "commands")])
            self._wait_assigned(cmds)
            time.sleep(3)  # the worker is up and the background load is flowing
            for node in nodes:
                line = json.dumps({"ts": datetime.now(UTC).isoformat(), "source": "kernel", "node": node,
                                   "line": "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, "
                                           "GPU has fallen off the bus."})
                t0 = time.perf_counter()
                pub.publish(parse_capture_line(line))
                pub.flush(5)
                samples.append(self._await_quarantine(cmds, node, t0))
            cmds.close()
        finally:
            stop.set()
            worker.stop()
        ms = sorted(s * 1000 for s in samples)
        p99 = ms[min(len(ms) - 1, int(round(0.99 * (len(ms) - 1))))]
        _say(f"detect to command: p50 {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms over {len(ms)}")
        return {"p50": round(statistics.median(ms), 1), "p99": round(p99, 1), "n": len(ms)}

    def _background(self, ns: str, stop: threading.Event) -> None:
        pub = EventPublisher(self.conf, ns)
        period = 0.05
        per_tick = max(1, int(self.sizes.background_eps * period))
        i = 0
        while not stop.is_set():
            now = datetime.now(UTC).isoformat()
            for _ in range(per_tick):
                i += 1
                pub.publish(parse_capture_line(json.dumps({
                    "ts": now, "source": "nvml", "node": f"bg-{i % 64:02d}",
                    "gpu": {"index": i % 8, "uuid": f"GPU-bg-{i % 512}", "pci_bus_id": "00000000:18:00.0"},
                    "metrics": {"temperature_c": 60 + i % 5, "power_w": 500}})))
            stop.wait(period)
        pub.flush()

    @staticmethod
    def _wait_assigned(c: Consumer) -> None:
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.1)

    @staticmethod
    def _await_quarantine(c: Consumer, node: str, t0: float) -> float:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.01)
            if m is None or m.error() or m.value() is None:
                continue
            cmd = Command.model_validate_json(m.value() or b"")
            if cmd.type == "quarantine_gpu" and cmd.target.node == node:
                return time.perf_counter() - t0
        raise TimeoutError(f"no quarantine command for {node} within 30s")


def _bare_consume(conf: dict[str, Any], topic: str) -> tuple[int, float]:
    """Records on ``topic`` and the seconds a bare confluent-kafka loop takes to fetch them all, from its
    assignment (connecting is start-up, as the worker's is) to the last record."""
    with TopicReader(conf, topic, f"bench-bare-{uuid.uuid4().hex}", stall_s=120) as reader:
        ends = reader.ends()
        reader.assign({p: OFFSET_BEGINNING for p in ends})
        t0 = time.perf_counter()
        count = sum(1 for batch in reader.batches(ends) for msg in batch if msg.value() is not None)
        return count, max(time.perf_counter() - t0, 1e-6)


def agent_cpu_pct(seconds: float) -> dict[str, Any]:
    """CPU share of one `faultline agent` for 8 GPUs at 1 Hz (recorded NVML readings where no GPU is present).

    Process CPU time over wall time, measured after a warm-up so start-up is not counted. The agent
    records to a capture file and sends nothing: the bus's cost is the broker's, not the node's.
    """
    import os
    import subprocess

    import yaml

    recording = Path(__file__).resolve().parents[2] / "producers" / "node" / "recordings" / "nvml_8xh100.json"
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "agent.yaml"
        cfg.write_text(yaml.safe_dump({"node": "bench-node", "state_dir": f"{d}/state", "sources": {
            "nvml": {"backend": "recorded", "path": str(recording), "interval_s": 1.0},
            "heartbeat": {"interval_s": 15}}}))
        proc = subprocess.Popen([sys.executable, "-m", "faultline.cli", "capture", "--config", str(cfg),
                                 "--out", f"{d}/capture.jsonl", "--seconds", str(seconds + 10)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu_s() -> float:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime

        try:
            time.sleep(5)  # start-up: imports, first inventory
            c0, t0 = cpu_s(), time.monotonic()
            time.sleep(seconds)
            c1, t1 = cpu_s(), time.monotonic()
            if proc.poll() is not None:  # a dead agent costs nothing: that is no figure
                raise RuntimeError(f"the agent exited ({proc.returncode}) while it was measured")
        finally:
            proc.terminate()
            proc.wait(30)
    pct = 100 * (c1 - c0) / (t1 - t0)
    _say(f"agent: {c1 - c0:.2f}s CPU over {t1 - t0:.1f}s = {pct:.2f}% of a core")
    return {"agent_cpu_pct": round(pct, 3), "agent_gpus": 8, "agent_sample_hz": 1.0,
            "agent_seconds": round(t1 - t0, 1)}


SECTIONS = ("storm", "archive", "replay")  # what ``faultline bench --only`` can run alone


def run_bench(settings: Settings, quick: bool = False, only: str | None = None) -> dict[str, Any]:
    """Every section (or ``only`` the one named in :data:`SECTIONS`) and its figures."""
    if only is not None and only not in SECTIONS:
        raise ValueError(f"no bench section {only!r}: one of {', '.join(SECTIONS)}")
    sizes = Sizes(quick)
    started = time.monotonic()
    _say(f"{'quick' if quick else 'full'} run{f' of the {only} alone' if only else ''}; starting the broker")
    bench = Bench(settings, sizes)
    out: dict[str, Any] = {"machine": _machine(), "quick": quick, "started_at": datetime.now(UTC).isoformat()}
    try:
        if only == "storm":
            out["storm"] = storm(settings, bench.bootstrap, bench.conf, bench.namespace("storm"), sizes.storm)
        elif only == "archive":
            events = _fleet_events(sizes.fleet_nodes, sizes.fleet_seconds)
            out.update(bench.archive(bench.published(events), events + [end_marker(0, events[-1].ts)]))
        elif only == "replay":
            out.update(bench.replay())
        else:
            _every_section(bench, settings, sizes, out)
    finally:
        bench.close()
    out["seconds"] = round(time.monotonic() - started, 1)
    out["machine"]["load_average_after"] = _load()
    return out


def _every_section(bench: Bench, settings: Settings, sizes: Sizes, out: dict[str, Any]) -> None:
    _say("1/6 detection to command under background telemetry")
    out["detect_to_command_ms"] = bench.detect_to_command()
    _say("2/6 the correlator: throughput vs a bare consumer, then a 16,384-GPU cell's storm and takeover")
    events = _fleet_events(sizes.fleet_nodes, sizes.fleet_seconds)
    tp = bench.throughputs(events, sizes.throughput_runs)
    out.update({k: v for k, v in tp.items() if k != "namespace"})
    out["storm"] = storm(settings, bench.bootstrap, bench.conf, bench.namespace("storm"), sizes.storm)
    _say("3/6 archive through the sink vs a bare insert")
    out.update(bench.archive(tp["namespace"], events + [end_marker(0, events[-1].ts)]))
    _say("4/6 replay")
    out.update(bench.replay())
    _say("5/6 node agent CPU")
    out.update(agent_cpu_pct(sizes.agent_seconds))
    _say("6/6 goodput from the engine's own decisions")
    out["goodput"] = compare(runs=sizes.goodput_runs)
    for line in goodput_lines(out["goodput"]):
        _say(line)


def goodput_lines(g: dict[str, Any]) -> list[str]:
    """The goodput section in brief: ETTR per arm at the assumed interval (faultline's with the restart modes
    the engine chose), checkpoint-now's sensitivity, the advised interval, and where the lost GPU-hours go."""
    interval = g["assumptions"]["checkpoint_interval_s"]
    adv = g["advised"]
    out = [f"   ETTR at a {interval / 60:g}-min interval: baseline {g['baseline_ettr']:.3f}, faultline "
           f"{g['faultline_ettr']:.3f} (restart modes as the engine chose)",
           "   with checkpoint-now for " + ", ".join(g["checkpoint_now_sensitivity"][0]["causes"]) + ": "
           + ", ".join(f"share {row['predicted_share']:g} -> {row['faultline_ettr']:.3f}"
                       for row in g["checkpoint_now_sensitivity"]),
           f"   advised interval (Young, MTBF {adv['mtbf_s'] / 3600:.1f} h): "
           + "; ".join(f"save {row['checkpoint_save_s']:g} s -> every {row['interval_s'] / 60:.1f} min, ETTR "
                       f"{row['faultline_ettr']:.3f}, {row['faultline_ettr_checkpoint_now']:.3f} with checkpoint-now "
                       f"at share {adv['predicted_share']:g}" for row in adv["by_save_time"])]
    for policy in ("baseline", "faultline"):
        total = g["where_the_time_goes"][policy]["total"]
        whole = sum(total.values()) or 1
        out.append(f"   where {policy}'s lost GPU-hours go: "
                   + ", ".join(f"{phase} {share / whole:.0%}" for phase, share in total.items()))
    return out


def _load() -> list[float]:
    import os

    return [round(x, 2) for x in os.getloadavg()]


def _machine() -> dict[str, Any]:
    import os
    import platform

    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "load_average_before": _load()}

