"""The ClickHouse archive.

:mod:`.migrations` (the versioned schema of a namespace's database), :mod:`.namespaces` (which
database each namespace has), :mod:`.store` (:class:`Archive`: one namespace, typed writes and
reads), :mod:`.connection` (how a process reaches a server or a chDB directory), and for chDB
:mod:`.endpoint` and :mod:`.endpoint_file` (the owning process serves the directory to the others).
"""

from sinks.archive.migrations import MIGRATIONS, Migration, migrate
from sinks.archive.store import Archive

__all__ = ["Archive", "MIGRATIONS", "Migration", "migrate"]
