"""The archive sink the crash test kills, with a fault point the test chooses.

``python -m tests.sinks.sink_child BOOTSTRAP NAMESPACE ARCHIVE_URL MAX_BATCH WHEN N``

The same :class:`~sinks.archive_sink.ArchiveSink` and :class:`~sinks.archive.Archive` as
``faultline sink run`` (group ``<namespace>.archive``), with the archive wrapped so that the
process SIGKILLs itself at its ``N``-th table write: ``before`` it (the batch's earlier tables
are written, this one and its offsets are not), or ``after`` it (written, offsets not committed:
for a batch's last table, the moment between the write and the commit). ``WHEN=none``: no
fault point (the test kills it from outside). Each write is logged as ``write <n> <table> <rows>``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from sinks.archive import Archive
from sinks.archive_sink import ArchiveSink


class FaultyArchive:
    """An :class:`Archive` whose ``write_*`` calls are counted, and the ``at``-th one kills the process."""

    def __init__(self, archive: Archive, when: str, at: int) -> None:
        self._archive, self._when, self._at, self.writes = archive, when, at, 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._archive, name)
        return self._faulty(name, attr) if name.startswith("write_") else attr

    def _faulty(self, name: str, write: Callable[[Sequence[Any]], int]) -> Callable[[Sequence[Any]], int]:
        def call(records: Sequence[Any]) -> int:
            self.writes += 1
            if self._when == "before" and self.writes == self._at:
                os.kill(os.getpid(), signal.SIGKILL)
            rows = write(records)
            print(f"write {self.writes} {name[6:]} {rows}", flush=True)
            if self._when == "after" and self.writes == self._at:
                os.kill(os.getpid(), signal.SIGKILL)
            return rows
        return call


def main(bootstrap: str, namespace: str, url: str, max_batch: str, when: str, at: str) -> None:
    with Archive.open(url) as archive:
        faulty = FaultyArchive(archive, when, int(at))
        # A short session: the resumed sink joins once the dead member is evicted, not after Kafka's 45 s.
        with ArchiveSink(faulty, bootstrap, namespace,  # type: ignore[arg-type]
                         consumer_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}) as sink:
            sink.run(threading.Event(), max_batch=int(max_batch), max_wait_s=0.2)


if __name__ == "__main__":
    main(*sys.argv[1:])
