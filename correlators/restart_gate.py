"""The restart gate: no restart while any hardware of the failed allocation is without a verdict.

A failure's restart used to go out when a settle window ran out, whatever could still speak: a
node whose heartbeat silence had not been timed yet, a BMC that had already logged an IERR, a
kernel line on its way. The gate makes the wait explicit state of the incident (one
:class:`GateRound` per round of it: the first failure, and each time it fails again) and judges
every node and GPU of the allocation that failed:

* **fenced** -- cordoned or quarantined (by this incident or any other): excluded by the ledger;
* **suspect** -- negative evidence not (yet) judged into a fence: the scheduler says the node is not
  ready, its BMC is unreachable or says the power is off, a hardware SEL or a machine check, its
  agent silent, the GPU gone from NVML. Excluded, never included;
* **healthy** -- heard from *after the failure* by every detector that can speak about it. "After"
  twice over: a report stamped no earlier than the failure's first evidence, that arrived after the
  gate opened (a source whose clock runs ahead cannot vouch for a node with lines it wrote before);
* **pending** -- a detector could still speak, and until when:

  ========================  =============================================================  ========
  detector                  could speak until                                              for
  ========================  =============================================================  ========
  in-band heartbeat         its silence threshold (``silence`` timer) + the judge step,     node
                            or, once silent, its verdict (``judge`` timer)
  BMC                       its last report + ``cadence_factor`` x its learned poll         node
                            interval (in the BMC's own time)
  late kernel lines         the failure + ``late_line_s`` while no hardware cause explains  node
                            it yet (else the settle window: a late line then is a second
                            fault, fenced when it comes)
  NVML                      its newest sample + ``gpu_lost_factor`` x the node's learned    GPU
                            sample interval (in the node's NVML time; before the node's
                            is known, the GPU's own newest gap), when the GPU is judged
                            present or gone (``gone`` timer)
  a finding being fenced    the fence debounce, a pending-remap confirmation                GPU
  ========================  =============================================================  ========

A detector that never spoke for that hardware (no heartbeat cadence known, no BMC report, no
NVML sample), or whose whole source has gone quiet for the cell or the node (the BMC poller, the
node's NVML collector), cannot be waited for. The gate waits for the latest deadline that could
still change a verdict, bounded by ``gate.max_wait_s`` after it opened; hardware still pending
then is excluded (``no_verdict``), never included. While it waits the incident says so
("waiting for a verdict on n05: heartbeat due by 01:21:13Z"); the restart says what it excluded
and why. A word from hardware the gate waits on wakes it (:func:`hear`), so healthy hardware
costs no more than its next report -- at once when it is the last node waited on, else at most once
per :data:`LOOK_AGAIN`, since one look judges the whole allocation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from correlators.findings import HARDWARE_CATEGORIES
from correlators.gate_round import Exclusion, GateRound, Wait
from correlators.incident_state import OpenIncident
from correlators.policy import Policy
from correlators.state import EngineState
from correlators.topology import Job

__all__ = ["GateDecision", "GateJudge", "hear", "human", "waiting_text"]

Detector = Literal["heartbeat", "bmc", "nvml"]
MAX_SHOWN = 4  # units named in the incident's waiting text; the rest are counted
LATE_LINES = "late kernel lines"


@dataclass
class _Verdict:
    node: str
    gpu: int | None
    verdict: Literal["healthy", "fenced", "suspect", "pending"]
    why: list[str] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)


@dataclass
class GateDecision:
    """What the gate concluded at one moment: ready (with what to leave out), or when to look again."""

    ready: bool
    wake: datetime | None = None
    waiting: list[Wait] = field(default_factory=list)
    excluded: list[Exclusion] = field(default_factory=list)


def human(t: datetime) -> str:
    """``01:21:13Z``: a time as the incident's texts say it (UTC, to the second)."""
    return f"{t.astimezone(UTC):%H:%M:%S}Z"


LOOK_AGAIN = timedelta(seconds=2)
"""How often reports may wake a gate. One look judges the whole allocation (every node and GPU), so a
gate woken by every report of a 2,048-node job (16,384 GPUs' samples, 2,048 heartbeats) would cost the
square of the job's size. A report wakes it at once when it comes from the only node the gate still
waits on, or when the gate last looked this long ago or more; else this long after that look. While
reports stream in that is one look per window, whatever the size, and the restart goes out at most
this much after the last verdict it waited for (at once when that verdict is its last node's)."""


