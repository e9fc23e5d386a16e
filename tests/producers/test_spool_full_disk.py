"""The spool on a full disk (issue 26): the newest kept, every drop counted, recovery with no step by anyone.

The disk is a real 1 MiB tmpfs mounted for the test (we need to be root; where the sandbox
refuses the mount, a 1 MiB quota is emulated under the spool's own writes: ``os.write``,
``posix_fallocate`` and file creation inside the spool directory fail with ``ENOSPC`` past it).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from common.kafka_admin import create_namespace_topics
from common.kafka_reader import read_topic
from deploy.local.kafka import LocalKafka
from producers.spool import Spool, SpoolingPublisher
from producers.spool.cursor import CursorFile
from producers.spool.losses import SPOOL_STAGE
from streams.topics import topic_name
from tests.producers.test_spool import _closed_port, _event

DISK_BYTES = 1 << 20


class _EmulatedQuota:
    """``ENOSPC`` for writes into ``directory`` past ``limit`` bytes of its files (where no tmpfs can be mounted)."""

    def __init__(self, directory: Path, limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
        self.directory, self.limit = str(directory.resolve()), limit
        real_write, real_fallocate, real_open = os.write, os.posix_fallocate, os.open

        def used() -> int:
            return sum(e.stat().st_size for e in os.scandir(self.directory) if e.is_file())

        def inside(fd: int) -> bool:
            return os.readlink(f"/proc/self/fd/{fd}").startswith(self.directory + "/")

        def write(fd: int, data: Any) -> int:
            if inside(fd) and used() + len(data) > self.limit:
                raise OSError(errno.ENOSPC, "No space left on device (emulated)")
            return real_write(fd, data)

        def fallocate(fd: int, offset: int, length: int) -> None:
            if inside(fd) and used() + max(0, offset + length - os.fstat(fd).st_size) > self.limit:
                raise OSError(errno.ENOSPC, "No space left on device (emulated)")
            real_fallocate(fd, offset, length)

        def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if (flags & os.O_CREAT and str(Path(path).resolve()).startswith(self.directory + "/")
                    and not Path(path).exists() and used() >= self.limit):
                raise OSError(errno.ENOSPC, "No space left on device (emulated)")
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "posix_fallocate", fallocate)
        monkeypatch.setattr(os, "open", open_)


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 1 MiB filesystem: a tmpfs, or a quota emulated on the spool's writes where mounting is refused."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(disk)],
                             capture_output=True, check=False).returncode == 0
    if not mounted:
        (disk / "spool").mkdir()
        _EmulatedQuota(disk / "spool", DISK_BYTES, monkeypatch)
    try:
        yield disk
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(path: Path) -> None:
    """Take every byte left on the disk of ``path`` (another writer filling it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * 512)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def _lost(reason: str) -> float:
    return REGISTRY.get_sample_value("faultline_producer_spool_lost_total",
                                     {"source": "node_agent", "kind": "agent_heartbeat", "reason": reason}) or 0.0


