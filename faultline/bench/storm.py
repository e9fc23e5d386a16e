"""A 16,384-GPU cell's worst minutes, live: the steady load, one GPU off the bus, the storm, the restart.

One real worker (live clock, snapshots on) judges a cell of :mod:`faultline.bench.cell` published
record by record at the wall times its agents would send them: the start (inventory, the job, its
checkpoint loaded: it resumes mid-life, a checkpoint saved), the steady load of the cell (~4,400
events/s), then the real storm -- the shape of :mod:`faultline.storm_capture`: a GPU of the job
falls off the bus (XID 79, its rank's CUDA error), ``watchdog_after_s`` later every other rank's
two watchdog lines and every worker's failure within ``storm_s``, the scheduler's ``job_failed`` --
then the steady load again while the restart gate judges the whole allocation. When the
``restart_job`` command comes the scheduler relaunches the job (a spare node in for the failed one)
and steps go on. Every record published is measured (the largest, per topic), and the restart
checked: the right GPU excluded, every GPU of the job requested. XID 79s on GPUs of spare nodes
are injected during the steady load (``steady`` latency) and during the storm (``storm`` latency),
and one just after the storm's last record: its command arrives once the worker has judged the
whole backlog, so its latency is how long the backlog took to drain after the storm ended.
Latency is from handing the XID's record to the producer to its quarantine command being readable
on the commands topic.

First signal -> ``restart_job`` is reported in event time (the command's ``issued_at`` less the
XID's) and in wall time (the XID's record handed over to the command readable).

Then the state: the worker's resident memory holding the cell, the newest snapshot's size on the
snapshot topic, and a takeover -- the worker is stopped, a successor starts, restores the
snapshot and catches up on the log after it (the time its log reports), and the time from its start
to its first command (an XID published once it is up).
"""

from __future__ import annotations

import heapq
import re
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Consumer, Producer

from common.kafka_reader import read_topic
from common.settings import Settings
from correlators.snapshot_topic import read_latest_snapshot, snapshot_topic_name
from faultline.bench.cell import Cell, Record
from faultline.pipeline import CorrelatorWorker
from producers.batching import Batcher, Batching
from streams.cells import cell_key
from streams.decisions import Command
from streams.topics import correlator_app_id, topic_name

__all__ = ["StormSizes", "storm", "storm_settings"]


class StormSizes:
    def __init__(self, quick: bool) -> None:
        self.nodes = 32 if quick else 2048
        self.spares = 16 if quick else 48
        self.warm_s = 4 if quick else 20
        self.steady_xids = 3 if quick else 20
        self.storm_s = 5.0
        self.storm_xids = 3 if quick else 20
        self.watchdog_after_s = 3.0 if quick else 60.0  # XID 79 on the job's GPU -> the other ranks' watchdogs
        self.tail_s = 35 if quick else 60  # the steady load goes on: the restart gate hears the allocation
        self.restart_wait_s = 60 if quick else 420  # gate.max_wait_s (300) and the settle window, with room


def _say(msg: str) -> None:
    print(f"bench:   {msg}", file=sys.stderr, flush=True)


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def _ms(xs: list[float]) -> dict[str, Any]:
    ms = [x * 1000 for x in xs]
    return {"p50": round(statistics.median(ms), 1), "p99": round(_pct(ms, 0.99), 1), "max": round(max(ms), 1),
            "n": len(ms)} if ms else {"n": 0}


class _Commands(threading.Thread):
    """Reads the commands topic from its end; when each spare node's quarantine arrived (monotonic)."""

    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        super().__init__(daemon=True)
        self.c = Consumer({**conf, "group.id": f"bench-{uuid.uuid4().hex}", "auto.offset.reset": "latest"})
        self.c.subscribe([topic])
        self.arrived: dict[str, float] = {}
        self.restarts: list[tuple[float, Command]] = []
        self.stop = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            m = self.c.poll(0.05)
            if not self.ready.is_set() and self.c.assignment():
                self.ready.set()
            if m is None or m.error() or m.value() is None:
                continue
            cmd = Command.model_validate_json(m.value() or b"")
            if cmd.type == "quarantine_gpu" and cmd.target.node:
                self.arrived.setdefault(cmd.target.node, time.monotonic())
            elif cmd.type == "restart_job":
                self.restarts.append((time.monotonic(), cmd))
        self.c.close()


