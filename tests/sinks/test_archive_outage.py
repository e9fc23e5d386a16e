"""The archive goes away mid-stream and comes back: the sink backs off, holds its offsets, catches up.

A real failure, not a mock: the embedded archive's data directory disappears the way a
detached or unmounted volume does -- it is moved aside and a plain file left at its path --
so every ClickHouse read and write in the sink's process fails (``CANNOT_STATVFS``) until the
directory is moved back. (Other routes were tried: ``chmod 000`` does nothing to a root
process; a directory that is only moved is silently re-created by chDB on the next insert,
whose rows then land in an empty directory the restore would throw away; a full disk fails
inserts with ``NOT_ENOUGH_SPACE`` just as well, but needs a mount, which CI may not allow.)

An outage that outlasts the consumer's ``max.poll.interval.ms`` (five minutes by default;
shortened in the test) costs the sink its group membership: the batch it held is written
when the archive is back, its commit is refused, and the records since the last commit are
delivered again. Those second copies are rows the ``ReplacingMergeTree`` tables replace:
counted through ``FINAL``, every record is there once (the test prints the raw copies).

The archive server route (``http(s)://``) runs the same sink and store code; only the
client's transport differs, so a stopped server fails the same ``insert`` call the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import REGISTRY
from pydantic import BaseModel

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from sinks.archive import Archive
from sinks.archive_sink import ArchiveSink
from streams.decisions import Command, Culprit, Incident, Target
from streams.events import AgentHeartbeat, Event
from streams.topics import topic_name

pytestmark = pytest.mark.broker

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)
PARTITIONS = 2
OUTAGE_S = 5.0  # how long the archive stays away once the sink has noticed
DEADLINE_S = 120.0  # generous: the machine is shared; no test asserts on time
REPO = Path(__file__).resolve().parents[2]

# Archive table -> topic suffix, for the records this test publishes.
TABLE_OF = {"events": "events", "incidents": "incident_versions", "commands": "commands"}


# --- records -----------------------------------------------------------------------------


def _records(start: int, count: int) -> dict[str, list[BaseModel]]:
    """``count`` events, and an incident version per 10 and a command per 20 of them, from ``start`` on."""
    out: dict[str, list[BaseModel]] = {"events": [], "incidents": [], "commands": []}
    for i in range(start, start + count):
        at = T0 + timedelta(milliseconds=i)
        out["events"].append(Event(id=f"e-{i:06d}", ts=at, source="node_agent", node=f"n{i % 16}",
                                   body=AgentHeartbeat()))
        if i % 10 == 0:
            out["incidents"].append(Incident(
                id=f"inc-{i // 100}", version=i // 10 % 10 + 1, job=f"j{i // 100}", category="gpu_off_bus",
                culprit=Culprit(node=f"n{i % 16}", gpus=["GPU-1"]), opened_at=at, updated_at=at,
                severity="page", state="open"))
        if i % 20 == 0:
            out["commands"].append(Command(id=f"cmd-{i:06d}", incident=f"inc-{i // 100}", type="quarantine_gpu",
                                           target=Target(node=f"n{i % 16}", gpu="GPU-1"), issued_at=at))
    return out


def _ids(records: dict[str, list[BaseModel]]) -> dict[str, set[str]]:
    """The natural id of every record, by archive table (an incident version is id@version)."""
    def key(r: BaseModel) -> str:
        return f"{r.id}@{r.version}" if isinstance(r, Incident) else str(getattr(r, "id"))  # noqa: B009

    return {TABLE_OF[suffix]: {key(r) for r in rs} for suffix, rs in records.items()}


class Publisher:
    """Sends records to the namespace's topics in a steady trickle, from a thread of its own."""

    def __init__(self, bootstrap: str, namespace: str) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self.namespace = namespace
        self.sent: dict[str, set[str]] = {table: set() for table in TABLE_OF.values()}

    def send(self, records: dict[str, list[BaseModel]]) -> None:
        for suffix, rs in records.items():
            for r in rs:
                key = str(getattr(r, "id")).encode()  # noqa: B009
                self._producer.produce(topic_name(self.namespace, suffix), value=r.model_dump_json().encode(),
                                       key=key)
        assert self._producer.flush(60) == 0, "the broker did not take the records"
        for table, ids in _ids(records).items():
            self.sent[table] |= ids

    def trickle(self, start: int, count: int, chunk: int, pause_s: float) -> threading.Thread:
        def run() -> None:
            for first in range(start, start + count, chunk):
                self.send(_records(first, min(chunk, start + count - first)))
                time.sleep(pause_s)

        thread = threading.Thread(target=run, name="publisher", daemon=True)
        thread.start()
        return thread


# --- the fault ---------------------------------------------------------------------------