def _until(done: Callable[[], bool], pump: Callable[[], None], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        pump()
        time.sleep(0.05)
    return done()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalKafka]:
    """A broker of the test's own, not started yet: away until the test starts it."""
    kafka = LocalKafka(tmp_path / "kafka")
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.mark.broker
def test_a_full_disk_keeps_the_newest_counts_every_drop_and_recovers_by_itself(
    small_disk: Path, own_broker: LocalKafka
) -> None:
    conf = {"bootstrap.servers": own_broker.bootstrap}  # away: not started yet
    before = {r: _lost(r) for r in ("disk_full", "refused")}
    pub = SpoolingPublisher(conf, "fulldisk", small_disk / "spool", max_inflight=10, retry_backoff_s=(0.2, 1.0))
    n = 6000
    events = [_event(i) for i in range(n)]
    for event in events:
        pub.publish([event])  # never raises, though the disk fills a little past the half
    assert pub.sent == 0 and pub.dropped > 0, "the disk filled and the oldest records went"
    assert pub.spool.disk_full_count > 0
    assert pub.dropped + pub.backlog() == n, "every event is either still spooled or counted as dropped"
    assert sum(_lost(r) - before[r] for r in before) == pub.dropped, "every drop counted by source, kind, reason"
    on_disk = pub.spool.unread  # the newest; the few records handed on before the disk filled wait in the producer

    own_broker.start()
    create_namespace_topics(conf, "fulldisk", partitions=1)
    assert _until(lambda: pub.backlog() == 0 and pub.sent > on_disk, pub.pump, 90), f"{pub.backlog()} left"
    ids = [json.loads(v)["id"] for v in read_topic(conf, topic_name("fulldisk", "events"))]
    assert len(ids) == len(set(ids)), "exactly once"
    assert ids[len(ids) - on_disk:] == [e.id for e in events[n - on_disk:]], "every record kept on disk, in order"
    early = ids[:len(ids) - on_disk]
    assert len(early) <= 10 and early == [e.id for e in events[:len(early)]], \
        "besides them only some of the records in the producer's hands when the broker went"
    assert len(ids) + pub.dropped == n, "each event delivered once or counted as dropped"

    more = [_event(n + i) for i in range(200)]
    for event in more:
        pub.publish([event])
    assert _until(lambda: pub.backlog() == 0, pub.pump, 60), "new publishes succeed once there is room"
    pub.close()  # does not raise

    ids = [json.loads(v)["id"] for v in read_topic(conf, topic_name("fulldisk", "events"))]
    assert len(ids) == len(set(ids)) and ids[-200:] == [e.id for e in more]
    letters = [json.loads(v) for v in read_topic(conf, topic_name("fulldisk", "deadletters"))]
    reports = [d for d in letters if d["stage"] == SPOOL_STAGE]
    assert reports and "node_agent/agent_heartbeat" in reports[0]["reason"], "the losses said once it delivers again"
    assert sum(x["events"] for d in reports for x in json.loads(d["raw"])["lost"]) == pub.dropped
    assert pub.sent == len(ids) + len(reports)


def test_a_restart_on_a_full_disk_cuts_a_torn_record_and_goes_on(small_disk: Path) -> None:
    away = {"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}
    pub = SpoolingPublisher(away, "torn", small_disk / "spool", max_inflight=1, message_timeout_s=30)
    for i in range(6000):
        pub.publish([_event(i)])
    assert pub.spool.disk_full_count > 0 and pub.dropped > 0
    _fill(small_disk / "spool" / "ballast")  # not a byte left: what the last eviction freed goes too
    pub.close(timeout_s=0.1)  # the cursor is saved in place: no room needed
    kept = pub.backlog()
    assert pub.dropped + kept == 6000
    saved = CursorFile(small_disk / "spool").load() or {}
    assert (saved.get("segment"), saved.get("offset")) == pub.spool.cursor, "the cursor saved on the full disk"
    tail = max((small_disk / "spool").glob("*.jsonl"))
    with tail.open("r+b") as fh:  # the last record torn, as by a crash inside its write
        fh.truncate(tail.stat().st_size - 7)

    again = SpoolingPublisher(away, "torn", small_disk / "spool", max_inflight=1, message_timeout_s=30)
    assert again.spool.torn > 0 and again.backlog() == kept - 1, "the torn record is cut, the rest still there"
    for i in range(6000, 6500):
        again.publish([_event(i)])  # the disk is full: the oldest go, the new are stored
    assert again.spool.disk_full_count > 0
    assert again.dropped + again.backlog() == kept - 1 + 500
    again.close(timeout_s=0.1)


def test_the_cursor_is_saved_in_place_on_a_full_disk(small_disk: Path) -> None:
    spool = Spool(small_disk / "spool")
    spool.append([b"record %d\n" % i for i in range(100)])
    _fill(small_disk / "spool" / "ballast")
    done = spool.read(10)
    spool.commit(done[-1].segment, done[-1].end)
    spool.save(force=True)  # a rename would need a free block
    saved = CursorFile(small_disk / "spool").load() or {}
    assert (saved.get("segment"), saved.get("offset")) == (done[-1].segment, done[-1].end)
    spool.close()
    again = Spool(small_disk / "spool")
    assert [e.line for e in again.read(1)] == [b"record 10\n"] and again.unread == 89
    again.close()
