"""The simulated fleet history: the same seed, the same lines; every kind of failure; lemons found."""

from __future__ import annotations

import json
from collections import Counter

from faultline.outcome import decide_offline
from faultline.simulate_history import History

PARAMS = {"nodes": 40, "days": 3, "lemons": 2, "faults_per_node_day": 0.4, "heartbeat_every_s": 900}
SMALL = History(seed=11, **PARAMS)  # type: ignore[arg-type]


def test_the_same_parameters_give_the_same_lines_and_another_seed_others() -> None:
    first = list(SMALL.lines())
    assert first == list(History(seed=11, **PARAMS).lines())  # type: ignore[arg-type]
    assert list(History(seed=12, **PARAMS).lines()) != first  # type: ignore[arg-type]


def test_a_history_holds_every_kind_of_failure_and_restarts_off_broken_nodes() -> None:
    runs = SMALL.runs()
    assert {r.fault for r in runs} >= {None, "xid", "software", "xid13", "oom", "nccl", "node_down", "lemon"}
    by_job: dict[str, list] = {}
    for r in runs:
        by_job.setdefault(r.job, []).append(r)
    for job_runs in by_job.values():
        for prev, nxt in zip(job_runs, job_runs[1:], strict=False):
            assert nxt.start >= prev.end  # one run of a job at a time
            if prev.fault in ("xid", "node_down"):
                assert prev.nodes[0] not in nxt.nodes  # the scheduler restarts it off the broken node
    ts = [json.loads(line)["ts"] for line in SMALL.lines()]
    assert ts == sorted(ts)


def test_the_correlator_finds_the_lemons_and_nothing_else_as_one() -> None:
    out = decide_offline(SMALL.lines())
    fenced = {(c["target"]["node"], c["target"]["gpu"]) for c in out["commands"]
              if c["params"].get("reason") == "lemon" and c["type"] == "quarantine_gpu"}
    lemons = {(n, SMALL.uuid(int(n.split("-")[1]) - 1, i)) for n, i in SMALL.lemon_gpus.items()}
    assert fenced and fenced <= lemons
    cats = Counter(i["category"] for i in out["incidents"])
    assert cats["software_crash"] > 5 and cats["network_timeout"] and cats["cuda_oom"]