@contextmanager
def volume_gone(data_dir: Path) -> Iterator[None]:
    """The archive's data directory is gone (moved aside, a file in its place) until the block exits."""
    aside = data_dir.with_name(data_dir.name + ".away")
    os.rename(data_dir, aside)
    data_dir.write_bytes(b"")  # so that chDB cannot re-create the directory and write into that
    try:
        yield
    finally:
        data_dir.unlink()
        os.rename(aside, data_dir)


# --- observation -------------------------------------------------------------------------


def _retries() -> float:
    return REGISTRY.get_sample_value("faultline_archive_write_retries_total") or 0.0


def _sink_lag(namespace: str) -> float:
    """The lag gauge the sink exports, summed over the namespace's partitions."""
    total = 0.0
    for suffix in TABLE_OF:
        for p in range(PARTITIONS):
            total += REGISTRY.get_sample_value(
                "faultline_consumer_lag_records",
                {"stage": "sink", "topic": topic_name(namespace, suffix), "partition": str(p)}) or 0.0
    return total


def _committed(bootstrap: str, group: str, namespace: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets on the namespace's topics (partitions without one left out)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = [TopicPartition(topic_name(namespace, s), p) for s in TABLE_OF for p in range(PARTITIONS)]
    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, parts)]).values()
    return {(tp.topic, tp.partition): tp.offset for tp in future.result(timeout=30).topic_partitions
            if tp.offset >= 0}


