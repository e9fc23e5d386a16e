"""From an incident and the policy to commands: which, for what target, in what order.

Fencing (quarantine, cordon, drain) comes first, then approvals, the request that
a running job save now (``checkpoint_now``, for hardware that warns before it fails),
tickets, then notifications; the restart is planned separately once the failure has
settled and its gate has a verdict on every piece of the failed hardware, so it
is always issued after the fence that it avoids. An incident's second culprits
(hardware of another cause found while it was open) are fenced by their own
category's rule, in the same order.

A restart asks for what the job needs, not for a server: its GPU class (from the
scheduler's ``job_started``), the count its elasticity allows once the excluded
hardware is left out -- in whole nodes of the launcher's ``nproc_per_node``
(:mod:`correlators.elastic_size`) --, the newest valid checkpoint, and what to avoid -- the
fenced hardware, and what the gate excluded without a fence (suspect, or no
verdict in time), each with why -- and how it comes back, the cheapest way that can work
(``params.mode``: in process, a spare, a requeue; :mod:`correlators.restart_mode`). Every
command is built within the record cap (:mod:`correlators.bounded`): text and lists for people
are shortened and say so; a restart's exclude lists stay exact, or, past the cap, become whole
nodes (never fewer) and need approval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from correlators.blast_radius import BlastRadius
from correlators.bounded import bounded_command, fold_exclusions
from correlators.elastic_size import Sizing, restart_size
from correlators.incident_state import OpenIncident, stable_id
from correlators.policy import Policy
from correlators.quarantine_ledger import Fence, QuarantineLedger
from correlators.repair_units import REPAIR_KINDS, Unit, ticket_units
from correlators.restart_mode import choose_mode
from correlators.topology import Job, Topology
from streams.decisions import Command, Target

__all__ = ["Planner", "IMMEDIATE_ORDER", "WorkOwner"]

IMMEDIATE_ORDER = ("quarantine_gpu", "cordon_node", "drain_node", "reset_gpu", "reboot_node",
                   "validate_gpu", "checkpoint_now", "open_ticket", "notify")
APPROVAL_ALWAYS = frozenset({"reset_gpu", "reboot_node"})
# Work on hardware that one request covers, whichever incident (job) asks first.
HARDWARE_ONCE = frozenset({"drain_node", "reboot_node", "reset_gpu", "validate_gpu", "open_ticket"})
# What a second culprit of an incident gets from its own category's rule: its fence and its repair.
OTHER_ACTIONS = frozenset({"quarantine_gpu", "cordon_node", "drain_node", "reset_gpu", "reboot_node", "validate_gpu",
                           "open_ticket"})
TICKET_KIND = {
    "gpu_off_bus": "rma", "gpu_memory_fault": "rma", "gpu_nvlink_fault": "repair",
    "gpu_firmware_fault": "repair", "gpu_ecc_degradation": "rma", "gpu_thermal": "cooling",
    "power_supply_fault": "repair", "node_hardware_fault": "repair", "node_down": "repair",
    "rack_outage": "facilities", "checkpoint_failure": "storage",
}


@dataclass
class WorkOwner:
    """The incident that asked first for one piece of work on hardware (:data:`HARDWARE_ONCE`); under a
    physical unit's key (:mod:`correlators.repair_units`), ``gpu`` is the id of the ticket that holds it."""

    type: str
    category: str
    gpu: str | None
    incident: str