def hear(state: EngineState, node: str, detector: Detector, ts: datetime, gpu: int | None = None) -> None:
    """A report from ``node`` (its heartbeat, its BMC, an NVML sample of ``gpu``): every open gate that
    watches the node records it, and one waiting on that node looks again: now, or (while it still waits
    on other nodes too) :data:`LOOK_AGAIN` after its last look if that was more recent."""
    refs = state.gate_watch.get(node)
    if not refs:
        return
    for ref in list(refs):
        inc = state.incidents.get(ref)
        gate = inc.gate if inc is not None else None
        if inc is None or gate is None or gate.passed or node not in gate.alloc:
            refs.remove(ref)
            continue
        if ts < gate.failure_at:
            continue
        if detector == "heartbeat":
            gate.heard_hb[node] = max(ts, gate.heard_hb.get(node, ts))
        elif detector == "bmc":
            gate.heard_bmc[node] = max(ts, gate.heard_bmc.get(node, ts))
        elif gpu is not None:
            on = gate.heard_nvml.setdefault(node, {})
            on[gpu] = max(ts, on.get(gpu, ts))
        if state.clock is None:
            continue
        look = state.clock
        last = gate.waiting[0].node == node == gate.waiting[-1].node if gate.waiting else False  # (sorted by node)
        if gate.looked is not None and not last:
            look = max(state.clock, gate.looked + LOOK_AGAIN)
        due = state.timers.due("settle", (inc.id,))
        if due is not None and due > look and any(w.node == node for w in gate.waiting):
            state.timers.arm("settle", (inc.id,), look)
    if not refs:
        del state.gate_watch[node]


