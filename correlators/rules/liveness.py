"""Node liveness: the agent's heartbeats, its silence, and what the BMC says out of band.

A node is silent once its agent misses ``silence_factor`` of its usual
heartbeat gaps (``silence``; nothing is timed until the cadence is known).
Its verdict (``judge``) waits a little longer and reads the BMC and the rack:
quiet peers in the rack with a BMC that is gone are a rack outage; a
power-supply or other hardware SEL names the node's fault; otherwise the node
is down. While the rack's nodes are quiet but this BMC has not answered since,
the verdict waits for its next poll (``bmc_wait_s``). What it concludes goes to
the hardware rules (:meth:`~correlators.rules.hardware.HardwareRules.node_finding`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from correlators.attribution import silence_category
from correlators.findings import Finding
from correlators.restart_gate import hear
from correlators.rules.base import EventHandler, OnTimer, RuleContext
from correlators.rules.hardware import HardwareRules
from correlators.state import Heartbeat
from correlators.timers import TimerKey, TimerName
from streams import events as ev

__all__ = ["LivenessRules"]


class LivenessRules:
    """Heartbeat silence and the BMC view (power, reachability, SEL), judged per node and per rack."""

    def __init__(self, ctx: RuleContext, hardware: HardwareRules) -> None:
        self.state = ctx.state
        self.p = ctx.policy
        self.hardware = hardware
        self.queue = ctx.state.timers

    def event_handlers(self) -> Mapping[str, EventHandler]:
        return {"agent_heartbeat": self._on_agent_heartbeat, "bmc_power": self._on_bmc_power,
                "bmc_unreachable": self._on_bmc_unreachable, "bmc_sel": self._on_bmc_sel,
                "node_state": self._on_node_state}

    def timer_handlers(self) -> Mapping[TimerName, OnTimer]:
        return {"silence": OnTimer(self._timer_silence, at_end=False),
                "judge": OnTimer(self._timer_judge, at_end=True)}

    # --- in band --------------------------------------------------------------------
    def _on_agent_heartbeat(self, e: ev.Event, b: ev.AgentHeartbeat) -> None:
        node = e.node
        if not node:
            return
        s = self.state
        # placed on the cell's clock: a heartbeat stamped ahead of it counts from when it arrived, so a node
        # whose clock leads the cell's is judged silent no later than one in step (correlators/clock.py)
        ts = e.ts if s.clock is None or e.ts <= s.clock else s.clock
        prev = s.heartbeat.get(node)
        if prev is None:
            beat = s.heartbeat[node] = Heartbeat(ts)
        else:
            beat = prev
            if ts > prev.last:
                beat.gaps.append((ts - prev.last).total_seconds())
            if ts >= prev.last:
                beat.last = ts
        s.silent.pop(node, None)
        self.queue.cancel("judge", (node,))
        if s.gate_watch:
            hear(s, node, "heartbeat", e.ts)
        usual = beat.usual()
        if usual is None:
            return  # silence means nothing until this agent's cadence is known
        wait = max(self.p.timing.silence_min_s, self.p.timing.silence_factor * usual)
        self.queue.arm("silence", (node,), beat.last + timedelta(seconds=wait))

    def _timer_silence(self, key: TimerKey, due: datetime) -> None:
        node = str(key[0])
        beat = self.state.heartbeat[node]
        self.state.silent[node] = beat.last
        step = beat.judge_step()
        self.queue.arm_after("judge", (node,), due, step)
        self.state.judge_from[node] = due + timedelta(seconds=step)

    def _timer_judge(self, key: TimerKey, due: datetime) -> None:
        node = str(key[0])
        s = self.state
        if node not in s.silent:
            return
        since = s.silent[node]
        rack = s.topology.rack_of(node)
        peers = [n for n in (s.topology.rack_nodes(rack) if rack else []) if n != node and n in s.silent
                 and abs((s.silent[n] - since).total_seconds()) <= self.p.timing.rack_window_s]
        view = s.bmc_view(node)
        wait_until = s.judge_from.get(node, due) + timedelta(seconds=self.p.timing.bmc_wait_s)
        if peers and (view.heard is None or view.heard < since) and due < wait_until:
            # the rack's nodes are quiet but this BMC has said nothing since: its answer (or its
            # silence) tells a rack outage from dead nodes, so give the next poll a chance
            self.queue.arm("judge", (node,), wait_until)
            return
        category = silence_category(view, len(peers))
        lost_nodes = [node] + (peers if category == "rack_outage" else [])
        for n in lost_nodes:
            last = s.silent.get(n, since)
            heard = self._last_heard(n, last, due)  # never after due
            reason = f"node agent silent since {last.isoformat()}" + (
                f", the node last heard from at {heard.isoformat()}" if heard > last else "")
            self.queue.cancel("judge", (n,))
            s.silent.pop(n, None)
            # the fault is as old as the silence: the jobs that failed around then are its victims, however
            # long the agent's cadence made the verdict take
            self.hardware.node_finding(Finding(category, heard, n, reason=f"{category}: {reason}"))

    def _last_heard(self, node: str, beat: datetime, due: datetime) -> datetime:
        """When ``node`` was last known alive: its agent's last heartbeat, or later where another of its sources
        spoke after it -- an NVML sample of one of its GPUs, a step of a job running on it (a step of a
        synchronous job is every rank's, this node's included) -- never after ``due``. Not its BMC: out of band,
        it logs a SEL of the host's parts whether the host still runs or not. A node whose agent beats
        every two minutes and whose ranks stepped until a second before it died failed then, not at the beat: a
        checkpoint saved in between is a restart point."""
        s = self.state
        nv = s.nvml.get(node)
        heard = [beat] + (list(nv.last.values()) if nv is not None else [])
        for job in s.topology.jobs_on(node):
            prog = s.progress.get(job.name)
            if prog is not None and prog.last_step_ts is not None and (
                    prog.run_started is None or prog.last_step_ts >= prog.run_started):
                heard.append(prog.last_step_ts)
        return min(max(heard), due)

    # --- the scheduler's view ------------------------------------------------------------
    def _on_node_state(self, e: ev.Event, b: ev.NodeState) -> None:
        """Not ready makes a node suspect at once (the restart gate leaves it out); it opens nothing on its
        own: whether a node is down is decided from its own silence and its BMC (a drain or a maintenance
        window is not-ready too)."""
        if not e.node:
            return
        if b.ready:
            self.state.not_ready.pop(e.node, None)
        elif e.node not in self.state.not_ready:
            self.state.not_ready[e.node] = e.ts

    # --- out of band ----------------------------------------------------------------
    def _bmc_heard(self, e: ev.Event) -> None:
        node = e.node or ""
        view = self.state.bmc_view(node)
        view.report(e.ts)
        s = self.state
        s.bmc_clock = e.ts if s.bmc_clock is None else max(s.bmc_clock, e.ts)
        if view.reachable and view.power_on is not False:
            hear(s, node, "bmc", e.ts)
        if node in self.state.silent and self.queue.armed("judge", (node,)):
            self.queue.arm("judge", (node,), max(self.state.judge_from.get(node, e.ts), e.ts))

    def _on_bmc_power(self, e: ev.Event, b: ev.BmcPower) -> None:
        if e.node:
            view = self.state.bmc_view(e.node)
            view.power_on, view.reachable = b.on, True
            self._bmc_heard(e)

    def _on_bmc_unreachable(self, e: ev.Event, b: ev.BmcUnreachable) -> None:
        if e.node:
            self.state.bmc_view(e.node).reachable = False
            self._bmc_heard(e)

    def _on_bmc_sel(self, e: ev.Event, b: ev.BmcSel) -> None:
        node = e.node
        if not node:
            return
        view = self.state.bmc_view(node)
        view.reachable = True
        self._bmc_heard(e)
        if not (b.hardware_fault and b.asserted):
            return
        view.hardware_fault(b.component, b.line, e.ts)
        if b.component == "power_supply":
            self.hardware.power_supply_sel(node, e.ts, e.id)
        else:
            self.hardware.node_fault_logged(node, e.ts, e.id, f"a {b.component} fault logged by its BMC")
