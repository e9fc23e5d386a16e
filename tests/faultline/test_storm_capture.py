"""The storm capture judged by the engine alone: the right decision, and a cost that does not grow with the job.

:class:`faultline.storm_capture.StormCapture` (a fixed-size job on every node, one GPU off the bus,
every other rank's watchdog a minute later) is judged offline, as the worker's engine judges it. The
restart gate must decide the same way for 8 nodes as for 48, and publish about as many versions of
the incident: one look per :data:`correlators.restart_gate.LOOK_AGAIN` at most while the allocation
reports in, not one per report (which grows with the square of the job's size).
"""

from __future__ import annotations

import pytest

from correlators.engine import Correlator
from correlators.policy import load_policy
from correlators.restart_gate import LOOK_AGAIN
from faultline.storm_capture import StormCapture
from producers.capture import parse_capture_line
from streams.decisions import Command, Incident


@pytest.mark.parametrize("nodes", [8, 48])
def test_the_gate_looks_per_window_not_per_report(nodes: int) -> None:
    cap = StormCapture(nodes=nodes, duration_s=1320.0)
    want = cap.expected()
    engine = Correlator(load_policy(None))
    out = [d for line in cap.lines() for e in parse_capture_line(line) for d in engine.process(e)]
    out += engine.finish()
    commands = [d for d in out if isinstance(d, Command)]
    assert [c.type for c in commands] == ["quarantine_gpu", "open_ticket", "restart_job"]
    restart = commands[-1]
    assert restart.params["gpus"] == want.gpus and restart.params["checkpoint"]["step"] == want.checkpoint_step
    assert restart.params["exclude"] == {"nodes": [], "gpus": [want.gpu_uuid]}
    versions = [d for d in out if isinstance(d, Incident)]
    assert {v.category for v in versions} == {"gpu_off_bus"}
    window = (restart.issued_at - want.fault_at) / LOOK_AGAIN
    assert len(versions) <= window + 10, f"{len(versions)} incident versions for {nodes} nodes"