class GateJudge:
    """Opens and closes gate rounds and judges them over the engine's state (it keeps nothing itself)."""

    def __init__(self, state: EngineState, policy: Policy) -> None:
        self.state = state
        self.p = policy

    # --- rounds ------------------------------------------------------------------------------
    def open(self, inc: OpenIncident, job: Job | None, failure_at: datetime, now: datetime) -> GateRound:
        """A new round of ``inc``'s gate: the allocation that failed, judged from ``failure_at`` on."""
        self.close(inc)
        alloc = {a.node: list(a.gpus) for a in job.spec.allocation} if job is not None else {}
        gate = GateRound(opened=now, failure_at=failure_at, alloc=alloc,
                         bound=now + timedelta(seconds=self.p.gate.max_wait_s))
        inc.gate = gate
        for node in alloc:
            refs = self.state.gate_watch.setdefault(node, [])
            if inc.ref not in refs:
                refs.append(inc.ref)
        return gate

    def hand_over(self, src: OpenIncident, dst: OpenIncident) -> None:
        """``dst`` takes ``src``'s open round over (a reopen folds the new failure into an earlier incident):
        what was heard since the failure still counts."""
        gate = src.gate
        self.close(dst)
        src.gate = None
        if gate is None or gate.passed:  # (never made so: every new failure opens a round) judge afresh
            self.open(dst, self.state.topology.jobs.get(dst.job or ""), src.opened_at, self.state.clock or src.opened_at)
            return
        dst.gate = gate
        for node in gate.alloc:
            refs = self.state.gate_watch.get(node)
            if refs is not None and src.ref in refs:
                refs[refs.index(src.ref)] = dst.ref

    def earlier(self, inc: OpenIncident, failure_at: datetime) -> None:
        """Earlier evidence of the same failure turned up: the round judges from then on."""
        gate = inc.gate
        if gate is not None and not gate.passed and failure_at < gate.failure_at:
            gate.failure_at = failure_at

    def close(self, inc: OpenIncident) -> None:
        """The round is over (its restart went out, or the incident is done): stop watching its hardware."""
        gate = inc.gate
        if gate is None or gate.passed:
            return
        gate.passed = True
        gate.waiting = []
        for node in gate.alloc:
            refs = self.state.gate_watch.get(node)
            if refs and inc.ref in refs:
                refs.remove(inc.ref)
                if not refs:
                    del self.state.gate_watch[node]

    # --- judging -----------------------------------------------------------------------------
    def decide(self, inc: OpenIncident, now: datetime) -> GateDecision:
        """Ready (and what to leave out), or not yet (and when to look again); records it on the round."""
        gate = inc.gate
        if gate is None or gate.passed:
            return GateDecision(ready=True)
        gate.looked = now
        verdicts = self.verdicts(gate, now, inc.category not in HARDWARE_CATEGORIES)
        waits = [w for v in verdicts if v.verdict == "pending" for w in v.waits]
        if waits and now < gate.bound:
            wake = min(min(w.due for w in waits), gate.bound)
            gate.waiting = waits
            return GateDecision(ready=False, wake=max(wake, now + timedelta(milliseconds=1)), waiting=waits)
        excluded = []
        for v in verdicts:
            if v.verdict == "suspect":
                excluded.append(Exclusion(v.node, v.gpu, "suspect", "; ".join(v.why)))
            elif v.verdict == "pending":
                dues = ", ".join(f"{w.detector} due by {human(w.due)}" for w in v.waits)
                why = "; ".join(v.why + [f"no verdict by {human(gate.bound)} ({dues})"])
                excluded.append(Exclusion(v.node, v.gpu, "no_verdict", why))
        gate.waiting, gate.excluded = [], excluded
        return GateDecision(ready=True, excluded=excluded)

    def verdicts(self, gate: GateRound, now: datetime, unexplained: bool = True) -> list[_Verdict]:
        """Every node of the failed allocation, and the GPUs of those that are neither fenced nor suspect.
        ``unexplained``: no hardware cause is known yet, so a late kernel line could still name one."""
        out: list[_Verdict] = []
        for node in sorted(gate.alloc):
            v = self._node(gate, node, now, unexplained)
            out.append(v)
            if v.verdict in ("fenced", "suspect"):
                continue
            out += [self._gpu(gate, node, g, now) for g in sorted(set(gate.alloc[node]))]
        return out

    def _eps(self) -> timedelta:
        """A verdict reached at ``t`` is fenced by ``t`` + the fence debounce: look just after that."""
        return timedelta(seconds=self.p.timing.fence_debounce_s + 0.001)

    def _node(self, gate: GateRound, node: str, now: datetime, unexplained: bool = True) -> _Verdict:
        s, f_at = self.state, gate.failure_at
        if s.ledger.is_fenced(node):
            return _Verdict(node, None, "fenced")
        why: list[str] = []
        waits: list[Wait] = []
        self._heartbeat(gate, node, now, why, waits)
        self._bmc(gate, node, now, why, waits)
        since = s.not_ready.get(node)
        if since is not None:
            why.append(f"the scheduler says it is not ready (since {human(since)})")
        late = self.p.gate.late_line_s if unexplained else min(self.p.gate.late_line_s, self.p.timing.settle_s)
        kernel = f_at + timedelta(seconds=late)
        if now < kernel:
            waits.append(Wait(node, None, LATE_LINES, kernel))
        if s.pending_fence.get(node):  # GPU findings held for the debounce: they may add up to the node's
            waits.append(Wait(node, None, "a finding being fenced", self._fence_due(node, now)))
        if waits:
            return _Verdict(node, None, "pending", why, waits)
        return _Verdict(node, None, "suspect" if why else "healthy", why)

    def _fence_due(self, node: str, now: datetime) -> datetime:
        due = self.state.timers.due("fence", (node,))
        return (due or now) + self._eps()

    def _heartbeat(self, gate: GateRound, node: str, now: datetime, why: list[str], waits: list[Wait]) -> None:
        s = self.state
        beat = s.heartbeat.get(node)
        if beat is None or len(beat.gaps) < 2:
            return  # no cadence known: its silence could not be timed, so it cannot be waited for
        heard = gate.heard_hb.get(node)
        if heard is not None and heard >= self._suspected_at(gate, node):
            return  # (a heartbeat from before later bad news about the node vouches for nothing after it)
        if node in s.silent:
            judge = s.timers.due("judge", (node,))
            if judge is not None:
                waits.append(Wait(node, None, "verdict on its silence", judge + self._eps()))
            why.append(f"its agent is silent (last heartbeat {human(s.silent[node])})")
            return
        silence = s.timers.due("silence", (node,))
        if silence is not None:
            waits.append(Wait(node, None, "heartbeat", silence + timedelta(seconds=beat.judge_step()) + self._eps()))
        else:
            why.append(f"no heartbeat since {human(beat.last)}")

    def _suspected_at(self, gate: GateRound, node: str) -> datetime:
        """The newest bad news about the node since the failure (a hardware SEL or machine check, the scheduler's
        not ready, a failed BMC poll or the power off): its agent must speak after it to vouch for it."""
        s = self.state
        at = gate.failure_at
        view = s.bmc.get(node)
        if view is not None:
            if view.hardware_at is not None:
                at = max(at, view.hardware_at)
            if view.heard is not None and (not view.reachable or view.power_on is False):
                at = max(at, view.heard)
        since = s.not_ready.get(node)
        return max(at, since) if since is not None else at

    def _bmc(self, gate: GateRound, node: str, now: datetime, why: list[str], waits: list[Wait]) -> None:
        s = self.state
        view = s.bmc.get(node)
        if view is None:
            return  # no BMC ever reported for it: it cannot be waited for
        bad = len(why)
        if not view.reachable:
            why.append("its BMC does not answer")
        if view.power_on is False:
            why.append("its BMC says the power is off")
        lookback = timedelta(seconds=self.p.timing.hardware_lookback_s)
        if view.hardware_at is not None and view.hardware_at >= gate.failure_at - lookback:
            what = view.hardware_sel[-1][0] if view.hardware_sel else "hardware"
            why.append(f"a {what} fault logged at {human(view.hardware_at)}")
        interval = view.interval()
        if len(why) > bad or interval is None or gate.heard_bmc.get(node) is not None or view.heard is None:
            return
        window = timedelta(seconds=self.p.gate.cadence_factor * interval)
        if view.heard < gate.failure_at - window:
            return  # already quiet before the failure: not a detector that can speak now
        clock = s.bmc_clock or view.heard
        if now - clock > window:
            return  # the BMC poller is quiet for the whole cell: it cannot be waited for
        deadline = view.heard + window
        if clock < deadline:
            waits.append(Wait(node, None, "BMC poll", now + (deadline - clock)))
        else:
            why.append(f"its BMC has not answered since {human(view.heard)}")

    def _gpu(self, gate: GateRound, node: str, g: int, now: datetime) -> _Verdict:
        s = self.state
        if s.ledger.is_fenced(node, g):
            return _Verdict(node, g, "fenced")
        why: list[str] = []
        waits: list[Wait] = []
        remap = s.awaiting_remap.get(node, {}).get(g)
        if remap is not None:
            due = s.timers.due("confirm", (node, g))
            waits.append(Wait(node, g, "NVML's word on remapped rows", (due or now) + self._eps()))
        self._nvml(gate, node, g, now, why, waits)
        if waits:
            return _Verdict(node, g, "pending", why, waits)
        return _Verdict(node, g, "suspect" if why else "healthy", why)

    def _nvml(self, gate: GateRound, node: str, g: int, now: datetime, why: list[str], waits: list[Wait]) -> None:
        nv = self.state.nvml.get(node)
        factor = self.p.thresholds.gpu_lost_factor
        overdue = nv.speaks_until(g, factor) if nv is not None else None
        if nv is None or overdue is None or nv.newest is None:
            return  # NVML never spoke for it (or neither its node's cadence nor its own is known): no waiting
        if g in nv.gone:
            why.append(f"gone from NVML (last sample {human(nv.gone[g])})")
            return
        if gate.heard_nvml.get(node, {}).get(g) is not None:
            return
        if nv.quiet(now, factor):
            return  # the node's NVML is quiet as a whole: the node's own verdict decides
        timer = self.state.timers.due("gone", (node,))
        if nv.newest < overdue or (timer is not None and timer >= now):
            due = max(now + (overdue - nv.newest), timer or now) + self._eps()
            waits.append(Wait(node, g, "NVML sample", due))
        else:
            why.append(f"no NVML sample since {human(nv.last[g])}")


