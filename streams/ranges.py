"""Integer ranges of the archive's columns, as types: a value the archive cannot store is refused on arrival.

Python's integers are unbounded and JSON's are too, but the archive's columns
are not (``sinks/archive/migrations.py``: ``rank Nullable(Int32)``,
``step``/``bytes Nullable(Int64)``, ``version UInt32``). One out-of-range value
that parses would make every insert of its batch fail, and a sink that retries
would stall on it forever. So the schema carries the column's range: a record
that does not fit is bad input at the parser (or a dead letter at any stage
that decodes it), never a poisoned batch.

They are strict integers too, and so is every other integer field of a record (:data:`Int`; issue 27): ``8.0`` is refused, not read as ``8``.
RFC 8785 writes both as ``8``, so a record whose ``8.0`` was accepted would verify
under a signature made over ``8``; and a consumer that reads JSON numbers as
they come (the Slurm backend's GPU count) must never see a float there.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

__all__ = ["INT32_MAX", "INT32_MIN", "INT64_MAX", "INT64_MIN", "UINT32_MAX", "Int", "Int32", "Int64", "NonNegInt32",
           "UInt32"]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT32_MAX = 2**32 - 1

#: Any other whole number of a record (an XID code, an exit code, a counter, a schema version): strict,
#: without a column range of its own (the capture parser bounds every integer to ±(2**53-1)).
Int = Annotated[int, Field(strict=True)]
Int32 = Annotated[int, Field(strict=True, ge=INT32_MIN, le=INT32_MAX)]
NonNegInt32 = Annotated[int, Field(strict=True, ge=0, le=INT32_MAX)]  # ranks: Int32 in the archive, never negative
Int64 = Annotated[int, Field(strict=True, ge=INT64_MIN, le=INT64_MAX)]
UInt32 = Annotated[int, Field(strict=True, ge=0, le=UINT32_MAX)]
