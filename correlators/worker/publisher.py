"""Publishing what the correlator decided, and recording that it is published.

The order of things for one judged record (:meth:`Publisher.settle`), which is what makes a
takeover publish exactly what was not published:

1. A record that says nothing (no decision, not a capture's end) publishes nothing and leaves
   ``emitted`` as it is.
2. A record at or below ``emitted[partition]`` was published before, by this worker or another:
   nothing is sent (a capture's end only stops its timer).
3. Each decision is handed to the producer (:meth:`Publisher.publish`): a command is signed first
   when signing keys are set (issued now, by the wall clock, expiring after the TTL) and counted
   (``commands_issued``, and detection-to-command latency when the clock is live); every record
   handed over counts in ``records_out``.
4. Every send is awaited until the broker acknowledged it. A refused one raises here, so nothing
   below happens: ``emitted`` does not advance, the agent fails, and the worker that judges the
   record next publishes it again (with the same ids).
5. A capture's end marker goes to ``control`` after every decision it follows (a reader of
   ``control`` then finds them all), awaited the same way.
6. :meth:`Publisher.acknowledged` -- the named point between "the broker has it" and "``emitted``
   says so" (``on_acknowledged``, a hook for fault injection). A crash here repeats the record's
   decisions on a takeover, with the same ids, which consumers drop as duplicates.
7. ``emitted[partition] = offset``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any

from common import metrics as m
from correlators.engine import Correlator
from correlators.partitions import Judged, PartitionState
from correlators.worker.ports import Clock, OffsetTable, Send, WallClock, utcnow
from streams.decisions import Command, Incident, StreamEnd
from streams.signing import SigningKeys, sign

__all__ = ["AcknowledgedHook", "Publisher"]

log = logging.getLogger("faultline.correlator")

#: Called with (partition, offset) once the broker acknowledged every record of that offset,
#: before ``emitted`` is written (step 6 of the module docstring).
AcknowledgedHook = Callable[[int, int], Awaitable[None]]


class Publisher:
    """Signs, counts and sends decisions; records a partition's offset once they are acknowledged."""

    def __init__(self, send: Send, emitted: OffsetTable, *, namespace: str, keys: SigningKeys | None,
                 ttl: timedelta, live_clock: bool, cluster: str | None = None, wall_clock: WallClock = utcnow,
                 clock: Clock = time.monotonic, on_acknowledged: AcknowledgedHook | None = None) -> None:
        self._send = send
        self._emitted = emitted
        self._namespace = namespace
        self._cluster = cluster  # signed into every command with the namespace (streams/signing.py)
        self._keys = keys
        self._ttl = ttl
        self._live_clock = live_clock
        self._wall_clock = wall_clock
        self._clock = clock
        self.on_acknowledged = on_acknowledged
        self._started: dict[int, float] = {}  # per partition: when the current capture's first event came
        self._cpu_started: dict[int, float] = {}  # ...and the process's CPU time then

    def published_upto(self, partition: int) -> int:
        """The last offset of ``partition`` whose decisions are on their topics (-1: none)."""
        return self._emitted[str(partition)]

    async def send(self, suffix: str, key: str, value: bytes) -> Awaitable[Any]:
        """Hand one record to the producer; the returned future resolves when the broker has it."""
        fut = await self._send(suffix, key.encode(), value)
        m.RECORDS_OUT.labels("correlator", suffix).inc()
        return fut

    async def publish(self, engine: Correlator, decisions: Iterable[Incident | Command]) -> list[Awaitable[Any]]:
        """Sign, count and hand over each decision (step 3); the futures of their acknowledgements."""
        pending = []
        for d in decisions:
            if isinstance(d, Command):
                if self._keys is not None:
                    d = sign(d, self._keys, self._wall_clock(), self._ttl, namespace=self._namespace,
                             cluster=self._cluster)
                m.COMMANDS_ISSUED.labels(d.type, str(d.requires_approval).lower()).inc()
                inc = engine.incidents.get(d.incident)
                if self._live_clock and inc is not None:
                    m.observe_detection_to_command(d.type, inc.opened_at)
            pending.append(await self.send("incidents" if isinstance(d, Incident) else "commands", d.id,
                                           d.model_dump_json().encode()))
        return pending

    async def publish_acknowledged(self, engine: Correlator, decisions: Iterable[Incident | Command]) -> None:
        """:meth:`publish`, then wait until the broker acknowledged every one (raises if it refused one)."""
        await asyncio.gather(*await self.publish(engine, decisions))

    def capture_started(self, partition: int) -> None:
        """An event of ``partition`` is about to be judged: its capture's timer starts (if not yet)."""
        if partition not in self._started:
            self._started[partition] = self._clock()
            self._cpu_started[partition] = time.process_time()

    async def settle(self, state: PartitionState, judged: Judged) -> None:
        """Publish what a record led to unless it was published before; then record it (module docstring)."""
        part = state.partition
        if not judged.says_anything:
            return
        if judged.offset <= self.published_upto(part):
            if judged.end:
                self._started.pop(part, None)
                self._cpu_started.pop(part, None)
            return
        await self.publish_acknowledged(state.engine(judged.cell), judged.decisions)
        if judged.end:
            now = self._clock()
            seconds = now - self._started.pop(part, now)
            cpu = time.process_time()
            cpu_seconds = cpu - self._cpu_started.pop(part, cpu)
            end = StreamEnd(events=judged.offset + 1, seconds=seconds, cpu_seconds=round(cpu_seconds, 3),
                            cell=judged.cell, partition=part)
            await (await self.send("control", self._namespace, end.model_dump_json().encode()))
            log.info("capture of cell %s judged: partition %d up to offset %d in %.2fs",
                     judged.cell, part, judged.offset, seconds)
        await self.acknowledged(part, judged.offset)
        self._emitted[str(part)] = judged.offset

    async def acknowledged(self, partition: int, offset: int) -> None:
        """Every record of ``offset`` is on its topic; ``emitted`` is not written yet (step 6)."""
        if self.on_acknowledged is not None:
            await self.on_acknowledged(partition, offset)
