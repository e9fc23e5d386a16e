"""No single source can fence a fleet (issue 26): a forged storm of XID 79 lines for every node of a cell."""

from __future__ import annotations

from builder import Capture

from correlators.blast_radius import FENCES
from correlators.engine import Correlator
from correlators.policy import load_policy
from producers.capture.screen import Accepted, CaptureScreen
from streams.decisions import Command, Incident
from streams.events import EndOfCapture, Event


def _decide(lines: list[str]) -> tuple[list[Incident], list[Command]]:
    events = [e for v in CaptureScreen().screen(x.encode() for x in lines) if isinstance(v, Accepted) for e in v.events]
    eng = Correlator(load_policy())
    incidents: list[Incident] = []
    commands: list[Command] = []
    for e in [*events, Event(id="end", ts=events[-1].ts, source="replay", body=EndOfCapture())]:
        for d in eng.process(e):
            if isinstance(d, Incident):
                incidents.append(d)
            elif isinstance(d, Command):
                commands.append(d)
    return incidents, commands


def test_a_forged_xid79_storm_on_every_node_fences_no_more_than_the_limit() -> None:
    limits = load_policy().blast_radius
    cap = Capture(duration=900)
    nodes = [f"n{i:03d}" for i in range(200)]
    for i, node in enumerate(nodes):
        cap.node(node, rack=f"r{i // 20}")
    cap.heartbeats(every=60)
    for i, node in enumerate(nodes):
        cap.xid(300 + i * 0.5, node, 0, 79)  # one line per node, 100 s in all: forged, every node at once
    incidents, commands = _decide(cap.lines())

    fences = [c for c in commands if c.type in FENCES]
    free = [c for c in fences if not c.requires_approval]
    assert len({c.target.node for c in free}) == limits.max_nodes_per_cell, "no more than the limit fenced"
    waiting = [c for c in fences if c.requires_approval]
    assert {c.target.node for c in waiting} == set(nodes) - {c.target.node for c in free}, "the rest waits"
    assert all("blast radius: " in c.reason and "the limit is 16" in c.reason for c in waiting)
    latest = {i.id: i for i in incidents}
    said = [i for i in latest.values() if "blast radius" in i.summary]
    assert len(said) == len({c.incident for c in waiting}), "each incident with a held fence says why"


def test_tickets_past_the_threshold_are_grouped_into_one() -> None:
    limits = load_policy().blast_radius
    cap = Capture(duration=900)
    for i in range(200):
        cap.node(f"n{i:03d}", rack=f"r{i // 20}")
    cap.heartbeats(every=60)
    for i in range(200):
        cap.xid(300 + i * 0.5, f"n{i:03d}", 0, 79)
    _, commands = _decide(cap.lines())
    tickets = [c for c in commands if c.type == "open_ticket"]
    [grouped] = [c for c in tickets if c.params.get("category") == "grouped"]
    assert len(tickets) == limits.group_past + 1, "one each up to the threshold, then one grouped ticket"
    assert "blast radius: more than 10 open_ticket" in grouped.reason
