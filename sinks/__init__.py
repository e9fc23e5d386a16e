"""Sinks: where faultline's streams come to rest.

:mod:`sinks.archive` is the ClickHouse archive (schema and store);
:mod:`sinks.archive_sink` consumes a namespace's topics into it.
"""

__all__ = ["archive", "archive_sink"]
