"""The archived history read back for backtests: order, pages, duplicates, retention, bad rows, context."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from sinks.archive import Archive
from sinks.archive.history import (
    Unreadable,
    context_events,
    decided,
    event_pages,
    raw_retention,
    time_span,
    without_raw,
)
from sinks.archive.store import EVENT_COLUMNS, event_row
from streams.events import (
    AgentHeartbeat,
    CheckpointSaved,
    Event,
    Inventory,
    JobEnded,
    JobStarted,
    RankAllocation,
    TrainStep,
)

from .records import Sample, at

NOW = datetime.now(UTC)
FAR = NOW + timedelta(days=1)


def _steps(n: int, every: float = 61.0, job: str = "j1") -> list[Event]:
    """Steps, several sharing a millisecond (their order is the id's)."""
    return [Event(id=f"s{k:05d}-{random.Random(k).randrange(10**6)}", ts=at((k // 3) * every), source="trainer",
                  job=job, rank=0, body=TrainStep(step=k)) for k in range(n)]


def _read(archive: Archive, **kw: object) -> list[Event]:
    return [e for page in event_pages(archive, at(-10**6), at(10**7), NOW - timedelta(days=30), **kw)  # type: ignore[arg-type]
            for e in page]


def test_events_come_back_in_event_time_then_id_order_whatever_the_insert_order(archive: Archive) -> None:
    events = _steps(300)
    shuffled = list(events)
    random.Random(3).shuffle(shuffled)
    archive.write_events(shuffled[:200])
    archive.write_events(shuffled[150:])  # overlapping batches: a redelivery cut differently
    archive.write_events(shuffled[:200])  # an identical batch again
    got = _read(archive)
    assert [e.id for e in got] == [e.id for e in sorted(events, key=lambda e: (e.ts, e.id))]
    assert got == sorted(events, key=lambda e: (e.ts, e.id))  # whole events, as they were archived


def test_pages_are_whole_hours_and_concatenate_to_the_whole_window(archive: Archive) -> None:
    events = _steps(900, every=30)  # 9,000 s: three hours
    archive.write_events(events)
    pages = list(event_pages(archive, at(0), at(10**5), NOW - timedelta(days=30), page_rows=200))
    assert len(pages) == 3 and [len(p) for p in pages] == [360, 360, 180]  # one hour is more than a page
    assert [e for p in pages for e in p] == _read(archive)
    lo, hi = at(3600), at(7199.999)
    inner = [e for p in event_pages(archive, lo, hi, NOW, page_rows=10) for e in p]
    assert inner == [e for e in _read(archive) if lo <= e.ts <= hi]


def test_raw_telemetry_ingested_before_the_retention_cutoff_is_left_out(archive: Archive) -> None:
    old = NOW - timedelta(days=40)
    beats = [Event(id=f"hb{k}", ts=at(k), source="node_agent", node="n1", body=AgentHeartbeat()) for k in range(5)]
    steps = _steps(3)
    archive.client.insert("events", [(*event_row(e), old) for e in beats + steps],
                          column_names=[*EVENT_COLUMNS, "ingested_at"])
    fresh = [Event(id=f"hb-new{k}", ts=at(100 + k), source="node_agent", node="n1", body=AgentHeartbeat())
             for k in range(2)]
    archive.write_events(fresh)
    retention = raw_retention(archive, NOW)
    assert retention.ttl_days == 30 and abs((retention.cutoff - (NOW - timedelta(days=30))).total_seconds()) < 1
    got = [e.id for e in _read(archive)]
    assert set(got) == {e.id for e in steps + fresh}  # the old heartbeats are out, merged away or not
    assert without_raw(archive, at(-10), at(10**4), retention.cutoff) == (3, at(0), at(0))


def test_the_ttl_read_is_the_one_set(archive_url: str) -> None:
    with Archive.open(archive_url, raw_ttl_days=7) as archive:
        assert raw_retention(archive).ttl_days == 7


def test_a_row_that_is_not_an_event_is_skipped_and_counted_not_run(archive: Archive) -> None:
    events = _steps(6)
    archive.write_events(events)
    bad = list(event_row(events[0]))
    bad[0], bad[-1] = "forged", '{"kind":"xid","code":"seventy-nine"}'
    archive.client.insert("events", [tuple(bad)], column_names=EVENT_COLUMNS)
    unreadable = Unreadable()
    got = _read(archive, unreadable=unreadable)
    assert [e.id for e in got] == [e.id for e in sorted(events, key=lambda e: (e.ts, e.id))]
    assert unreadable.rows == 1 and unreadable.ids == ["forged"] and "forged" in unreadable.first


def test_context_is_each_nodes_inventory_and_the_running_jobs_with_their_checkpoint(archive: Archive) -> None:
    def started(job: str, t: float) -> Event:
        return Event(id=f"start-{job}-{t}", ts=at(t), source="scheduler", job=job, body=JobStarted(
            allocation=[RankAllocation(node="n1", gpus=[0], ranks=[0])], world_size=1))

    def saved(job: str, t: float) -> Event:
        return Event(id=f"ck-{job}-{t}", ts=at(t), source="trainer", job=job, rank=0,
                     body=CheckpointSaved(step=int(t), path=f"/ck/{t}"))

    inv = [Event(id=f"inv-{node}-{t}", ts=at(t), source="inventory", node=node, body=Inventory(rack="r1"))
           for node, t in (("n1", -50), ("n1", -20), ("n2", -30), ("n2", 200))]
    history = [*inv, started("run", 0), saved("run", 10), saved("run", 20), started("done", 0), saved("done", 5),
               Event(id="end-done", ts=at(30), source="scheduler", job="done", body=JobEnded(status="finished")),
               started("again", 0), saved("again", 3), started("again", 40), saved("run", 500)]
    archive.write_events(history)
    got = context_events(archive, at(100))
    # the newest inventory of each node, the running jobs' newest start and that run's newest checkpoint
    # (none yet for the new run of "again"; "done" has finished)
    assert [e.id for e in got] == ["inv-n2--30", "inv-n1--20", "start-run-0", "ck-run-20", "start-again-40"]
    assert time_span(archive) == (at(-50), at(500))


def test_decided_is_the_window_s_commands_and_their_incidents(archive: Archive, sample: Sample) -> None:
    archive.write_incidents(sample.incidents)
    archive.write_commands(sample.commands)
    incidents, commands = decided(archive, at(34), at(60))
    assert [c.id for c in commands] == ["cmd-quarantine", "cmd-restart", "cmd-validate"]
    assert [(i.id, i.version) for i in incidents] == [("inc-1", 3)]  # opened at 33, before: named by them
    assert decided(archive, at(61), FAR) == ([sample.incidents[-1]], [sample.commands[-1]])
