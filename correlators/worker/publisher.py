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
4. Every send is awaited until the broker acknowledged it (:mod:`correlators.worker.refusals` says
   what a refusal is). A record over :data:`streams.bounds.MAX_RECORD_BYTES` is not sent at all, and
   one the broker refuses **for good** (too large, invalid) would be refused again by every
   successor: it is replaced by a minimal record of the same id and type that says what was cut
   (:func:`correlators.bounded.minimal`), the refusal is dead-lettered with its reason and counted
   (``records_refused``), and the record goes on to step 5. A **transient** refusal is sent again,
   at most :data:`RETRIES` times, backing off; past that, and for a refusal of an unknown kind, it
   raises here, so nothing below happens: ``emitted`` does not advance, the agent fails, and the
   worker that judges the record next publishes it again (with the same ids).
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
from common.deadletters import dead_letter
from correlators.bounded import minimal
from correlators.engine import Correlator
from correlators.partitions import Judged, PartitionState
from correlators.worker.ports import Clock, OffsetTable, Send, WallClock, utcnow
from correlators.worker.refusals import classify
from streams.bounds import MAX_RECORD_BYTES
from streams.decisions import Command, Incident, StreamEnd
from streams.signing import SigningKeys, sign

__all__ = ["RETRIES", "AcknowledgedHook", "Publisher"]

log = logging.getLogger("faultline.correlator")

#: Called with (partition, offset) once the broker acknowledged every record of that offset,
#: before ``emitted`` is written (step 6 of the module docstring).
AcknowledgedHook = Callable[[int, int], Awaitable[None]]

#: Sends of one record again after a transient refusal (then it raises: step 4), and the first back-off.
RETRIES = 3
BACKOFF_S = 0.5

Decision = Incident | Command


class Publisher:
    """Signs, counts and sends decisions; records a partition's offset once they are acknowledged."""

    def __init__(self, send: Send, emitted: OffsetTable, *, namespace: str, keys: SigningKeys | None,
                 ttl: timedelta, live_clock: bool, cluster: str | None = None, wall_clock: WallClock = utcnow,
                 clock: Clock = time.monotonic, on_acknowledged: AcknowledgedHook | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
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
        self._sleep = sleep  # the back-off between transient refusals (tests pass one that returns at once)
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

    async def publish(self, engine: Correlator, decisions: Iterable[Decision]) -> list[Awaitable[Any]]:
        """Sign, count and hand over each decision (step 3); per decision, what settles it (step 4)."""
        pending: list[Awaitable[Any]] = []
        for d in decisions:
            if isinstance(d, Command):
                if self._keys is not None:
                    d = sign(d, self._keys, self._wall_clock(), self._ttl, namespace=self._namespace,
                             cluster=self._cluster)
                m.COMMANDS_ISSUED.labels(d.type, str(d.requires_approval).lower()).inc()
                inc = engine.incidents.get(d.incident)
                if self._live_clock and inc is not None:
                    m.observe_detection_to_command(d.type, inc.opened_at)
            suffix = "incidents" if isinstance(d, Incident) else "commands"
            value = d.model_dump_json().encode()
            if len(value) > MAX_RECORD_BYTES:
                pending.append(self._replace(d, suffix, value, "over_cap",
                                             f"{len(value):,} bytes, over the cap of {MAX_RECORD_BYTES:,}"))
                continue
            try:
                fut = await self.send(suffix, d.id, value)
            except Exception as exc:  # noqa: BLE001 - refused before it was sent: judged like a refused ack
                fut = _failed(exc)
            pending.append(self._settled(d, suffix, value, fut))
        return pending

    async def publish_acknowledged(self, engine: Correlator, decisions: Iterable[Decision]) -> None:
        """:meth:`publish`, then wait until every one is on its topic or replaced (raises: step 4)."""
        settling = await self.publish(engine, decisions)
        try:
            for settled in settling:  # in order: the sends are all handed over already
                await settled
        finally:
            for rest in settling:  # after a raise, the coroutines never awaited are closed, not leaked
                close = getattr(rest, "close", None)
                if close is not None:
                    close()

    async def _settled(self, d: Decision, suffix: str, value: bytes, fut: Awaitable[Any]) -> None:
        """Await ``d``'s acknowledgement; replace it if refused for good, send it again if refused for now."""
        for attempt in range(RETRIES + 1):
            try:
                await fut
                return
            except Exception as exc:  # noqa: BLE001 - classified below; unknown ones raise as they are
                kind, reason = classify(exc)
                if kind == "for_good":
                    await self._replace(d, suffix, value, reason, repr(exc))
                    return
                if kind == "unknown" or attempt == RETRIES:
                    raise
                log.warning("%s record %s refused for now (%s), sending again (%d of %d)",
                            suffix, d.id, reason, attempt + 1, RETRIES)
                await self._sleep(BACKOFF_S * 2**attempt)
                try:
                    fut = await self.send(suffix, d.id, value)
                except Exception as again:  # noqa: BLE001 - judged on the next turn of the loop
                    fut = _failed(again)

    async def _replace(self, d: Decision, suffix: str, value: bytes, reason: str, detail: str) -> None:
        """``d`` cannot be published as it is: its minimal record instead, and the refusal dead-lettered."""
        m.RECORDS_REFUSED.labels("correlator", suffix, reason).inc()
        m.DEAD_LETTERS.labels("correlator").inc()
        why = f"{suffix} record {d.id} ({d.type if isinstance(d, Command) else 'incident'}) not published " \
              f"whole: {reason}: {detail}; a minimal record of the same id was published instead"
        log.error("%s", why)
        small = minimal(d, f"{reason}: {detail}", self._wall_clock())
        for topic, key, body in ((suffix, d.id, small.model_dump_json().encode()),
                                 ("deadletters", "correlator",
                                  dead_letter("correlator", why, value, self._wall_clock()).model_dump_json().encode())):
            try:
                await (await self.send(topic, key, body))
            except Exception as exc:  # noqa: BLE001 - nothing smaller exists: log it and go on, never loop
                kind, _ = classify(exc)
                if kind != "for_good":
                    raise
                log.error("the %s record replacing %s was refused too (%r): left out", topic, d.id, exc)

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


def _failed(exc: BaseException) -> Awaitable[Any]:
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    fut.set_exception(exc)
    return fut
