"""The correlator: typed events in, incidents and commands out, time passed in.

Pure logic, no I/O: the Faust agent, ``faultline replay`` and the tests all
drive the same :class:`Correlator`. Time is event time: the clock only moves
with the observations, and timers (debounce, settle, silence, hang, staleness)
fire as it passes them, so a three-day capture replays in seconds and gives the
same answer every run.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta

from correlators.attribution import silence_category
from correlators.findings import FAILURE_CATEGORIES, Finding
from correlators.operator_actions import operator_commands
from correlators.state import Decision
from correlators.topology import Job
from correlators.training_rules import TrainingRules
from streams import events as ev

__all__ = ["Correlator", "Decision"]

CLOSED = frozenset({"resolved", "closed", "escalated"})
# Timers that decide on what was already seen; at the end of a capture they
# still fire. The others wait for time to pass (silence, staleness, hangs), and
# the end of a capture is not the passing of time.
FLUSH_AT_END = frozenset({"fence", "settle", "judge", "psu_check", "confirm"})
_SEEN_IDS = 200_000


class Correlator(TrainingRules):
    """The whole correlator: state (``state``), lifecycle (``lifecycle``) and rules (here and ``training_rules``)."""

    # --- driving ---------------------------------------------------------------------
    def process(self, event: ev.Event) -> list[Decision]:
        """Apply one event; return the decisions it (and the time it moved past) caused."""
        if event.id in self._seen:
            return []
        self._seen[event.id] = None
        if len(self._seen) > _SEEN_IDS:
            self._seen.popitem(last=False)
        if isinstance(event.body, ev.EndOfCapture):
            return self.finish()
        self._advance(event.ts)
        handler = getattr(self, f"_on_{event.body.kind}", None)
        if handler is not None:
            handler(event, event.body)
        return self._drain()

    def advance_to(self, now: datetime) -> list[Decision]:
        """Move the clock without an event (live mode ticks on wall time)."""
        self._advance(now)
        return self._drain()

    def finish(self) -> list[Decision]:
        """End of a capture: judge every decision whose evidence is in; wait for nothing else."""
        while True:
            t = self.timers.pop_due(datetime.max.replace(tzinfo=self.clock.tzinfo if self.clock else None))
            if t is None:
                break
            if t.name in FLUSH_AT_END:
                self.clock = max(self.clock or t.due, t.due)
                self._fire(t.name, t.key, t.due)
        return self._drain()

    def _advance(self, now: datetime) -> None:
        while (t := self.timers.pop_due(now)) is not None:
            self.clock = max(self.clock or t.due, t.due)
            self._fire(t.name, t.key, t.due)
        self.clock = max(self.clock or now, now)

    def _fire(self, name: str, key: tuple, due: datetime) -> None:
        getattr(self, f"_timer_{name}")(key, due)

    def _drain(self) -> list[Decision]:
        out, self._out = self._out, []
        return out

    # --- topology and scheduler ------------------------------------------------------
    def _on_inventory(self, e: ev.Event, b: ev.Inventory) -> None:
        if e.node:
            self.topo.apply_inventory(e.node, b)

    def _on_job_started(self, e: ev.Event, b: ev.JobStarted) -> None:
        if not e.job:
            return
        self.topo.apply_job_started(e.job, b)
        inc = self.failure.get(e.job)
        if inc and inc.state in ("restarting", "awaiting_approval", "mitigating", "open"):
            if inc.restart_attempts:
                self._set_state(inc, "verifying", e.ts)
                self.timers.arm_after("verify", (inc.id,), e.ts, self.p.timing.verify_timeout_s)
        self._arm_stale(e.job, e.ts)

    def _on_job_ended(self, e: ev.Event, b: ev.JobEnded) -> None:
        job = self.topo.jobs.get(e.job or "")
        if job is None:
            return
        job.running = False
        job.ended = (e.ts, b.status)
        for name in ("hang", "stale"):
            self.timers.cancel(name, (job.name,))
        if b.status == "failed":
            inc = self.failure.get(job.name)
            if inc is None or inc.state in CLOSED or inc.state == "verifying":
                self._failure(job.name, Finding("software_crash", e.ts, e.node, reason="job failed", evidence=e.id))
            else:
                inc.add_evidence(e.id)
        else:
            for inc in self._open_for_job(job.name):
                self._set_state(inc, "closed", e.ts)

    def _on_operator_action(self, e: ev.Event, b: ev.OperatorAction) -> None:
        self._out.extend(operator_commands(e, b, self.topo, self.ledger))

    def _on_node_state(self, e: ev.Event, b: ev.NodeState) -> None:
        return None  # recorded in the archive; silence and the BMC decide

    # --- node liveness and out-of-band ------------------------------------------------
    def _on_agent_heartbeat(self, e: ev.Event, b: ev.AgentHeartbeat) -> None:
        node = e.node
        if not node:
            return
        prev = self.heartbeat.get(node)
        gaps: deque[float] = prev[1] if prev else deque(maxlen=20)
        if prev and e.ts > prev[0]:
            gaps.append((e.ts - prev[0]).total_seconds())
        if prev is None or e.ts >= prev[0]:
            self.heartbeat[node] = (e.ts, gaps)
        self.silent.pop(node, None)
        self.timers.cancel("judge", (node,))
        if len(gaps) < 2:
            return  # silence means nothing until this agent's cadence is known
        usual = sorted(gaps)[len(gaps) // 2]
        wait = max(self.p.timing.silence_min_s, self.p.timing.silence_factor * usual)
        self.timers.arm("silence", (node,), self.heartbeat[node][0] + timedelta(seconds=wait))

    def _timer_silence(self, key: tuple, due: datetime) -> None:
        node = key[0]
        last, gaps = self.heartbeat[node]
        self.silent[node] = last
        usual = max(gaps) if gaps else 0.0
        self.timers.arm_after("judge", (node,), due, max(15.0, usual))
        self.judge_from[node] = due + timedelta(seconds=max(15.0, usual))

    def _timer_judge(self, key: tuple, due: datetime) -> None:
        node = key[0]
        if node not in self.silent:
            return
        since = self.silent[node]
        rack = self.topo.rack_of(node)
        peers = [n for n in (self.topo.rack_nodes(rack) if rack else []) if n != node and n in self.silent
                 and abs((self.silent[n] - since).total_seconds()) <= self.p.timing.rack_window_s]
        view = self.bmc[node]
        wait_until = self.judge_from.get(node, due) + timedelta(seconds=self.p.timing.bmc_wait_s)
        if peers and (view.heard is None or view.heard < since) and due < wait_until:
            # the rack's nodes are quiet but this BMC has said nothing since: its answer (or its
            # silence) tells a rack outage from dead nodes, so give the next poll a chance
            self.timers.arm("judge", (node,), wait_until)
            return
        category = silence_category(view, len(peers))
        lost_nodes = [node] + (peers if category == "rack_outage" else [])
        for n in lost_nodes:
            reason = f"node agent silent since {self.silent.get(n, since).isoformat()}"
            self.timers.cancel("judge", (n,))
            self.silent.pop(n, None)
            self._node_finding(Finding(category, due, n, reason=f"{category}: {reason}"))

    def _bmc_heard(self, e: ev.Event) -> None:
        node = e.node or ""
        view = self.bmc[node]
        view.heard = e.ts if view.heard is None else max(view.heard, e.ts)
        if node in self.silent and self.timers.armed("judge", (node,)):
            self.timers.arm("judge", (node,), max(self.judge_from.get(node, e.ts), e.ts))

    def _on_bmc_power(self, e: ev.Event, b: ev.BmcPower) -> None:
        if e.node:
            self.bmc[e.node].power_on, self.bmc[e.node].reachable = b.on, True
            self._bmc_heard(e)

    def _on_bmc_unreachable(self, e: ev.Event, b: ev.BmcUnreachable) -> None:
        if e.node:
            self.bmc[e.node].reachable = False
            self._bmc_heard(e)

    def _on_bmc_sel(self, e: ev.Event, b: ev.BmcSel) -> None:
        node = e.node
        if not node:
            return
        view = self.bmc[node]
        view.reachable = True
        self._bmc_heard(e)
        if not (b.hardware_fault and b.asserted):
            return
        view.hardware_sel.append((b.component, b.line))
        if b.component == "power_supply":
            self.psu_sel[node].append(e.ts)
            if self._recent_losses(node, e.ts):
                self._power_finding(node, e.ts, e.id)
            else:
                self.timers.arm_after("psu_check", (node,), e.ts, self.p.timing.power_window_s)

    def _timer_psu_check(self, key: tuple, due: datetime) -> None:
        node = key[0]
        if self._recent_losses(node, due):
            return
        self._condition(None, node, "power_supply_fault", [], due,
                        "power supply failure reported by the BMC; nothing lost yet", None,
                        actions_only=("open_ticket",), severity="ticket")

    # --- kernel and NVML --------------------------------------------------------------
    def _on_xid(self, e: ev.Event, b: ev.Xid) -> None:
        node = e.node
        idx = self.topo.resolve(node, b.gpu)
        category = self.p.xid.get(b.code)
        if node is None or idx is None or category is None:
            return
        if category == "software":
            return  # evidence for a software crash, never a hardware fault alone
        reason = f"XID {b.code} on {node} GPU {idx}"
        if b.code in self.p.xid_needs_pending_remap:
            after = self.health[(node, idx)].remap_reading
            if after is not None and after[0] >= e.ts:  # the XID came in late: NVML has spoken already
                if not after[1]:
                    return
            elif not self._remap_pending(node, idx, e.ts):
                self.awaiting_remap[(node, idx)] = (e.ts, e.id)
                self.timers.arm_after("confirm", (node, idx), e.ts, self.p.timing.confirm_window_s)
                return
            reason += " with remapped rows pending"
        if category == "gpu_ecc_degradation":
            if self.health[(node, idx)].note_sbe(e.ts, self.p.thresholds):
                self._gpu_condition(node, idx, category, e.ts, reason + ": rising single-bit ECC rate", e.id)
            return
        self._queue_fence(node, Finding(category, e.ts, node, [idx], reason, e.id))

    def _on_gpu_lost(self, e: ev.Event, b: ev.GpuLost) -> None:
        idx = self.topo.resolve(e.node, b.gpu)
        if e.node and idx is not None:
            self._queue_fence(e.node, Finding("gpu_off_bus", e.ts, e.node, [idx], f"GPU {idx} lost", e.id))

    def _on_kernel_fault(self, e: ev.Event, b: ev.KernelFault) -> None:
        if e.node and b.fault == "host_oom":
            self.host_oom[e.node] = e.ts
        elif e.node and b.fault == "machine_check" and b.severity in ("uncorrected", "fatal"):
            self.bmc[e.node].hardware_sel.append(("cpu", b.message))

    def _on_gpu_sample(self, e: ev.Event, b: ev.GpuSample) -> None:
        node = e.node
        idx = self.topo.resolve(node, b.gpu)
        if node is None or idx is None:
            return
        for category, reason in self.health[(node, idx)].observe(e.ts, b.metrics, self.p.thresholds):
            if category in FAILURE_CATEGORIES:
                self._queue_fence(node, Finding(category, e.ts, node, [idx], reason, e.id))
            else:
                self._gpu_condition(node, idx, category, e.ts, reason, e.id)
        waiting = self.awaiting_remap.get((node, idx))
        reading = self.health[(node, idx)].remap_reading
        if waiting and reading is not None and reading[0] >= waiting[0]:
            # the first reading of the flag after the XID decides, whichever way it goes
            del self.awaiting_remap[(node, idx)]
            self.timers.cancel("confirm", (node, idx))
            if reading[1]:
                self._queue_fence(node, Finding("gpu_memory_fault", waiting[0], node, [idx],
                                                "XID with remapped rows pending", waiting[1]))

    def _timer_confirm(self, key: tuple, due: datetime) -> None:
        self.awaiting_remap.pop((key[0], key[1]), None)

    def _remap_pending(self, node: str, idx: int, ts: datetime) -> bool:
        """NVML showed rows pending remap at most ``confirm_window_s`` before (or at) ``ts``."""
        at = self.health[(node, idx)].pending_remap_at
        return at is not None and 0 <= (ts - at).total_seconds() <= self.p.timing.confirm_window_s

    # --- fencing hardware: debounce, then group by power domain ------------------------
    def _queue_fence(self, node: str, f: Finding) -> None:
        if f.category == "gpu_off_bus":
            self.lost[node].extend((f.ts, i, f.evidence or "") for i in f.gpus)
        self.pending_fence[node].append(f)
        if not self.timers.armed("fence", (node,)):
            self.timers.arm_after("fence", (node,), f.ts, self.p.timing.fence_debounce_s)

    def _timer_fence(self, key: tuple, due: datetime) -> None:
        node = key[0]
        findings = self.pending_fence.pop(node, [])
        powered = self._power_group(node, due)
        if powered:
            self._power_finding(node, due, None)
        for f in findings:
            if f.category == "gpu_off_bus" and set(f.gpus) <= powered:
                continue
            self._gpu_finding(f)

    def _recent_losses(self, node: str, now: datetime) -> list[tuple[datetime, int, str]]:
        w = self.p.timing.power_window_s
        return [x for x in self.lost[node] if abs((now - x[0]).total_seconds()) <= w]

    def _power_group(self, node: str, now: datetime) -> set[int]:
        """GPUs whose loss is one power fault: several of one domain, or any with a PSU SEL near."""
        losses = self._recent_losses(node, now)
        lost = {i for _, i, _ in losses}
        w = self.p.timing.power_window_s
        if any(abs((now - t).total_seconds()) <= w for t in self.psu_sel[node]):
            return lost
        grouped: set[int] = set()
        for i in lost:
            peers = set(self.topo.power_domain_peers(node, i)) & lost
            if len(peers) >= 2:
                grouped |= peers
        return grouped

    def _power_finding(self, node: str, ts: datetime, evidence: str | None) -> None:
        losses = self._recent_losses(node, ts)
        gpus = sorted({i for _, i, _ in losses})
        first = min((t for t, _, _ in losses), default=ts)
        doms = sorted({self.topo.gpu(node, i).power_domain or "?" for i in gpus})
        f = Finding("power_supply_fault", first, node, gpus,
                    f"{len(gpus)} GPUs of power domain {'/'.join(doms)} on {node} lost together",
                    evidence or (losses[0][2] if losses else None))
        if not gpus:
            self._node_finding(f)
            return
        # the jobs on the GPUs that went dark; a job on the node's other supply keeps running
        victims = {j.name: j for i in gpus for j in self._victims(node, i, f.ts)}
        self._hardware_finding(f, [victims[name] for name in sorted(victims)])

    def _gpu_finding(self, f: Finding) -> None:
        node, idx = f.node or "", f.gpus[0]
        self._hardware_finding(f, self._victims(node, idx, f.ts))

    def _node_finding(self, f: Finding) -> None:
        self._hardware_finding(f, self._victims(f.node or "", None, f.ts))

    def _hardware_finding(self, f: Finding, jobs: list[Job]) -> None:
        node = f.node or ""
        for job in jobs:
            self._failure(job.name, f)
        if jobs:
            return
        fenced_by = self.ledger.fenced_by(node, f.gpus[0] if len(f.gpus) == 1 else None)
        owner = self.incidents.get(fenced_by) if fenced_by else None
        if owner is not None and owner.category == f.category and owner.state not in ("resolved", "closed"):
            owner.add_evidence(f.evidence)  # hardware already fenced for this very cause
            return
        self._condition(None, node, f.category, f.gpus, f.ts, f.reason, f.evidence)

    def _victims(self, node: str, idx: int | None, ts: datetime) -> list[Job]:
        """Jobs on this hardware when it failed: running, or failed within ``hardware_lookback_s`` of it
        (the kernel or BMC often reports after the crash it caused)."""
        near = self.p.timing.hardware_lookback_s
        return [j for j in self.topo.jobs_on(node, idx)
                if j.running or (j.ended is not None and j.ended[1] == "failed"
                                 and abs((ts - j.ended[0]).total_seconds()) <= near)]

    def _gpu_condition(self, node: str, idx: int, category: str, ts: datetime, reason: str,
                       evidence: str | None) -> None:
        jobs = self.topo.running_jobs_on(node, idx)
        for job in jobs:
            self._condition(job.name, None, category, [idx], ts, reason, evidence, node_hint=node)
        if not jobs:
            self._condition(None, node, category, [idx], ts, reason, evidence)
