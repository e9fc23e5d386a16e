"""The Faust worker: a thin adapter that feeds the events topic to the pure correlator.

Run it with ``faultline worker`` (or ``python -m correlators.app worker``).
Configuration comes from ``FAULTLINE_*`` (see :mod:`common.settings`); the
app is built when the worker starts (:func:`main`), not at import.

This module is the wiring only: the Faust app, its topics, the ``emitted``
table, the agent and the timers. What they do is in :mod:`correlators.worker`
(each collaborator states the order of its steps there):

* the record judge -- one events record at a time (:mod:`~correlators.worker.judge`);
* the takeover -- a partition's state from its newest snapshot and the log
  (:mod:`~correlators.worker.takeover`);
* the publisher -- sign, count, send, await the broker, then ``emitted``
  (:mod:`~correlators.worker.publisher`);
* the consumer -- Faust's, with a fetch wait short enough to keep up
  (:mod:`correlators.faust_consumer`);
* the snapshot taker (:mod:`~correlators.worker.snapshot_taker`), the live
  clock and gauges (:mod:`~correlators.worker.live`), the delivery watch
  (:mod:`~correlators.worker.delivery_watch`) and the recovery watch, which exits a worker
  whose table recovery stalled (:mod:`~correlators.worker.recovery_watch`).

Scale-out. Events are keyed by cell (:mod:`streams.cells`), so a cell's events
are in one partition; the workers of one namespace form one consumer group and
share the partitions. A worker holds one engine per cell of each partition it
is assigned (:mod:`correlators.partitions`), picked by the record's key.

State and takeovers. The correlator is deterministic: the same events give the
same state and the same decisions (with the same ids). So a worker that gets a
partition it holds no state for (a start, a crash elsewhere, a rebalance), or
that sees the partition continue past where its own state ends (another worker
judged the records in between), first rebuilds that partition's state by
reading it from the log start up to where it takes over, silently; then it goes
on. A partition that is revoked is dropped, so one assigned back later is
rebuilt, never judged on stale state.

Snapshots bound that rebuild. Every ``FAULTLINE_SNAPSHOT_EVERY_EVENTS`` judged
records (or ``FAULTLINE_SNAPSHOT_EVERY_S`` seconds) of a partition, at a record
boundary where every decision so far is published, the worker serialises the
partition's engine states on the event loop, then seals and writes them off it
to the compacted ``<app id>-snapshots`` topic (:mod:`correlators.snapshots`,
:mod:`correlators.snapshot_topic`). A worker that takes a partition over
installs its newest valid snapshot and rebuilds only the records after it; a
snapshot refused (key, version, policy, or older than the retained log) is
logged, and the partition rebuilt from the log start as before.

Publishing exactly what was not published. A changelog-backed table,
``emitted``, records per partition the offset whose decisions were last
published; it is written only after the broker acknowledged those decisions.
Records at or below it are judged again on a takeover without publishing
their decisions twice; records above it publish theirs, so none is skipped.
What can still slip through (a crash after the acknowledgement but before the
table's own write) repeats a decision with the same id, which every consumer
treats as a duplicate.

Committing only what was judged. Faust's consumer is corrected in two places it
would otherwise commit wrongly: offsets it already counts are not acknowledged
again (:mod:`correlators.consumer_acks`), and no commit of the events topic
passes a record this worker has not judged, though Faust acknowledges records it
skips around a rebalance (:mod:`correlators.commit_limit`).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, cast

import faust
from faust.tables.manager import TableManager
from faust.types import TP

from common.heap import tune_for_streaming
from common.kafka_admin import ensure_topic, grow_topic, topic_partitions, topic_replication
from common.private import private_dir, private_umask
from common.settings import Settings
from common.terminal_safe import install_safe_log_records
from correlators.broker_auth import faust_credentials
from correlators.commit_limit import CommitLimit
from correlators.consumer_acks import ConsumerAcks
from correlators.faust_consumer import use_fetch_wait
from correlators.worker.assembly import Worker
from correlators.worker.recovery_watch import RecoveryWatch
from streams.topics import correlator_app_id, topic_name

__all__ = ["main", "make_app"]

log = logging.getLogger("faultline.correlator")


def _partitions_of(conf: dict[str, Any], events_topic: str, changelog: str) -> int:
    """The events topic's partition count; the ``emitted`` changelog made to match it (Faust requires it)."""
    n = topic_partitions(conf, events_topic)
    if n is None:
        raise RuntimeError(f"topic {events_topic} does not exist: create the namespace's topics first "
                           "(`faultline topics apply`, or let the deployment's topics job run)")
    # Created here, before Faust looks for it: Faust's own declaration races its first write.
    ensure_topic(conf, changelog, n, {"cleanup.policy": "compact"})
    grow_topic(conf, changelog, n)  # events partitions were added since it was created
    have = topic_partitions(conf, changelog)
    if have != n:
        raise RuntimeError(f"{changelog} has {have} partitions but {events_topic} has {n}; they must match. "
                           "Stop every worker of the namespace, delete the changelog topic and start them "
                           "again: it is rebuilt (decisions made after the group's last committed offset may "
                           "be published again, with the same ids, which consumers drop).")
    return n


