"""Where a capture may end: the replay-only ``end_of_capture`` record is refused on a live events topic.

``end_of_capture`` (:class:`streams.events.EndOfCapture`) tells the correlator that a capture was sent
whole: its engine judges every pending decision at once (:meth:`correlators.engine.Correlator.finish`)
and the worker publishes the end to ``control``. That is what a replay, a demo or a benchmark needs at
the end of the capture it runs through a namespace of its own. On a live events topic it is an
attack: anyone with an agent's credential could close every debounce and settle window early, and
the decisions would be made before their evidence is in.

So a capture ends only in a **scratch namespace** -- ``<namespace>.<kind>-<id>``, the name
``faultline replay``, ``demo`` and ``bench`` give the namespace they make and throw away
(:func:`streams.topics.is_replay_namespace`). Elsewhere the worker dead-letters the record with the
reason (:func:`screen_ends`), and the engine of a live worker refuses it again (``replay=False``:
it moves no clock and takes no id), so a rebuild from the log, which has no dead letters, decides alike.
"""

from __future__ import annotations

from collections.abc import Iterable

from streams.events import EndOfCapture, Event
from streams.topics import SCRATCH_KINDS, is_replay_namespace

__all__ = ["end_refused", "screen_ends"]


def end_refused(namespace: str) -> str | None:
    """Why an ``end_of_capture`` is refused in ``namespace``, or None where a capture may end."""
    if is_replay_namespace(namespace):
        return None
    kinds = ", ".join(f"<namespace>.{kind}-<id>" for kind in SCRATCH_KINDS)
    return (f"end_of_capture refused: a replay-only record, and {namespace!r} is not a replay namespace "
            f"({kinds}): a live capture never ends")


def screen_ends(events: Iterable[Event], namespace: str) -> tuple[list[Event], list[tuple[Event, str]]]:
    """``events`` split into those to judge and the ``end_of_capture`` records refused, each with its reason."""
    why = end_refused(namespace)
    keep: list[Event] = []
    refused: list[tuple[Event, str]] = []
    for e in events:
        if why is not None and isinstance(e.body, EndOfCapture):
            refused.append((e, why))
        else:
            keep.append(e)
    return keep, refused
