"""A sample of generated fleets through the real pipeline (broker, Faust worker, archive): what it decides is
what the offline path decides for the same bytes, and the fleet invariants that hold offline hold there too.

The wide net is :mod:`test_fleet_invariants` (offline, thousands of fleets); this is its check that the worker
path adds nothing of its own. A few fixed plans run in the default suite; more drawn ones in the soak::

    pytest -q -m slow tests/correlators/test_fleet_broker.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fleet import FaultPlan, FleetPlan, JobPlan, build, fleets
from hypothesis import HealthCheck, given, settings

from common.settings import Settings
from faultline.outcome import decide_offline
from faultline.pipeline import replay

pytestmark = pytest.mark.broker

PLANS = [
    FleetPlan(nodes=3, gpus=4, duration=900.0, jobs=(JobPlan(nodes=2, every=10.0, interval=120.0),),
              faults=(FaultPlan(kind="xid", at=0.5, pick=5), FaultPlan(kind="ckpt_fail", at=0.3, late=30.0))),
    FleetPlan(nodes=4, gpus=8, duration=600.0, jobs=(JobPlan(nodes=1, half=True, elastic=(1, 2)), JobPlan(nodes=1, half=True)),
              faults=(FaultPlan(kind="psu", at=0.4, pick=6), FaultPlan(kind="xid_idle", at=0.6, dup=True))),
]


def _key(out: dict[str, list[dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    """What a decision is, without what the worker adds on the way out (signature, namespace, cluster)."""
    incidents = [(i["id"], i["job"], i["category"], i["culprit"], i["state"]) for i in out["incidents"]]
    commands = [(c["id"], c["incident"], c["type"], c["target"], c["params"], c["requires_approval"])
                for c in out["commands"]]
    return incidents, commands


def _through_the_broker(plan: FleetPlan, kafka: str, tmp_path: Path, name: str) -> None:
    capture = tmp_path / "fleet.jsonl"
    lines = build(plan).write(capture)
    run = replay(capture, Settings(kafka=kafka, data_dir=tmp_path, namespace=name,
                                   archive=f"chdb://{tmp_path / 'archive'}"))
    assert run.lines == len(lines) and run.bad == len(lines) - len(set(lines))  # a line sent twice: a dead letter
    assert _key(run.contract()) == _key(decide_offline(lines))


@pytest.mark.parametrize("plan", PLANS, ids=["xid-and-checkpoint", "psu-half-nodes"])
def test_a_fleet_through_the_broker_decides_as_offline(plan: FleetPlan, kafka_bootstrap: str, tmp_path: Path,
                                                       unique_name: str) -> None:
    _through_the_broker(plan, kafka_bootstrap, tmp_path, unique_name)


@pytest.mark.slow
@settings(max_examples=8, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(plan=fleets(max_nodes=8))
def test_drawn_fleets_through_the_broker_decide_as_offline(plan: FleetPlan, kafka_bootstrap: str,
                                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    import uuid
    _through_the_broker(plan, kafka_bootstrap, tmp_path_factory.mktemp("fleet"), f"t-fleet-{uuid.uuid4().hex[:8]}")
