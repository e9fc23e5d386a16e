"""The Faust worker: a thin adapter that feeds the events topic to the pure correlator.

Run it with ``faultline worker`` (or ``python -m correlators.app worker``).
Configuration comes from ``FAULTLINE_*`` (see :mod:`faultline.settings`).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import faust
from pydantic import ValidationError

from correlators.engine import Correlator
from correlators.policy import load_policy
from faultline.settings import Settings
from streams.decisions import Command, DeadLetter, Incident, StreamEnd
from streams.events import EndOfCapture, Event
from streams.topics import topic_name

__all__ = ["app", "make_app"]

log = logging.getLogger("faultline.correlator")


def make_app(settings: Settings) -> faust.App:
    ns = settings.namespace
    bootstrap = settings.kafka or f"127.0.0.1:{settings.local_kafka_port}"
    app = faust.App(
        f"faultline-correlator.{ns}",
        broker=f"kafka://{bootstrap}",
        store="memory://",
        web_enabled=False,
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        datadir=str(settings.data_dir / "faust"),
    )
    events = app.topic(topic_name(ns, "events"), value_serializer="raw", key_serializer="raw")
    out = {s: app.topic(topic_name(ns, s), value_serializer="raw", key_serializer="raw")
           for s in ("incidents", "commands", "deadletters", "control")}
    engine = Correlator(load_policy(settings.policy))

    async def send(suffix: str, key: str, value: bytes) -> None:
        await out[suffix].send(key=key.encode(), value=value)

    @app.agent(events)
    async def correlate(stream: faust.StreamT) -> None:
        count = 0
        async for raw in stream:
            count += 1
            try:
                event = Event.model_validate_json(raw)
            except ValidationError as exc:
                dl = DeadLetter(stage="correlator", reason=f"undecodable event: {exc.errors()[0]['msg']}",
                                raw=raw.decode("utf-8", "replace")[:10000], at=datetime.now(UTC))
                await send("deadletters", "correlator", dl.model_dump_json().encode())
                continue
            for d in engine.process(event):
                if isinstance(d, Incident):
                    await send("incidents", d.id, d.model_dump_json().encode())
                elif isinstance(d, Command):
                    await send("commands", d.id, d.model_dump_json().encode())
            if isinstance(event.body, EndOfCapture):
                await app.producer.flush()  # every decision is on its topic before the marker
                await send("control", ns, StreamEnd(events=count).model_dump_json().encode())
                log.info("capture judged: %d events", count)

    return app


app = make_app(Settings())

if __name__ == "__main__":
    app.main()