def make_app(settings: Settings) -> faust.App:
    """The worker's Faust app for ``settings``: topics, the ``emitted`` table, the agent, the timers."""
    settings.require_keys("worker")  # production: refuse to start without the signing and snapshot keys
    ns = settings.namespace
    bootstrap = settings.kafka or f"127.0.0.1:{settings.local_kafka_port}"
    app = faust.App(
        correlator_app_id(ns),
        broker=f"kafka://{bootstrap}",
        broker_credentials=faust_credentials(settings),  # FAULTLINE_KAFKA_SECURITY_PROTOCOL and SASL_*
        store="memory://",
        web_enabled=False,
        topic_allow_declare=True,  # the changelog of `emitted`; our own topics exist already
        topic_partitions=1,
        # Faust's own topics (the leader assignor's) replicated like every other (common/replication.py).
        topic_replication_factor=topic_replication(settings.kafka_config(bootstrap)),
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        # A dead worker's partitions move to a live one after this long (not Faust's default minute).
        broker_session_timeout=10.0,
        broker_heartbeat_interval=2.0,
        # A rebalance done on stale metadata (a broker that just restarted lists no topics yet) assigns
        # nothing; the next refresh notices and rejoins: after seconds, not aiokafka's default five minutes.
        consumer_metadata_max_age_ms=10_000,
        datadir=str(settings.data_dir / "faust"),
    )
    use_fetch_wait(app, settings.worker_fetch_wait_ms)  # Faust's own 1.5 s starves a busy partition
    events_topic = topic_name(ns, "events")
    conf = settings.kafka_config(bootstrap)
    partitions = _partitions_of(conf, events_topic, f"{app.conf.id}-emitted-changelog")
    events = app.topic(events_topic, value_serializer="raw", key_serializer="raw")
    out = {s: app.topic(topic_name(ns, s), value_serializer="raw", key_serializer="raw")
           for s in ("incidents", "commands", "deadletters", "control")}
    emitted = app.Table("emitted", default=lambda: -1, partitions=partitions, key_type=str, value_type=int)

    async def send(suffix: str, key: bytes, value: bytes) -> Any:
        return await out[suffix].send(key=key, value=value)

    async def seek(part: int, offset: int) -> None:
        await app.consumer.seek_wait({TP(events_topic, part): offset})

    worker = Worker(settings, conf, app_id=app.conf.id, events_topic=events_topic, partitions=partitions,
                    send=send, emitted=emitted,
                    ack=ConsumerAcks(lambda: app.consumer, events_topic), seek=seek, ready=lambda: not app.rebalancing,
                    position=lambda part: app.consumer.position(TP(events_topic, part)))

    # Before anything is fetched (the first assignment): no commit passes a record not judged here.
    limit = CommitLimit(events_topic, worker.held.judged_upto)

    async def follow_assignment(_app: faust.App, assigned: set[TP], **_: Any) -> None:
        limit.install(app.consumer)
        worker.on_assigned({tp.partition for tp in assigned if tp.topic == events_topic})

    app.on_partitions_assigned.connect(follow_assignment)  # type: ignore[arg-type]  # mode types receivers as *args

    @app.task
    async def started() -> None:
        tune_for_streaming()  # start-up is done: its heap is never garbage (common/heap.py)

    @app.task
    async def serve_metrics() -> None:
        if settings.metrics_port:
            from prometheus_client import start_http_server

            start_http_server(settings.metrics_port, addr=settings.metrics_bind)

    @app.timer(interval=5.0)
    async def gauges() -> None:  # and the lag the worker's heartbeat carries (faultline worker)
        worker.set_gauges(lambda part: app.consumer.highwater(TP(events_topic, part)))

    @app.timer(interval=1.0)
    async def watch_delivery() -> None:
        await worker.watch.check()

    def recovery_left() -> int | None:
        recovery = cast(TableManager, app.tables).recovery  # TableManagerT does not declare it
        return recovery.active_remaining_total() if recovery.in_recovery else None

    recovery_watch = RecoveryWatch(recovery_left, give_up=_exit_to_restart)

    @app.timer(interval=5.0)
    async def watch_recovery() -> None:
        recovery_watch.check()

    if worker.live is not None:
        live = worker.live

        @app.timer(interval=0.05)
        async def tick() -> None:
            await live.tick()

    @app.agent(events)
    async def correlate(stream: faust.StreamT) -> None:
        # One record (an event, or a batch of them: streams/batch.py) handed over as bytes; nothing per event here.
        try:
            async for ev in stream.events():
                await worker.judge.on_record(ev.message.partition, ev.message.offset, ev.message.key, ev.value)
        except Exception:
            # Crash-only: Faust would log the agent's crash and keep a process that judges nothing
            # (and looks alive). Exit instead; the supervisor restarts the worker, which rebuilds
            # its state and publishes only what was not published (decisions keep their ids).
            log.critical("the correlator agent failed; exiting so the supervisor restarts the worker", exc_info=True)
            logging.shutdown()
            os._exit(70)

    return app


def _exit_to_restart(why: str) -> None:
    """Crash-only for a worker that cannot go on (:mod:`correlators.worker.recovery_watch`)."""
    log.critical("%s; exiting (status 75) so the supervisor starts a fresh worker, which recovers anew "
                 "while the other workers take these partitions over", why)
    logging.shutdown()
    os._exit(75)


def main() -> None:
    """``python -m correlators.app worker ...``: build the app for ``FAULTLINE_*`` and run Faust's command line."""
    install_safe_log_records()  # a log line quoting an event's text never acts on a terminal showing the log
    private_umask()  # its local state (Faust's tables, logs) is this user's alone (common/private.py)
    try:
        settings = Settings()
        private_dir(settings.data_dir)
        app = make_app(settings)
    except Exception as exc:  # a person reads this: say what is wrong and what to do
        print(f"faultline worker: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    app.main()


if __name__ == "__main__":
    main()
