"""Issue 15, finding 6: a value the archive cannot store is set aside with the reason; the rest is written.

Against the real embedded archive: an event whose ``rank`` is past the ``Int32`` column (built
without validation, as a record from an older or foreign producer could reach the sink) makes
the driver refuse the insert every time. Retrying that batch forever was the stall.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from sinks.archive import Archive
from sinks.archive_errors import is_permanent, write_isolating
from streams.events import AgentHeartbeat, Event

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def event(i: int, rank: int = 0) -> Event:
    return Event.model_construct(id=f"e{i}", ts=T0 + timedelta(seconds=i), source="node_agent", node="n01",
                                 job=None, rank=rank, local_rank=None, body=AgentHeartbeat(), schema_version=1)


def test_the_records_the_archive_refuses_for_good_become_dead_letters(archive: Archive) -> None:
    events = [event(i) for i in range(10)]
    events[3] = event(3, rank=2**70)
    events[7] = event(7, rank=2**31)
    written, letters = write_isolating(archive.write_events, events, "archive-sink:ns.events")
    assert written == 8 and archive.count("events") == 8
    assert [letter.raw.count('"id":"e3"') + letter.raw.count('"id":"e7"') for letter in letters] == [1, 1]
    assert all("retrying cannot help" in letter.reason and "rank" in letter.reason for letter in letters)
    assert letters[0].at == T0 + timedelta(seconds=3)  # the record's time: a redelivery gives the same letter
    archive.write_deadletters(letters)
    assert archive.count("deadletters") == 2


def test_an_archive_that_is_away_is_not_a_reason_to_drop_anything() -> None:
    def away(_records: object) -> int:
        raise OperationalError("HTTPDriver for http://clickhouse:8123 returned: Connection refused")

    with pytest.raises(OperationalError):
        write_isolating(away, [event(1)], "archive-sink:ns.events")


@pytest.mark.parametrize(("error", "permanent"), [
    (DatabaseError("Code: 53. DB::Exception: Type mismatch in IN or VALUES section"), True),
    (DatabaseError("Code: 321. DB::Exception: Value is out of range of data type"), True),
    (DatabaseError("Code: 252. DB::Exception: Too many parts (300)"), False),
    (DatabaseError("Code: 107. DB::Exception: File doesn't exist"), False),
    (DatabaseError("Code: 243. DB::Exception: Cannot reserve 1.00 MiB, not enough space"), False),
    (OperationalError("Connection refused"), False),
    (RuntimeError("archive down"), False),
    (OverflowError("int too big"), True),
])
def test_what_retrying_can_fix(error: Exception, permanent: bool) -> None:
    assert is_permanent(error) is permanent
