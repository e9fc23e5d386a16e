"""Fakes for the worker's collaborators, without a broker.

* :class:`FakeProducer` records every send; each acknowledgement resolves (at once, or when the
  test says) or fails on demand.
* :class:`FakeEmitted` is the ``emitted`` table (-1 for a partition never written).
* :class:`Timeline` is what both did, in order, so a test can check the orderings that matter.
* :func:`log_rebuild` is the takeover's log side: the real :func:`correlators.rebuild.rebuild`
  over a fake consumer that holds an events log.
* :func:`inline` runs "blocking" calls at once; :class:`ManualClock` moves when told.
* :class:`JudgeRig` is a record judge with every collaborator real but these.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from scenario_book import SCENARIOS

from correlators.engine import Correlator
from correlators.partitions import Folded, Judged, PartitionState, WorkerState
from correlators.policy import load_policy
from correlators.rebuild import rebuild
from correlators.snapshots import SnapshotSchedule
from correlators.worker.judge import RecordJudge
from correlators.worker.live import LiveClock
from correlators.worker.publisher import Publisher
from correlators.worker.snapshot_taker import Captured, SnapshotTaker
from correlators.worker.takeover import Takeover
from producers.capture import BadInput, parse_capture_line
from streams.cells import cell_key
from streams.events import EndOfCapture, Event
from streams.topics import is_replay_namespace
from tests.common.fake_kafka import FakeConsumer

POLICY = load_policy(None)
CELL = "default"


def scenario_log(name: str = "xid48_double_bit_ecc") -> list[tuple[bytes, bytes]]:
    """A scenario's events as one partition's records (key, value), its end marker last."""
    capture, _ = SCENARIOS[name]()
    events: list[Event] = []
    for raw in capture.lines():
        try:
            events.extend(parse_capture_line(raw))
        except BadInput:
            continue
    events.append(Event(id="end", ts=events[-1].ts, source="replay", body=EndOfCapture(lines=len(events))))
    return [(cell_key(CELL), e.model_dump_json().encode()) for e in events]


def new_state(partition: int = 0, *, replay: bool = True) -> PartitionState:
    return PartitionState(partition, lambda: Correlator(POLICY, replay=replay), CELL)


def judged_all(log: list[tuple[bytes, bytes]]) -> list[Judged]:
    """What every record of ``log`` leads to, judged by one uninterrupted state."""
    state = new_state()
    return [state.judge(offset, key, Event.model_validate_json(value)) for offset, (key, value) in enumerate(log)]


def decision_ids(judged: list[Judged]) -> list[str]:
    return [d.id for j in judged for d in j.decisions]


class Timeline(list[str]):
    """What the producer and the table did, in order."""


@dataclass
class Sent:
    suffix: str
    key: bytes
    value: bytes
    ack: asyncio.Future[None]


class FakeProducer:
    """Records sends; acknowledgements resolve at once (``auto_ack``) or on :meth:`acknowledge`/:meth:`refuse`."""

    def __init__(self, timeline: Timeline | None = None, auto_ack: bool = True) -> None:
        self.timeline = timeline if timeline is not None else Timeline()
        self.auto_ack = auto_ack
        self.sent: list[Sent] = []

    async def send(self, suffix: str, key: bytes, value: bytes) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sent.append(Sent(suffix, key, value, fut))
        self.timeline.append(f"send {suffix} {key.decode()}")
        if self.auto_ack:
            self._resolve(self.sent[-1])
        return fut

    @property
    def pending(self) -> list[Sent]:
        return [s for s in self.sent if not s.ack.done()]

    def acknowledge(self) -> int:
        """The broker acknowledges every record sent so far; how many were pending."""
        pending = self.pending
        for s in pending:
            self._resolve(s)
        return len(pending)

    def refuse(self, exc: Exception | None = None) -> None:
        """The broker refuses the oldest pending record (the rest stay pending)."""
        s = self.pending[0]
        s.ack.set_exception(exc or RuntimeError("broker refused the record"))
        self.timeline.append(f"refused {s.suffix} {s.key.decode()}")

    def keys(self, *suffixes: str) -> list[str]:
        return [s.key.decode() for s in self.sent if s.suffix in suffixes]

    def _resolve(self, s: Sent) -> None:
        s.ack.set_result(None)
        self.timeline.append(f"ack {s.suffix} {s.key.decode()}")


class FakeEmitted(dict[str, int]):
    """The ``emitted`` table; its writes go on the timeline."""

    def __init__(self, timeline: Timeline | None = None) -> None:
        super().__init__()
        self.timeline = timeline if timeline is not None else Timeline()

    def __missing__(self, key: str) -> int:
        return -1

    def __setitem__(self, key: str, value: int) -> None:
        super().__setitem__(key, value)
        self.timeline.append(f"emitted {key}={value}")


async def inline(fn: Callable[..., Any], /, *args: Any) -> Any:
    return fn(*args)


class ManualClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def log_rebuild(log: list[tuple[bytes, bytes]], committed: int = -1001,
                reads: list[int] | None = None) -> Callable[[PartitionState, int, int], tuple[Folded, int]]:
    """The takeover's log side over ``log`` (partition 0), the group having committed ``committed``.

    ``reads`` collects the first offset each rebuild reads from.
    """

    def run(state: PartitionState, upto: int, after: int) -> tuple[Folded, int]:
        consumer = FakeConsumer({0: dict(enumerate(log))})
        consumer.committed_at[0] = committed
        if reads is not None:
            original = consumer.assign

            def assign(partitions: Any) -> None:
                original(partitions)
                reads.append(consumer.positions[0])

            consumer.assign = assign  # type: ignore[method-assign]
        return rebuild(state, {}, "events", "group", upto, after, consumer=consumer)

    return run


def _inline_submit(fn: Callable[[], None]) -> concurrent.futures.Future[None]:
    fut: concurrent.futures.Future[None] = concurrent.futures.Future()
    fn()
    fut.set_result(None)
    return fut


class JudgeRig:
    """A record judge over ``log`` (partition 0) with every collaborator real but the broker faked."""

    def __init__(self, log: list[tuple[bytes, bytes]], *, auto_ack: bool = True, snapshot_every: int = 0, committed: int = -1001,
                 namespace: str | None = None) -> None:
        """``namespace``: the worker's, whose engines end a capture only in a replay namespace (None: they do)."""
        self.producer = FakeProducer(auto_ack=auto_ack)
        self.emitted = FakeEmitted()
        self.held = WorkerState()
        self.clock = ManualClock()
        self.acks: list[int] = []
        self.publisher = Publisher(self.producer.send, self.emitted, namespace="ns", keys=None,
                                   ttl=timedelta(hours=1), live_clock=False, clock=self.clock)
        self.live = LiveClock(self.held, self.publisher)
        self.captures: list[tuple[int, int]] = []  # (position, records unacknowledged then)
        self.snapshots = None
        if snapshot_every:
            self.snapshots = SnapshotTaker(SnapshotSchedule(snapshot_every, 3600.0), self.capture,
                                           lambda c: b"blob", lambda p, b: None, _inline_submit,
                                           ticks_in_flight=lambda: self.live.in_flight, max_bytes=1 << 20,
                                           clock=self.clock)
        replay = namespace is None or is_replay_namespace(namespace)
        takeover = Takeover(self.held, lambda part: new_state(part, replay=replay), self.publisher,
                            log_rebuild(log, committed), self.ack, load_snapshot=None, run_blocking=inline)
        self.log = log
        self.judge = RecordJudge(self.held, takeover, self.publisher, self.snapshots, topic="events",
                                 clock=self.clock, namespace=namespace)

    def ack(self, part: int, offsets: range) -> int:
        self.acks.extend(offsets)
        return len(offsets)

    def capture(self, state: PartitionState) -> Captured:
        self.captures.append((state.position, len(self.producer.pending)))
        return Captured(state.partition, state.position, [], b"")

    async def feed(self, offsets: range | list[int]) -> None:
        for offset in offsets:
            key, value = self.log[offset]
            await self.judge.on_record(0, offset, key, value)
            await asyncio.sleep(0)  # the stream yields to the loop between records

    def published(self) -> list[str]:
        return self.producer.keys("incidents", "commands")
