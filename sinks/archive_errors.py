"""Which archive write errors retrying can fix, and how a batch gets past the ones it cannot.

The archive sink retries a failed write until it succeeds, because an archive
that is away (a restart, a full disk, a network cut) comes back, and the sink
must lose nothing meanwhile. But some rows fail every time: a value the
column cannot hold (an integer past ``Int32``, a string ClickHouse refuses), a
row the driver cannot even serialise. Retrying those stalls the whole archive
forever behind one record. So:

* :func:`is_permanent` tells the two apart. Permanent: the driver's
  ``DataError`` (a value it cannot serialise for its column), the Python
  errors of building a row (``ValueError``, ``TypeError``, ``OverflowError``,
  ``struct.error``), and a server error whose ClickHouse code says the data
  is wrong (:data:`DATA_ERROR_CODES`). Everything else (connection refused,
  timeouts, a missing directory, "too many parts", an unknown code) is
  transient: retried, as before.
* :func:`write_isolating` writes a table's records and, on a permanent error,
  splits them in halves until it has the records that fail alone; those come
  back as dead letters (with the error as the reason), every other record is
  written. A transient error on the way is raised, so the caller retries the
  whole batch (writes are idempotent: rows replace by id).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from clickhouse_connect.driver.exceptions import DatabaseError, DataError
from pydantic import BaseModel

from common.deadletters import dead_letter
from streams.decisions import DeadLetter

__all__ = ["DATA_ERROR_CODES", "is_permanent", "write_isolating"]

#: ClickHouse error codes that name bad data (the same rows fail again, whatever the server's state).
DATA_ERROR_CODES: frozenset[int] = frozenset({
    6,    # CANNOT_PARSE_TEXT
    26,   # CANNOT_PARSE_QUOTED_STRING
    27,   # CANNOT_PARSE_INPUT_ASSERTION_FAILED
    38,   # CANNOT_PARSE_DATE
    41,   # CANNOT_PARSE_DATETIME
    53,   # TYPE_MISMATCH
    69,   # ARGUMENT_OUT_OF_BOUND
    70,   # CANNOT_CONVERT_TYPE
    72,   # CANNOT_PARSE_NUMBER
    117,  # INCORRECT_DATA
    131,  # TOO_LARGE_STRING_SIZE
    321,  # VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
    349,  # CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
    407,  # DECIMAL_OVERFLOW
})
_CODE = re.compile(r"\bCode: (\d+)\b")


def is_permanent(exc: BaseException) -> bool:
    """Whether writing the same rows again must fail the same way (bad data, not an archive away)."""
    if isinstance(exc, DataError | ValueError | TypeError | OverflowError | struct.error):
        return True
    if isinstance(exc, DatabaseError):
        match = _CODE.search(str(exc))
        return match is not None and int(match.group(1)) in DATA_ERROR_CODES
    return False


def _when(record: BaseModel) -> datetime:
    """The record's own time, so a re-delivered batch gives the same dead letter (its id hashes it)."""
    for name in ("ts", "at", "updated_at", "issued_at", "opened_at"):
        value = getattr(record, name, None)
        if isinstance(value, datetime):
            return value
    return datetime(1970, 1, 1, tzinfo=UTC)


def write_isolating(write: Callable[[Sequence[BaseModel]], int], records: Sequence[BaseModel],
                    stage: str) -> tuple[int, list[DeadLetter]]:
    """Write ``records``; on a permanent error, write all but the ones that fail alone.

    Returns (rows written, dead letters for the records refused). Raises what is not permanent.
    """
    try:
        return write(records), []
    except Exception as exc:
        if not is_permanent(exc):
            raise
        if len(records) == 1:
            reason = f"the archive refused this record ({type(exc).__name__}: {exc}); retrying cannot help"
            return 0, [dead_letter(stage, reason, records[0].model_dump_json(), _when(records[0]))]
    mid = len(records) // 2
    first, letters = write_isolating(write, records[:mid], stage)
    second, more = write_isolating(write, records[mid:], stage)
    return first + second, letters + more
