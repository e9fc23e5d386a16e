"""What a repair ticket repairs: its physical units (issue #25 class 6, "one ticket per physical thing").

The rule: **at most one repair ticket per physical unit**, whichever incident, category or version asks
for it. A unit is what a technician replaces or fixes:

* a **power domain** (a supply, named by the inventory's ``power_domain``; a GPU without one is fed by
  its node's own supply) for a ``power_supply_fault`` -- one PDU feeding GPUs of two nodes and two jobs
  is one unit;
* a **GPU** (node and index: the slot, whatever form of id the lines used) for a fault of GPUs;
* a **node** for a node's own fault (down, hardware, its rack's outage), or a fault that names no GPU.

The planner asks :func:`ticket_units` for the units of a ticket it plans and leaves out every unit a
ticket already covers (its own earlier ticket, or another incident's): an incident whose fault grew, or
gained a second culprit, is not re-ticketed for what was ticketed; a ticket for what is left names only
the new units; the incident's text links the ticket that holds a unit for another incident. Tickets
that repair no physical unit (a storage system's, an investigation) are not units' tickets
(:data:`REPAIR_KINDS`).
"""

from __future__ import annotations

from dataclasses import dataclass

from correlators.topology import Topology

__all__ = ["NODE_UNIT", "REPAIR_KINDS", "Unit", "ticket_units"]

#: Categories whose repair is the node's, whatever GPUs they name.
NODE_UNIT = frozenset({"node_down", "node_hardware_fault", "rack_outage"})
#: Ticket kinds (planner's ``TICKET_KIND``) that repair a physical unit of the fleet.
REPAIR_KINDS = frozenset({"rma", "repair", "cooling", "facilities"})


@dataclass(frozen=True)
class Unit:
    """One physical unit a ticket covers, and the hardware of the ticket that maps to it."""

    key: str  # the planner's hardware-work key: ``power_domain:<d>``, ``gpu:<node>:<index>``, ``node:<node>``
    label: str  # for people: "power domain pdu-7", "n01 GPU 3", "node n01"
    node: str
    index: int | None  # the GPU of the ticket's hardware that maps to the unit (None: the node)


def ticket_units(topo: Topology, category: str, hardware: list[tuple[str, set[int]]]) -> list[Unit]:
    """The units of a ticket for ``category`` over ``hardware`` (node, GPU indices), one per GPU or node of
    it, in its order (several GPUs can map to one power domain: the key repeats)."""
    out: list[Unit] = []
    for node, gpus in hardware:
        if not gpus or category in NODE_UNIT:
            out.append(Unit(f"node:{node}", f"node {node}", node, None))
            continue
        for i in sorted(gpus):
            if category == "power_supply_fault":
                dom = topo.gpu(node, i).power_domain or node
                out.append(Unit(f"power_domain:{dom}", f"power domain {dom}", node, i))
            else:
                out.append(Unit(f"gpu:{node}:{i}", f"{node} GPU {i}", node, i))
    return out
