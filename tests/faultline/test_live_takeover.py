"""Takeover with the live clock: decisions the wall clock makes between records survive a worker's kill.

With ``FAULTLINE_LIVE_CLOCK`` a worker's tick judges timers by the wall clock, so a fence, a
settle or a silence is decided while no record comes at all. The capture
(:func:`tests.harness.captures.spread_capture`: two jobs over 150 s, each losing a GPU) is cut at a
seeded line after which such timers fall due, and a silence of ``GAP`` seconds is put there; it is
dated to start ``LEAD`` seconds ahead of the wall clock (no tick judges anything before the events
that precede it: the uninterrupted run is the offline one of the same lines). The first part is published, a production worker (keys set,
the live clock on) judges and commits it, and then, with no record coming:

* ``before-tick`` -- the worker is SIGKILLed before the first timer of the silence falls due; a
  successor must take the partition over **without a record to wake it** and publish what the
  clock decides, before the rest of the capture is published;
* ``after-tick`` -- the worker is SIGKILLed once its tick published those decisions; the successor
  may publish them again (same ids, one content).

Then the rest of the capture and its end marker; every decision of the uninterrupted run on its
topic at least once, nothing else, one content per id (a command's but for its expiry and
signature, set anew when it is re-signed: tests/faultline/killed_workers.py).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.kafka_reader import read_topic
from correlators.engine import Correlator
from correlators.policy import load_policy
from faultline.pipeline import end_marker, publish_capture, wait_for_end
from producers.capture.screen import Accepted, CaptureScreen
from producers.delivery import EventPublisher
from streams.decisions import Command, Incident
from streams.topics import correlator_app_id, topic_name
from tests.faultline.fault_worker import decision_key
from tests.faultline.killed_workers import (
    Workers,
    check_decisions,
    dated,
    offline,
    production_settings,
    wait_until,
)
from tests.faultline.takeover import committed_offset
from tests.harness.captures import spread_capture
from tests.harness.seeds import seed_params

pytestmark = [pytest.mark.broker, pytest.mark.reliability]

DEADLINE_S = 240.0
GAP = 40  # seconds of silence put into the capture
#: The capture's first event is this far ahead of the wall clock when it is published: longer than a worker
#: takes to start and judge the first part, so no tick judges a timer before the events that precede it.
LEAD = 25.0
MIN_DUE = 10  # the silence's first decision falls due at least this long after its start
BEFORE_REST_S = 8.0  # the rest is published this long before the wall clock reaches its first event


def _cuts(lines: list[bytes], rng: random.Random) -> tuple[int, int]:
    """A seeded line to cut after, whose silence decides something, first ``s`` >= MIN_DUE seconds in."""
    events: list[tuple[int, object]] = []
    for v in CaptureScreen().screen(lines):
        if isinstance(v, Accepted):
            events += [(v.line, e) for e in v.events]
    found = []
    for cut in range(len(lines) // 10, len(lines) * 7 // 10, len(lines) // 60):
        engine = Correlator(load_policy(None))
        last = None
        for line, e in events:
            if line > cut:
                break
            engine.process(e)  # type: ignore[arg-type]
            last = e
        for s in range(1, GAP - 5):
            if engine.advance_to(last.ts + timedelta(seconds=s)):  # type: ignore[attr-defined]
                if s >= MIN_DUE:
                    found.append((cut, s))
                break
    assert found, "no line of the capture is followed by a decision the clock makes"
    return rng.choice(found)


def _decided_by_the_clock(first_part: list[bytes], until: datetime) -> set[str]:
    """What the clock alone decides after ``first_part``, up to ``until`` (offline, the next record does)."""
    engine = Correlator(load_policy(None))
    for v in CaptureScreen().screen(first_part):
        if isinstance(v, Accepted):
            for e in v.events:
                engine.process(e)
    return {decision_key(d) for d in engine.advance_to(until)}  # type: ignore[arg-type]


def _committed(conf: dict[str, object], group: str, topic: str) -> int:
    try:
        return committed_offset(conf, group, topic)
    except KafkaException:  # the group's coordinator not there yet
        return -1


def _on_topics(conf: dict[str, object], ns: str) -> set[str]:
    keys = {decision_key(Incident.model_validate_json(v)) for v in read_topic(conf, topic_name(ns, "incidents"))}
    return keys | {decision_key(Command.model_validate_json(v)) for v in read_topic(conf, topic_name(ns, "commands"))}


@pytest.mark.timeout(900)
# "before-tick" found that a successor took a partition over only when a record of it arrived, so the
# clock's decisions in a silence waited for the next record (correlators/worker/takeover.py: adoption).
@pytest.mark.parametrize("point", ["before-tick", pytest.param("after-tick", marks=pytest.mark.slow)])
@pytest.mark.parametrize("seed", seed_params(default=(11,), soak=tuple(range(1000, 1005))))
def test_what_the_clock_decides_between_records_survives_a_worker_killed_around_it(
        kafka_bootstrap: str, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch,
        seed: int, point: str) -> None:
    rng = random.Random(f"{seed}-{point}")
    raw = spread_capture(jobs=2, duration_s=150)
    cut, due_s = _cuts(raw, rng)
    lines = dated(raw, datetime.now(UTC) + timedelta(seconds=LEAD), gap_after=cut, gap=timedelta(seconds=GAP))
    want = offline(lines)
    a_events = sum(len(v.events) for v in CaptureScreen().screen(lines[:cut]) if isinstance(v, Accepted))
    rest_starts = datetime.fromisoformat(_ts_of(lines[cut]))
    in_silence = _decided_by_the_clock(lines[:cut], rest_starts - timedelta(milliseconds=1))
    ctx = f"[seed={seed} {point} cut after line {cut}, first due {due_s}s into the silence] "
    ns = f"{unique_name}.replay-live"  # a capture ends (end_of_capture) only in a replay namespace
    settings = production_settings(kafka_bootstrap, tmp_path, unique_name)
    conf = settings.kafka_config(kafka_bootstrap)
    create_namespace_topics(conf, ns, partitions=1)
    workers = Workers(settings, kafka_bootstrap, ns, monkeypatch)
    group, events_topic = correlator_app_id(ns), topic_name(ns, "events")
    try:
        pub = EventPublisher(conf, ns)
        publish_capture(pub, lines[:cut])
        pub.flush()
        first = workers.start(name="first")
        wait_until("the first worker judged and committed the first part",
                   lambda: _committed(conf, group, events_topic) >= a_events, DEADLINE_S)
        on_topics = _on_topics(conf, ns)
        assert not in_silence & on_topics, f"{ctx}the clock decided before the first part was judged: too slow"
        if point == "after-tick":
            wait_until("the first worker's tick publishes what the silence decides",
                       lambda: in_silence <= _on_topics(conf, ns), DEADLINE_S)
        workers.kill(first)
        killed_with = in_silence & _on_topics(conf, ns)
        successor = workers.start(name="successor")
        wait_until("the successor publishes what the silence decides, no record having come",
                   lambda: in_silence <= _on_topics(conf, ns)
                   or datetime.now(UTC) > rest_starts - timedelta(seconds=BEFORE_REST_S), DEADLINE_S)
        before_rest = in_silence & _on_topics(conf, ns)
        _, _, _, last = publish_capture(pub, lines[cut:])
        pub.publish([end_marker(len(lines), last)])
        pub.flush()
        wait_for_end(conf, ns, successor, timeout=DEADLINE_S)
        counted = check_decisions(conf, ns, settings, want, ctx)
    finally:
        workers.stop_all()
        delete_namespace_topics(conf, ns)
    assert in_silence, ctx
    assert before_rest == in_silence, (f"{ctx}decided by the clock in the silence but not published before the "
                                       f"next record: {sorted(in_silence - before_rest)}")
    if point == "before-tick":
        assert not killed_with, f"{ctx}the kill landed after the tick: {killed_with}"
    copies = counted.copies_of(sorted(in_silence))
    if point == "after-tick":
        assert killed_with == in_silence, ctx
    print(f"\nlive takeover {ctx}: events={len(want.per_event) - 1} silence={GAP}s decided_in_silence="
          f"{len(in_silence)} incident_versions={len(counted.versions.ids)} commands={len(counted.commands.ids)} "
          f"lost=0 version_copies={counted.versions.extra_copies} command_copies={counted.commands.extra_copies} "
          f"resigned_differing={counted.resigned} silence_copies={copies}")


def _ts_of(raw: bytes) -> str:
    import json

    return str(json.loads(raw)["ts"]).replace("Z", "+00:00")