def waiting_text(waits: Iterable[Wait]) -> str:
    """``waiting for a verdict on n05: heartbeat due by 01:21:13Z; n03 GPU 2: NVML sample due by ...``; the
    wait for late kernel lines (the same for every node) is said once, at the end."""
    by: dict[tuple[str, int | None], list[Wait]] = {}
    kernel: datetime | None = None
    for w in waits:
        if w.detector == LATE_LINES:
            kernel = w.due if kernel is None else max(kernel, w.due)
        else:
            by.setdefault((w.node, w.gpu), []).append(w)
    parts = []
    for (node, gpu), ws in sorted(by.items(), key=lambda x: (x[0][1] is not None, x[0][0], x[0][1] or 0)):
        latest: dict[str, datetime] = {}
        for w in ws:
            latest[w.detector] = max(w.due, latest.get(w.detector, w.due))
        what = ", ".join(f"{d} due by {human(t)}" for d, t in sorted(latest.items(), key=lambda x: x[1]))
        parts.append(f"{node}{'' if gpu is None else f' GPU {gpu}'}: {what}")
    shown = parts[:MAX_SHOWN]
    more = f"; and {len(parts) - MAX_SHOWN} more" if len(parts) > MAX_SHOWN else ""
    lines = f"; {LATE_LINES} until {human(kernel)}" if kernel is not None else ""
    if not parts:
        return f"waiting for {LATE_LINES} until {human(kernel)}" if kernel is not None else ""
    return f"waiting for a verdict on {'; '.join(shown)}{more}{lines}"
