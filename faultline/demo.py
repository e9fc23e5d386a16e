"""`faultline demo`: the whole pipeline on the embedded defaults with a simulated fleet.

Five nodes of eight GPUs train one job; ten minutes in, a GPU falls off the
bus. The capture is fed through the real broker at a steady pace, decisions
are printed as the correlator makes them, and everything lands in the archive.

The story is told to its end: the scheduler relaunches the job on healthy GPUs
after the correlator's restart, the trainer loads its checkpoint and steps at
its old throughput, and the incident is verified and resolved before the
capture ends (:class:`~faultline.simulate.Fleet` states the timing). The
closing lines say how each incident ended, and own up to one that did not.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer

from common.kafka_admin import create_namespace_topics
from common.settings import Settings
from faultline.commands.replay import command_line, incident_line
from faultline.outcome import collate
from faultline.pipeline import (
    CorrelatorWorker,
    archive,
    collect,
    end_marker,
    publish_capture,
    wait_for_end,
)
from faultline.preflight import preflight
from faultline.simulate import Fleet
from faultline.story import describe_command
from faultline.terminal import human_time, plural, to_json
from producers.delivery import EventPublisher
from streams.decisions import Command, Incident
from streams.topics import scratch_namespace, topic_name

__all__ = ["closing_lines", "run_demo"]


_OUT = {"stream": sys.stdout}


def _say(msg: str) -> None:
    """A line for the person watching (standard error when the decisions go to standard output)."""
    print(msg, file=_OUT["stream"], flush=True)


def _watch(conf: dict, namespace: str, stop: threading.Event) -> None:
    """Print incidents and commands as they reach their topics (the event time in brackets)."""
    c = Consumer({**conf, "group.id": f"demo-watch-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"})
    inc_t, cmd_t = topic_name(namespace, "incidents"), topic_name(namespace, "commands")
    c.subscribe([inc_t, cmd_t])
    try:
        while not stop.is_set():
            m = c.poll(0.2)
            value = m.value() if m is not None and not m.error() else None
            if m is None or value is None:
                continue
            if m.topic() == inc_t:
                i = Incident.model_validate_json(value)
                _say(f"  [{(i.updated_at or i.opened_at):%H:%M:%S}] {incident_line(json.loads(i.model_dump_json()))}")
            else:
                k = Command.model_validate_json(value)
                _say(f"  [{k.issued_at:%H:%M:%S}] {command_line(json.loads(k.model_dump_json()), with_time=False)}")
    finally:
        c.close()


def _paced(lines: list[bytes], seconds: float) -> Iterator[bytes]:
    start, n = time.monotonic(), len(lines)
    for i, line in enumerate(lines):
        ahead = start + seconds * i / n - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        yield line


def closing_lines(decided: dict[str, list[dict[str, Any]]], namespace: str = "") -> list[str]:
    """How the story ended, from the decisions (contract JSON): each incident's last state, and the
    restart that brought its job back. An incident left open is said to be one, never glossed over."""
    incidents = decided.get("incidents", [])
    ended = [i for i in incidents if i["state"] in ("resolved", "closed")]
    where = f" --namespace {namespace}" if namespace else ""
    lines = [f"{plural(len(incidents), 'incident')}, {len(ended)} resolved:"]
    for i in incidents:
        restarts = [c for c in decided.get("commands", []) if c.get("incident") == i["id"] and c["type"] == "restart_job"]
        if i["state"] in ("resolved", "closed"):
            how = (f"restarted {describe_command('restart_job', restarts[-1].get('params') or {})}, it held its "
                   "old throughput" if restarts else "it needed no restart")
            lines.append(f"  {i['id']} {i['category']} job {i.get('job') or '-'}: resolved at "
                         f"{human_time(i.get('updated_at') or i['opened_at'])} (fleet time): {how}.")
        else:
            lines.append(f"  {i['id']} {i['category']} job {i.get('job') or '-'}: still {i['state']}, not resolved "
                         f"when the capture ended: `faultline incident {i['id']}{where}` tells where it stopped.")
    return lines


def run_demo(settings: Settings, seconds: float = 20, json_out: bool = False) -> int:
    """The demo; with ``json_out`` the people's lines go to standard error and the decisions, as the
    contract's JSON, to standard output."""
    _OUT["stream"] = sys.stderr if json_out else sys.stdout
    fleet = Fleet()
    lines = [line.encode() for line in fleet.lines()]
    _say(f"faultline demo: {fleet.nodes + fleet.spare_nodes} nodes x {fleet.gpus_per_node} GPUs, job "
         f"{fleet.job!r}; a GPU falls off the bus {fleet.fault.at_s / 60 if fleet.fault else 0:.0f} minutes in.")
    _say("checking the policy and the archive, starting the broker (the first run fetches Kafka with Maven)...")
    bootstrap = preflight(settings)
    conf = settings.kafka_config(bootstrap)
    namespace = scratch_namespace(settings.namespace, "demo", uuid.uuid4().hex[:8])
    create_namespace_topics(conf, namespace, partitions=1)
    _say(f"broker {bootstrap}; topics {namespace}.*; starting the correlator worker...")
    worker = CorrelatorWorker(settings, bootstrap, namespace)
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(conf, namespace, stop), daemon=True)
    watcher.start()
    try:
        _say(f"streaming {len(lines)} observations ({fleet.duration_s / 60:.0f} min of fleet time) "
             f"over {seconds:.0f}s:")
        pub = EventPublisher(conf, namespace, settings.cell)
        n, _, _, last = publish_capture(pub, _paced(lines, seconds))
        pub.publish([end_marker(n, last)])
        pub.flush()
        wait_for_end(conf, namespace, worker, timeout=120)
        time.sleep(1.0)  # let the watcher print the last decisions
        rows = archive(settings, conf, namespace)
        decided = collate(*collect(conf, namespace))
    finally:
        stop.set()
        watcher.join(5)
        worker.stop()
    for line in closing_lines(decided, namespace):
        _say(line)
    _say(f"done: {plural(rows, 'row')} archived to {settings.archive_shown} under namespace {namespace}, apart from "
         f"the live one: `faultline status --namespace {namespace}` shows it, `faultline archive drop {namespace}` "
         "removes it.")
    if json_out:
        print(to_json(decided))
    return 0


if __name__ == "__main__":
    sys.exit(run_demo(Settings()))