@dataclass
class Planner:
    """Plans over the engine's state: the topology, the fence ledger and who owns which hardware work
    (node -> owners; part of the state, so a snapshot keeps "one drain, one ticket")."""

    policy: Policy
    topo: Topology
    ledger: QuarantineLedger
    hardware_work: dict[str, list[WorkOwner]] = field(default_factory=dict)
    blast: BlastRadius = field(default_factory=BlastRadius)

    def immediate(self, inc: OpenIncident, now: datetime, only: tuple[str, ...] | None = None) -> list[Command]:
        """Every non-restart action of the incident's category not yet issued for it (or, for work on
        hardware, for another incident: two jobs on one dead node get one drain and one ticket), then those
        of its second culprits' categories for their hardware (fences and tickets). ``only``: of these types
        alone -- the others are not planned at all (planning a fence records it in the ledger)."""
        keep = set(only) if only is not None else None
        groups = [(inc.category, inc.hardware(), set(self.policy.rule(inc.category).actions))]
        groups += [(o.category, [(o.node, o.gpus)], set(self.policy.rule(o.category).actions) & OTHER_ACTIONS)
                   for o in inc.others]
        if keep is not None:
            groups = [(c, hw, actions & keep) for c, hw, actions in groups]
        out: list[tuple[str, Command]] = []
        for action in IMMEDIATE_ORDER:
            for category, hardware, actions in groups:
                if action in actions:
                    out.extend((category, c) for c in self._action(inc, category, hardware, action, now))
        cmds = [c for category, c in out if self._first_for_hardware(inc, category, c) and self._fresh(inc, c)]
        return self.blast.limit(cmds, self.policy.blast_radius, self.topo, self.ledger, now)

    def _first_for_hardware(self, inc: OpenIncident, category: str, cmd: Command) -> bool:
        if cmd.type not in HARDWARE_ONCE or cmd.target.node is None:
            return True
        if cmd.type == "open_ticket" and TICKET_KIND.get(category) in REPAIR_KINDS:
            return True  # one per physical unit: decided when it was planned (_units_left)
        owners = self.hardware_work.setdefault(cmd.target.node, [])
        for w in owners:
            if (w.type, w.category, w.gpu) == (cmd.type, category, cmd.target.gpu):
                return w.incident == inc.id
        owners.append(WorkOwner(cmd.type, category, cmd.target.gpu, inc.id))
        return True

    def fence_node(self, inc: OpenIncident, node: str, now: datetime) -> list[Command]:
        """Cordon ``node`` for ``inc`` (a culprit the evidence pins to the node: :mod:`correlators.pinned`)."""
        return [c for c in self._action(inc, inc.category, [(node, set())], "cordon_node", now) if self._fresh(inc, c)]

    def _units_left(self, inc: OpenIncident, category: str, hardware: list[tuple[str, set[int]]]
                    ) -> tuple[list[tuple[str, set[int]]], list[Unit]]:
        """One repair ticket per physical unit (:mod:`correlators.repair_units`): of a ticket's ``hardware``,
        what no ticket covers yet (a unit already ticketed -- by this incident's earlier ticket, or by another
        incident, which the text then links -- is left out), and the units that are left."""
        units = ticket_units(self.topo, category, hardware)
        held = {u.key: w for u in units for w in self.hardware_work.get(u.key, []) if w.type == "open_ticket"}
        for u in units:
            w = held.get(u.key)
            if w is not None and w.incident != inc.id and w.gpu and w.gpu not in inc.summary:
                inc.summary = f"{inc.summary}; {u.label} already has repair ticket {w.gpu} " \
                              f"(incident {w.incident}): one ticket per physical unit, linked from here"
        new = [u for u in units if u.key not in held]
        left: dict[str, set[int]] = {}
        for u in new:
            left.setdefault(u.node, set()).update(() if u.index is None else (u.index,))
        return [(n, left[n]) for n, _ in hardware if n in left], new

    def _ticket(self, inc: OpenIncident, category: str, hardware: list[tuple[str, set[int]]],
                now: datetime) -> list[Command]:
        """The open_ticket of ``category`` over ``hardware``: for a repair, only over the units no ticket covers
        yet (none left: no ticket), each unit then held by it."""
        main = category == inc.category
        repair = TICKET_KIND.get(category) in REPAIR_KINDS
        units: list[Unit] = []
        whole = hardware
        if repair:
            hardware, units = self._units_left(inc, category, hardware)
            if not units:
                return []
        first, blamed = (hardware[0] if hardware else (None, set()))
        narrowed = hardware != whole
        one = first is not None and len(blamed) == 1 and (narrowed and len(hardware) == 1 or not main or not inc.more)
        gpu = self.topo.gpu_id(first, sorted(blamed)[0]) if one and first else None
        summary = inc.summary if main else next((o.reason for o in inc.others if o.category == category
                                                 and o.node == first), category)
        tag = "" if main else category
        params = {"kind": TICKET_KIND.get(category, "investigate"), "category": category,
                  "nodes": [n for n, _ in hardware],
                  "gpus": [self.topo.gpu_id(n, i) for n, g in hardware for i in sorted(g)], "summary": summary}
        target = Target(job=inc.job, node=first, gpu=gpu)
        cmd = self._cmd(inc, "open_ticket", now, target, params, tag=tag)
        if units and (narrowed or cmd.id in inc.issued):  # what is left of a grown fault: named by its units
            cmd = self._cmd(inc, "open_ticket", now, target, params,
                            tag=f"{tag}+{','.join(sorted({u.key for u in units}))}")
        for key in sorted({u.key for u in units}):
            self.hardware_work.setdefault(key, []).append(WorkOwner("open_ticket", category, cmd.id, inc.id))
        return [cmd]

    def notify(self, inc: OpenIncident, now: datetime, message: str, severity: str) -> list[Command]:
        cmd = self._notify_cmd(inc, now, message, severity)
        return self.blast.limit([cmd], self.policy.blast_radius, self.topo, self.ledger, now) if self._fresh(inc, cmd) else []

    def restart(self, inc: OpenIncident, job: Job, checkpoint: dict[str, Any] | None, now: datetime,
                requires_approval: bool, reason: str, extra_exclude_nodes: list[str],
                extra_exclude_gpus: Sequence[tuple[str, int]] = (), extra: dict[str, Any] | None = None) -> Command:
        """The restart command: fenced hardware and ``extra_exclude_*`` left out, the size that leaves, the
        job's GPU class; ``extra`` params (the gate's exclusions, what the checkpoint choice cost)."""
        exclude_nodes = sorted(set(self.ledger.nodes) | set(extra_exclude_nodes))
        out = set(exclude_nodes)
        gpus = {(n, i) for (n, i) in self.ledger.quarantined() if n not in out}
        gpus |= {(n, i) for (n, i) in extra_exclude_gpus if n not in out}
        exclude_nodes, exclude_gpus, folded = fold_exclusions(
            exclude_nodes, [(n, self.topo.gpu_id(n, i)) for (n, i) in gpus])
        if folded:  # exact lists past the record cap: whole nodes instead (a superset), a person approves
            out = set(exclude_nodes)
            gpus = set()
            requires_approval = True
            reason = (f"{reason}; exclusions folded into {len(out):,} whole nodes to fit one record "
                      "(fewer GPUs than possible): needs approval")
        sizing = self._restart_size(job, out, gpus)
        if sizing.elastic or job.name in self.topo.launch:  # say which rule sized it
            extra = {**(extra or {}), "sizing": sizing.params()}
            reason = f"{reason}; {sizing.text()}"
        params: dict[str, Any] = {
            "checkpoint": checkpoint,
            "gpus": sizing.gpus,
            "gpu_class": job.spec.gpu_class,
            "exclude": {"nodes": exclude_nodes, "gpus": exclude_gpus},
            "attempt": inc.restart_attempts + 1,
            **(extra or {}),
        }
        capacity = self._capacity(job, out, gpus)
        if capacity is not None:
            params["capacity_known"] = capacity
        own = job.rank_of
        way = choose_mode(self.policy.restart_modes, gpus=sizing.gpus, in_process_launcher=job.name in self.topo.launch,
                          avoids_own_hardware=any(n in out for n in job.nodes) or any(g in own for g in gpus),
                          capacity_known=capacity)
        params.update(way.params())
        reason = f"{reason}; {way.why}"
        inc.avoided_nodes = set(out)
        inc.avoided_gpus = {}
        for n, i in gpus:
            inc.avoided_gpus.setdefault(n, set()).add(i)
        cmd = self._cmd(inc, "restart_job", now, Target(job=job.name), params, tag=str(inc.restart_attempts + 1),
                        requires_approval=requires_approval, reason=reason)
        inc.issued.add(cmd.id)
        return cmd

    # --- helpers -------------------------------------------------------------------
    def _restart_size(self, job: Job, excluded_nodes: set[str], excluded_gpus: set[tuple[str, int]]) -> Sizing:
        """Whole nodes of the job's launcher, of what is neither left out nor fenced (elastic_size.py)."""
        return restart_size(job, self.topo.launch.get(job.name), lambda n, i: n not in excluded_nodes
                            and (n, i) not in excluded_gpus and not self.ledger.is_fenced(n, i))

    def _capacity(self, job: Job, excluded_nodes: set[str], excluded_gpus: set[tuple[str, int]]) -> int | None:
        """Healthy GPUs the job could run on as far as this cell knows: its own that are left, and those of the
        inventory no other running job holds (None: no inventory known)."""
        if not any(n.gpus for n in self.topo.nodes.values()):
            return None
        busy = {place for j in self.topo.jobs.values() if j.running and j.name != job.name for place in j.rank_of}
        return sum(1 for n in self.topo.nodes.values() if n.name not in excluded_nodes and not self.ledger.is_fenced(n.name)
                   for i in n.gpus if (n.name, i) not in excluded_gpus and not self.ledger.is_fenced(n.name, i)
                   and (n.name, i) not in busy)

    def _action(self, inc: OpenIncident, category: str, hardware: list[tuple[str, set[int]]], action: str,
                now: datetime) -> list[Command]:
        out: list[Command] = []
        if action in ("quarantine_gpu", "reset_gpu", "validate_gpu"):
            for node, gpus in hardware:
                for i in sorted(gpus):
                    cmd = self._cmd(inc, action, now, Target(job=inc.job, node=node, gpu=self.topo.gpu_id(node, i)),
                                    {"reason": category})
                    if action == "quarantine_gpu" and not self.ledger.quarantine(
                            node, i, Fence(now, inc.id, category, cmd.id)):
                        continue
                    out.append(cmd)
            return out
        if action in ("cordon_node", "drain_node", "reboot_node"):
            for node, _ in hardware:
                cmd = self._cmd(inc, action, now, Target(job=inc.job, node=node), {"reason": category})
                if action == "cordon_node" and not self.ledger.cordon(node, Fence(now, inc.id, category, cmd.id)):
                    continue
                out.append(cmd)
            return out
        if action == "checkpoint_now":
            return self._checkpoint_now(inc, category, hardware, now)
        if action == "open_ticket":
            return self._ticket(inc, category, hardware, now)
        if action == "notify":
            return self._tell(inc, now)
        return []

    def _checkpoint_now(self, inc: OpenIncident, category: str, hardware: list[tuple[str, set[int]]],
                        now: datetime) -> list[Command]:
        """Ask the incident's job to save a checkpoint at its next step, once: only while the job runs (a
        failed or ended run has nothing left to save, and its restart loads the newest checkpoint) and
        only on hardware it uses. The target names the hardware that warned, for the person reading it."""
        job = self.topo.jobs.get(inc.job) if inc.job else None
        if job is None or not job.running:
            return []
        used = [(node, sorted(i for i in gpus if (node, i) in job.rank_of)) for node, gpus in hardware
                if node in job.nodes]
        if not used:
            return []
        node, gpus = used[0]
        where = f"{node} GPU {gpus[0]}" if gpus else node
        # its id is the job's alone, so a second GPU warning in the same incident asks nothing more
        cmd = self._cmd(inc, "checkpoint_now", now, Target(job=job.name), {"reason": category},
                        reason=f"{category} on {where}, which {job.name} runs on: save now, before it may fail")
        return [cmd.model_copy(update={"target": Target(job=job.name, node=node,
                                                        gpu=self.topo.gpu_id(node, gpus[0]) if gpus else None)})]

    def _tell(self, inc: OpenIncident, now: datetime) -> list[Command]:
        """The notify of the incident's current facts: once per change of them, at most once per
        ``timing.notify_min_interval_s`` -- a change inside it sets ``inc.tell_at``, when the current facts
        are told (the lifecycle's ``tell`` timer), whatever changed meanwhile."""
        cmd = self._notify_cmd(inc, now, inc.summary or inc.category, inc.severity)
        if cmd.id in inc.issued:
            return []
        gap = self.policy.timing.notify_min_interval_s
        if inc.told_at is not None and (now - inc.told_at).total_seconds() < gap:
            inc.tell_at = inc.told_at + timedelta(seconds=gap)
            return []
        inc.told_at, inc.tell_at = now, None
        return [cmd]

    def _notify_cmd(self, inc: OpenIncident, now: datetime, message: str, severity: str) -> Command:
        target = Target(job=inc.job, node=inc.node if inc.job is None else None)
        return self._cmd(inc, "notify", now, target,
                         {"to": self._owner(inc), "severity": severity, "message": message}, tag=message)

    def _owner(self, inc: OpenIncident) -> str:
        job = self.topo.jobs.get(inc.job) if inc.job else None
        return (job.owner if job and job.owner else None) or "on-call"

    def _cmd(self, inc: OpenIncident, ctype: str, now: datetime, target: Target, params: dict[str, Any],
             tag: str = "", requires_approval: bool = False, reason: str = "") -> Command:
        cid = stable_id("cmd", inc.id, ctype, target.job, target.node, target.gpu, tag)
        return bounded_command(Command(
            id=cid, incident=inc.id, type=ctype,  # type: ignore[arg-type]
            target=target, issued_at=now,
            requires_approval=requires_approval or ctype in APPROVAL_ALWAYS,
            params=params, reason=reason or f"{inc.category}: {inc.summary}".strip(": "),
        ))

    @staticmethod
    def _fresh(inc: OpenIncident, cmd: Command) -> bool:
        if cmd.id in inc.issued:
            return False
        inc.issued.add(cmd.id)
        return True
