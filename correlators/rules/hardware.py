"""Rules over what the hardware reports: XIDs, NVML samples, kernel faults; fencing it, debounced and
grouped by power domain.

A GPU finding is not fenced at once: it waits ``fence_debounce_s`` (the
``fence`` timer) so that the GPUs one power fault takes down together -- several
of one power domain, or any with a power-supply SEL near -- become one
``power_supply_fault`` on the node rather than one ``gpu_off_bus`` per card.
Some XIDs count only when NVML shows rows pending remap (``confirm`` waits for
the next reading). A GPU that stops appearing in NVML while the other GPUs of
its node keep reporting is gone (``gone``, judged in the node's own NVML time,
:mod:`correlators.nvml_presence`): the same evidence as XID 79, without the
kernel line. Findings on hardware no job runs on become condition incidents of
the hardware -- unless a job failed on it and was cancelled while its incident waited
for this verdict: that incident, closed by the cancel, takes the verdict and its fences
(:meth:`IncidentLifecycle.after_end`), and nothing is restarted.

The liveness rules (silence, the BMC) report what they conclude through
:meth:`HardwareRules.node_finding` and :meth:`HardwareRules.power_supply_sel`.

A node whose own parts failed (a BMC hardware SEL of its CPU, memory or board, or an uncorrected
machine check from its kernel) and on which a rank crashed within ``hardware_lookback_s`` of it,
in either order, is a ``node_hardware_fault`` even though its agent keeps talking (the contract:
"in-band silence *or crash* with a BMC hardware SEL"): the crash is that hardware's, not the
software's (:meth:`HardwareRules.rank_crashed`, :meth:`HardwareRules.node_fault_logged`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from correlators.clock import source_key
from correlators.findings import FAILURE_CATEGORIES, Finding
from correlators.incident_state import OpenIncident
from correlators.lifecycle import IncidentLifecycle
from correlators.nvml_presence import NvmlNode
from correlators.restart_gate import hear, human
from correlators.rules.base import EventHandler, OnTimer, RuleContext
from correlators.state import AwaitingRemap, LostGpu
from correlators.timers import TimerKey, TimerName
from correlators.topology import Job
from streams import events as ev

__all__ = ["HardwareRules"]

#: Crash times kept per node: a fault of its own parts reported late still finds the crash beside it.
RANK_CRASHES_KEPT = 16


class HardwareRules:
    """XID, NVML and kernel-fault detectors, the fence debounce and the power grouping."""

    def __init__(self, ctx: RuleContext, lifecycle: IncidentLifecycle) -> None:
        self.state = ctx.state
        self.p = ctx.policy
        self.life = lifecycle
        self.queue = ctx.state.timers

    def event_handlers(self) -> Mapping[str, EventHandler]:
        return {"xid": self._on_xid, "gpu_lost": self._on_gpu_lost, "kernel_fault": self._on_kernel_fault,
                "gpu_sample": self._on_gpu_sample}

    def timer_handlers(self) -> Mapping[TimerName, OnTimer]:
        return {"fence": OnTimer(self._timer_fence, at_end=True),
                "confirm": OnTimer(self._timer_confirm, at_end=True),
                "psu_check": OnTimer(self._timer_psu_check, at_end=True),
                "gone": OnTimer(self._timer_gone, at_end=False)}

    # --- kernel and NVML --------------------------------------------------------------
    def _on_xid(self, e: ev.Event, b: ev.Xid) -> None:
        node = e.node
        idx = self.state.topology.resolve(node, b.gpu)
        category = self.p.xid.get(b.code)
        if node is None or idx is None or category is None:
            return
        if category == "software":
            return  # evidence for a software crash, never a hardware fault alone
        reason = f"XID {b.code} on {node} GPU {idx}"
        health = self.state.gpu_health(node, idx)
        if b.code in self.p.xid_needs_pending_remap:
            after = health.remap_reading
            if after is not None and after[0] >= e.ts:  # the XID came in late: NVML has spoken already
                if not after[1]:
                    return
            elif not self._remap_pending(node, idx, e.ts):
                self.state.awaiting_remap.setdefault(node, {})[idx] = AwaitingRemap(e.ts, e.id)
                self.queue.arm_after("confirm", (node, idx), e.ts, self.p.timing.confirm_window_s)
                return
            reason += " with remapped rows pending"
        if category == "gpu_ecc_degradation":
            if health.note_sbe(e.ts, self.p.thresholds):
                self._gpu_condition(node, idx, category, e.ts, reason + ": rising single-bit ECC rate", e.id)
            return
        self.queue_fence(node, Finding(category, e.ts, node, [idx], reason, e.id))

    def _on_gpu_lost(self, e: ev.Event, b: ev.GpuLost) -> None:
        idx = self.state.topology.resolve(e.node, b.gpu)
        if e.node and idx is not None:
            self.queue_fence(e.node, Finding("gpu_off_bus", e.ts, e.node, [idx], f"GPU {idx} lost", e.id))

    def _on_kernel_fault(self, e: ev.Event, b: ev.KernelFault) -> None:
        if e.node and b.fault == "host_oom":
            self.state.host_oom[e.node] = e.ts
        elif e.node and b.fault == "machine_check" and b.severity in ("uncorrected", "fatal"):
            self.state.bmc_view(e.node).hardware_fault("cpu", b.message, e.ts)
            self.node_fault_logged(e.node, e.ts, e.id, "machine check logged by the kernel")

    # --- a crash on a node whose own parts failed -------------------------------------
    def rank_crashed(self, node: str, ts: datetime, evidence: str | None) -> None:
        """A rank placed on ``node`` crashed at ``ts``: the node's fault, if its parts failed near then (any of
        its faults: a later SEL of the same node hides neither the one beside the crash nor its time)."""
        s = self.state
        crashes = s.rank_crashed.setdefault(node, [])
        crashes.append(ts)
        del crashes[:-RANK_CRASHES_KEPT]
        view = s.bmc.get(node)
        near = view.node_fault_near(ts, self.p.timing.hardware_lookback_s) if view is not None else None
        if near is not None:
            at, what = near
            self._node_fault(node, min(ts, at), f"a {what} fault logged by its BMC", evidence)

    def node_fault_logged(self, node: str, ts: datetime, evidence: str | None, what: str) -> None:
        """``node``'s own parts failed at ``ts`` (a hardware SEL or a machine check): a rank that crashed
        there near then crashed of it (the crash nearest the fault: a later crash of the node, heard before a
        late SEL, hides neither the one beside it nor its time)."""
        near = [t for t in self.state.rank_crashed.get(node, ()) if self._near(t, ts)]
        if near:
            crashed = min(near, key=lambda t: abs((t - ts).total_seconds()))
            self._node_fault(node, min(ts, crashed), what, evidence)

    def _near(self, then: datetime | None, now: datetime) -> bool:
        return then is not None and abs((now - then).total_seconds()) <= self.p.timing.hardware_lookback_s

    def _node_fault(self, node: str, ts: datetime, what: str, evidence: str | None) -> None:
        self.node_finding(Finding("node_hardware_fault", ts, node,
                                  reason=f"node_hardware_fault: {what} on {node}, where a rank crashed",
                                  evidence=evidence))

    def _on_gpu_sample(self, e: ev.Event, b: ev.GpuSample) -> None:
        node = e.node
        idx = self.state.topology.resolve(node, b.gpu)
        if node is None or idx is None:
            return
        self._present(node, idx, e.ts, e.source)
        health = self.state.gpu_health(node, idx)
        for category, reason in health.observe(e.ts, b.metrics, self.p.thresholds):
            if category in FAILURE_CATEGORIES:
                self.queue_fence(node, Finding(category, e.ts, node, [idx], reason, e.id))
            else:
                self._gpu_condition(node, idx, category, e.ts, reason, e.id)
        on_node = self.state.awaiting_remap.get(node)
        waiting = on_node.get(idx) if on_node else None
        reading = health.remap_reading
        if on_node and waiting and reading is not None and reading[0] >= waiting.since:
            # the first reading of the flag after the XID decides, whichever way it goes
            self._stop_awaiting(node, idx)
            self.queue.cancel("confirm", (node, idx))
            if reading[1]:
                self.queue_fence(node, Finding("gpu_memory_fault", waiting.since, node, [idx],
                                               "XID with remapped rows pending", waiting.evidence))

    # --- a GPU gone from NVML, without a kernel line -------------------------------------
    def _present(self, node: str, idx: int, ts: datetime, source: str) -> None:
        """An NVML sample of the GPU: it is present. The node's ``gone`` timer looks at its GPUs' absences
        once one of them could be overdue (one timer per node, not per GPU or per sample). The restart gate
        hears it when it was taken: a late sample placed at the cell's clock was still taken at its own stamp,
        unless its source runs behind as a rule (then its arrival says more than its stamp)."""
        s = self.state
        stamp = s.sources.stamp or ts
        nv = s.nvml.get(node) or s.nvml_node(node)
        nv.observe(idx, ts, stamp)  # the node's cadence from its own stamps, even when screened
        if s.gate_watch:  # (the common case, no gate open, costs no call)
            hear(s, node, "nvml", ts if stamp >= ts or s.sources.lags(source_key(node, source)) else stamp, idx)
        cad = nv.cad
        if cad is not None and not self.queue.armed("gone", (node,)):
            self.queue.arm_after("gone", (node,), self.state.clock or ts, self.p.thresholds.gpu_lost_factor * cad)

    def _timer_gone(self, key: TimerKey, due: datetime) -> None:
        """Has one of the node's GPUs missed ``gpu_lost_factor`` of its sample intervals while the node's other
        GPUs went on reporting (in the node's own NVML time)? Then it is gone: ``gpu_off_bus``."""
        node = str(key[0])
        nv = self.state.nvml.get(node)
        factor = self.p.thresholds.gpu_lost_factor
        cad = nv.cadence() if nv is not None else None
        if nv is None or cad is None or nv.newest is None or nv.quiet(due, factor):
            return  # unknown cadence, or the node's NVML as a whole stopped: its silence is the node's to judge
        window = timedelta(seconds=factor * cad)
        for idx, last in sorted(nv.last.items()):
            if idx not in nv.gone and nv.newest >= last + window:
                self._gone(node, nv, idx, last, cad)
        nxt = nv.next_overdue(factor)
        if nxt is not None:  # when the next GPU could be overdue, in engine time
            self.queue.arm("gone", key, due + max(nxt - nv.newest, timedelta(seconds=cad / 2)))

    def _gone(self, node: str, nv: NvmlNode, idx: int, last: datetime, cad: float) -> None:
        others = len(nv.last) - 1
        if others < 1 or nv.reporting_since(idx, last + timedelta(seconds=cad)) < max(1, (others + 1) // 2):
            return  # most of its siblings are as quiet: not this GPU's own loss
        nv.gone[idx] = last
        if self.state.ledger.is_fenced(node, idx) or any(x.index == idx and x.ts >= last - timedelta(seconds=cad)
                                                         for x in self.state.lost.get(node, ())):
            return  # already fenced, or already known lost (its XID said so)
        self.queue_fence(node, Finding("gpu_off_bus", last, node, [idx],
                                       f"GPU {idx} on {node} gone from NVML (last sample {human(last)}; the "
                                       f"node's other GPUs still report)", None))

    def _timer_confirm(self, key: TimerKey, due: datetime) -> None:
        node, idx = key[0], key[1]
        if isinstance(node, str) and isinstance(idx, int):
            self._stop_awaiting(node, idx)

    def _stop_awaiting(self, node: str, idx: int) -> None:
        on_node = self.state.awaiting_remap.get(node)
        if on_node is not None:
            on_node.pop(idx, None)
            if not on_node:
                del self.state.awaiting_remap[node]

    def _remap_pending(self, node: str, idx: int, ts: datetime) -> bool:
        """NVML showed rows pending remap at most ``confirm_window_s`` before (or at) ``ts``."""
        at = self.state.gpu_health(node, idx).pending_remap_at
        return at is not None and 0 <= (ts - at).total_seconds() <= self.p.timing.confirm_window_s

    # --- fencing hardware: debounce, then group by power domain ------------------------
    def queue_fence(self, node: str, f: Finding) -> None:
        """Hold ``f`` for the node's debounce window, so GPUs lost together are judged together."""
        if f.category == "gpu_off_bus":
            self.state.lost.setdefault(node, []).extend(LostGpu(f.ts, i, f.evidence or "") for i in f.gpus)
        self.state.pending_fence.setdefault(node, []).append(f)
        if not self.queue.armed("fence", (node,)):
            self.queue.arm_after("fence", (node,), f.ts, self.p.timing.fence_debounce_s)

    def _timer_fence(self, key: TimerKey, due: datetime) -> None:
        node = str(key[0])
        findings = self.state.pending_fence.pop(node, [])
        # grouped around when the GPUs went, not when we learnt it (a GPU gone from NVML is known a few
        # sample intervals after its last sample)
        at = min((f.ts for f in findings if f.category == "gpu_off_bus"), default=due)
        powered = self._power_group(node, at)
        if powered:
            self._power_finding(node, at, None)
        for f in findings:
            if f.category == "gpu_off_bus" and set(f.gpus) <= powered:
                continue
            self._hardware_finding(f, self._victims(f.node or "", f.gpus[0], f.ts))

    def power_supply_sel(self, node: str, ts: datetime, evidence: str) -> None:
        """The BMC reported a power-supply fault: with GPUs lost near it, that is their cause; else wait and
        see (``psu_check``) whether any go."""
        self.state.psu_sel.setdefault(node, []).append(ts)
        if self._recent_losses(node, ts):
            self._power_finding(node, ts, evidence)
        else:
            self.queue.arm_after("psu_check", (node,), ts, self.p.timing.power_window_s)

    def _timer_psu_check(self, key: TimerKey, due: datetime) -> None:
        node = str(key[0])
        if self._recent_losses(node, due):
            return
        self.life.condition(None, node, "power_supply_fault", [], due,
                            "power supply failure reported by the BMC; nothing lost yet", None,
                            actions_only=("open_ticket",), severity="ticket")

    def _recent_losses(self, node: str, now: datetime) -> list[LostGpu]:
        w = self.p.timing.power_window_s
        return [x for x in self.state.lost.get(node, ()) if abs((now - x.ts).total_seconds()) <= w]

    def _power_group(self, node: str, now: datetime) -> set[int]:
        """GPUs whose loss is one power fault: several of one domain, or any with a PSU SEL near."""
        lost = {x.index for x in self._recent_losses(node, now)}
        w = self.p.timing.power_window_s
        if any(abs((now - t).total_seconds()) <= w for t in self.state.psu_sel.get(node, ())):
            return lost
        grouped: set[int] = set()
        for i in lost:
            peers = set(self.state.topology.power_domain_peers(node, i)) & lost
            if len(peers) >= 2:
                grouped |= peers
        return grouped

    def _power_finding(self, node: str, ts: datetime, evidence: str | None) -> None:
        topo = self.state.topology
        losses = self._recent_losses(node, ts)
        gpus = sorted({x.index for x in losses})
        first = min((x.ts for x in losses), default=ts)
        doms = sorted({topo.gpu(node, i).power_domain or "?" for i in gpus})
        f = Finding("power_supply_fault", first, node, gpus,
                    f"{len(gpus)} GPUs of power domain {'/'.join(doms)} on {node} lost together",
                    evidence or (losses[0].evidence if losses else None))
        if not gpus:
            self.node_finding(f)
            return
        # the jobs on the GPUs that went dark; a job on the node's other supply keeps running
        victims = {j.name: j for i in gpus for j in self._victims(node, i, f.ts)}
        self._hardware_finding(f, [victims[name] for name in sorted(victims)])

    def node_finding(self, f: Finding) -> None:
        """A whole node failed (silence, its BMC, its power): the jobs on it fail; else a condition."""
        self._hardware_finding(f, self._victims(f.node or "", None, f.ts))

    def _hardware_finding(self, f: Finding, jobs: list[Job]) -> None:
        node = f.node or ""
        for job in jobs:
            self.life.failure(job.name, f)
        ended = [] if jobs else self._ended_failures(f)
        for inc in ended:
            self.life.after_end(inc, f)
        if jobs or ended:
            return
        self.life.condition(None, node, f.category, f.gpus, f.ts, f.reason, f.evidence)  # (a repeat: the fence's)

    def _victims(self, node: str, idx: int | None, ts: datetime) -> list[Job]:
        """Jobs on this hardware when it failed: running, or failed within ``hardware_lookback_s`` of it
        (the kernel or BMC often reports after the crash it caused)."""
        near = self.p.timing.hardware_lookback_s
        return [j for j in self.state.topology.jobs_on(node, idx)
                if j.running or (j.ended is not None and j.ended.status == "failed"
                                 and abs((ts - j.ended.at).total_seconds()) <= near)]

    def _ended_failures(self, f: Finding) -> list[OpenIncident]:
        """Failures this verdict explains of jobs whose run ended since (cancelled while the incident waited
        for it, and not run again): closed by that end, opened within ``hardware_lookback_s`` of the verdict's
        time, on the hardware it names."""
        near = self.p.timing.hardware_lookback_s
        found: dict[str, OpenIncident] = {}
        idxs: list[int | None] = list(f.gpus) or [None]
        for idx in idxs:
            for j in self.state.topology.jobs_on(f.node or "", idx):
                inc = self.state.failure_of(j.name)
                if j.over and inc is not None and inc.state == "closed" and inc.run == j.starts \
                        and abs((f.ts - inc.opened_at).total_seconds()) <= near:
                    found[inc.id] = inc
        return [found[k] for k in sorted(found)]

    def _gpu_condition(self, node: str, idx: int, category: str, ts: datetime, reason: str,
                       evidence: str | None) -> None:
        jobs = self.state.topology.running_jobs_on(node, idx)
        for job in jobs:
            self.life.condition(job.name, None, category, [idx], ts, reason, evidence, node_hint=node)
        if not jobs:
            self.life.condition(None, node, category, [idx], ts, reason, evidence)
