"""Finding 3 and 6 of issue 15 at the parser: a node name that is a hostlist, and a number the archive
cannot store, are bad input at the first line they appear in, never an event.

(Finding 3: ``gpu-[001-999]`` reached ``scontrol update NodeName=...`` and drained a range; finding 6:
a ``rank`` of 2**70 parsed, then failed every archive insert of its batch forever.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from producers.capture import BadInput, parse_capture_line
from streams.events import JobStarted

TS = "2026-04-22T03:25:00Z"

HOSTLISTS_AND_WORSE = [
    "gpu-[001-999]",  # a Slurm hostlist: a thousand nodes
    "n01,n02",  # two nodes
    "ALL", "all",  # Slurm's every node
    "n 01", "n01\n", "n\t1", "n\x0701",  # whitespace, control characters
    "-h",  # an option to the command it reaches
    "n" * 254,  # longer than a DNS name
    "",
    "n\u00e9",  # not ASCII
    "n01;reboot", "$(reboot)", "n=1", "n'1", 'n"1',
]


def refusal(obj: dict[str, Any]) -> BadInput:
    with pytest.raises(BadInput) as info:
        parse_capture_line(json.dumps({"ts": TS, **obj}))
    return info.value


@pytest.mark.parametrize("node", HOSTLISTS_AND_WORSE)
def test_a_node_name_that_is_not_exactly_one_node_is_refused(node: str) -> None:
    bad = refusal({"source": "node_agent", "node": node, "alive": True})
    assert bad.kind in ("invalid_value", "missing_field") and "node" in bad.reason


def test_a_hostlist_inside_a_jobs_allocation_is_refused() -> None:
    ok = parse_capture_line(json.dumps({"ts": TS, "source": "scheduler", "event": "job_started", "job": "j1",
                                        "allocation": [{"node": "n01", "gpus": [0], "ranks": [0]}]}))
    assert isinstance(ok[0].body, JobStarted)
    bad = refusal({"source": "scheduler", "event": "job_started", "job": "j1",
                   "allocation": [{"node": "n[01-99]", "gpus": [0], "ranks": [0]}]})
    assert bad.kind == "invalid_value" and "allocation" in bad.reason


@pytest.mark.parametrize("gpu", ["GPU-1,GPU-2", "GPU 1", "ALL", "-GPU-1", "GPU-\x00", "G" * 129])
def test_a_gpu_id_outside_the_grammar_is_refused(gpu: str) -> None:
    for obj in ({"source": "nvml", "node": "n01", "gpu": {"uuid": gpu}, "metrics": {}},
                {"source": "inventory", "node": "n01", "gpus": [{"index": 0, "uuid": gpu}]}):
        assert refusal(obj).kind == "invalid_value"


def test_valid_identifiers_pass() -> None:
    events = parse_capture_line(json.dumps({
        "ts": TS, "source": "inventory", "node": "gpu-node-07.cluster_a", "job": "ns/train-70b@v2",
        "gpus": [{"index": 0, "uuid": "GPU-e40650f3-142a-c640-c614-51c2be1a1ec0"},
                 {"index": 1, "uuid": "MIG-GPU-e40650f3-142a-c640-c614-51c2be1a1ec0/1/0"}]}))
    assert events[0].node == "gpu-node-07.cluster_a"


@pytest.mark.parametrize(("field", "value"), [("rank", 2**70), ("rank", 2**31), ("rank", -1), ("local_rank", 2**40)])
def test_a_rank_outside_the_archives_int32_column_is_refused(field: str, value: int) -> None:
    bad = refusal({"source": "node_agent", "node": "n01", "alive": True, field: value})
    assert (bad.kind, field in bad.reason) == ("invalid_value", True)


def test_the_largest_rank_the_archive_stores_parses() -> None:
    assert parse_capture_line(json.dumps({"ts": TS, "source": "node_agent", "node": "n01", "alive": True,
                                          "rank": 2**31 - 1}))[0].rank == 2**31 - 1


@pytest.mark.parametrize("obj", [
    {"source": "trainer", "job": "j1", "event": "step", "step": 2**70},
    {"source": "trainer", "job": "j1", "event": "checkpoint_saved", "step": 1, "bytes": 2**64},
    {"source": "torchelastic", "job": "j1", "exitcode": -(2**63) - 1},
    {"source": "nvml", "node": "n01", "gpu": {"index": 2**40}, "metrics": {}},
    {"source": "inventory", "node": "n01", "gpus": [{"index": 2**33}]},
    {"source": "nvml", "node": "n01", "gpu": {"index": 0}, "metrics": {"ecc_sbe_volatile": 10**30}},
])
def test_any_integer_no_archive_column_can_hold_is_refused(obj: dict[str, Any]) -> None:
    assert refusal(obj).kind == "invalid_value"
