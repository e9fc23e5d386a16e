"""The Faust worker: a thin adapter that feeds the events topic to the pure correlator.

Run it with ``faultline worker`` (or ``python -m correlators.app worker``).
Configuration comes from ``FAULTLINE_*`` (see :mod:`faultline.settings`).

State and restarts. The correlator is deterministic: the same events give the
same state and the same decisions (with the same ids). So a worker that starts
on a partition someone else was consuming (a crash, a rebalance) first rebuilds
its state by reading that partition from the beginning up to where it takes
over, silently; then it goes on. A changelog-backed table, ``emitted``, records
per partition the offset whose decisions were last published, so events that
were processed before a crash but not yet committed are judged again without
publishing their decisions twice. Whatever slips through (a crash between a
publish and the table update) repeats a decision with the same id, which every
consumer treats as a duplicate.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import faust
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from pydantic import ValidationError

from correlators.broker_auth import faust_credentials
from correlators.engine import Correlator
from correlators.policy import load_policy
from faultline.settings import Settings
from faultline.topic_io import ensure_topic
from sinks import metrics as m
from streams.decisions import Command, DeadLetter, Incident, StreamEnd
from streams.events import EndOfCapture, Event
from streams.signing import sign
from streams.topics import topic_name

__all__ = ["app", "make_app", "rebuild"]

log = logging.getLogger("faultline.correlator")


def rebuild(engine: Correlator, conf: dict[str, Any], topic: str, partition: int, upto: int) -> int:
    """Feed ``engine`` every event of ``topic[partition]`` below offset ``upto``, discarding decisions."""
    c = Consumer({**conf, "group.id": f"faultline-rebuild-{topic}", "enable.auto.commit": False})
    n = 0
    try:
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])  # the log start, after retention too
        idle_since = time.monotonic()
        while True:
            msgs = c.consume(1000, timeout=1.0)
            if not msgs:
                if time.monotonic() - idle_since > 60:
                    raise TimeoutError(f"rebuilding from {topic}[{partition}]: no records before offset {upto}")
                continue
            idle_since = time.monotonic()
            for m in msgs:
                if m.error() or (m.offset() or 0) >= upto:
                    continue
                value = m.value()
                if value is not None:
                    try:
                        engine.process(Event.model_validate_json(value))
                        n += 1
                    except ValidationError:
                        pass  # it went to the dead letters the first time
            if (msgs[-1].offset() or 0) >= upto - 1:
                return n
    finally:
        c.close()


def make_app(settings: Settings) -> faust.App:
    ns = settings.namespace
    bootstrap = settings.kafka or f"127.0.0.1:{settings.local_kafka_port}"
    app = faust.App(
        f"faultline-correlator.{ns}",
        broker=f"kafka://{bootstrap}",
        broker_credentials=faust_credentials(settings),  # FAULTLINE_KAFKA_SECURITY_PROTOCOL and SASL_*
        store="memory://",
        web_enabled=False,
        topic_allow_declare=True,  # the changelog of `emitted`; our own topics exist already
        topic_partitions=1,
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
    events = app.topic(events_topic, value_serializer="raw", key_serializer="raw")
    out = {s: app.topic(topic_name(ns, s), value_serializer="raw", key_serializer="raw")
           for s in ("incidents", "commands", "deadletters", "control")}
    # Created here, before Faust looks for it: Faust's own declaration races its first write.
    ensure_topic(settings.kafka_config(bootstrap), f"{app.conf.id}-emitted-changelog", 1, {"cleanup.policy": "compact"})
    emitted = app.Table("emitted", default=lambda: -1, partitions=1, key_type=str, value_type=int)
    engine = Correlator(load_policy(settings.policy))
    rebuilt: set[int] = set()

    async def send(suffix: str, key: str, value: bytes) -> None:
        await out[suffix].send(key=key.encode(), value=value)
        m.RECORDS_OUT.labels("correlator", suffix).inc()

    keys = settings.signing()
    ttl = timedelta(seconds=settings.command_ttl_s)

    async def publish(decisions: list[Incident | Command]) -> None:
        for d in decisions:
            if isinstance(d, Command):
                if keys is not None:
                    d = sign(d, keys, datetime.now(UTC), ttl)
                m.COMMANDS_ISSUED.labels(d.type, str(d.requires_approval).lower()).inc()
                inc = engine.incidents.get(d.incident)
                if settings.live_clock and inc is not None:
                    m.observe_detection_to_command(d.type, inc.opened_at)
            await send("incidents" if isinstance(d, Incident) else "commands", d.id, d.model_dump_json().encode())

    @app.task
    async def serve_metrics() -> None:
        if settings.metrics_port:
            from prometheus_client import start_http_server

            start_http_server(settings.metrics_port)

    @app.timer(interval=5.0)
    async def gauges() -> None:
        """Open incidents by category and severity, every few seconds (not per event: a hot path)."""
        counts: dict[tuple[str, str], int] = {}
        for inc in engine.incidents.values():
            if inc.state not in ("resolved", "closed"):
                counts[(inc.category, inc.severity)] = counts.get((inc.category, inc.severity), 0) + 1
        m.set_incidents_open(counts)
        if engine.clock is not None:
            m.EVENT_TIME.labels("correlator").set(engine.clock.timestamp())

    if settings.live_clock:
        @app.timer(interval=0.05)
        async def tick() -> None:
            """Live: event time follows the wall clock too, so debounce and settle windows close on time."""
            await publish(engine.advance_to(datetime.now(UTC)))

    in_count = m.RECORDS_IN.labels("correlator", "events")

    @app.agent(events)
    async def correlate(stream: faust.StreamT) -> None:
        started: float | None = None
        async for ev in stream.events():
            msg = ev.message
            part, offset = msg.partition, msg.offset
            if part not in rebuilt:
                rebuilt.add(part)
                if offset > 0:
                    n = await asyncio.get_running_loop().run_in_executor(
                        None, rebuild, engine, settings.kafka_config(bootstrap), events_topic, part, offset)
                    log.warning("rebuilt state from %d earlier events of partition %d", n, part)
            in_count.inc()
            try:
                event = Event.model_validate_json(ev.value)
            except ValidationError as exc:
                m.DEAD_LETTERS.labels("correlator").inc()
                dl = DeadLetter(stage="correlator", reason=f"undecodable event: {exc.errors()[0]['msg']}",
                                raw=bytes(ev.value).decode("utf-8", "replace")[:10000], at=datetime.now(UTC))
                await send("deadletters", "correlator", dl.model_dump_json().encode())
                continue
            decisions = engine.process(event)
            if decisions and offset > emitted[str(part)]:  # else judged before a crash: already published
                await publish(decisions)
                emitted[str(part)] = offset
            if started is None:
                started = time.monotonic()
            if isinstance(event.body, EndOfCapture):
                await app.producer.flush()  # every decision is on its topic before the marker
                seconds = time.monotonic() - started
                await send("control", ns, StreamEnd(events=offset + 1, seconds=seconds).model_dump_json().encode())
                log.info("capture judged: %d events in %.2fs", offset + 1, seconds)
                started = None

    return app


app = make_app(Settings())


if __name__ == "__main__":
    app.main()
