"""The fleet checks bite, and the generator writes what its plan says (issue #25).

An engine broken on purpose (a fence dropped, nothing excluded, the checkpoint dropped, a world the launcher
cannot form, a takeover that loses its state) fails the invariant that names it; and the captures
:mod:`fleet` builds hold what their plans say.
"""

from __future__ import annotations

import json
from typing import Any

import fleet_checks
import pytest
from builder import Capture, at_iso
from fleet import FaultPlan, FleetPlan, JobPlan, build
from fleet_checks import evaluate

from streams.decisions import Command, Incident

# --- the checks bite: an engine broken on purpose fails them ------------------------------------------------------
XID_PLAN = FleetPlan(nodes=3, gpus=4, duration=900.0, heartbeat=30.0, nvml=60.0,
                     jobs=(JobPlan(nodes=2, every=10.0, interval=120.0),),
                     faults=(FaultPlan(kind="xid", at=0.5, pick=5),))


class _Mangled(fleet_checks.Correlator):
    """An engine whose decisions are altered on their way out (set by the test)."""

    mangle: Any = staticmethod(lambda d: d)

    def process(self, event: Any) -> list[Any]:
        return [m for d in super().process(event) if (m := self.mangle(d)) is not None]


def _restart_with(**params: Any) -> Any:
    def mangle(d: Any) -> Any:
        if isinstance(d, Command) and d.type == "restart_job":
            return d.model_copy(update={"params": {**d.params, **params}})
        return d
    return mangle


def _siblings() -> dict[str, str]:
    """Each GPU of the plan's fleet -> another GPU of its node (from the capture's inventory lines)."""
    out = {}
    for line in build(XID_PLAN).lines():
        rec = json.loads(line)
        if rec.get("source") == "inventory":
            ids = [g["uuid"] for g in rec["gpus"]]
            out.update({u: ids[(k + 1) % len(ids)] for k, u in enumerate(ids)})
    return out


SIBLING = _siblings()


def _fence_elsewhere(d: Any) -> Any:
    """A quarantine of the blamed GPU's sibling instead of it, and a cordon of its node besides (a GPU fault is
    never its node's cordon)."""
    if isinstance(d, Command) and d.type == "quarantine_gpu" and d.target.gpu:
        return d.model_copy(update={"target": d.target.model_copy(update={"gpu": SIBLING[d.target.gpu]})})
    if isinstance(d, Command) and d.type == "open_ticket" and d.target.node:
        return d.model_copy(update={"type": "cordon_node", "target": d.target.model_copy(update={"gpu": None})})
    return d


@pytest.mark.parametrize(("mangle", "invariant"), [
    (lambda d: None if isinstance(d, Command) and d.type == "quarantine_gpu" else d, "fenced_first"),
    (_restart_with(exclude={"nodes": [], "gpus": []}), "gate"),
    (_restart_with(checkpoint=None), "checkpoint"),
    (_restart_with(gpus=7), "world"),
    (_fence_elsewhere, "quarantine"),
    (_fence_elsewhere, "cordon"),
    (_restart_with(mode="in_process"), "mode"),
    (lambda d: d.model_copy(update={"summary": "x" * 3_000_000}) if isinstance(d, Incident) else d, "size"),
], ids=["fence-dropped", "nothing-excluded", "checkpoint-dropped", "odd-world", "wrong-gpu", "gpu-fault-cordons",
        "in-process-without-a-gpu", "unbounded-record"])
def test_a_broken_engine_fails_the_invariant(monkeypatch: pytest.MonkeyPatch, mangle: Any, invariant: str) -> None:
    lines = build(XID_PLAN).lines()
    assert not evaluate(lines, again=False).get(invariant), "the plan must keep the invariant unbroken"
    monkeypatch.setattr(_Mangled, "mangle", staticmethod(mangle))
    monkeypatch.setattr(fleet_checks, "Correlator", _Mangled)
    assert evaluate(lines, again=False).get(invariant)


def test_a_takeover_that_loses_state_fails_sameness(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fleet_checks.restore

    def forgetful(state: Any, snap: Any) -> None:  # installs fresh engines: the snapshot's state is lost
        real(state, snap)
        state.restore({cell: fleet_checks.Correlator(fleet_checks.POLICY) for cell in state.engines}, state.position)
    lines = build(XID_PLAN).lines()
    monkeypatch.setattr(fleet_checks, "restore", forgetful)
    assert evaluate(lines, cut=0.4, again=False).get("same")


def test_the_generator_writes_what_the_plan_says() -> None:
    plan = FleetPlan(nodes=4, gpus=8, jobs=(JobPlan(nodes=2, half=True, elastic=(1, 3)), JobPlan(nodes=2, half=True)),
                     faults=(FaultPlan(kind="xid_idle", at=0.4),))
    lines = [json.loads(x) for x in build(plan).lines()]
    starts = [x for x in lines if x.get("event") == "job_started"]
    assert [(s["job"], [a["gpus"] for a in s["allocation"]]) for s in starts] == [
        ("job0", [[0, 1, 2, 3], [0, 1, 2, 3]]), ("job1", [[4, 5, 6, 7], [4, 5, 6, 7]])]  # two jobs, half nodes each
    assert starts[0]["elastic"] == {"min_gpus": 4, "max_gpus": 12}
    launch = [x["line"] for x in lines if x["source"] == "framework" and x["job"] == "job0"]
    assert "  min_nodes        : 1" in launch and "  nproc_per_node   : 4" in launch
    assert {x["node"] for x in lines if x["source"] == "nvml"} == {"n01", "n02"}  # NVML on the nodes at work
    idle = [x for x in lines if x["source"] == "kernel"]
    assert len(idle) == 1 and idle[0]["node"] in {"n03", "n04"}


def test_a_gpu_off_the_bus_stays_off_through_a_second_xid_79() -> None:
    cap = Capture(duration=600.0).node("n1", gpus=4).nvml(30.0)
    cap.xid(200.0, "n1", 0, 79).xid(300.0, "n1", 0, 79)  # built in either order, it fell off at 200 s
    seen = [x["ts"] for x in map(json.loads, cap.lines()) if x["source"] == "nvml" and x["gpu"]["index"] == 0]
    assert seen and max(seen) < at_iso(200.0)
