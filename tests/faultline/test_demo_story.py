"""The demo tells a finished story: its fault is fenced, the job restarted, and the recovery verified.

`faultline demo` is the first thing a newcomer runs; it used to end with its incident still
verifying (``report``: RECOVERED 0, STILL_OPEN 1) because the simulated job came back too late
in the capture to hold its throughput for ``timing.verify_hold_s``. The demo's fleet is decided
here in-process (the same engine the worker runs), and its closing lines are checked to say how
the story ended.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from correlators.policy import load_policy
from faultline.outcome import decide_offline
from faultline.simulate import Fleet


def _when(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def test_the_demo_fleets_incident_is_resolved_before_the_capture_ends() -> None:
    fleet = Fleet()
    lines = list(fleet.lines())
    out = decide_offline(lines)
    [incident] = out["incidents"]
    assert incident["category"] == "gpu_off_bus" and incident["state"] == "resolved"
    restart = next(c for c in out["commands"] if c["type"] == "restart_job")
    relaunch = [json.loads(x) for x in lines if '"job_started"' in x][-1]
    # the job comes back after the restart went out, on GPUs that exclude the faulty node
    assert _when(relaunch["ts"]) > _when(restart["issued_at"])
    assert fleet.node_name(fleet.fault.node if fleet.fault else 0) not in {a["node"] for a in relaunch["allocation"]}
    # ...and is verified with room to spare: the capture outlasts the hold the policy asks for
    last = _when(json.loads(lines[-1])["ts"])
    assert _when(incident["updated_at"]) < last
    assert _when(incident["updated_at"]) - _when(relaunch["ts"]) >= timedelta(
        seconds=load_policy(None).timing.verify_hold_s)


def test_the_demos_closing_lines_say_the_incident_resolved() -> None:
    from faultline.demo import closing_lines

    out = decide_offline(list(Fleet().lines()))
    text = "\n".join(closing_lines(out))
    assert "resolved" in text and "1 incident" in text
    assert out["incidents"][0]["id"] in text


def test_closing_lines_own_up_to_an_unfinished_story() -> None:
    from faultline.demo import closing_lines

    out = decide_offline(list(Fleet(recover_after_s=None).lines()))
    [incident] = out["incidents"]
    text = "\n".join(closing_lines(out, "faultline.demo-x"))
    assert text.startswith("1 incident, 0 resolved")
    assert f"still {incident['state']}, not resolved" in text
    assert f"faultline incident {incident['id']} --namespace faultline.demo-x" in text
