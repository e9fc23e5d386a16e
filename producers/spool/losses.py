"""What a spooling publisher lost, counted by source, event kind and reason, and said once the broker answers.

Every event the publisher gives up on is counted here (issue 26: a full disk dropped records with
``dropped=0``), for one of these reasons:

* ``disk_full`` -- evicted, oldest segment first, to make room on a full disk;
* ``over_bound`` -- evicted, oldest segment first, past the spool's configured size;
* ``refused`` -- new records a full disk could not take, nothing older being left to evict;
* ``rejected`` -- refused by the broker for good (too large, invalid);
* ``unreadable`` -- a spooled record that failed its checksum or did not decode.

Each loss goes to ``faultline_producer_spool_lost_total{source, kind, reason}`` (and the total by
source to ``faultline_producer_dropped_total``, which pages: ``AgentDroppingEvents``). Losses not
yet reported are summed until a delivery succeeds again; then :meth:`Losses.report` makes one
dead letter of stage ``spool`` saying what was lost, when and why, which the publisher sends like
any other, so the archive (and ``faultline status``) learns it without anyone reading the node.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Literal

from common.deadletters import dead_letter
from producers import metrics
from streams.decisions import DeadLetter

__all__ = ["SPOOL_STAGE", "LossReason", "Losses", "kinds_of"]

LossReason = Literal["disk_full", "over_bound", "refused", "rejected", "unreadable"]
#: The stage of the dead letters that report a spool's losses.
SPOOL_STAGE = "spool"
_SHOWN = 8  # (source, kind) pairs named in a report's reason; all of them are in its raw


def kinds_of(value: bytes, events: int) -> Counter[str]:
    """The kinds of the events in one record's value (an event, a batch of them, or a dead letter)."""
    try:
        record = json.loads(value)
        if isinstance(record.get("events"), list):
            return Counter(str(e["body"]["kind"]) for e in record["events"])
        if "body" in record:
            return Counter({str(record["body"]["kind"]): events})
        if "stage" in record:
            return Counter({"dead_letter": events})
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return Counter({"unknown": events})


class Losses:
    """The losses of one publisher: counted as they happen, reported in a dead letter when it can deliver."""

    def __init__(self) -> None:
        self.total: Counter[tuple[str, str, str]] = Counter()
        self.pending: Counter[tuple[str, str, str]] = Counter()
        self._since: datetime | None = None
        self._until: datetime | None = None

    def add(self, source: str, value: bytes, events: int, reason: LossReason, at: datetime | None = None) -> None:
        """Count the events of one lost record."""
        now = at or datetime.now(UTC)
        for kind, n in kinds_of(value, events).items():
            self.total[(source, kind, reason)] += n
            self.pending[(source, kind, reason)] += n
            metrics.SPOOL_LOST.labels(source, kind, reason).inc(n)
        self._since = self._since or now
        self._until = now

    def report(self, at: datetime | None = None) -> DeadLetter | None:
        """One dead letter for the losses not yet reported (None: there were none); they count as reported."""
        if not self.pending:
            return None
        pending, self.pending = self.pending, Counter()
        since, until = self._since, self._until
        self._since = self._until = None
        events = sum(pending.values())
        why: Counter[str] = Counter()
        pairs: Counter[str] = Counter()
        for (source, kind, reason), n in pending.items():
            why[reason] += n
            pairs[f"{source}/{kind}"] += n
        shown = ", ".join(f"{pair} {n:,}" for pair, n in pairs.most_common(_SHOWN))
        more = f" and {len(pairs) - _SHOWN} more" if len(pairs) > _SHOWN else ""
        reason_text = (f"the spool lost {events:,} events ({', '.join(f'{r} {n:,}' for r, n in why.most_common())}) "
                       f"between {_iso(since)} and {_iso(until)}: {shown}{more}")
        raw = json.dumps({"events": events, "since": _iso(since), "until": _iso(until),
                          "lost": [{"source": s, "kind": k, "reason": r, "events": n}
                                   for (s, k, r), n in sorted(pending.items())]})
        return dead_letter(SPOOL_STAGE, reason_text, raw, at)


def _iso(t: datetime | None) -> str:
    return t.isoformat(timespec="seconds") if t is not None else "?"
