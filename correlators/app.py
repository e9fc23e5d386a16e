"""The Faust worker: a thin adapter that feeds the events topic to the pure correlator.

Run it with ``faultline worker`` (or ``python -m correlators.app worker``).
Configuration comes from ``FAULTLINE_*`` (see :mod:`common.settings`); the
app is built when the worker starts (:func:`main`), not at import.

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
boundary where every decision so far is published, the worker pickles the
partition's engines on the event loop, then seals and writes them off it to the
compacted ``<app id>-snapshots`` topic (:mod:`correlators.snapshots`,
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
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import faust
from faust.types import TP, Message
from pydantic import ValidationError

from common import metrics as m
from common.deadletters import dead_letter
from common.kafka_admin import ensure_topic, grow_topic, topic_partitions, topic_replication
from common.settings import Settings
from correlators.broker_auth import faust_credentials
from correlators.engine import Correlator
from correlators.partitions import Folded, Judged, PartitionState, Step, WorkerState
from correlators.policy import load_policy
from correlators.rebuild import rebuild
from correlators.snapshot_topic import (
    SnapshotWriter,
    ensure_snapshot_topic,
    events_log_start,
    read_latest_snapshot,
    snapshot_topic_name,
)
from correlators.snapshots import (
    MAX_SNAPSHOT_BYTES,
    Snapshot,
    SnapshotRefused,
    SnapshotSchedule,
    check_retained,
    open_snapshot,
    pickle_engines,
    policy_fingerprint,
    restore,
    seal,
)
from streams.decisions import Command, Incident, StreamEnd
from streams.events import Event
from streams.signing import sign
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
    events_topic = topic_name(ns, "events")
    conf = settings.kafka_config(bootstrap)
    partitions = _partitions_of(conf, events_topic, f"{app.conf.id}-emitted-changelog")
    events = app.topic(events_topic, value_serializer="raw", key_serializer="raw")
    out = {s: app.topic(topic_name(ns, s), value_serializer="raw", key_serializer="raw")
           for s in ("incidents", "commands", "deadletters", "control")}
    emitted = app.Table("emitted", default=lambda: -1, partitions=partitions, key_type=str, value_type=int)
    policy = load_policy(settings.policy)
    held = WorkerState()
    snapshots_on = settings.snapshot_every_events > 0
    snap_topic = snapshot_topic_name(app.conf.id)
    if snapshots_on:
        ensure_snapshot_topic(conf, snap_topic, partitions)
    snap_writer = SnapshotWriter(conf, snap_topic) if snapshots_on else None
    snap_key = settings.snapshot_key.get_secret_value().encode() if settings.snapshot_key else None
    fingerprint = policy_fingerprint(policy)
    schedule = SnapshotSchedule(settings.snapshot_every_events, settings.snapshot_every_s)
    snap_pool = ThreadPoolExecutor(1, thread_name_prefix="snapshots")  # one at a time: written in order
    snapping: set[int] = set()  # partitions with a snapshot being sealed or written

    def new_state(partition: int) -> PartitionState:
        return PartitionState(partition, lambda: Correlator(policy), settings.cell)

    async def send(suffix: str, key: str, value: bytes) -> Any:
        """Hand one record to the producer; the returned future resolves when the broker has it."""
        fut = await out[suffix].send(key=key.encode(), value=value)
        m.RECORDS_OUT.labels("correlator", suffix).inc()
        return fut

    keys = settings.signing()
    ttl = timedelta(seconds=settings.command_ttl_s)

    async def publish(engine: Correlator, decisions: Iterable[Incident | Command]) -> list[Any]:
        pending = []
        for d in decisions:
            if isinstance(d, Command):
                if keys is not None:
                    d = sign(d, keys, datetime.now(UTC), ttl)
                m.COMMANDS_ISSUED.labels(d.type, str(d.requires_approval).lower()).inc()
                inc = engine.incidents.get(d.incident)
                if settings.live_clock and inc is not None:
                    m.observe_detection_to_command(d.type, inc.opened_at)
            pending.append(await send("incidents" if isinstance(d, Incident) else "commands", d.id,
                                      d.model_dump_json().encode()))
        return pending

    async def follow_assignment(_app: faust.App, assigned: set[TP], **_: Any) -> None:
        """Drop the state of partitions another worker has now; one assigned back later is rebuilt."""
        mine = {tp.partition for tp in assigned if tp.topic == events_topic}
        dropped = held.keep_only(mine)
        schedule.forget(dropped)
        log.warning("assigned events partitions %s of %s%s", sorted(mine), events_topic,
                    f"; dropped the state of {dropped}" if dropped else "")

    app.on_partitions_assigned.connect(follow_assignment)  # type: ignore[arg-type]  # mode types receivers as *args

    @app.task
    async def serve_metrics() -> None:
        if settings.metrics_port:
            from prometheus_client import start_http_server

            start_http_server(settings.metrics_port)

    @app.timer(interval=5.0)
    async def gauges() -> None:
        """Open incidents by category and severity over every cell held, every few seconds (not per event)."""
        counts: dict[tuple[str, str], int] = {}
        newest: datetime | None = None
        for engine in held.engines():
            for inc in engine.incidents.values():
                if inc.state not in ("resolved", "closed"):
                    counts[(inc.category, inc.severity)] = counts.get((inc.category, inc.severity), 0) + 1
            if engine.clock is not None and (newest is None or engine.clock > newest):
                newest = engine.clock
        m.set_incidents_open(counts)
        if newest is not None:
            m.EVENT_TIME.labels("correlator").set(newest.timestamp())

    ticks_unacked = 0  # live ticks whose decisions the broker has not acknowledged yet

    if settings.live_clock:
        @app.timer(interval=0.05)
        async def tick() -> None:
            """Live: event time follows the wall clock too, so debounce and settle windows close on time.

            Its decisions are awaited to the broker's acknowledgement, and no snapshot is taken
            meanwhile: a snapshot must never hold a decision that is not on its topic.
            """
            nonlocal ticks_unacked
            now = datetime.now(UTC)
            for engine in held.engines():
                decisions = engine.advance_to(now)
                if decisions:
                    ticks_unacked += 1
                    try:
                        await asyncio.gather(*await publish(engine, decisions))
                    finally:
                        ticks_unacked -= 1

    in_count = m.RECORDS_IN.labels("correlator", "events")

    started: dict[int, float] = {}  # per partition: when the current capture's first event came

    async def settle(state: PartitionState, judged: Judged) -> None:
        """Publish what a record led to, unless it was published before (by any worker); then record it.

        Decisions are acknowledged by the broker before ``emitted`` says so, and a capture's end
        marker goes out after every decision it follows, so a reader of ``control`` finds them.
        """
        part = state.partition
        if not judged.says_anything:
            return
        if judged.offset <= emitted[str(part)]:
            if judged.end:
                started.pop(part, None)
            return
        await asyncio.gather(*await publish(state.engine(judged.cell), judged.decisions))
        if judged.end:
            seconds = time.monotonic() - started.pop(part, time.monotonic())
            await (await send("control", ns, StreamEnd(events=judged.offset + 1, seconds=seconds, cell=judged.cell,
                                                       partition=part).model_dump_json().encode()))
            log.info("capture of cell %s judged: partition %d up to offset %d in %.2fs",
                     judged.cell, part, judged.offset, seconds)
        emitted[str(part)] = judged.offset

    def load_snapshot(part: int) -> Snapshot | None:
        """The newest valid snapshot of ``part``; None (and why, in the log) when there is none to use."""
        try:
            blob = read_latest_snapshot(conf, snap_topic, part, app.conf.id)
            if blob is None:
                return None
            snap = open_snapshot(blob, part, fingerprint, snap_key)
            check_retained(snap.position, events_log_start(conf, events_topic, part, app.conf.id))
            return snap
        except SnapshotRefused as exc:
            log.warning("snapshot of partition %d refused: %s; rebuilding it from the log start", part, exc)
        except Exception as exc:  # the snapshot is an optimisation: without it the rebuild is complete
            log.warning("could not read the snapshot of partition %d from %s (%s); rebuilding it from the log "
                        "start", part, snap_topic, exc)
        return None

    def write_snapshot(part: int, position: int, cells: list[str], pickled: bytes, pickle_s: float) -> None:
        """Seal and write one snapshot (off the event loop); a failure is logged, the next one is tried later."""
        t0 = time.monotonic()
        try:
            blob = seal(part, position, cells, pickled, fingerprint, snap_key)
            if len(blob) > MAX_SNAPSHOT_BYTES:
                log.warning("snapshot of partition %d at offset %d is %d bytes, over the %d the topic takes: not "
                            "written (a takeover replays more); split the cell or raise MAX_SNAPSHOT_BYTES",
                            part, position, len(blob), MAX_SNAPSHOT_BYTES)
                return
            assert snap_writer is not None
            snap_writer.send(part, blob)
            log.info("snapshot of partition %d at offset %d (%d cells): %d bytes (%d pickled); %.3fs pickling on "
                     "the loop, %.3fs sealing and writing", part, position, len(cells), len(blob), len(pickled),
                     pickle_s, time.monotonic() - t0)
        except Exception as exc:
            log.warning("snapshot of partition %d at offset %d not written (%s); the next one is tried after "
                        "%d more events", part, position, exc, settings.snapshot_every_events)

    def take_snapshot(state: PartitionState) -> None:
        """At a record boundary, every decision so far published: pickle here, seal and write elsewhere."""
        part = state.partition
        if part in snapping:
            return  # the previous one is still being written; the schedule asks again on the next record
        t0 = time.monotonic()
        position, cells, pickled = pickle_engines(state)
        schedule.taken(part, time.monotonic())
        snapping.add(part)
        fut = asyncio.get_running_loop().run_in_executor(snap_pool, write_snapshot, part, position, cells, pickled,
                                                         time.monotonic() - t0)
        fut.add_done_callback(lambda _f: snapping.discard(part))

    async def catch_up(part: int, offset: int) -> PartitionState:
        """Bring ``part``'s state up to just before ``offset`` from the log, publishing what was not published.

        A fresh state starts from the partition's newest valid snapshot when there is one; it may
        cover records past ``offset`` (their decisions are published: the caller skips them).
        """
        state = held.release(part)  # out of sight of the timers while another thread works on it
        fresh = state is None
        if state is None:
            state = new_state(part)
        start, t0 = state.position + 1, time.monotonic()
        restored = None
        if fresh and snapshots_on:
            restored = await asyncio.get_running_loop().run_in_executor(None, load_snapshot, part)
            if restored is not None:
                restore(state, restored)
        folded, committed = (Folded(), -1) if offset == 0 else await asyncio.get_running_loop().run_in_executor(
            None, rebuild, state, conf, events_topic, app.conf.id, offset, emitted[str(part)])
        held.install(state)
        for judged in folded.unpublished:
            await settle(state, judged)
        # Records the consumer fetched but never handed over (it clears its buffers when it resumes
        # after a rebalance) were judged just now: acknowledge them, or the group's committed offset
        # would wait for them forever. Offsets below the committed one are ignored by ack().
        for missed in range(max(start, committed), offset):
            app.consumer.ack(Message(events_topic, part, missed, 0.0, 0, None, None, None, None))
        if restored is not None:
            log.warning("restored snapshot of partition %d at offset %d (%d cells); rebuilt %d later events in "
                        "%.2fs; published %d outcomes not published before", part, restored.position,
                        len(state.engines), folded.events, time.monotonic() - t0, len(folded.unpublished))
        elif fresh and offset > 0:
            log.warning("rebuilt state from %d earlier events of partition %d (%d cells) in %.2fs; published %d "
                        "outcomes not published before", folded.events, part, len(state.engines),
                        time.monotonic() - t0, len(folded.unpublished))
        elif not fresh:
            log.warning("caught up on offsets %d-%d of partition %d, which this worker had not seen (%d events, "
                        "%d outcomes published) in %.2fs", start, offset - 1, part, folded.events,
                        len(folded.unpublished), time.monotonic() - t0)
        return state

    @app.agent(events)
    async def correlate(stream: faust.StreamT) -> None:
        try:
            await judge_stream(stream)
        except Exception:
            # Crash-only: Faust would log the agent's crash and keep a process that judges nothing
            # (and looks alive). Exit instead; the supervisor restarts the worker, which rebuilds
            # its state and publishes only what was not published (decisions keep their ids).
            log.critical("the correlator agent failed; exiting so the supervisor restarts the worker", exc_info=True)
            logging.shutdown()
            os._exit(70)

    async def judge_stream(stream: faust.StreamT) -> None:
        async for ev in stream.events():
            msg = ev.message
            part, offset = msg.partition, msg.offset
            step = held.step(part, offset)
            if step is Step.SEEN:
                continue  # redelivered after a rebalance: already judged (and published) here
            state = await catch_up(part, offset) if step is Step.CATCH_UP else held.get(part)
            if offset <= state.position:
                continue  # a restored snapshot covers it: judged, and its decisions published, before
            in_count.inc()
            try:
                event = Event.model_validate_json(ev.value)
            except ValidationError as exc:
                state.skip(offset)
                m.DEAD_LETTERS.labels("correlator").inc()
                dl = dead_letter("correlator", f"undecodable event: {exc.errors()[0]['msg']}", bytes(ev.value))
                await send("deadletters", "correlator", dl.model_dump_json().encode())
                continue
            started.setdefault(part, time.monotonic())
            await settle(state, state.judge(offset, msg.key, event))
            if schedule.due(part, time.monotonic()) and not ticks_unacked:
                take_snapshot(state)  # here: the record's decisions are published, the next not yet judged

    return app


def main() -> None:
    """``python -m correlators.app worker ...``: build the app for ``FAULTLINE_*`` and run Faust's command line."""
    try:
        app = make_app(Settings())
    except Exception as exc:  # a person reads this: say what is wrong and what to do
        print(f"faultline worker: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    app.main()


if __name__ == "__main__":
    main()