class _Sender:
    """Publishes records (each one agent's record: its node's events of one tick) at their wall times."""

    def __init__(self, conf: dict[str, Any], ns: str) -> None:
        self.p = Producer({**conf, "linger.ms": 2, "compression.type": "lz4", "enable.idempotence": True})
        self.topic = topic_name(ns, "events")
        self.key = cell_key("default")
        self.queue: list[tuple[float, int, bytes, str]] = []
        self.n = 0
        self.events = 0
        self.sent_at: dict[str, float] = {}
        self.late: list[float] = []

    def plan(self, at: float, record: Record, tag: str = "") -> None:
        b = Batcher(Batching(max_events=10_000, max_bytes=900_000))
        for packed in [p for e in record.events for p in b.add(e)] + b.flush():
            self.n += 1
            self.events += packed.events
            heapq.heappush(self.queue, (at, self.n, packed.value, tag))

    def run_until(self, until: float) -> None:
        while self.queue and self.queue[0][0] <= until:
            at, _, value, tag = heapq.heappop(self.queue)
            wait = at - time.monotonic()
            if wait > 0:
                time.sleep(min(wait, 0.01))
                heapq.heappush(self.queue, (at, 0, value, tag))
                continue
            self.late.append(-wait)
            while True:
                try:
                    self.p.produce(self.topic, value=value, key=self.key)
                    break
                except BufferError:
                    self.p.poll(0.05)
            if tag:
                self.sent_at[tag] = time.monotonic()
            self.p.poll(0)
        self.p.poll(0)


