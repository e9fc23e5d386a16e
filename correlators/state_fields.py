"""Field types of the engine's state that keep it plain data: JSON in and out, bounds in the schema.

The engine's state (:mod:`correlators.state`) is stdlib dataclasses read and written through a
pydantic ``TypeAdapter``; most fields need nothing special. Two shapes do:

* :class:`Bounded` -- a ``deque`` in memory (cheap appends, cheap trimming from the left), a
  JSON array on the wire, with its ``maxlen`` restored on load. pydantic's own ``deque``
  support forgets the ``maxlen``, so a restored window would grow without bound and decide
  differently; this marker keeps it and writes the bound into the JSON Schema (``maxItems``),
  so changing a bound changes the state version of the snapshots too.
* :data:`Instant` -- a datetime that must carry its offset: a naive one read back from a
  snapshot is refused instead of raising in the first comparison with an event's time.
"""

from __future__ import annotations

from collections import deque
from typing import Any, get_args

from pydantic import AwareDatetime, GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = ["Bounded", "Instant"]

#: A tz-aware datetime (every event time is; the capture screen refuses naive ones).
Instant = AwareDatetime


class Bounded:
    """``Annotated[deque[X], Bounded(n)]``: a deque of at most ``n`` items (None: unbounded),
    serialised as a list and validated back into ``deque(..., maxlen=n)``."""

    def __init__(self, maxlen: int | None = None) -> None:
        self.maxlen = maxlen

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        (item,) = get_args(source) or (Any,)
        as_list = core_schema.list_schema(handler.generate_schema(item), max_length=self.maxlen)
        maxlen = self.maxlen

        def to_deque(items: list[Any]) -> deque[Any]:
            return deque(items, maxlen=maxlen)

        return core_schema.no_info_after_validator_function(
            to_deque, as_list,
            serialization=core_schema.plain_serializer_function_ser_schema(list, return_schema=as_list))

    def __repr__(self) -> str:
        return f"Bounded({self.maxlen})"
