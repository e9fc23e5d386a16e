"""The contract's output: ``{"incidents": [...], "commands": [...]}`` from a stream of decisions."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from faultline.terminal import to_plain
from streams.decisions import Command, Incident

__all__ = ["collate", "decide_offline"]


def _as_json(d: Incident | Command) -> dict[str, Any]:
    """The record as the contract prints it: plain JSON data, times in faultline's one RFC 3339 form."""
    plain: dict[str, Any] = to_plain(d)
    return plain


def collate(incidents: Iterable[Incident], commands: Iterable[Command]) -> dict[str, list[dict[str, Any]]]:
    """Latest version of each incident (in the order they opened) and every command once, in issue order."""
    latest: dict[str, Incident] = {}
    for inc in incidents:
        if inc.id not in latest or inc.version >= latest[inc.id].version:
            latest[inc.id] = inc
    seen: set[str] = set()
    cmds = []
    for c in commands:
        if c.id not in seen:
            seen.add(c.id)
            cmds.append(_as_json(c))
    return {"incidents": [_as_json(i) for i in latest.values()], "commands": cmds}


def decide_offline(lines: Iterable[bytes | str], policy_path: str | None = None,
                   on_decisions: Callable[[list[Incident | Command]], None] | None = None,
                   ) -> dict[str, list[dict[str, Any]]]:
    """Run capture lines through the capture screen, the parsers and the correlator in-process (no broker).

    The same code `faultline replay` and the Faust worker run (bad lines are
    refused by the same :class:`~producers.capture.screen.CaptureScreen`), so
    the decisions agree; used by the tests to check decisions in milliseconds.
    """
    from correlators.engine import Correlator
    from correlators.policy import load_policy
    from producers.capture.screen import Accepted, CaptureScreen
    from streams.events import EndOfCapture, Event

    engine = Correlator(load_policy(policy_path))
    incidents: list[Incident] = []
    commands: list[Command] = []

    def take(decisions: list[Incident | Command]) -> None:
        for d in decisions:
            (incidents if isinstance(d, Incident) else commands).append(d)  # type: ignore[arg-type]
        if on_decisions is not None:
            on_decisions(decisions)  # after every event: tests check invariants as the engine goes

    n = 0
    last = None
    for verdict in CaptureScreen().screen(raw.encode() if isinstance(raw, str) else raw for raw in lines):
        n = verdict.line
        if isinstance(verdict, Accepted):
            for e in verdict.events:
                last = e
                take(engine.process(e))
    if last is not None:
        take(engine.process(Event(id=f"end-{n}", ts=last.ts, source="replay", body=EndOfCapture(lines=n))))
    return collate(incidents, commands)