def _ends(bootstrap: str, namespace: str) -> dict[tuple[str, int], int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{namespace}.probe"})
    try:
        return {(topic_name(namespace, s), p): c.get_watermark_offsets(
            TopicPartition(topic_name(namespace, s), p), timeout=30)[1] for s in TABLE_OF for p in range(PARTITIONS)}
    finally:
        c.close()


def _archived(archive: Archive) -> dict[str, tuple[int, int, set[str]]]:
    """Per table: rows as read (FINAL), rows stored before replacement, and the distinct ids."""
    out = {}
    for table in TABLE_OF.values():
        key = "concat(id, '@', toString(version))" if table == "incident_versions" else "id"
        final = archive.query(f"SELECT {key} AS k FROM {table} FINAL")
        [raw] = archive.query(f"SELECT count() AS n FROM {table}")
        out[table] = (len(final), int(raw["n"]), {str(r["k"]) for r in final})
    return out


def _wait(what: str, done: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.2)


def _assert_exactly_once(archive: Archive, sent: dict[str, set[str]]) -> dict[str, int]:
    """Every published record is archived once: as many rows as ids, and the same ids. Returns raw dups."""
    raw_duplicates = {}
    for table, (rows, stored, ids) in _archived(archive).items():
        assert ids == sent[table], f"{table}: {len(sent[table] - ids)} lost, {len(ids - sent[table])} unknown"
        assert rows == len(sent[table]), f"{table}: {rows} rows for {len(sent[table])} records"
        raw_duplicates[table] = stored - rows
    assert archive.query("SELECT count() AS n FROM system.detached_parts")[0]["n"] == 0, "no part set aside"
    return raw_duplicates


@pytest.fixture
def namespace(kafka_bootstrap: str, unique_name: str) -> Iterator[str]:
    conf = {"bootstrap.servers": kafka_bootstrap}
    create_namespace_topics(conf, unique_name, partitions=PARTITIONS)
    yield unique_name
    delete_namespace_topics(conf, unique_name)


# --- the tests ---------------------------------------------------------------------------


# The second outage outlasts the consumer's max.poll.interval.ms (shortened here from five minutes):
# the broker takes the partitions away from the waiting sink, which must still lose and double nothing.
@pytest.mark.parametrize(("outage_s", "consumer_config"), [
    (OUTAGE_S, {}),
    (10.0, {"session.timeout.ms": 6000, "max.poll.interval.ms": 7000}),
], ids=["short", "past-max-poll-interval"])
def test_archive_outage_mid_stream_backs_off_holds_offsets_and_catches_up(
        kafka_bootstrap: str, namespace: str, tmp_path: Path, outage_s: float,
        consumer_config: dict[str, int]) -> None:
    data_dir = tmp_path / "archive"
    group = f"{namespace}.archive"
    with Archive.open(f"chdb://{data_dir}") as archive:
        sink = ArchiveSink(archive, kafka_bootstrap, namespace, group_id=group, consumer_config=consumer_config)
        stop = threading.Event()
        failures: list[BaseException] = []

        def run_sink() -> None:
            try:
                sink.run(stop, max_wait_s=0.2)
            except BaseException as exc:  # the test reports it; the sink must not die
                failures.append(exc)

        runner = threading.Thread(target=run_sink, name="archive-sink", daemon=True)
        runner.start()
        pub = Publisher(kafka_bootstrap, namespace)
        trickle = pub.trickle(0, 6000, chunk=100, pause_s=0.1 + outage_s / 100)
        try:
            _wait("the sink archives the first records", lambda: archive.count("events") > 0)
            retries_before = _retries()
            with volume_gone(data_dir):
                went = time.monotonic()
                _wait("a failed write", lambda: _retries() > retries_before)
                held = _committed(kafka_bootstrap, group, namespace)
                sent_at_hold = sum(len(ids) for ids in pub.sent.values())
                lag_at_hold = _sink_lag(namespace)
                while time.monotonic() - went < outage_s:
                    assert _committed(kafka_bootstrap, group, namespace) == held, "committed during the outage"
                    assert runner.is_alive(), f"the sink died: {failures}"
                    time.sleep(0.5)
                # The lag alert sees the archive falling behind: the gauge grows while the sink backs off.
                _wait("the lag gauge grows during the outage", lambda: _sink_lag(namespace) > lag_at_hold)
                lag_in_outage = _sink_lag(namespace)
                assert _committed(kafka_bootstrap, group, namespace) == held, "committed during the outage"
                sent_in_outage = sum(len(ids) for ids in pub.sent.values()) - sent_at_hold
                retries_in_outage = _retries() - retries_before
                away_s = time.monotonic() - went
            back = time.monotonic()
            trickle.join(DEADLINE_S)
            assert not trickle.is_alive()
            ends = _ends(kafka_bootstrap, namespace)
            _wait("the sink commits every record",
                  lambda: _committed(kafka_bootstrap, group, namespace) == ends)
            caught_up_s = time.monotonic() - back
        finally:
            stop.set()
            runner.join(60)
            sink.close()
        assert not runner.is_alive() and not failures, failures
        assert retries_in_outage >= 2, "the sink retried with back-off rather than giving up"
        assert sent_in_outage > 0, "records arrived while the archive was away"
        raw_duplicates = _assert_exactly_once(archive, pub.sent)
        records = sum(len(v) for v in pub.sent.values())
        print(f"\narchive outage ({consumer_config or 'default consumer'}): records={records} "
              f"(events={len(pub.sent['events'])}) outage_s={away_s:.1f} sent_in_outage={sent_in_outage} "
              f"retries={retries_in_outage:.0f} lag_in_outage={lag_in_outage:.0f} lost=0 duplicated_final=0 "
              f"raw_duplicate_rows={raw_duplicates} catch_up_s={caught_up_s:.1f}")


def test_sink_killed_during_the_outage_resumes_from_its_committed_offsets(
        kafka_bootstrap: str, namespace: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "archive"
    group = f"{namespace}.archive"  # what `faultline sink run` uses
    pub = Publisher(kafka_bootstrap, namespace)
    log_path = tmp_path / "sink.log"
    env = {**os.environ, "FAULTLINE_KAFKA": kafka_bootstrap, "FAULTLINE_NAMESPACE": namespace,
           "FAULTLINE_DATA_DIR": str(tmp_path), "FAULTLINE_ARCHIVE": f"chdb://{data_dir}", "PYTHONUNBUFFERED": "1"}
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "faultline.cli", "sink", "run"], cwd=REPO, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        pub.send(_records(0, 2000))
        before = _ends(kafka_bootstrap, namespace)
        _wait("the sink archives and commits the first records",
              lambda: _committed(kafka_bootstrap, group, namespace) == before or proc.poll() is not None)
        assert proc.poll() is None, log_path.read_text()[-3000:]
        with volume_gone(data_dir):
            pub.send(_records(2000, 1000))
            _wait("a failed write", lambda: "archive write failed" in log_path.read_text())
            time.sleep(1.0)  # a few more back-offs
            assert _committed(kafka_bootstrap, group, namespace) == before, "committed during the outage"
            os.killpg(proc.pid, signal.SIGKILL)  # no flush, no goodbye: the batch it held is gone with it
            proc.wait(30)
        assert _committed(kafka_bootstrap, group, namespace) == before
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)

    after = _ends(kafka_bootstrap, namespace)
    with Archive.open(f"chdb://{data_dir}") as archive:
        with ArchiveSink(archive, kafka_bootstrap, namespace, group_id=group) as sink:
            resumed = sink.drain(timeout_s=DEADLINE_S)
        # It read from the committed offsets on: exactly the records published during the outage.
        assert resumed == sum(after.values()) - sum(before.values())
        assert _committed(kafka_bootstrap, group, namespace) == after
        raw_duplicates = _assert_exactly_once(archive, pub.sent)
    print(f"\nsink killed in outage: records={sum(len(v) for v in pub.sent.values())} resumed={resumed} "
          f"lost=0 duplicated_final=0 raw_duplicate_rows={raw_duplicates}")