def _await(cmds: _Commands, nodes: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(n in cmds.arrived for n in nodes):
        time.sleep(0.05)


def _rss_mib(pid: int) -> float | None:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _wall(mono: float, mono0: float, wall0: datetime) -> datetime:
    return wall0 + timedelta(seconds=mono - mono0)


def storm_settings(settings: Settings) -> Settings:
    """What the storm's workers run with: the live clock, snapshots as a cell's worker takes them."""
    return settings.model_copy(update={"live_clock": True, "snapshot_every_events": 50_000,
                                       "snapshot_every_s": 10.0})


def storm(settings: Settings, bootstrap: str, conf: dict[str, Any], ns: str, sizes: StormSizes,
          pool: list[CorrelatorWorker] | None = None,
          start: Callable[[float], tuple[float, datetime]] | None = None) -> dict[str, Any]:
    """The cell's steady load, its storm and XIDs through one live worker; then its memory and a takeover.

    With ``pool`` (the namespace's workers, started with :func:`storm_settings` by the caller, who stops
    them) the load goes to them and there is no takeover; ``start``, given the lead this cell needs to make
    its records, says when its load starts (monotonic and wall time): how several cells start together.
    """
    cell = Cell(nodes=sizes.nodes, spare_nodes=sizes.spares)
    settings = storm_settings(settings)
    workers = pool or [CorrelatorWorker(settings, bootstrap, ns)]
    worker = workers[0]
    cmds = _Commands(conf, topic_name(ns, "commands"))
    cmds.start()
    send = _Sender(conf, ns)
    out: dict[str, Any] = {"nodes": cell.nodes, "gpus": cell.gpus, "ranks": cell.gpus}
    try:
        if not cmds.ready.wait(30):
            raise TimeoutError("the commands consumer got no assignment in 30 s")
        # Every record is made and encoded before the first is sent (stamped with the wall time it is due),
        # so the sender only hands bytes over: the load arrives when it should, not when this process
        # finds the CPU to make it (about 0.1 s per second of the cell's load, and a second for the storm).
        span = sizes.warm_s + 0.5 * sizes.steady_xids + 2 + sizes.watchdog_after_s + sizes.storm_s + sizes.tail_s
        lead = 3.0 + 0.25 * span * cell.nodes / 2048
        if start:
            mono0, wall0 = start(lead)
        else:
            mono0, wall0 = time.monotonic() + lead, datetime.now(UTC) + timedelta(seconds=lead)
        for r in cell.start(wall0):
            send.plan(mono0, r)
        resumed = 1_200_000
        send.plan(mono0 + 0.5, cell.resumed(_wall(mono0 + 0.5, mono0, wall0), resumed))
        saved_step = resumed + 10 * int(sizes.warm_s / 2)
        send.plan(mono0 + sizes.warm_s / 2, cell.saved(_wall(mono0 + sizes.warm_s / 2, mono0, wall0), saved_step))
        spare = iter(range(cell.spare_nodes - 1))  # the last spare is where the relaunch goes
        t_probe = mono0 + sizes.warm_s
        t_fault = t_probe + 0.5 * sizes.steady_xids + 1
        t_storm = t_fault + sizes.watchdog_after_s
        t_failed = t_storm + sizes.storm_s + 0.5
        t_after = t_storm + sizes.storm_s + 0.01
        t_end = t_after + sizes.tail_s
        bad_node, bad_gpu = cell.nodes // 3, 5
        for k, r in enumerate(cell.fault(_wall(t_fault, mono0, wall0), bad_node, bad_gpu)):
            send.plan(t_fault + 1.5 * k, r, "fault" if k == 0 else "")
        send.plan(t_failed, cell.failed(_wall(t_failed, mono0, wall0)))

        def xid_at(at: float) -> str:
            tag = cell.spare_name(next(spare))
            send.plan(at, _spare_xid(cell, tag, _wall(at, mono0, wall0)), tag)
            return tag

        steady_tags = [xid_at(t_probe + 0.5 * k) for k in range(sizes.steady_xids)]
        storm_tags = [xid_at(t_storm + sizes.storm_s * (k + 0.5) / sizes.storm_xids) for k in range(sizes.storm_xids)]
        after_tag = xid_at(t_after)
        steady_events = seconds = 0
        while mono0 + 1 + seconds <= t_end:
            at = mono0 + 1 + seconds
            for i, r in enumerate(cell.steady_tick(seconds, _wall(at, mono0, wall0), steps=at < t_fault)):
                send.plan(at + 0.9 * i / cell.nodes, r)  # the agents spread over the second
                steady_events += len(r.events)
            seconds += 1
        hung = bad_node * cell.gpus_per_node + bad_gpu
        storm_records = list(cell.storm(_wall(t_storm, mono0, wall0), seconds=sizes.storm_s, hung_rank=hung))
        storm_events = sum(len(r.events) for r in storm_records)
        for r in storm_records:
            send.plan(t_storm + (r.at - _wall(t_storm, mono0, wall0)).total_seconds(), r)
        ahead = mono0 - time.monotonic()
        _say(f"{send.n:,} records of {cell.gpus:,} GPUs made, {ahead:.1f}s before the first is due; sending")
        send.run_until(t_end)
        send.p.flush(30)
        _await(cmds, steady_tags + storm_tags + [after_tag], 60)
        lat = {tag: cmds.arrived[tag] - send.sent_at[tag] for tag in send.sent_at if tag in cmds.arrived}
        missing = [t for t in steady_tags + storm_tags + [after_tag] if t not in lat]
        out.update({
            "steady_events_per_s": round(steady_events / max(1, seconds)),
            "storm_events": storm_events, "storm_seconds": sizes.storm_s,
            "steady_detect_to_command_ms": _ms([lat[t] for t in steady_tags if t in lat]),
            "storm_detect_to_command_ms": _ms([lat[t] for t in storm_tags if t in lat]),
            "storm_backlog_drained_after_s": round(lat[after_tag], 2) if after_tag in lat else None,
            "xids_without_command": missing, "records": send.n,
            "sender_late_p99_ms": round(_pct(send.late, 0.99) * 1000, 1) if send.late else None,
        })
        _say(f"steady p99 {out['steady_detect_to_command_ms'].get('p99')} ms; storm of "
             f"{storm_events:,} events: p99 {out['storm_detect_to_command_ms'].get('p99')} ms, backlog drained "
             f"{out['storm_backlog_drained_after_s']} s after it")
        out.update(_restart(cell, send, cmds, sizes, (bad_node, bad_gpu), _wall(t_fault, mono0, wall0), saved_step))
        rss = [_rss_mib(w.proc.pid) for w in workers]
        out["worker_rss_mib"] = max((r for r in rss if r is not None), default=None)
        if pool:
            out["workers_rss_mib"] = rss
        else:
            out.update(_takeover(settings, bootstrap, conf, ns, worker, cell, send, cmds, next(spare)))
        out["largest_record_bytes"] = _largest(conf, ns)
        _say(f"largest records published: {out['largest_record_bytes']}")
    finally:
        cmds.stop.set()
        if not pool:
            worker.stop()
    return out


def _restart(cell: Cell, send: _Sender, cmds: _Commands, sizes: StormSizes, bad: tuple[int, int],
             fault_at: datetime, step: int) -> dict[str, Any]:
    """Wait for the job's ``restart_job`` (the gate judging 2,048 nodes), check it, then relaunch the job as
    the scheduler would (the failed node's place taken by a spare) and let its steps go on."""
    deadline = send.sent_at.get("fault", time.monotonic()) + sizes.restart_wait_s
    while time.monotonic() < deadline and not cmds.restarts:
        time.sleep(0.1)
    if not cmds.restarts:
        _say(f"no restart_job within {sizes.restart_wait_s}s of the XID")
        return {"restart_job": None}
    arrived, cmd = cmds.restarts[0]
    node, gpu = cell.node_name(bad[0]), bad[1]
    excluded = cmd.params.get("exclude") or {}
    now = datetime.now(UTC)
    send.plan(time.monotonic(), cell.relaunch(now, cell.nodes // 3))
    send.plan(time.monotonic() + 1, cell.resumed(now + timedelta(seconds=1), step))
    for k in range(3):
        send.plan(time.monotonic() + 2 + k, cell.step(now + timedelta(seconds=2 + k), step + 10 * (k + 1)))
    send.run_until(time.monotonic() + 5)
    send.p.flush(10)
    out = {
        "first_signal_to_restart_event_s": round((cmd.issued_at - fault_at).total_seconds(), 2),
        "first_signal_to_restart_wall_s": round(arrived - send.sent_at["fault"], 2) if "fault" in send.sent_at else None,
        "restart_job": {"gpus": cmd.params.get("gpus"), "checkpoint_step": (cmd.params.get("checkpoint") or {}).get("step"),
                        "excluded_nodes": len(excluded.get("nodes", [])), "excluded_gpus": len(excluded.get("gpus", [])),
                        "excludes_failed_gpu": node in excluded.get("nodes", []) or cell.uuid(node, gpu) in
                        excluded.get("gpus", []), "restarts": len(cmds.restarts)},
    }
    _say(f"restart_job {out['first_signal_to_restart_event_s']} s after the XID in event time, "
         f"{out['first_signal_to_restart_wall_s']} s in wall time: {out['restart_job']}")
    return out


def _largest(conf: dict[str, Any], ns: str) -> dict[str, int]:
    """The largest record on each topic the correlator publishes to (bytes)."""
    return {t: max((len(v) for v in read_topic(conf, topic_name(ns, t))), default=0)
            for t in ("incidents", "commands", "deadletters", "control")}


def _spare_xid(cell: Cell, node: str, t: datetime) -> Record:
    return cell.xid(int(node.rsplit("-", 1)[1]), t)


_RESTORED = re.compile(r"restored snapshot of partition \d+ at offset (\d+) \((\d+) cells\); rebuilt (\d+) later "
                       r"events in ([\d.]+)s")
_REBUILT = re.compile(r"rebuilt state from (\d+) earlier events of partition \d+ \((\d+) cells\) in ([\d.]+)s")


def _takeover(settings: Settings, bootstrap: str, conf: dict[str, Any], ns: str, worker: CorrelatorWorker,
              cell: Cell, send: _Sender, cmds: _Commands, spare: int) -> dict[str, Any]:
    """Stop the worker; a successor takes the partition over when the next record (an XID) comes."""
    app = correlator_app_id(ns)
    blob = read_latest_snapshot(conf, snapshot_topic_name(app), 0, app)
    worker.stop()
    successor = CorrelatorWorker(settings, bootstrap, ns, name="successor")
    t0 = time.monotonic()
    node = cell.spare_name(spare)
    try:
        send.plan(t0, cell.xid(spare, datetime.now(UTC)), node)
        send.run_until(t0)
        send.p.flush(10)
        _await(cmds, [node], 120)
        text = successor.log_text()
        rss = _rss_mib(successor.proc.pid)
    finally:
        successor.stop()
    restored, rebuilt = _RESTORED.search(text), _REBUILT.search(text)
    return {
        "snapshot_bytes": len(blob) if blob else None,
        "takeover_from_snapshot": restored is not None,
        "takeover_restore_and_catch_up_s": float(restored.group(4)) if restored else
        (float(rebuilt.group(3)) if rebuilt else None),
        "takeover_events_caught_up": int(restored.group(3)) if restored else (int(rebuilt.group(1)) if rebuilt else None),
        "takeover_start_to_first_command_s": round(cmds.arrived[node] - t0, 2) if node in cmds.arrived else None,
        "successor_rss_mib": rss,
    }
