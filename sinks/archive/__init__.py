"""The ClickHouse archive: versioned schema (:mod:`.migrations`) and the store (:mod:`.store`)."""

from sinks.archive.migrations import MIGRATIONS, Migration, migrate
from sinks.archive.store import Archive

__all__ = ["Archive", "MIGRATIONS", "Migration", "migrate"]
