"""A worker whose table recovery stopped moving exits, so the supervisor starts a fresh one.

Why. After a rebalance Faust restores the ``emitted`` table from its changelog before the worker
judges anything on the partitions it was given. Its recovery can stall for good: it waits for a
changelog offset that never comes, logging "No event received for active tp ... since recovery
start" every five seconds (faust-streaming issues 155, 597; seen here once in CI, a worker that
rejoined after a SIGKILL takeover sat 4 minutes on one partition of a changelog that holds a
handful of records). The process looks alive and holds its partitions, so no other worker takes
them over, and the cells on them are judged by no one.

What. Every few seconds (:meth:`RecoveryWatch.check`), in this order:

1. Not in recovery (or nothing left to read): nothing to watch; forget what was seen.
2. Fewer records left than at the last sighting, or the first sighting: progress, the stall timer
   starts again from now. More left than before (a new rebalance, a new recovery): the same.
3. As many left as ``stall_s`` ago: the worker gives up (``give_up``, with the reason): in the
   worker, a critical log line and exit status 75 (EX_TEMPFAIL). Its partitions go to the other
   workers after the session timeout; the supervisor's fresh process rejoins and recovers anew.
   Nothing is lost: the successor rebuilds from the log and publishes only what was not
   published (crash-only, as an agent that fails, :mod:`correlators.app`).

The ``emitted`` changelog holds one compacted record per partition, so a healthy recovery reads
it in well under a second; ``stall_s`` (60 s) is the slack for a broker that is slow to answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from correlators.worker.ports import Clock

__all__ = ["STALL_S", "RecoveryWatch"]

#: How long table recovery may stay at the same number of records left before the worker gives up.
STALL_S = 60.0


class RecoveryWatch:
    """Gives up on a table recovery that has not moved for ``stall_s`` (module docstring)."""

    def __init__(self, remaining: Callable[[], int | None], give_up: Callable[[str], None], *,
                 stall_s: float = STALL_S, clock: Clock = time.monotonic) -> None:
        self._remaining = remaining  # records left to restore; None when not in recovery
        self._give_up = give_up
        self.stall_s = stall_s
        self._clock = clock
        self._left: int | None = None
        self._since = 0.0

    def check(self) -> bool:
        """One round (module docstring); True when it gave up."""
        left = self._remaining()
        now = self._clock()
        if left is None or left <= 0:  # 1.
            self._left = None
            return False
        if self._left is None or left != self._left:  # 2.
            self._left, self._since = left, now
            return False
        if now - self._since < self.stall_s:
            return False
        self._give_up(f"table recovery has had {left:,} changelog records left to read for "  # 3.
                      f"{now - self._since:.0f}s without reading one")
        return True
