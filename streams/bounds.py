"""How large one published record may be, and how long lists are kept short in a person's words.

:data:`MAX_RECORD_BYTES` is the cap of every record faultline publishes (incidents, commands,
notify and ticket text, dead letters, control records), measured as its serialised JSON value
(``model_dump_json().encode()``), UTF-8. Kafka's default limit is 1 MB per request
(``max.request.size``) and per record batch (``message.max.bytes``); 64 KiB leaves room for
batching, headers and a topic configured smaller. The cap is enforced where a record is built
(the incident lifecycle, the restart gate, the planner, :mod:`common.deadletters`): what grows
with a job's size (ranks, nodes, evidence lines, gate state per node) is kept as ranges, counts
and the first few names, and the full detail stays in the archive, which keeps every event.

The helpers here are pure and deterministic (same input, same words) so two workers that judge
the same record publish the same bytes:

- :func:`rank_ranges` -- ``16–23, 40`` (at most ``limit`` runs, then ``and 8,184 others``)
- :func:`names` -- ``n0017, n0018 … (+2)``
- :func:`capped` -- the first ``limit`` items of a list and the line ``and 16,380 more``
- :func:`record_bytes` / :func:`fits` -- a model's serialised size, against the cap
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

__all__ = ["EVIDENCE_KEPT", "LIST_KEPT", "MAX_EVENT_BYTES", "MAX_RECORD_BYTES", "TEXT_KEPT_CHARS", "capped", "fits", "names",
           "rank_ranges", "record_bytes", "shorten"]

#: The most one published record may take, serialised (JSON, UTF-8), in bytes.
MAX_RECORD_BYTES = 64 * 1024
#: The most one *event* may take as its readers decode it (JSON, UTF-8, uncompressed), in bytes. Larger than
#: :data:`MAX_RECORD_BYTES` because an event is an observation, not a summary: the scheduler's ``job_started``
#: lists the whole allocation, about 93 KB for 1,024 nodes of 8 GPUs and 190 KB for the 2,048 nodes of a
#: 16,384-GPU job, so a 64 KiB cap dead-lettered the very record that says which job a fault belongs to. One
#: MiB (Kafka's default ``message.max.bytes``, which the broker applies to *compressed* bytes) holds a
#: 10,000-node allocation and still refuses a compressible 10 MB record; a capture line (at most 512 KiB)
#: always fits. What the engine builds from an event stays under :data:`MAX_RECORD_BYTES`.
MAX_EVENT_BYTES = 1024 * 1024
#: Evidence lines an incident keeps (the rest: one line "and N more", the archive has them all).
EVIDENCE_KEPT = 24
#: Items of a per-node / per-GPU list a record keeps in full before it turns into a count.
LIST_KEPT = 16
#: The most characters of one free-text field (a summary, a reason, one evidence line).
TEXT_KEPT_CHARS = 2_000


class _Dumps(Protocol):
    def model_dump_json(self) -> str: ...


def record_bytes(record: _Dumps) -> int:
    """The size of ``record`` as it is published: its JSON, UTF-8 encoded."""
    return len(record.model_dump_json().encode())


def fits(record: _Dumps, limit: int = MAX_RECORD_BYTES) -> bool:
    """Whether ``record`` is within the cap."""
    return record_bytes(record) <= limit


def _runs(values: Iterable[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs


def rank_ranges(ranks: Iterable[int], limit: int = 8) -> str:
    """Ranks as sorted runs, ``16–23, 40``; past ``limit`` runs the rest is counted:
    ``0–7, 16–23 and 8,184 others``. Empty: ``""``."""
    runs = _runs(ranks)
    shown = runs[:limit]
    text = ", ".join(f"{a}–{b}" if b > a else f"{a}" for a, b in shown)
    rest = sum(b - a + 1 for a, b in runs[limit:])
    return f"{text} and {rest:,} others" if rest else text


def names(items: Iterable[str], limit: int = 3) -> str:
    """Sorted unique names, the first ``limit`` shown: ``n0017, n0018 … (+2)``. Empty: ``""``."""
    unique = sorted(set(items))
    text = ", ".join(unique[:limit])
    rest = len(unique) - limit
    return f"{text} … (+{rest:,})" if rest > 0 else text


def shorten(text: str, limit: int = TEXT_KEPT_CHARS) -> str:
    """``text`` cut at ``limit`` characters, with ``…`` where it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def capped(items: Sequence[str], limit: int = EVIDENCE_KEPT, where: str = "") -> list[str]:
    """The first ``limit`` lines (each shortened), then one line ``and N more`` (``where``: how to find them)."""
    kept = [shorten(s) for s in items[:limit]]
    rest = len(items) - limit
    if rest > 0:
        kept.append(f"and {rest:,} more" + (f" ({where})" if where else ""))
    return kept
